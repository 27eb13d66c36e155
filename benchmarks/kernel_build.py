#!/usr/bin/env python3
"""Measure one run of the flash-attn stage script (docker/stages/flash-attn.sh), the same script the
Dockerfile runs: wall time, CPU time, peak memory of the whole build and of every compile job and process
kind (nvcc, cicc, ptxas, cudafe++, cc1plus), the wheel's size, the SASS it carries (cuobjdump) and whether
the extension imports.

    python3 benchmarks/kernel_build.py --label release --out OUT --sdist flash_attn-2.8.3.tar.gz --max-jobs 16

The flash-attn settings are the plan's build args, the ones the Dockerfile's flash-attn stage declares: from
`--plan FILE` (the output of `build.py plan --json`, for a machine without this project's dependencies) or else
resolved here for `--profile` (default release) and `--sglang`; `--archs`, `--head-dims`, `--dtypes`,
`--backward`, `--cxx-std`, `--patches` and `--version` override one each (a variant to compare).

Writes OUT/<label>.json. Needs psutil (the H200 lender's image has it). docs/kernel-build-sm120.md has the
figures and the exact commands.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sm120.plan import build_args  # noqa: E402 (standard library only: runs where pydantic is absent)

# Option -> the build arg it overrides.
OVERRIDES = {
    "version": "FLASH_ATTN_VERSION",
    "archs": "FLASH_ATTN_CUDA_ARCHS",
    "head_dims": "FLASH_ATTN_HEAD_DIMS",
    "dtypes": "FLASH_ATTN_DTYPES",
    "backward": "FLASH_ATTN_BACKWARD",
    "cxx_std": "CXX_STD",
    "patches": "FLASH_ATTN_PATCHES",
}
KINDS = ("nvcc", "cicc", "ptxas", "cudafe++", "cc1plus", "fatbinary", "nvlink", "ninja", "ld")
SOURCE = re.compile(r"(?:^|/)([\w.+-]+\.(?:cu|cpp))$")


def _kind(name: str) -> str | None:
    return next((kind for kind in KINDS if name.startswith(kind)), None)


class Sampler(threading.Thread):
    """Samples the build's process tree: per-process peak RSS (VmHWM) and CPU, per-job tree peak RSS."""

    def __init__(self, root_pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.interval = interval
        self.stop = threading.Event()
        self.procs: dict[int, dict] = {}  # pid -> {name, kind, hwm, cpu, parent_job, first, last}
        self.jobs: dict[int, dict] = {}  # job root pid -> {source, peak_rss, first, last}
        self.peak_total = 0
        self.peak_procs = 0

    def _job_of(self, proc: psutil.Process) -> int | None:
        """The compile job a process belongs to: the ancestor whose parent is ninja (ninja runs one per file)."""
        child = proc
        while True:
            try:
                parent = child.parent()
            except psutil.Error:
                return None
            if parent is None or parent.pid == self.root_pid:
                return None
            if parent.name() == "ninja":
                return child.pid
            known = self.procs.get(parent.pid)
            if known is not None:
                return known["job"]
            child = parent

    def run(self) -> None:
        try:
            root = psutil.Process(self.root_pid)
        except psutil.Error:
            return
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                tree = root.children(recursive=True)
            except psutil.Error:
                break
            total = 0
            per_job: dict[int, int] = {}
            for proc in tree:
                try:
                    with proc.oneshot():
                        rss = proc.memory_info().rss
                        name = proc.name()
                        cpu = proc.cpu_times()
                        status = Path(f"/proc/{proc.pid}/status").read_text()
                    hwm_match = re.search(r"VmHWM:\s+(\d+) kB", status)
                    hwm = int(hwm_match.group(1)) * 1024 if hwm_match else rss
                except (psutil.Error, OSError):
                    continue
                total += rss
                info = self.procs.get(proc.pid)
                if info is None:
                    job = self._job_of(proc)
                    info = {"name": name, "kind": _kind(name), "hwm": 0, "cpu": 0.0, "job": job, "first": now}
                    self.procs[proc.pid] = info
                    if job is not None and job not in self.jobs:
                        self.jobs[job] = {"source": None, "peak_rss": 0, "first": now, "last": now}
                info["hwm"] = max(info["hwm"], hwm)
                info["cpu"] = cpu.user + cpu.system
                info["last"] = now
                job = info["job"]
                if job is not None:
                    per_job[job] = per_job.get(job, 0) + rss
                    if self.jobs[job]["source"] is None:
                        with contextlib.suppress(psutil.Error):
                            found = [m[1] for arg in proc.cmdline() if (m := SOURCE.search(arg)) and "-o" not in arg]
                            self.jobs[job]["source"] = found[0] if found else None
            for job, rss in per_job.items():
                self.jobs[job]["peak_rss"] = max(self.jobs[job]["peak_rss"], rss)
                self.jobs[job]["last"] = now
            self.peak_total = max(self.peak_total, total)
            self.peak_procs = max(self.peak_procs, len(tree))
            self.stop.wait(self.interval)


def _cuobjdump(so: Path) -> dict[str, object]:
    tool = shutil.which("cuobjdump")
    if tool is None:
        return {"error": "cuobjdump not on PATH"}
    out = subprocess.run([tool, "--list-elf", str(so)], capture_output=True, text=True, check=False)
    archs = sorted(set(re.findall(r"\.(sm_\d+a?)\.cubin", out.stdout)))
    count = len(re.findall(r"\.cubin", out.stdout))
    ptx = subprocess.run([tool, "--list-ptx", str(so)], capture_output=True, text=True, check=False)
    return {"sass_archs": archs, "cubins": count, "ptx_entries": len(ptx.stdout.strip().splitlines())}


def _inspect_wheel(wheel: Path, python: str) -> dict[str, object]:
    info: dict[str, object] = {"wheel": wheel.name, "wheel_bytes": wheel.stat().st_size}
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        sos = sorted(Path(tmp).glob("*.so"))
        info["extensions"] = {so.name: {"bytes": so.stat().st_size, **_cuobjdump(so)} for so in sos}
        probe = subprocess.run(
            [python, "-c", "import torch, flash_attn_2_cuda as m; print([n for n in dir(m) if n[0] != '_'])"],
            capture_output=True,
            text=True,
            check=False,
            env=dict(os.environ, PYTHONPATH=tmp),
            cwd=tmp,
        )
        info["imports"] = probe.returncode == 0
        info["import_output"] = (probe.stdout or probe.stderr).strip()[-400:]
    return info


def plan_build_args(plan: Path | None, profile: str, sglang: str | None) -> dict[str, str]:
    """The plan's build args: from a `build.py plan --json` file, or resolved from build.toml here."""
    if plan is not None:
        return json.loads(plan.read_text())["build_args"]
    from sm120.plan.resolve import load_plan

    return load_plan(profile=profile, sglang=sglang).build_args


def stage_args(args: argparse.Namespace) -> dict[str, str]:
    """What the Dockerfile's flash-attn stage gets from the plan, with this run's overrides."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    stage = build_args.stage_env(plan_build_args(args.plan, args.profile, args.sglang), dockerfile, "flash-attn")
    for option, name in OVERRIDES.items():
        if getattr(args, option) is not None:
            stage[name] = getattr(args, option)
    return stage


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sdist", type=Path, required=True)
    ap.add_argument("--plan", type=Path, help="a `build.py plan --json` output to take the build args from")
    ap.add_argument("--profile", default="release", help="else: resolve the plan of this profile here")
    ap.add_argument("--sglang", help="and this SGLang track (default: build.toml's)")
    for option in OVERRIDES:
        ap.add_argument("--" + option.replace("_", "-"), help=f"override the plan's {OVERRIDES[option]}")
    ap.add_argument("--max-jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--nvcc-threads", type=int, default=1)
    args = ap.parse_args()
    stage = stage_args(args)

    args.out.mkdir(parents=True, exist_ok=True)
    wheels = Path(tempfile.mkdtemp(prefix="fa-wheels-"))
    env = dict(
        os.environ,
        **stage,
        FLASH_ATTN_SDIST=str(args.sdist.resolve()),
        MAX_JOBS=str(args.max_jobs),
        NVCC_THREADS=str(args.nvcc_threads),
        OUT_DIR=str(wheels),
        PATCH_ROOT=str(ROOT),
        WHEELHOUSE="/nonexistent",
        FLASH_ATTN_WORK_DIR=tempfile.mkdtemp(prefix=f"fa-{args.label}-"),  # builds may run side by side
    )
    log = args.out / f"{args.label}.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with log.open("w") as fh:
        script = str(ROOT / "docker/stages/flash-attn.sh")
        proc = subprocess.Popen(["bash", script], env=env, stdout=fh, stderr=subprocess.STDOUT)
        sampler = Sampler(proc.pid)
        sampler.start()
        code = proc.wait()
        sampler.stop.set()
        sampler.join()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    kinds: dict[str, dict[str, float]] = {}
    for info in sampler.procs.values():
        kind = info["kind"]
        if kind is None:
            continue
        k = kinds.setdefault(kind, {"count": 0, "peak_rss_max": 0, "cpu_s": 0.0})
        k["count"] += 1
        k["peak_rss_max"] = max(k["peak_rss_max"], info["hwm"])
        k["cpu_s"] += info["cpu"]
    jobs = []
    for pid, job in sampler.jobs.items():
        job_cpu = sum(p["cpu"] for p in sampler.procs.values() if p["job"] == pid)
        jobs.append(
            {
                "source": job["source"],
                "peak_rss": job["peak_rss"],
                "cpu_s": round(job_cpu, 1),
                "wall_s": round(job["last"] - job["first"], 1),
            }
        )
    jobs.sort(key=lambda j: -j["peak_rss"])
    result: dict[str, object] = {
        "label": args.label,
        "config": {
            **{k: stage[name] for k, name in OVERRIDES.items() if k != "patches"},
            "max_jobs": args.max_jobs,
            "nvcc_threads": args.nvcc_threads,
        },
        "exit_code": code,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_total_rss": sampler.peak_total,
        "peak_processes": sampler.peak_procs,
        "kinds": kinds,
        "jobs": jobs,
        "machine": {"cpus": os.cpu_count(), "mem_bytes": psutil.virtual_memory().total},
        "python": sys.version.split()[0],
    }
    try:
        import torch

        result["torch"] = torch.__version__
    except ImportError:
        result["torch"] = None
    built = sorted(wheels.glob("*.whl"))
    if built:
        result.update(_inspect_wheel(built[0], sys.executable))
        if built[0].stat().st_size < 15 * 1024**2:  # small enough to come back from the device
            shutil.copy2(built[0], args.out / built[0].name)
    (args.out / f"{args.label}.json").write_text(json.dumps(result, indent=2))
    gib = 1024**3
    print(
        f"{args.label}: exit {code}, wall {wall:.0f} s, CPU {cpu:.0f} s, peak {sampler.peak_total / gib:.1f} GiB "
        f"total, {max((j['peak_rss'] for j in jobs), default=0) / gib:.2f} GiB per job (max), "
        f"wheel {result.get('wheel_bytes', 0) / 1024**2:.1f} MiB, imports={result.get('imports')}"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
