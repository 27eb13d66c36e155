"""What `build.py build` hands the image build, staged in the build context at `.plan/<profile>-<track>/` (the
build arg PLAN_DIR; docs/architecture.md), so the image build resolves nothing. The directory outlives `build.py
build`: the command `build --print` shows can be run.
"""

from __future__ import annotations

import dataclasses
import filecmp
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sm120.image import patch_engine
from sm120.patches import patching

if TYPE_CHECKING:
    from sm120.plan.config import Config
from sm120.plan.plan_types import Plan

BUILD_JOBS = "build_jobs"


def stage(config: Config, plan: Plan, repo: Path) -> Path:
    """Write plan.json, the SGLang patch series (with their files) and build_jobs for the build; returns the
    directory. Written beside it first and swapped in only when it differs, so a build reading the staged files
    (BuildKit reads the context when each COPY runs) never sees a half-written or missing directory."""
    target = repo / plan.build_args["PLAN_DIR"]
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _write(config, plan, scratch)
        if not (target.is_dir() and _same_tree(scratch, target)):
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            if target.exists():
                target.rename(old)
            scratch.rename(target)
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _same_tree(a: Path, b: Path) -> bool:
    files_a, files_b = (sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file()) for d in (a, b))
    return files_a == files_b and all(filecmp.cmp(a / f, b / f, shallow=False) for f in files_a)


def _write(config: Config, plan: Plan, target: Path) -> None:
    series_dir = target / "series"
    series_dir.mkdir(parents=True)
    (target / "plan.json").write_text(plan.to_json(), encoding="utf-8")
    jobs = "".join(f"{key}={int(value)}\n" for key, value in plan.build_jobs.items())  # shell assignments
    (target / BUILD_JOBS).write_text(jobs, encoding="utf-8")
    names = [p.name for p in plan.patches if p.component == "sglang"]
    names += [s.name for s in plan.patches_skipped if config.patch(s.name).component == "sglang"]
    order = [n for n in config.track(plan.sglang_version).patches if n in names]
    series = patching.resolve([(n, config.patch(n)) for n in order], plan.sglang_version)
    staged = []
    for patch in series:
        if patch.file is not None:
            rel = f"{patch.name}/{Path(patch.file).name}"
            (series_dir / patch.name).mkdir(exist_ok=True)
            shutil.copyfile(config.root / patch.file, series_dir / rel)
            patch = dataclasses.replace(patch, file=rel)
        staged.append(patch)
    patch_engine.write_series(series_dir, plan.sglang_version, staged)
    # flash-attn's patches from the plan resolved here (not the checkout's patches/ folder), so a build with
    # `--config ALT` compiles with ALT's patches, the ones its labels name.
    for ref in plan.patches:
        if ref.component == "flash-attn":
            dest = target / "flash-attn" / ref.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(config.root / ref.path, dest)
    (target / "flash-attn").mkdir(exist_ok=True)
