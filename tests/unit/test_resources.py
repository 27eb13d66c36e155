"""The parallelism rule, fed fake /proc and /sys trees (cgroup v1 and v2) and fake affinity."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120.plan import resources as res

GIB = 1024**3


def fake_machine(tmp_path: Path, *, mem_gib: float, cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       {int(mem_gib * 1024 * 1024)} kB\nMemFree: 1 kB\n")
    (proc / "self" / "cgroup").write_text(cgroup)
    for rel, text in files.items():
        path = sysfs / "fs" / "cgroup" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (sysfs / "fs" / "cgroup").mkdir(parents=True, exist_ok=True)
    return proc, sysfs


def test_no_limits_uses_affinity_and_memtotal(tmp_path):
    proc, sysfs = fake_machine(tmp_path, mem_gib=24, cgroup="0::/\n", files={"cgroup.controllers": "cpu memory"})
    r = res.detect(proc, sysfs, affinity=lambda: 2)
    assert (r.cpus, round(r.memory_gib)) == (2, 24)


def test_cgroup_v2_limits_along_the_path(tmp_path):
    proc, sysfs = fake_machine(
        tmp_path,
        mem_gib=256,
        cgroup="0::/ci/job\n",
        files={
            "cgroup.controllers": "cpu memory",
            "ci/cpu.max": "800000 100000",  # 8 CPUs at the parent
            "ci/job/cpu.max": "max 100000",
            "ci/job/memory.max": str(8 * GIB),
            "ci/memory.max": "max",
        },
    )
    r = res.detect(proc, sysfs, affinity=lambda: 64)
    assert r.cpus == 8
    assert r.memory_bytes == 8 * GIB
    assert "cgroup v2" in r.source


def test_cgroup_v1_quota_and_memory(tmp_path):
    proc, sysfs = fake_machine(
        tmp_path,
        mem_gib=64,
        cgroup="4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
        files={
            "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "250000",
            "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
            "memory/docker/abc/memory.limit_in_bytes": str(12 * GIB),
            "memory/memory.limit_in_bytes": str(9223372036854771712),  # v1 "unlimited"
        },
    )
    r = res.detect(proc, sysfs, affinity=lambda: 16)
    assert r.cpus == 2  # 2.5 CPUs of quota -> 2 whole jobs
    assert r.memory_bytes == 12 * GIB


def test_cgroup_v1_unlimited(tmp_path):
    proc, sysfs = fake_machine(
        tmp_path,
        mem_gib=24,
        cgroup="3:cpu,cpuacct:/\n4:memory:/\n",
        files={
            "cpu,cpuacct/cpu.cfs_quota_us": "-1",
            "cpu,cpuacct/cpu.cfs_period_us": "100000",
            "memory/memory.limit_in_bytes": str(9223372036854771712),
        },
    )
    r = res.detect(proc, sysfs, affinity=lambda: 2)
    assert (r.cpus, round(r.memory_gib)) == (2, 24)


@pytest.mark.parametrize(
    ("cpus", "mem_gib", "expected"),
    [
        (2, 8, 1),  # 8 x 0.8 / 4.5 = 1.4 -> memory allows 1
        (2, 24, 2),  # CPUs limit
        (16, 24, 4),  # memory limits: 19.2 / 4.5 = 4
        (16, 128, 16),
        (64, 256, 45),  # 204.8 / 4.5 = 45
    ],
)
def test_parallelism_rule(cpus, mem_gib, expected):
    r = res.Resources(cpus=cpus, memory_bytes=int(mem_gib * GIB), source="test")
    p = res.parallelism(r, job_memory_gib=4.5, memory_fraction=0.8, nvcc_threads_max=4, gencode_targets=1)
    assert p.max_jobs == expected
    assert p.nvcc_threads == 1
    assert p.max_jobs * p.nvcc_threads * 4.5 <= max(mem_gib * 0.8, 4.5)


def test_nvcc_threads_follow_gencode_targets_and_cost_memory():
    r = res.Resources(cpus=64, memory_bytes=256 * GIB, source="test")
    p = res.parallelism(r, job_memory_gib=4.5, memory_fraction=0.8, nvcc_threads_max=4, gencode_targets=4)
    assert p.nvcc_threads == 4
    assert p.max_jobs == 11  # 204.8 / 18 = 11.4; CPUs allow 16


def test_too_little_memory_warns_but_still_builds_one_job():
    r = res.Resources(cpus=4, memory_bytes=2 * GIB, source="test")
    p = res.parallelism(r, job_memory_gib=4.5, memory_fraction=0.8, nvcc_threads_max=4, gencode_targets=1)
    assert p.max_jobs == 1 and p.warning and "may be killed" in p.warning


def test_override_wins_and_keeps_the_rule_in_the_reason():
    r = res.Resources(cpus=2, memory_bytes=24 * GIB, source="test")
    p = res.parallelism(
        r, job_memory_gib=4.5, memory_fraction=0.8, nvcc_threads_max=4, gencode_targets=1, max_jobs_override=7
    )
    assert p.max_jobs == 7 and "the rule gave 2" in p.reason


def test_detect_on_this_machine_is_sane():
    r = res.detect()
    assert r.cpus >= 1 and r.memory_bytes > 256 * 1024**2
