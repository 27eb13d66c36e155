"""T4: `build.py bench --image` on sm_120 GPUs with real weights, baseline vs EAGLE-3.

Runs only on a machine with NVIDIA sm_120 GPUs (compute capability 12.0), the image, and the models:
    BENCH_MODELS=/models              host directory with the weights (mounted read-only at /models)
    BENCH_MODEL=Kimi-K2.5-NVFP4       target model, relative to BENCH_MODELS
    BENCH_DRAFT=Kimi-K2.5-EAGLE3      EAGLE-3 draft model, relative to BENCH_MODELS
    BENCH_IMAGE=...                   default: the plan's image tag
    BENCH_TP=8                        default: the number of sm_120 GPUs
    BENCH_CONCURRENCY=1,2,4,8,16,32,64, BENCH_RUNS=3, BENCH_OUT=DIR, BENCH_MIN_SPEEDUP=X (optional gate, judged
    at the lowest concurrency), BENCH_HEALTH_TIMEOUT=1800
Elsewhere every test here is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests.helpers import run_build_py

pytestmark = pytest.mark.gpu


def sm120_gpus() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.strip() == "12.0")


@pytest.fixture(scope="module")
def gpu_setup() -> dict[str, str]:
    count = sm120_gpus()
    if count == 0:
        pytest.skip("no NVIDIA sm_120 GPU (nvidia-smi reports no compute capability 12.0)")
    models = os.environ.get("BENCH_MODELS")
    if not models or not Path(models).is_dir():
        pytest.skip("BENCH_MODELS is not set to a model directory")
    for var in ("BENCH_MODEL", "BENCH_DRAFT"):
        if not os.environ.get(var) or not (Path(models) / os.environ[var]).exists():
            pytest.skip(f"{var} is not set to a model under BENCH_MODELS")
    image = os.environ.get("BENCH_IMAGE") or planmod.resolve(cfg.load()).tags[0]
    return {"models": models, "image": image, "tp": os.environ.get("BENCH_TP", str(count))}


def test_baseline_and_eagle3_on_sm120(gpu_setup, tmp_path):
    out = Path(os.environ.get("BENCH_OUT") or tmp_path)
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    concurrency = os.environ.get("BENCH_CONCURRENCY", "1,2,4,8,16,32,64")
    args = [
        "bench", "--image", gpu_setup["image"], "--modes", "baseline,eagle3", "--models", gpu_setup["models"],
        "--env", f"MODEL_PATH=/models/{os.environ['BENCH_MODEL']}",
        "--env", f"DRAFT_MODEL_PATH=/models/{os.environ['BENCH_DRAFT']}",
        "--env", f"TP_SIZE={gpu_setup['tp']}",
        "--runs", str(runs), "--concurrency", concurrency, "--out", str(out), "--fresh",
        "--health-timeout", os.environ.get("BENCH_HEALTH_TIMEOUT", "1800"),
    ]  # fmt: skip
    if os.environ.get("BENCH_MIN_SPEEDUP"):
        args += ["--min-speedup", os.environ["BENCH_MIN_SPEEDUP"]]
    proc = run_build_py(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "bench.json").read_text())
    base, spec = data["labels"]["baseline"], data["labels"]["eagle3"]
    assert base["status"] == spec["status"] == "complete"
    points = len(concurrency.split(","))
    assert len(base["runs"]) == len(spec["runs"]) == runs * points
    lowest = min(concurrency.split(","), key=int)
    assert base["summary"][lowest]["output_tok_s"]["mean"] > 0
    assert "accept_length" not in base["summary"][lowest]
    assert spec["summary"][lowest]["accept_length"]["mean"] > 1.0  # EAGLE-3 accepted draft tokens
    assert spec["server"].get("speculative_algorithm") == "EAGLE3"
    assert set(data["speedup"]["eagle3"]) == set(concurrency.split(","))
    assert "eagle3" in data["crossover"]
