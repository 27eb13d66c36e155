"""The CPUs and memory this process may really use (cgroup v2 or v1 limits along its cgroup path and its ancestors,
the CPU affinity mask, /proc/meminfo: the smallest wins), and the build parallelism they allow."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3
_V1_UNLIMITED = 1 << 60  # cgroup v1 reports "no limit" as a huge page-rounded number, v2 as "max"


@dataclass(frozen=True)
class Resources:
    cpus: int
    memory_bytes: int
    source: str  # what limited them, for the plan's explanation

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


@dataclass(frozen=True)
class Parallelism:
    max_jobs: int
    nvcc_threads: int
    reason: str
    warning: str | None = None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _ancestors(base: Path, rel: str) -> list[Path]:
    """base/rel and each parent up to base (a namespaced path that does not exist falls back to base)."""
    parts = [part for part in rel.split("/") if part]
    return [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _smallest(dirs: list[Path], limit: Callable[[Path], float | None]) -> float | None:
    """The smallest limit set along the cgroup path (a child cannot exceed its parents), or None where none is."""
    return min((value for value in map(limit, dirs) if value is not None), default=None)


def _v2_cpu(d: Path) -> float | None:
    quota, _, period = (_read(d / "cpu.max") or "").partition(" ")
    return int(quota) / int(period) if quota and quota != "max" and period else None


def _v1_cpu(d: Path) -> float | None:
    quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    return int(quota) / int(period) if quota and period and int(quota) > 0 else None


def _memory(d: Path, name: str) -> int | None:
    text = _read(d / name)
    return int(text) if text and text != "max" and int(text) < _V1_UNLIMITED else None


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def detect(
    proc: Path = Path("/proc"), sysfs: Path = Path("/sys"), affinity: Callable[[], int] = _affinity
) -> Resources:
    cpus, cpu_source = float(affinity()), "affinity"
    totals = [line.split()[1] for line in (_read(proc / "meminfo") or "").splitlines() if line.startswith("MemTotal:")]
    if not totals:
        raise RuntimeError(f"{proc / 'meminfo'} has no MemTotal")
    memory, mem_source = int(totals[0]) * 1024, "MemTotal"
    v2: str | None = None  # the v2 path and {v1 controller: path}, from /proc/self/cgroup
    v1: dict[str, str] = {}
    for line in (_read(proc / "self" / "cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1]:
            v1.update(dict.fromkeys(parts[1].split(","), parts[2]))
        elif len(parts) == 3:
            v2 = parts[2]
    cgroot = sysfs / "fs" / "cgroup"
    if v2 is not None and (cgroot / "cgroup.controllers").exists():
        dirs = _ancestors(cgroot, v2)
        cpu_limit, mem_limit = _smallest(dirs, _v2_cpu), _smallest(dirs, lambda d: _memory(d, "memory.max"))
        kind = "cgroup v2"
    else:
        cpu_dir = cgroot / "cpu,cpuacct" if (cgroot / "cpu,cpuacct").exists() else cgroot / "cpu"
        cpu_limit = _smallest(_ancestors(cpu_dir, v1.get("cpu", "")), _v1_cpu)
        mem_dirs = _ancestors(cgroot / "memory", v1.get("memory", ""))
        mem_limit = _smallest(mem_dirs, lambda d: _memory(d, "memory.limit_in_bytes"))
        kind = "cgroup v1"
    if cpu_limit is not None and cpu_limit < cpus:
        cpus, cpu_source = cpu_limit, f"{kind} cpu quota"
    if mem_limit is not None and mem_limit < memory:
        memory, mem_source = mem_limit, f"{kind} memory limit"
    return Resources(
        cpus=max(1, math.floor(cpus)), memory_bytes=memory, source=f"CPUs from {cpu_source}, memory from {mem_source}"
    )


def parallelism(
    resources: Resources,
    *,
    job_memory_gib: float,
    memory_fraction: float,
    nvcc_threads_max: int,
    gencode_targets: int,
    max_jobs_override: int | None = None,
) -> Parallelism:
    """max_jobs x nvcc_threads compile processes, each needing job_memory_gib, within memory_fraction. nvcc --threads
    only parallelises across -gencode targets, so it is capped by their number; each thread runs its own cicc/ptxas,
    so one job's memory grows with it."""
    nvcc_threads = max(1, min(nvcc_threads_max, gencode_targets))
    per_job = job_memory_gib * nvcc_threads
    budget = resources.memory_gib * memory_fraction
    by_cpu = max(1, resources.cpus // nvcc_threads)
    ratio = budget / per_job  # a tiny per-job figure gives inf: no more jobs than CPUs are used anyway
    by_memory = math.floor(ratio) if math.isfinite(ratio) and ratio < (1 << 30) else 1 << 30
    warning = (
        f"one compile job may need {per_job:.1f} GiB, more than {memory_fraction:.0%} of "
        f"{resources.memory_gib:.1f} GiB: the build may be killed for memory"
        if by_memory < 1
        else None
    )
    jobs = max(1, min(by_cpu, by_memory))
    reason = (
        f"{resources.cpus} CPUs / {nvcc_threads} nvcc thread(s) = {by_cpu} jobs; "
        f"{resources.memory_gib:.1f} GiB x {memory_fraction:g} / {per_job:g} GiB per job = {max(by_memory, 0)} jobs; "
        f"limited by {'CPUs' if by_cpu <= by_memory else 'memory'} ({resources.source})"
    )
    if max_jobs_override is not None:
        jobs, reason = max_jobs_override, f"--max-jobs {max_jobs_override} (the rule gave {jobs}: {reason})"
    return Parallelism(jobs, nvcc_threads, reason, warning)
