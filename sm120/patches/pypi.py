"""SGLang releases on PyPI: list them, download a release's wheel (cached), extract its source tree.

Everything is cached under ~/.cache/sglang-sm120/pypi (SGLANG_SM120_CACHE moves the root):

    pypi/wheels/<wheel file>         verified against PyPI's sha256 (hashed on every use, never size-compared)
    pypi/meta/<version>.json         which file was picked for a release, its sha256 (lets a release be used offline)

A cached file that does not check out (a metadata file that is not one, a wheel whose sha256 is not the
recorded one) is fetched again once; if it still does not check out, the error names the file to delete.
    pypi/src/<version>/              the wheel's .py files and dist-info (enough for `patches check`)

Up to 0.5.9 SGLang shipped one pure-Python wheel; later releases ship compiled wheels per Python and platform,
whose Python sources are the same for every tag: one x86_64 wheel (cp311 preferred) stands for the release.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests
from packaging.version import InvalidVersion, Version

from sm120.errors import CheckFailed, UsageError

PACKAGE = "sglang"
INDEX = os.environ.get("SGLANG_SM120_PYPI", "https://pypi.org/pypi")
TIMEOUT = (10, 120)


def cache_home() -> Path:
    """This project's cache directory (PyPI downloads here, the T1 venvs of tests/upstream): SGLANG_SM120_CACHE."""
    return Path(os.environ.get("SGLANG_SM120_CACHE", "~/.cache/sglang-sm120")).expanduser()


def cache_root() -> Path:
    return cache_home() / "pypi"


def parse_version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise UsageError(f"--sglang {text!r} is not a version (like 0.5.9)") from None


@dataclass(frozen=True)
class WheelFile:
    version: str
    filename: str
    url: str
    sha256: str
    size: int


def _get_json(url: str) -> Any:
    try:
        response = requests.get(url, timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise CheckFailed(f"cannot reach PyPI ({url}): {type(exc).__name__}") from None
    if response.status_code == 404:
        return None
    if not response.ok:
        raise CheckFailed(f"PyPI answered {response.status_code} for {url}")
    try:
        return response.json()
    except ValueError:
        raise CheckFailed(f"PyPI answered something that is not JSON for {url}") from None


_RELEASES: dict[str, list[dict[str, Any]]] | None = None


def all_releases() -> dict[str, list[dict[str, Any]]]:
    """{version: [file, ...]} from PyPI's JSON API for the project (fetched once per process)."""
    global _RELEASES
    if _RELEASES is None:
        data = _get_json(f"{INDEX}/{PACKAGE}/json")
        if data is None:
            raise CheckFailed(f"PyPI has no project {PACKAGE!r}")
        _RELEASES = data["releases"]
    return _RELEASES


_PROJECTS: dict[str, dict[str, list[dict[str, Any]]]] = {}


def releases_of(project: str) -> dict[str, list[dict[str, Any]]]:
    """{version: [file, ...]} of any project on PyPI (torch, sglang-kernel, ...), fetched once per process;
    sglang's through all_releases."""
    if project == PACKAGE:
        return all_releases()
    if project not in _PROJECTS:
        data = _get_json(f"{INDEX}/{project}/json")
        if data is None:
            raise UsageError(f"PyPI has no project {project!r}")
        _PROJECTS[project] = data["releases"]
    return _PROJECTS[project]


def release_files(project: str, version: str) -> list[dict[str, Any]] | None:
    """The files of one release of `project` (matching 0.5.10.post1 == 0.5.10-post1), or None when PyPI has none."""
    releases = releases_of(project)
    files = releases.get(version)
    if files is None:
        wanted = Version(version)
        files = next((f for v, f in releases.items() if _same(v, wanted)), None)
    return files


def final_releases(minimum: str) -> list[str]:
    """Every final release (no pre-, dev-release; post-releases included) >= minimum with files not all yanked."""
    floor = Version(minimum)
    out = []
    for text, files in all_releases().items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or version < floor:
            continue
        if not files or all(f.get("yanked") for f in files):
            continue
        out.append(text)
    return sorted(out, key=Version)


def _pick(version: str, files: list[dict[str, Any]], project: str = PACKAGE) -> WheelFile:
    wheels = [f for f in files if f["filename"].endswith(".whl") and not f.get("yanked")]

    def rank(f: dict[str, Any]) -> tuple[int, str]:
        name = f["filename"]
        if name.endswith("-py3-none-any.whl"):
            return (0, name)
        if "-cp311-" in name and name.endswith("x86_64.whl"):
            return (1, name)
        if name.endswith("x86_64.whl"):
            return (2, name)
        return (3, name)

    if not wheels:
        raise CheckFailed(f"{project} {version} has no wheel on PyPI (only {', '.join(f['filename'] for f in files)})")
    best = min(wheels, key=rank)
    # PyPI answers absolute URLs; a mirror may answer ones relative to the JSON document.
    url = urljoin(f"{INDEX}/{project}/json", best["url"])
    return WheelFile(version, best["filename"], url, best["digests"]["sha256"], best["size"])


def pick_wheel(project: str, version: str, files: list[dict[str, Any]]) -> WheelFile:
    """The wheel that stands for a release of any project: py3-none-any, else CPython 3.11 x86_64, else x86_64."""
    return _pick(version, files, project)


def _meta_path(version: str) -> Path:
    return cache_root() / "meta" / f"{version}.json"


def _read_meta(meta: Path, version: str) -> WheelFile | None:
    """The cached record for a release, or None when it is missing or not a record of this release."""
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
        wheel = WheelFile(**data)
    except (OSError, ValueError, TypeError, RecursionError):
        return None
    valid = (
        isinstance(wheel.filename, str)
        and wheel.filename.endswith(".whl")
        and "/" not in wheel.filename
        and isinstance(wheel.url, str)
        and isinstance(wheel.sha256, str)
        and re.fullmatch(r"[0-9a-f]{64}", wheel.sha256) is not None
        and isinstance(wheel.size, int)
        and wheel.version == version
    )
    return wheel if valid else None


def wheel_for(version: str, *, refresh: bool = False) -> WheelFile:
    """The wheel that stands for `version`: from the cache when known (and sound), else from PyPI."""
    parse_version(version)
    meta = _meta_path(version)
    if not refresh and meta.exists():
        cached = _read_meta(meta, version)
        if cached is not None:
            return cached
        meta.unlink(missing_ok=True)  # not a record of this release: fetched again below
    releases = all_releases()
    files = releases.get(version)
    if files is None:  # PyPI spells versions as uploaded; match 0.5.10.post1 == 0.5.10-post1 too
        wanted = Version(version)
        files = next((f for v, f in releases.items() if _same(v, wanted)), None)
    if not files:
        raise UsageError(f"sglang {version} is not on PyPI (newest final release: {newest_or_unknown()})")
    wheel = _pick(version, files)
    meta.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(meta, json.dumps(wheel.__dict__, indent=2) + "\n")
    return wheel


def _same(text: str, wanted: Version) -> bool:
    try:
        return Version(text) == wanted
    except InvalidVersion:
        return False


def newest_or_unknown() -> str:
    try:
        releases = final_releases("0")
    except CheckFailed:
        return "unknown"
    return releases[-1] if releases else "none"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # one per process: two may write the same record
    tmp.write_text(text)
    tmp.replace(path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(wheel: WheelFile, partial: Path, progress: Callable[[str], None] | None) -> str:
    """Download the wheel to `partial`; return its sha256."""
    if progress:
        progress(f"downloading {wheel.filename} ({wheel.size / 2**20:.1f} MiB)")
    try:
        with requests.get(wheel.url, stream=True, timeout=TIMEOUT) as response:
            response.raise_for_status()
            bar = _bar(wheel.size, wheel.filename)
            with open(partial, "wb") as handle:
                for chunk in response.iter_content(1 << 20):
                    handle.write(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
            if bar is not None:
                bar.close()
    except requests.RequestException as exc:
        partial.unlink(missing_ok=True)
        raise CheckFailed(f"downloading {wheel.filename} failed: {type(exc).__name__}") from None
    return _sha256(partial)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created) for the block: two processes sharing the cache (pytest workers,
    two `build.py patches` runs) do not fetch or unpack the same release at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def download(version: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """The release's wheel in the cache, downloaded and sha256-checked if not there yet or not sound.

    A cached wheel is hashed (a size can match a corrupt file). A mismatch fetches the metadata and the wheel
    again, once; a second mismatch is an error naming what to delete.
    """
    with locked(cache_root() / "locks" / f"wheel-{version}"):
        return _download(version, progress)


def _download(version: str, progress: Callable[[str], None] | None) -> Path:
    wheel = wheel_for(version)
    target = cache_root() / "wheels" / wheel.filename
    refreshed = False
    if target.is_file():
        if _sha256(target) == wheel.sha256:
            return target
        wheel, refreshed = wheel_for(version, refresh=True), True  # the record may be the stale half
        target = cache_root() / "wheels" / wheel.filename
        if target.is_file() and _sha256(target) == wheel.sha256:
            return target
    digest = ""
    for _attempt in (1, 2):
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        digest = _fetch(wheel, partial, progress)
        if digest == wheel.sha256:
            partial.replace(target)
            return target
        partial.unlink(missing_ok=True)
        if not refreshed:
            wheel, refreshed = wheel_for(version, refresh=True), True
            target = cache_root() / "wheels" / wheel.filename
    target.unlink(missing_ok=True)
    raise CheckFailed(
        f"{wheel.filename}: sha256 {digest} does not match PyPI's {wheel.sha256}, also when fetched again; "
        f"delete {_meta_path(version)} and {target} and retry (or check the index, {INDEX})"
    )


def _bar(total: int, desc: str) -> Any:
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, leave=False)


def _is_source(name: str) -> bool:
    return name.endswith(".py") or ".dist-info/" in name


def extract(wheel: Path, dest: Path, *, python_only: bool) -> Path:
    """Unpack `wheel` into `dest` (site-packages layout); with python_only only .py files and the dist-info."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if info.is_dir() or (python_only and not _is_source(info.filename)):
                    continue
                target = (dest / info.filename).resolve()
                if dest.resolve() not in target.parents:
                    raise CheckFailed(f"{wheel.name}: member {info.filename!r} would land outside {dest}")
                archive.extract(info, dest)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(target, mode)
    except zipfile.BadZipFile:
        raise CheckFailed(f"{wheel}: not a valid wheel (zip); delete it to download it again") from None
    return dest


def source_tree(version: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """The release's Python sources (site-packages layout) in the cache, for checks. Extracted once, from the
    wheel the record names (a tree from another wheel, e.g. before the record was fetched again, is redone)."""
    with locked(cache_root() / "locks" / f"src-{version}"):
        return _source_tree(version, progress)


def _source_tree(version: str, progress: Callable[[str], None] | None) -> Path:
    target = cache_root() / "src" / version
    marker = target / ".complete"
    if marker.exists():
        wheel = wheel_for(version)
        try:
            done = marker.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            done = ""
        if done == wheel.filename:
            return target
    wheel = download(version, progress=progress)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=target.parent))
    try:
        extract(wheel, scratch, python_only=True)
        (scratch / ".complete").write_text(wheel.name + "\n")
        if target.exists():
            shutil.rmtree(target)
        scratch.rename(target)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return target
