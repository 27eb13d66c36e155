"""SGLang releases on PyPI: list them, download a release's wheel (cached), extract its source tree. Cached under
~/.cache/sglang-sm120/pypi (SGLANG_SM120_CACHE moves the root): wheels/ (checked against PyPI's sha256 on every use),
meta/<version>.json (the wheel picked and its sha256: a release works offline) and src/<version>/. After 0.5.9 SGLang
ships compiled wheels per Python and platform with the same Python sources: one wheel stands for the release."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests
from packaging.version import InvalidVersion, Version
from pydantic import TypeAdapter

from sm120.errors import CheckFailed, UsageError

PACKAGE = "sglang"
INDEX = os.environ.get("SGLANG_SM120_PYPI", "https://pypi.org/pypi")
TIMEOUT = (10, 120)
_BYTES = {"unit": "B", "unit_scale": True, "unit_divisor": 1024}  # a download's bar (disable=None: none if no tty)


def cache_home() -> Path:
    """This project's cache directory (PyPI downloads here, the T1 venvs of tests/upstream): SGLANG_SM120_CACHE."""
    return Path(os.environ.get("SGLANG_SM120_CACHE", "~/.cache/sglang-sm120")).expanduser()


def cache_root() -> Path:
    return cache_home() / "pypi"


def parse_version(text: str, option: str = "--sglang") -> None:
    if _parsed(text) is None:
        raise UsageError(f"{option} {text!r} is not a version (like 0.5.9)")


@dataclass(frozen=True)
class WheelFile:
    version: str
    filename: str
    url: str
    sha256: str
    size: int


_RELEASES: dict[str, dict[str, list[dict[str, Any]]]] = {}  # by project, fetched once per process


def releases_of(project: str) -> dict[str, list[dict[str, Any]]]:
    """{version: [file, ...]} of a project on PyPI (sglang, torch, sglang-kernel, ...) from its JSON API."""
    if project in _RELEASES:
        return _RELEASES[project]
    url = f"{INDEX}/{project}/json"
    try:
        response = requests.get(url, timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise CheckFailed(f"cannot reach PyPI ({url}): {type(exc).__name__}") from None
    if response.status_code == 404:  # sglang missing is PyPI's (or the mirror's) fault; another project, the caller's
        raise (CheckFailed if project == PACKAGE else UsageError)(f"PyPI has no project {project!r}")
    if not response.ok:
        raise CheckFailed(f"PyPI answered {response.status_code} for {url}")
    try:
        _RELEASES[project] = response.json()["releases"]
    except ValueError:
        raise CheckFailed(f"PyPI answered something that is not JSON for {url}") from None
    return _RELEASES[project]


all_releases = functools.partial(releases_of, PACKAGE)  # sglang's: what final_releases reads (tests replace it)


def release_files(project: str, version: str) -> list[dict[str, Any]] | None:
    """The files of one release of `project` (matching 0.5.10.post1 == 0.5.10-post1), or None when PyPI has none."""
    releases = releases_of(project)
    if version in releases:
        return releases[version]
    wanted = Version(version)
    return next((f for v, f in releases.items() if _parsed(v) == wanted), None)


def final_releases(minimum: str) -> list[str]:
    """Every final release (no pre-, dev-release; post-releases included) >= minimum with files not all yanked."""
    floor = Version(minimum)
    found = [t for t, files in all_releases().items() if files and not all(f.get("yanked") for f in files)]
    return sorted((t for t in found if (v := _parsed(t)) and not v.is_prerelease and v >= floor), key=Version)


def pick_wheel(project: str, version: str, files: list[dict[str, Any]]) -> WheelFile:
    """The wheel that stands for a release of any project: py3-none-any, else CPython 3.11 x86_64, else x86_64."""
    wheels = [f for f in files if f["filename"].endswith(".whl") and not f.get("yanked")]
    if not wheels:
        raise CheckFailed(f"{project} {version} has no wheel on PyPI (only {', '.join(f['filename'] for f in files)})")

    def rank(f: dict[str, Any]) -> tuple[bool, bool, bool, str]:
        name = f["filename"]
        x86 = name.endswith("x86_64.whl")
        return (not name.endswith("-py3-none-any.whl"), not (x86 and "-cp311-" in name), not x86, name)

    best = min(wheels, key=rank)
    # PyPI answers absolute URLs; a mirror may answer ones relative to the JSON document.
    url = urljoin(f"{INDEX}/{project}/json", best["url"])
    return WheelFile(version, best["filename"], url, best["digests"]["sha256"], best["size"])


def _meta_path(version: str) -> Path:
    return cache_root() / "meta" / f"{version}.json"


def wheel_for(version: str, *, refresh: bool = False) -> WheelFile:
    """The wheel that stands for `version`: from the cache when its record is sound, else from PyPI."""
    parse_version(version)
    meta = _meta_path(version)
    if not refresh:  # a record missing, not one, or not of this release is fetched again below
        with contextlib.suppress(OSError, ValueError):  # pydantic's ValidationError is a ValueError
            cached = TypeAdapter(WheelFile).validate_json(meta.read_bytes(), strict=True)
            name = cached.filename
            sound = name.endswith(".whl") and "/" not in name and re.fullmatch(r"[0-9a-f]{64}", cached.sha256)
            if sound and cached.version == version:
                return cached
    files = release_files(PACKAGE, version)
    if not files:
        try:
            newest = (final_releases("0") or ["none"])[-1]
        except CheckFailed:
            newest = "unknown"
        raise UsageError(f"sglang {version} is not on PyPI (newest final release: {newest})")
    wheel = pick_wheel(PACKAGE, version, files)
    write(meta, (json.dumps(wheel.__dict__, indent=2) + "\n").encode())
    return wheel


def _parsed(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(path: Path, data: bytes) -> None:
    """`data` into `path` in one step (a temporary file beside it, one per process, renamed): never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created) for the block: two processes sharing the cache (pytest workers,
    two `build.py patches` runs) do not fetch or unpack the same release at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def download(version: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """The release's wheel in the cache, hashed on every use (a size can match a corrupt file); a mismatch fetches
    the record and the wheel again, once; a second one is an error naming what to delete (tracks-and-patches.md)."""
    with locked(cache_root() / "locks" / f"wheel-{version}"):
        for refreshed in (False, True):  # a cached wheel that does not match: the record may be the stale half
            wheel = wheel_for(version, refresh=refreshed)
            target = cache_root() / "wheels" / wheel.filename
            if not target.is_file():
                break
            if _sha256(target) == wheel.sha256:
                return target
        from tqdm import tqdm

        for _attempt in (1, 2):
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".part")
            if progress:
                progress(f"downloading {wheel.filename} ({wheel.size / 2**20:.1f} MiB)")
            try:
                with requests.get(wheel.url, stream=True, timeout=TIMEOUT) as response, open(partial, "wb") as handle:
                    response.raise_for_status()
                    with tqdm(total=wheel.size, desc=wheel.filename, disable=None, leave=False, **_BYTES) as bar:
                        for chunk in response.iter_content(1 << 20):
                            bar.update(handle.write(chunk))
            except requests.RequestException as exc:
                partial.unlink(missing_ok=True)
                raise CheckFailed(f"downloading {wheel.filename} failed: {type(exc).__name__}") from None
            digest = _sha256(partial)
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


def extract(wheel: Path, dest: Path, *, python_only: bool) -> Path:
    """Unpack `wheel` into `dest` (site-packages layout); with python_only only .py files and the dist-info."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                source = info.filename.endswith(".py") or ".dist-info/" in info.filename
                if info.is_dir() or (python_only and not source):
                    continue
                target = (dest / info.filename).resolve()
                if dest.resolve() not in target.parents:
                    raise CheckFailed(f"{wheel.name}: member {info.filename!r} would land outside {dest}")
                archive.extract(info, dest)
                if mode := (info.external_attr >> 16) & 0o777:
                    os.chmod(target, mode)
    except zipfile.BadZipFile:
        raise CheckFailed(f"{wheel}: not a valid wheel (zip); delete it to download it again") from None
    return dest


def source_tree(version: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """The release's Python sources (site-packages layout) in the cache, for checks. Extracted once, from the
    wheel the record names (a tree from another wheel, e.g. before the record was fetched again, is redone)."""
    target = cache_root() / "src" / version
    with locked(cache_root() / "locks" / f"src-{version}"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if (target / ".complete").read_text(encoding="utf-8").strip() == wheel_for(version).filename:
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
            shutil.rmtree(scratch, ignore_errors=True)
        return target
