"""Helpers for the entrypoint's tests (T0 in tests/unit, T1 in tests/upstream).

- `run_entrypoint`: docker/entrypoint.py as the image runs it: a separate process, a clean environment.
- `write_model`, `kimi_target`, `eagle3_draft`: model directories with a config.json like the real ones.
- `synthetic_plan`: a plan whose presets the tests choose (mechanics tested apart from build.toml's values);
  `real_plan`: `build.py plan --json` for a track, as the image build writes it.
- `fake_sglang`: a stand-in `sglang` package for T0 (no torch): a small ServerArgs parser, model classes to
  read (never imported), the files a patch check reads, and a stand-in server for `-m sglang.launch_server`
  that records how it was started and exits on SIGTERM with a status the test picks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sm120.verify.model_configs import eagle3_draft as eagle3_draft
from sm120.verify.model_configs import kimi_target as kimi_target
from sm120.verify.model_configs import write_model as write_model

ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = ROOT / "docker" / "entrypoint.py"

SYMM_MEM_CHECKS = [
    {"path": "sglang/srt/distributed/device_communicators/all_reduce_utils.py", "patterns": [r"^\s*12: \{"]},
]


def clean_env(**extra: str) -> dict[str, str]:
    """A minimal environment: nothing from the test runner's own (MODEL_PATH, CUDA_VISIBLE_DEVICES, ...)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        # No NVML here, so a test's fake nvidia-smi decides; a GPU runner's real NVML must not.
        "SM120_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1",
    }
    env.update(extra)
    return env


def run_entrypoint(
    args: list[str],
    env: dict[str, str],
    *,
    python: str | Path = sys.executable,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), str(ENTRYPOINT), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def synthetic_plan(path: Path, *, version: str = "9.9.9", runtime=None, left_out=None, **entry: Any) -> Path:
    """An image plan (`entrypoint` key) with presets chosen by the test."""
    plan = {
        "sglang_version": version,
        "cuda_archs": ["12.0"],
        "port": 30000,
        "cache_dir": str(path.parent / "cache"),
        "default_mode": "baseline",
        "modes": {
            "baseline": {"summary": "plain server", "args": [], "draft": False},
            "eagle3": {
                "summary": "EAGLE-3",
                "args": ["--speculative-algorithm", "EAGLE3"],
                "draft": True,
                "spec_num_steps": 2,
                "spec_eagle_topk": 4,
                "spec_num_draft_tokens": 16,
                "draft_tree_reason": "the test's presets",
            },
        },
        "drafters": {},
        "runtime": runtime
        if runtime is not None
        else [
            {"name": "env-rule", "when": ["always"], "env": {"SM120_TEST_ENV": "1"}, "args": [], "reason": "r1"},
            {
                "name": "nvfp4-rule",
                "when": ["nvfp4"],
                "env": {},
                "args": ["--moe-runner-backend", "flashinfer_cutlass"],
                "reason": "r2",
            },
            {
                "name": "symm",
                "when": ["tp>1", "single-node"],
                "env": {},
                "args": ["--enable-torch-symm-mem"],
                "requires": {"patch": "torch-symm-mem-sm120", "checks": SYMM_MEM_CHECKS},
                "reason": "r3",
            },
        ],
        "left_out": left_out
        if left_out is not None
        else [{"args": ["--enable-flashinfer-allreduce-fusion"], "reason": "does nothing on sm_120"}],
    }
    plan.update(entry)
    path.write_text(json.dumps({"entrypoint": plan, "other": "keys of the whole plan"}))
    return path


def real_plan(path: Path, version: str) -> Path:
    """`build.py plan --json --sglang V --profile offline`, as the image build writes /etc/sglang-sm120/plan.json."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "build.py"), "plan", "--json", "--sglang", version, "--profile", "offline"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    path.write_text(out.stdout)
    return path


_SERVER_ARGS = """
import argparse, os, pathlib

_probe = os.environ.get("FAKE_SGLANG_PROBE")
if _probe:  # what the parser check's interpreter saw
    pathlib.Path(_probe).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
print("noise from importing the fake sglang")  # the real one prints warnings too


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
        parser.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
        parser.add_argument("--pipeline-parallel-size", "--pp-size", type=int, default=1)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--nnodes", type=int, default=1)
        parser.add_argument("--node-rank", type=int, default=0)
        parser.add_argument("--dist-init-addr", "--nccl-init-addr")
        parser.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN"])
        parser.add_argument("--speculative-num-steps", type=int)
        parser.add_argument("--speculative-eagle-topk", type=int)
        parser.add_argument("--speculative-num-draft-tokens", type=int)
        parser.add_argument("--enable-torch-symm-mem", action="store_true")
        parser.add_argument("--enable-flashinfer-allreduce-fusion", action="store_true")
        parser.add_argument("--moe-runner-backend", choices=["auto", "triton", "flashinfer_cutlass"], default="auto")
        parser.add_argument("--mem-fraction-static", type=float)
        parser.add_argument("--quantization")
        parser.add_argument("--api-key")
        parser.add_argument("--tokenizer-worker-num", type=int, default=1)
"""

_LAUNCH_SERVER = """
import json, os, pathlib, signal, sys, time

record = pathlib.Path(os.environ["FAKE_SGLANG_RECORD"])


def on_term(signum, frame):
    record.with_suffix(".term").write_text(str(signum))
    sys.exit(int(os.environ.get("FAKE_SGLANG_TERM_STATUS", "42")))


signal.signal(signal.SIGTERM, on_term)
if os.environ.get("FAKE_SGLANG_LOG_ARGS"):  # as SGLang logs its ServerArgs at start-up, the key included
    import logging

    logging.basicConfig(level=logging.INFO, format="[fake] %(message)s", force=True)
    logging.getLogger("fake").info("server_args=%r", sys.argv[1:])
    print("stdout: " + " ".join(sys.argv[1:]), flush=True)
record.write_text(json.dumps({
    "argv": sys.argv[1:],
    "cmdline": pathlib.Path("/proc/self/cmdline").read_bytes().decode().split("\\0")[:-1],
    "environ": pathlib.Path("/proc/self/environ").read_bytes().decode(errors="replace"),
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "env": {k: os.environ.get(k) for k in ("SGLANG_ENABLE_JIT_DEEPGEMM", "SM120_TEST_ENV", "CUDA_VISIBLE_DEVICES")},
}))
if os.environ.get("FAKE_SGLANG_SERVE"):
    while True:
        time.sleep(0.05)
"""

_MODELS = """
from torch import nn


class EagleHooks(nn.Module):
    def get_embed_and_head(self):
        return None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass


class DeepseekV2ForCausalLM(EagleHooks):
    pass


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass


class KimiK25ForConditionalGeneration(nn.Module):
{kimi_body}


class LlamaForCausalLMEagle3(nn.Module):
    pass


EntryClass = [DeepseekV3ForCausalLM, KimiK25ForConditionalGeneration, LlamaForCausalLMEagle3]
"""

_MLA_DRAFTER = """
from torch import nn


class Eagle3DeepseekV2ForCausalLM(nn.Module):
    pass


EntryClass = [Eagle3DeepseekV2ForCausalLM]
"""

_KIMI_DELEGATES = """
    def get_embed_and_head(self):
        return self.language_model.get_embed_and_head()

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)
"""


def fake_sglang(
    site: Path,
    *,
    version: str = "9.9.9",
    kimi_hooks: bool = False,
    symm_mem_12: bool = False,
    mla_drafter: bool = False,
) -> Path:
    """A stand-in `sglang` package in `site` (put it on PYTHONPATH); `mla_drafter`: it registers the MLA EAGLE-3
    drafter class (Eagle3DeepseekV2ForCausalLM, SGLang >= 0.5.12) in a model file of its own."""
    pkg = site / "sglang"
    files = {
        "__init__.py": "",
        "_version.py": f"__version__ = version = {version!r}\n",
        "version.py": "from sglang._version import __version__\n",
        "launch_server.py": _LAUNCH_SERVER,
        "srt/__init__.py": "",
        "srt/server_args.py": _SERVER_ARGS,
        "srt/models/__init__.py": "",
        "srt/models/fake.py": _MODELS.replace("{kimi_body}", _KIMI_DELEGATES.strip("\n") if kimi_hooks else "    pass"),
        "srt/distributed/device_communicators/all_reduce_utils.py": "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {\n"
        + "    9: {2: 1},\n"
        + ("    12: {2: 1},\n" if symm_mem_12 else "")
        + "}\n",
    }
    if mla_drafter:
        files["srt/models/kimi_k25_eagle3.py"] = _MLA_DRAFTER
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return site


def fake_nvidia_smi(bin_dir: Path, gpus: list[tuple[str, str]] | None, *, fail: str | None = None) -> Path:
    """An `nvidia-smi` that answers the entrypoint's query: (name, compute capability) per GPU, or fails."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    if fail is not None:
        body = f"echo {fail!r}; exit 9\n"
    else:
        lines = "".join(f"echo '{i}, {name}, {cap}'\n" for i, (name, cap) in enumerate(gpus or []))
        body = lines + "exit 0\n"
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return exe


def stderr_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def standin_run(tmp_path: Path, **extra: str) -> dict[str, Any]:
    """A run of the entrypoint with the stand-in SGLang on PYTHONPATH, 8 fake RTX PRO GPUs (nvidia-smi), a cache
    directory, a synthetic plan and two models; `extra` adds to its environment."""
    site = fake_sglang(tmp_path / "site", version="9.9.9")
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, [(RTX_PRO, "12.0")] * 8)
    (tmp_path / "cache").mkdir()
    env = clean_env(
        SM120_PLAN=str(synthetic_plan(tmp_path / "plan.json")),
        MODEL_PATH=str(kimi_target(tmp_path / "target", architecture="DeepseekV3ForCausalLM")),
        DRAFT_MODEL_PATH=str(eagle3_draft(tmp_path / "draft")),
        PYTHONPATH=str(site),
        PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        SM120_CACHE_DIR=str(tmp_path / "cache"),
        FAKE_SGLANG_RECORD=str(tmp_path / "server.json"),
        **extra,
    )
    return {"env": env, "tmp": tmp_path, "site": site}
