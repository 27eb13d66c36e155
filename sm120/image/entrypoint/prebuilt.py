"""FlashInfer's prebuilt modules (docker/stages/flashinfer_prebuilt.py): at start, say what a first start still
compiles, and warn when the FlashInfer installed is not the one they were built for (FlashInfer loads a module of
its AOT directory without a version check)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

from .errors import Log

MANIFEST = "sm120-prebuilt.json"  # docker/stages/flashinfer_prebuilt.py writes it


def check(log: Log, directory: Path | None = None) -> None:
    spec = importlib.util.find_spec("flashinfer") if directory is None else None
    if spec is not None and spec.submodule_search_locations:
        directory = Path(next(iter(spec.submodule_search_locations))) / "data" / "aot"
    if directory is None or not (directory / MANIFEST).is_file():
        return
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        built, modules, left = manifest["flashinfer"], sorted(manifest["modules"]), manifest["first_start_builds"]
        installed = importlib.metadata.version("flashinfer-python")
    except (OSError, ValueError, KeyError, TypeError, importlib.metadata.PackageNotFoundError) as exc:
        log.warn(f"cannot read FlashInfer's prebuilt modules ({directory / MANIFEST}): {exc}")
        return
    if modules and installed != built:
        log.warn(
            f"FlashInfer {installed} is installed, but its prebuilt modules ({', '.join(modules)}) are of {built}: "
            f"FlashInfer loads them unchecked; install flashinfer-python=={built} again, or delete {directory} "
            "to have them compiled at first use"
        )
    elif modules or left:
        done = f"prebuilt: {', '.join(modules)}" if modules else "none prebuilt"
        todo = f"; compiled at first use, where the model takes them (docs/first-start): {', '.join(left)}"
        log.note(f"FlashInfer modules for sm_120: {done}{todo if left else ''}")
    elif manifest.get("note"):
        log.note(f"FlashInfer modules for sm_120: {manifest['note']}")
