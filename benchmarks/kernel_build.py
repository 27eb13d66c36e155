#!/usr/bin/env python3
"""Measure one run of the flash-attn stage script (docker/stages/flash-attn.sh), the one the Dockerfile runs: wall
and CPU time, peak memory of the build and of every compile job and process kind, the wheel's size, its SASS
(cuobjdump) and whether the extension imports. Writes OUT/<label>.json; needs psutil.

    python3 benchmarks/kernel_build.py --label release --out OUT --sdist flash_attn-2.8.3.tar.gz --max-jobs 16

The flash-attn settings are the plan's build args for the Dockerfile's flash-attn stage: from `--plan FILE` (a
`build.py plan --json` output) or resolved here for `--profile` and `--sglang`; the other options override one
build arg each. docs/kernel-build-sm120.md has the figures and the exact commands.
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
    "split_kv": "FLASH_ATTN_SPLIT_KV",
    "cxx_std": "CXX_STD",
    "patches": "FLASH_ATTN_PATCHES",
}
KINDS = ("nvcc", "cicc", "ptxas", "cudafe++", "cc1plus", "fatbinary", "nvlink", "ninja", "ld")
SOURCE = re.compile(r"(?:^|/)([\w.+-]+\.(?:cu|cpp))$")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Sampler(threading.Thread):
    """Samples the build's process tree: per-process peak RSS (VmHWM) and CPU, per-job tree peak RSS."""

    def __init__(self, root_pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.stop = threading.Event()
        self.procs: dict[int, dict] = {}  # pid -> {kind, hwm, cpu, job}
        self.jobs: dict[int, dict] = {}  # job root pid -> {source, peak_rss, first, last}
        self.peak_total = self.peak_procs = 0

    def _job_of(self, proc: psutil.Process) -> int | None:
        """The compile job a process belongs to: the ancestor whose parent is ninja (ninja runs one per file)."""
        child = proc
        with contextlib.suppress(psutil.Error):
            for parent in proc.parents():
                if parent.pid == self.root_pid:
                    return None
                if parent.name() == "ninja":
                    return child.pid
                if parent.pid in self.procs:
                    return self.procs[parent.pid]["job"]
                child = parent
        return None

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
                        hwm = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{proc.pid}/status").read_text())
                except (psutil.Error, OSError):
                    continue
                total += rss
                if proc.pid not in self.procs:
                    kind = next((kind for kind in KINDS if name.startswith(kind)), None)
                    self.procs[proc.pid] = {"kind": kind, "hwm": 0, "job": self._job_of(proc)}
                info = self.procs[proc.pid]
                info["hwm"] = max(info["hwm"], int(hwm[1]) * 1024 if hwm else rss)
                info["cpu"] = cpu.user + cpu.system
                if (job := info["job"]) is None:
                    continue
                per_job[job] = per_job.get(job, 0) + rss
                entry = self.jobs.setdefault(job, {"source": None, "peak_rss": 0, "first": now, "last": now})
                if entry["source"] is None:
                    with contextlib.suppress(psutil.Error):
                        found = (m[1] for arg in proc.cmdline() if (m := SOURCE.search(arg)) and "-o" not in arg)
                        entry["source"] = next(found, None)
            for job, rss in per_job.items():
                self.jobs[job]["peak_rss"] = max(self.jobs[job]["peak_rss"], rss)
                self.jobs[job]["last"] = now
            self.peak_total = max(self.peak_total, total)
            self.peak_procs = max(self.peak_procs, len(tree))
            self.stop.wait(self.interval)

    def kinds(self) -> dict[str, dict[str, float]]:
        """Per process kind: how many ran, the largest peak RSS (bytes) and the CPU seconds of them all."""
        kinds: dict[str, dict[str, float]] = {}
        for info in self.procs.values():
            if info["kind"] is not None:
                k = kinds.setdefault(info["kind"], {"count": 0, "peak_rss_max": 0, "cpu_s": 0.0})
                k["count"] += 1
                k["peak_rss_max"] = max(k["peak_rss_max"], info["hwm"])
                k["cpu_s"] += info["cpu"]
        return kinds


def _cuobjdump(so: Path) -> dict[str, object]:
    if (tool := shutil.which("cuobjdump")) is None:
        return {"error": "cuobjdump not on PATH"}
    elf = subprocess.run([tool, "--list-elf", str(so)], capture_output=True, text=True, check=False).stdout
    ptx = subprocess.run([tool, "--list-ptx", str(so)], capture_output=True, text=True, check=False).stdout
    return {
        "sass_archs": sorted(set(re.findall(r"\.(sm_\d+a?)\.cubin", elf))),
        "cubins": len(re.findall(r"\.cubin", elf)),
        "ptx_entries": len(ptx.strip().splitlines()),
    }


def _inspect_wheel(wheel: Path) -> dict[str, object]:
    info: dict[str, object] = {"wheel": wheel.name, "wheel_bytes": wheel.stat().st_size}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp)
        info["extensions"] = {so.name: {"bytes": so.stat().st_size, **_cuobjdump(so)} for so in Path(tmp).glob("*.so")}
        probe = subprocess.run(
            [sys.executable, "-c", "import torch, flash_attn_2_cuda as m; print([n for n in dir(m) if n[0] != '_'])"],
            capture_output=True,
            text=True,
            check=False,
            env=dict(os.environ, PYTHONPATH=tmp),
            cwd=tmp,
        )
        info["imports"] = probe.returncode == 0
        info["import_output"] = (probe.stdout or probe.stderr).strip()[-400:]
    return info


def stage_args(args: argparse.Namespace) -> dict[str, str]:
    """What the Dockerfile's flash-attn stage gets from the plan, with this run's overrides."""
    if args.plan is not None:
        plan = json.loads(args.plan.read_text())["build_args"]
    else:
        from sm120.plan.resolve import load_plan

        plan = load_plan(profile=args.profile, sglang=args.sglang).build_args
    stage = build_args.stage_env(plan, (ROOT / "Dockerfile").read_text(), "flash-attn")
    return stage | {name: getattr(args, opt) for opt, name in OVERRIDES.items() if getattr(args, opt) is not None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sdist", type=Path, required=True)
    ap.add_argument("--plan", type=Path, help="a `build.py plan --json` output to take the build args from")
    ap.add_argument("--profile", default="release", help="else: resolve the plan of this profile here")
    ap.add_argument("--sglang", help="and this SGLang track (default: build.toml's)")
    for option, name in OVERRIDES.items():
        ap.add_argument("--" + option.replace("_", "-"), help=f"override the plan's {name}")
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
    cpu, started = children_cpu(), time.monotonic()
    with (args.out / f"{args.label}.log").open("w") as log:
        proc = subprocess.Popen(["bash", ROOT / "docker/stages/flash-attn.sh"], env=env, stdout=log, stderr=log)
        sampler = Sampler(proc.pid)
        sampler.start()
        code = proc.wait()
        sampler.stop.set()
        sampler.join()
    wall, cpu = time.monotonic() - started, children_cpu() - cpu

    jobs = [
        {
            "source": job["source"],
            "peak_rss": job["peak_rss"],
            "cpu_s": round(sum(p["cpu"] for p in sampler.procs.values() if p["job"] == pid), 1),
            "wall_s": round(job["last"] - job["first"], 1),
        }
        for pid, job in sorted(sampler.jobs.items(), key=lambda item: -item[1]["peak_rss"])
    ]
    try:
        import torch
    except ImportError:
        torch = None
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
        "kinds": sampler.kinds(),
        "jobs": jobs,
        "machine": {"cpus": os.cpu_count(), "mem_bytes": psutil.virtual_memory().total},
        "python": sys.version.split()[0],
        "torch": torch and torch.__version__,
    }
    if built := sorted(wheels.glob("*.whl")):
        result.update(_inspect_wheel(built[0]))
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
