"""T1: `allreduce-sweep` with each track's real torch and SGLang, on this machine (CPU only, no GPU).

- Without a GPU, the sweep (and the entrypoint's `allreduce-sweep` route to it) is one line and exit 1.
- Its orchestration for real: two processes of torch.multiprocessing, torch.distributed over gloo, and the
  track's patched TorchSymmMemCommunicator built in each as SGLang builds it, with only what needs a GPU
  replaced (tests/upstream/allreduce_standin.py: the two-shot kernel becomes a gloo all-reduce, a real sum over
  the processes). The sweep's buffer comes from SM120_SYMM_MEM_MAX_SIZES, which the patched code honours.
- A rank that fails, one killed by a signal, a hang, and the published (unpatched) releases: one line each.
The timings here are a CPU's and mean nothing; the GPU run is in docs/allreduce-sweep.md.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from sm120.plan import config as cfg
from tests.entrypoint_helpers import ROOT, clean_env, real_plan, run_entrypoint, stderr_lines
from tests.upstream import env as upstream_env

TRACKS = sorted(cfg.load().tracks, key=Version)
STANDIN = "tests.upstream.allreduce_standin:communicator"

SWEEP = """
import os
from sm120.image.allreduce import errors, launch
fields = dict(world_size=2, sizes=[4096, 65536], repeats=3, warmup=1, cuda_graph=False, capability=12,
              device="cpu", communicator=os.environ["STANDIN"], progress=False)
try:
    emit({"results": launch.run(fields, float(os.environ.get("SWEEP_TIMEOUT", "240")))})
except errors.SweepError as exc:
    emit({"error": exc.render(), "exit": exc.exit_code})
"""


def sweep(python: Path, tree: Path | None, **env: str) -> dict:
    return upstream_env.run_snippet(
        python,
        SWEEP,
        pythonpath=[*([tree] if tree else []), ROOT],
        env={"STANDIN": STANDIN, "SGLANG_OPT_USE_INKLING_CUSTOM_AR": "0", **env},
        timeout=600,
    )


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_without_a_gpu_the_sweep_is_one_line(sglang_python: Path):
    proc = subprocess.run(
        [str(sglang_python), "-m", "sm120.image.allreduce", "--tp", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""},
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in stderr_lines(proc) if ln.startswith(("allreduce-sweep:", "  "))]
    assert lines[0] == "allreduce-sweep: error: no GPU is visible here (torch sees none)", proc.stderr
    assert len(lines) <= 3


@pytest.mark.parametrize("sglang_python, version", [(v, v) for v in TRACKS], indirect=["sglang_python"])
def test_the_entrypoint_routes_allreduce_sweep_to_it(sglang_python: Path, version: str, tmp_path: Path):
    plan = real_plan(tmp_path / "plan.json", version)
    env = clean_env(SM120_PLAN=str(plan), CUDA_VISIBLE_DEVICES="")
    proc = run_entrypoint(["allreduce-sweep", "--sizes", "4K..1M"], env, python=sglang_python, timeout=600)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "allreduce-sweep: error: no GPU is visible here" in proc.stderr
    help_proc = run_entrypoint(["allreduce-sweep", "--help"], env, python=sglang_python)
    assert help_proc.returncode == 0 and "SM120_SYMM_MEM_MAX_SIZES" in help_proc.stdout


@pytest.mark.parametrize("sglang_python, version", [(v, v) for v in TRACKS], indirect=["sglang_python"])
class TestOrchestration:
    def test_two_ranks_run_sglangs_patched_communicator(self, sglang_python, version, patched_tree):
        out = sweep(sglang_python, patched_tree(version))
        assert "error" not in out, out
        first, second = out["results"]
        assert second == {"rows": second["rows"], "log": second["log"], "max_size": 68 * 1024}  # every rank ran
        rows = first["rows"]
        assert [r["size"] for r in rows] == [4096, 65536]
        assert [r["ops"] for r in rows] == [64, 64]
        for r in rows:  # the two-shot stand-in sums over gloo: the same bits as the NCCL path's gloo sum
            assert r["exact"] and r["random_ok"] and r["random_diff"] == 0.0, r
            assert r["two_shot_us"] > 0 and r["nccl_us"] > 0
        assert first["max_size"] == 68 * 1024  # the sweep's own buffer: largest size + 4 KiB, by the override
        log = first["log"]
        assert "INFO: TorchSymmMemCommunicator: limit for world size 2 set to 68 KiB by SM120_SYMM_MEM_MAX_SIZES" in (
            " ".join(log)
        ), log
        assert any(
            "two-shot all-reduce (capability 12, world size 2, multicast not available) below 68 KiB" in m for m in log
        )

    @pytest.mark.parametrize(
        "failure, expected",
        [
            (
                "1:raise",
                "rank 1: SGLang's TorchSymmMemCommunicator cannot be built: RuntimeError: stand-in rendezvous failed",
            ),
            ("1:signal", "rank 1 was killed by SIGFPE"),
        ],
    )
    def test_a_failing_rank_is_one_line(self, sglang_python, version, patched_tree, failure, expected):
        out = sweep(sglang_python, patched_tree(version), SM120_STANDIN_FAILURE=failure)
        assert out["exit"] == 1
        (line,) = out["error"].splitlines()
        assert line.startswith(f"allreduce-sweep: error: {expected}"), line

    def test_a_hang_stops_at_the_deadline(self, sglang_python, version, patched_tree):
        out = sweep(sglang_python, patched_tree(version), SM120_STANDIN_FAILURE="0:hang", SWEEP_TIMEOUT="20")
        assert out["exit"] == 1
        assert out["error"].startswith("allreduce-sweep: error: the ranks did not finish within 20 s"), out


@pytest.mark.parametrize("sglang_python, version", [(v, v) for v in TRACKS], indirect=["sglang_python"])
def test_on_the_published_release_the_sweep_says_why(sglang_python: Path, version: str):
    out = sweep(sglang_python, None)
    assert out["exit"] == 1
    line = out["error"].splitlines()[0]
    assert re.match(r"allreduce-sweep: error: rank [01]: ", line), line  # both fail alike; the first one is named
    if Version(version) < Version("0.5.14"):
        assert line.endswith("SGLang's TorchSymmMemCommunicator cannot be built: KeyError: 12"), line
    else:
        assert (
            "SGLang's communicator is off on these GPUs: WARNING: TorchSymmMemCommunicator: Device capability 12"
            in line
        )
