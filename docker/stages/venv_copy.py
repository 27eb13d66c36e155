"""The runtime stage's venv: the built venv copied without what serving on sm_120 never loads.

    NOT_SHIPPED="GLOB ..." python3 venv_copy.py SOURCE DEST SITE_PACKAGES_REL

NOT_SHIPPED (the build arg of that name, written from build.toml [[tracks.*.not_shipped]] by the plan): globs
separated by white space, relative to site-packages (`nvidia_cutlass_dsl/cu12`, `pandas/tests`, `flashinfer_cubin-*`).
A path that matches is not copied (a directory: with everything below it). Every glob must match something, or
the step fails naming it: an entry that a new release made stale is found here, not left in build.toml. Standard
library only (it runs with the runtime base's python3); tests/unit/test_venv_copy.py runs it on a tree.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import sys
from pathlib import Path


def matcher(globs: list[str]):
    """path relative to site-packages -> the glob that leaves it out, or None."""

    def match(rel: str) -> str | None:
        for glob in globs:
            if fnmatch.fnmatchcase(rel, glob):
                return glob
        return None

    return match


def copy(source: Path, dest: Path, site: str, globs: list[str]) -> tuple[int, dict[str, int]]:
    """Copy source to dest (symlinks as links, modes and times kept), leaving out what the globs match under
    source/site. Returns (bytes copied, glob -> bytes left out)."""
    match = matcher(globs)
    left_out = dict.fromkeys(globs, 0)
    copied = 0
    site_root = source / site
    for root, dirs, files in os.walk(source):
        here = Path(root)
        target = dest / here.relative_to(source)
        target.mkdir(parents=True, exist_ok=True)
        shutil.copystat(here, target)
        inside = here == site_root or site_root in here.parents
        keep_dirs = []
        for name in dirs:
            path = here / name
            glob = match(str(path.relative_to(site_root))) if inside else None
            if glob is not None:
                left_out[glob] += _size(path)
            elif path.is_symlink():
                os.symlink(os.readlink(path), target / name)
            else:
                keep_dirs.append(name)
        dirs[:] = keep_dirs
        for name in files:
            path = here / name
            glob = match(str(path.relative_to(site_root))) if inside else None
            if glob is not None:
                left_out[glob] += path.lstat().st_size
                continue
            if path.is_symlink():
                os.symlink(os.readlink(path), target / name)
            else:
                shutil.copy2(path, target / name)
                copied += path.lstat().st_size
    return copied, left_out


def _size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir() or p.is_symlink())


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write('usage: NOT_SHIPPED="GLOB ..." venv_copy.py SOURCE DEST SITE_PACKAGES_REL\n')
        return 2
    source, dest, site = Path(argv[0]), Path(argv[1]), argv[2]
    globs = os.environ.get("NOT_SHIPPED", "").split()
    bad = [g for g in globs if g.startswith("/") or ".." in Path(g).parts]
    if bad:
        sys.stderr.write(f"[venv] error: {bad[0]!r} is not a path below site-packages\n")
        return 2
    copied, left_out = copy(source, dest, site, globs)
    stale = [glob for glob, size in left_out.items() if size == 0]
    if stale:
        sys.stderr.write(
            f"[venv] error: not_shipped {stale[0]!r} matches nothing in {site}: the release changed; "
            "fix or drop that entry in build.toml\n"
        )
        return 1
    for glob, size in left_out.items():
        print(f"[venv] left out {glob}: {size / 2**20:.0f} MiB")
    print(f"[venv] copied {copied / 2**20:.0f} MiB, left out {sum(left_out.values()) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
