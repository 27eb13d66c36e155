"""flashinfer-prebuilt stage: FlashInfer's JIT modules that the plan names, built ahead of time for sm_120.

Each module is made by FlashInfer's own generator and built by its own JitSpec.build (its build.ninja, its nvcc
flags), then laid out where FlashInfer looks for AOT modules before it compiles anything:
site-packages/flashinfer/data/aot/<name>/<name>.so (flashinfer/jit/env.py get_aot_artifacts, the fallback path
that needs no provider package and no GPU to be found). It is inside the Python environment, so a cache volume
mounted over the JIT cache directory cannot hide it. A manifest beside the modules records FlashInfer's version
and the arch list: `build.py verify` and the entrypoint compare it with the FlashInfer installed.

    FLASHINFER_PREBUILT=JSON python3 flashinfer_prebuilt.py OUT_DIR    # the plan's (sm120/plan/prebuilt.py)

Parallelism: MAX_JOBS, which the Dockerfile sets from FLASHINFER_MAX_JOBS of the BuildKit secret build_jobs (read
by docker/stages/common.sh's load_build_jobs), else FlashInfer's own default.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

MANIFEST = "sm120-prebuilt.json"  # what sm120/image/entrypoint/prebuilt.py reads (a T0 test runs both)


def main(out: Path) -> int:
    plan = json.loads(os.environ["FLASHINFER_PREBUILT"])
    out.mkdir(parents=True, exist_ok=True)
    manifest = {key: plan[key] for key in ("flashinfer", "arch_list", "first_start_builds", "note")}
    manifest["modules"] = {}
    if plan["modules"]:
        os.environ.update(
            FLASHINFER_CUDA_ARCH_LIST=plan["arch_list"],
            FLASHINFER_WORKSPACE_BASE=tempfile.mkdtemp(prefix="flashinfer-"),
        )
        import flashinfer

        if flashinfer.__version__ != plan["flashinfer"]:
            print(
                f"[flashinfer-prebuilt] FlashInfer {flashinfer.__version__} is installed, the plan pins "
                f"{plan['flashinfer']}: modules built here would not match (fix the track's flashinfer pin)",
                file=sys.stderr,
            )
            return 1
    for entry in plan["modules"]:
        module, _, function = entry["gen"].partition(":")
        spec = getattr(importlib.import_module(module), function)(**entry.get("kwargs", {}))
        if spec.name != entry["name"]:
            print(f"[flashinfer-prebuilt] {entry['gen']} made {spec.name!r}, not {entry['name']!r}", file=sys.stderr)
            return 1
        started = time.monotonic()
        jobs = os.environ.get("MAX_JOBS", "FlashInfer's default")
        print(f"[flashinfer-prebuilt] {spec.name}: {len(spec.sources)} sources, MAX_JOBS={jobs}")
        spec.build(verbose=False)
        target = out / spec.name / f"{spec.name}.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(spec.jit_library_path, target)
        seconds = round(time.monotonic() - started)
        print(f"[flashinfer-prebuilt] {spec.name}: built in {seconds} s, {target.stat().st_size / 2**20:.1f} MiB")
        manifest["modules"][spec.name] = {"gen": entry["gen"], "build_seconds": seconds}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
