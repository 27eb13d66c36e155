"""Single files out of a wheel on PyPI, read by HTTP range requests: the zip's central directory and the members
asked for, not the whole wheel (remotezip). `build.py track add` reads torch's METADATA and one header this way
(the wheel is 550 MB) and the kernel package's compiled libraries (a few of its hundreds of MB).

Each member is checked against the wheel's own RECORD (its sha256) and cached under the PyPI cache:

    pypi/members/<wheel file>/RECORD       the wheel's RECORD: which member has which sha256 and size
    pypi/members/<wheel file>/<member>     a member read, checked against RECORD on every use

A cached member that does not match is fetched again once, RECORD with it; if it still does not match, the error
names the files to delete (as for the wheels in sm120/patches/pypi.py).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sm120.errors import CheckFailed
from sm120.patches import pypi

# What opens a remote wheel: remotezip's RemoteZip(url) (tests hand in a local zip instead).
Opener = Callable[[str], Any]


def _remote(url: str) -> Any:
    from remotezip import RemoteZip

    return RemoteZip(url, timeout=pypi.TIMEOUT)


_open: Opener = _remote


def _directory(wheel: pypi.WheelFile) -> Path:
    return pypi.cache_root() / "members" / wheel.filename


def dist_info(wheel: pypi.WheelFile) -> str:
    """`torch-2.14.1.dist-info` for torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl (the wheel spec's rule)."""
    name, version = wheel.filename.split("-")[:2]
    return f"{name}-{version}.dist-info"


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _record(text: str) -> dict[str, str]:
    """RECORD -> {member: 'sha256=<urlsafe base64>'} (RECORD itself and unhashed lines left out)."""
    return {row[0]: row[1] for row in csv.reader(io.StringIO(text)) if len(row) >= 2 and row[1]}


def _fetch(wheel: pypi.WheelFile, names: list[str]) -> dict[str, bytes]:
    try:
        with _open(wheel.url) as archive:
            return {name: archive.read(name) for name in names}
    except KeyError as exc:
        raise CheckFailed(f"{wheel.filename} has no member {exc.args[0]!r}") from None
    except Exception as exc:  # remotezip's errors, requests' and zipfile's: one line, not a traceback
        raise CheckFailed(f"cannot read {wheel.filename} by range requests ({type(exc).__name__}: {exc})") from None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _cached_record(wheel: pypi.WheelFile, *, refresh: bool = False) -> dict[str, str]:
    path = _directory(wheel) / "RECORD"
    if refresh or not path.is_file():
        name = f"{dist_info(wheel)}/RECORD"
        _write(path, _fetch(wheel, [name])[name])
    try:
        return _record(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, csv.Error):
        path.unlink(missing_ok=True)
        raise CheckFailed(f"{path}: not a wheel RECORD; deleted, run again") from None


def names(wheel: pypi.WheelFile) -> list[str]:
    """Every member RECORD lists (hashed ones), sorted."""
    with pypi.locked(pypi.cache_root() / "locks" / f"members-{wheel.filename}"):
        return sorted(_cached_record(wheel))


def member(wheel: pypi.WheelFile, name: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """The cached, RECORD-checked copy of one member of `wheel` (fetched by range requests when needed)."""
    with pypi.locked(pypi.cache_root() / "locks" / f"members-{wheel.filename}"):
        return _member(wheel, name, progress)


def _member(wheel: pypi.WheelFile, name: str, progress: Callable[[str], None] | None) -> Path:
    target = _directory(wheel) / name
    if not target.resolve().is_relative_to(_directory(wheel).resolve()):
        raise CheckFailed(f"{wheel.filename}: member {name!r} would land outside the cache")
    record = _cached_record(wheel)
    if target.is_file() and record.get(name) == f"sha256={_digest(target.read_bytes())}":
        return target
    for refreshed in (False, True):
        if refreshed:
            record = _cached_record(wheel, refresh=True)
        if name not in record:
            raise CheckFailed(f"{wheel.filename} has no member {name!r} (its RECORD does not list it)")
        if progress:
            progress(f"reading {name} out of {wheel.filename} (range requests)")
        data = _fetch(wheel, [name])[name]
        if record[name] == f"sha256={_digest(data)}":
            _write(target, data)
            return target
    raise CheckFailed(
        f"{wheel.filename}: {name} does not match the sha256 its RECORD gives, also when fetched again; "
        f"delete {_directory(wheel)} and retry (or check the index, {pypi.INDEX})"
    )
