"""T0: benchmarks/kernel_build.py builds flash-attn with the plan's build args (the ones the Dockerfile's
flash-attn stage declares), not with settings of its own; its options override one arg each."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from sm120.plan import build_args
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.plan import resources as res

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kernel_build(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", types.ModuleType("psutil"))  # measured on the device only
    spec = importlib.util.spec_from_file_location("kernel_build", ROOT / "benchmarks" / "kernel_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def options(**given) -> argparse.Namespace:
    values = dict.fromkeys(
        ("plan", "sglang", "version", "archs", "head_dims", "dtypes", "backward", "split_kv", "cxx_std")
    )
    values |= {"patches": None, "profile": "release", **given}
    return argparse.Namespace(**values)


def expected(profile: str) -> dict[str, str]:
    plan = planmod.resolve(cfg.load(), profile=profile, machine=res.Resources(4, 16 * 1024**3, "test"))
    return build_args.stage_env(plan.build_args, (ROOT / "Dockerfile").read_text(), "flash-attn")


@pytest.mark.parametrize("profile", ["release", "offline"])
def test_the_benchmark_builds_what_the_plan_builds(kernel_build, profile):
    assert kernel_build.stage_args(options(profile=profile)) == expected(profile)


def test_a_plan_file_and_overrides(kernel_build, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"build_args": expected("offline")}))  # not the default profile
    got = kernel_build.stage_args(options(plan=plan_file, archs="80;120", cxx_std="20"))
    assert got == expected("offline") | {"FLASH_ATTN_CUDA_ARCHS": "80;120", "CXX_STD": "20"}
