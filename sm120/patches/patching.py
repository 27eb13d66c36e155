"""The host side of the patch engine: pick each patch's variant for a release (PEP 440 ranges in build.toml), then
run the engine (sm120/image/patch_engine.py, the same code the image build runs) on the series."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_version

from sm120.image import patch_engine as engine
from sm120.image.patch_engine import PatchFileError as PatchFileError  # the engine's data, for this module's callers
from sm120.image.patch_engine import Result as Result
from sm120.image.patch_engine import Status as Status
from sm120.image.patch_engine import TreeError, tree_version

if TYPE_CHECKING:
    from sm120.plan.config import Patch


def resolve(patches: Sequence[tuple[str, Patch]], version: str) -> list[engine.Resolved]:
    """The series for `version`: each patch with the variant file that covers the release (or none)."""
    return [
        engine.Resolved(
            name=name,
            file=getattr(patch.variant_for(version), "file", None),  # None: no variant covers the release
            upstream=patch.upstream,
            checks=tuple((c.path, tuple(c.patterns)) for c in patch.upstream_checks),
            ranges="; ".join(v.versions for v in patch.variants),
        )
        for name, patch in patches
    ]


def upstream_has(patch: Patch, tree: Path) -> bool:
    """True when every upstream check of the patch holds on the tree (a check on the source, not on the version)."""
    return engine.upstream_has([(c.path, c.patterns) for c in patch.upstream_checks], tree)


def verify_tree(tree: Path, version: str) -> None:
    """Refuse a tree that is not SGLang `version` (e.g. --source pointing at the wrong site-packages)."""
    if not (tree / "sglang").is_dir():
        raise TreeError(f"{tree}: no sglang/ package here; pass the site-packages folder that holds it")
    found = tree_version(tree)
    if found is None:
        raise TreeError(f"{tree}: cannot tell which SGLang this is (no sglang-*.dist-info, no sglang/_version.py)")
    if canonicalize_version(found) != canonicalize_version(version):
        raise TreeError(f"{tree}: holds SGLang {found}, not {version}; pass --sglang {found} or the right tree")


def check(tree: Path, version: str, patches: Sequence[tuple[str, Patch]], *, root: Path, write=False) -> list[Result]:
    """The series on `tree` (a release's source, site-packages layout): `tree` not modified, or with `write` (apply)
    patched in place, all or nothing: on any CONFLICT nothing is written."""
    verify_tree(tree, version)
    return engine.run(tree, version, resolve(patches, version), root=root, write=write)


apply = functools.partial(check, write=True)
