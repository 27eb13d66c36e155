"""What `build.py build` hands the image build: the outputs of the plan it resolved on the host, staged in the
build context (the build arg PLAN_DIR, `.plan/<profile>-<track>/` of the checkout), so the image build resolves
nothing itself: no build.toml, no pydantic, no second `plan` inside a stage.

    .plan/<profile>-<track>/plan.json            the plan, byte for byte what `build.py plan --json` prints
                                                 (the image's /etc/sglang-sm120/plan.json; the overlay stage)
    .plan/<profile>-<track>/series/series.json   the track's SGLang patch series, in order (sm120/image/patch_engine.py)
    .plan/<profile>-<track>/series/<name>/...    the listed patch files (the patched stage)
    .plan/<profile>-<track>/flash-attn/<path>    the plan's flash-attn patches at their build.toml paths (the
                                                 flash-attn stage; FLASH_ATTN_PATCHES names them)
    .plan/<profile>-<track>/build_jobs           the plan's compile job split, the BuildKit secret `build_jobs`
                                                 (docker/stages/common.sh); read from the host, never from the
                                                 context (.dockerignore leaves it out), so it is in no cache key

The patched stage copies only the series and the engine (sm120/image/patch_engine.py with the one module it imports,
sm120/image/exit_errors.py), so a Python edit elsewhere in sm120/ never re-runs it, and a plan that differs only in what
the image's entrypoint reads (a machine's job figures, the revision) re-runs only the small overlay layer. The staged
directory outlives `build.py build`, so the command `build.py build --print` shows can be run by hand.
"""

from __future__ import annotations

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


def directory(plan: Plan, repo: Path) -> Path:
    """Where the plan's outputs go: the PLAN_DIR build arg, under the build context."""
    return repo / plan.build_args["PLAN_DIR"]


def build_jobs(plan: Plan) -> str:
    """The plan's job split as shell assignments, for the BuildKit secret `build_jobs` (docker/stages/common.sh)."""
    return "".join(f"{key}={int(value)}\n" for key, value in plan.build_jobs.items())


def stage(config: Config, plan: Plan, repo: Path) -> Path:
    """Write plan.json, the SGLang patch series (with their files) and build_jobs for the build; returns the
    directory.

    Written beside the directory first and swapped in only when it differs, so a build reading the staged files
    (BuildKit reads the context when each COPY runs) never sees a half-written or missing directory."""
    target = directory(plan, repo)
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
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return files_a == files_b and all(filecmp.cmp(a / f, b / f, shallow=False) for f in files_a)


def _write(config: Config, plan: Plan, target: Path) -> None:
    series_dir = target / "series"
    series_dir.mkdir(parents=True)
    (target / "plan.json").write_text(plan.to_json(), encoding="utf-8")
    (target / BUILD_JOBS).write_text(build_jobs(plan), encoding="utf-8")
    names = [p.name for p in plan.patches if p.component == "sglang"]
    names += [s.name for s in plan.patches_skipped if config.patch(s.name).component == "sglang"]
    order = [n for n in config.track(plan.sglang_version).patches if n in names]
    series = patching.resolve([(n, config.patch(n)) for n in order], plan.sglang_version)
    staged = []
    for patch in series:
        if patch.file is not None:
            source = config.root / patch.file
            rel = f"{patch.name}/{Path(patch.file).name}"
            (series_dir / patch.name).mkdir(exist_ok=True)
            shutil.copyfile(source, series_dir / rel)
            patch = patch_engine.Resolved(patch.name, rel, patch.upstream, patch.checks, patch.ranges)
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
