"""Checks that need an sm_120 GPU: skipped, with the reason, unless SM120_VERIFY_GPUS is set (`build.py verify
--gpus all` on a GPU runner with the NVIDIA container runtime). Without a GPU nothing here is imitated."""

from __future__ import annotations

import os

import pytest

GPUS = os.environ.get("SM120_VERIFY_GPUS", "").strip()

# flash-attn's forward against torch's own attention, in bf16 at head dim 128 (what every profile compiles), and
# sgl_kernel's library loading with the driver present (its ops registered with torch).
ON_GPU = r"""
import torch
major, minor = torch.cuda.get_device_capability(0)
from flash_attn import flash_attn_func
torch.manual_seed(0)
q, k, v = (torch.randn(1, 256, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = flash_attn_func(q, k, v, causal=True)
ref = torch.nn.functional.scaled_dot_product_attention(
    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
err = (out.float() - ref.float()).abs().max().item()
import sgl_kernel
ops = sorted(n for n in dir(torch.ops.sgl_kernel) if not n.startswith("_"))
report({"capability": [major, minor], "flash_attn_max_err": err, "sgl_kernel_ops": len(ops)})
"""


def test_kernels_run_on_the_gpu(start, image, expect):
    if not GPUS:
        pytest.skip(
            "needs an sm_120 GPU: run `build.py verify --gpus all` on a GPU host with the NVIDIA container runtime"
        )
    from sm120.bench.docker_runner import device_requests
    from sm120.verify.suite.conftest import PRELUDE, last_json

    container = start("gpu", entrypoint=["sleep", "infinity"], device_requests=device_requests(GPUS))
    result = container.exec_run([image.python, "-c", PRELUDE + ON_GPU])
    output = result.output.decode(errors="replace")
    assert result.exit_code == 0, output[-800:]
    out = last_json(output)
    digits = expect.cuda_archs[0].removeprefix("sm_").rstrip("af")
    assert out["capability"] == [int(digits[:-1]), int(digits[-1])], f"the GPU is not {expect.cuda_archs[0]}: {out}"
    assert out["flash_attn_max_err"] < 2e-2, f"flash-attn differs from torch's attention by {out}"
    assert out["sgl_kernel_ops"] > 0, "sgl_kernel registered no ops with torch"
