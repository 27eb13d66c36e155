"""Single files out of a wheel on PyPI, read by HTTP range requests (remotezip), not the whole wheel (torch's is
550 MB). Each member is cached under the PyPI cache (pypi/members/<wheel file>/<member>, beside the wheel's RECORD) and
checked against RECORD's sha256 on every use; one that does not match is fetched again once, RECORD with it."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sm120.errors import CheckFailed
from sm120.patches import pypi


def _open(url: str) -> Any:  # tests hand in a local zip instead
    from remotezip import RemoteZip

    return RemoteZip(url, timeout=pypi.TIMEOUT)


def _directory(wheel: pypi.WheelFile) -> Path:
    return pypi.cache_root() / "members" / wheel.filename


def dist_info(wheel: pypi.WheelFile) -> str:
    """`torch-2.14.1.dist-info` for torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl (the wheel spec's rule)."""
    return "-".join(wheel.filename.split("-")[:2]) + ".dist-info"


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _fetch(wheel: pypi.WheelFile, name: str) -> bytes:
    try:
        with _open(wheel.url) as archive:
            return archive.read(name)
    except KeyError as exc:
        raise CheckFailed(f"{wheel.filename} has no member {exc.args[0]!r}") from None
    except Exception as exc:  # remotezip's errors, requests' and zipfile's: one line, not a traceback
        raise CheckFailed(f"cannot read {wheel.filename} by range requests ({type(exc).__name__}: {exc})") from None


def _cached_record(wheel: pypi.WheelFile, *, refresh: bool = False) -> dict[str, str]:
    path = _directory(wheel) / "RECORD"
    if refresh or not path.is_file():
        pypi.write(path, _fetch(wheel, f"{dist_info(wheel)}/RECORD"))
    try:  # {member: 'sha256=<urlsafe base64>'} (RECORD itself and unhashed lines left out)
        rows = csv.reader(io.StringIO(path.read_text(encoding="utf-8")))
        return {row[0]: row[1] for row in rows if len(row) >= 2 and row[1]}
    except (OSError, UnicodeDecodeError, csv.Error):
        path.unlink(missing_ok=True)
        raise CheckFailed(f"{path}: not a wheel RECORD; deleted, run again") from None


def names(wheel: pypi.WheelFile) -> list[str]:
    """Every member RECORD lists (hashed ones), sorted."""
    with pypi.locked(pypi.cache_root() / "locks" / f"members-{wheel.filename}"):
        return sorted(_cached_record(wheel))


def member(wheel: pypi.WheelFile, name: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """The cached, RECORD-checked copy of one member of `wheel` (fetched by range requests when needed)."""
    target = _directory(wheel) / name
    if not target.resolve().is_relative_to(_directory(wheel).resolve()):
        raise CheckFailed(f"{wheel.filename}: member {name!r} would land outside the cache")
    with pypi.locked(pypi.cache_root() / "locks" / f"members-{wheel.filename}"):
        record = _cached_record(wheel)
        if target.is_file() and record.get(name) == f"sha256={_digest(target.read_bytes())}":
            return target
        for refresh in (False, True):
            record = _cached_record(wheel, refresh=True) if refresh else record
            if name not in record:
                raise CheckFailed(f"{wheel.filename} has no member {name!r} (its RECORD does not list it)")
            if progress:
                progress(f"reading {name} out of {wheel.filename} (range requests)")
            data = _fetch(wheel, name)
            if record[name] == f"sha256={_digest(data)}":
                pypi.write(target, data)
                return target
    raise CheckFailed(
        f"{wheel.filename}: {name} does not match the sha256 its RECORD gives, also when fetched again; "
        f"delete {_directory(wheel)} and retry (or check the index, {pypi.INDEX})"
    )
