"""T0: each format written from the plan reads back to the same facts, for every profile and track.

plan.json (`Plan.to_dict`, what `plan --json` prints and the image's entrypoint reads) decodes into the same typed
plan; the labels (`sm120.plan.labels.write`) parse (`sm120.plan.labels.parse`) into what the plan holds; the build args
(`sm120.plan.build_args.write`) are exactly the ARGs the Dockerfile declares; the facts that files which cannot import
Python write themselves (the plan.json path) equal the one constant.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from sm120.image.entrypoint.spec import PLAN_JSON_PATH
from sm120.plan import build_args, exported, labels
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.plan import resources as res
from sm120.plan.plan_types import Plan, sm

ROOT = Path(__file__).resolve().parents[2]
CONFIG = cfg.load(ROOT / "build.toml")
MACHINE = res.Resources(cpus=16, memory_bytes=64 * 1024**3, source="test")
DOCKERFILE = (ROOT / "Dockerfile").read_text()
PAIRS = [(profile, track) for profile in sorted(CONFIG.profiles) for track in sorted(CONFIG.tracks)]


def resolve(profile: str, track: str) -> Plan:
    return planmod.resolve(CONFIG, profile=profile, sglang=track, machine=MACHINE)


@pytest.mark.parametrize(("profile", "track"), PAIRS)
def test_plan_json_decodes_to_the_same_typed_plan(profile: str, track: str):
    plan = resolve(profile, track)
    text = json.dumps(plan.to_dict(), indent=2)
    decoded = TypeAdapter(Plan).validate_json(text, strict=True)
    assert decoded == plan
    assert json.dumps(decoded.to_dict(), indent=2) == text


@pytest.mark.parametrize(("profile", "track"), PAIRS)
def test_labels_parse_back_to_the_plan(profile: str, track: str):
    plan = resolve(profile, track)
    expect = labels.parse(plan.labels, CONFIG.project.name)
    sms = [sm(a) for a in plan.cuda_archs]
    assert (expect.profile, expect.sglang, expect.cuda, expect.cuda_archs) == (
        plan.profile,
        plan.sglang_version,
        plan.cuda_version,
        sms,
    )
    assert (expect.python, expect.torch, expect.torch_cuda, expect.flashinfer) == (
        plan.python_version,
        plan.torch_version,
        plan.torch_cuda,
        plan.flashinfer_version,
    )
    flash_attn = plan.flash_attn
    assert expect.flash_attn == flash_attn.version and expect.flash_attn_archs == sms
    assert expect.flash_attn_kernels == exported.Kernels(
        sorted(flash_attn.head_dims), sorted(flash_attn.dtypes), flash_attn.backward, flash_attn.split_kv
    )
    sgl_kernel = plan.sgl_kernel
    assert (expect.sgl_kernel_package, expect.sgl_kernel, expect.sgl_kernel_archs) == (
        sgl_kernel.package,
        sgl_kernel.version,
        sgl_kernel.archs,
    )
    assert [(p.name, p.sha256) for p in expect.patches] == [(p.name, p.sha256) for p in plan.patches]
    assert (expect.user, expect.cache_dir, expect.port) == (plan.image.user, plan.image.cache_dir, plan.image.port)
    assert expect.stand_ins == (" | ".join(plan.stand_ins) or "none")


def test_the_label_namespace_is_the_project_name():
    plan = resolve(CONFIG.defaults.profile, CONFIG.defaults.sglang)
    own = {key.split(".", 1)[0] for key in plan.labels if not key.startswith("org.opencontainers.")}
    assert own == {CONFIG.project.name}
    assert labels.missing(plan.labels) == []


def test_every_build_arg_is_used():
    """(That the ARGs are exactly the plan's and every stage's ARGs are build args: tests/unit/test_dockerfile.py.)"""
    written = build_args.write(resolve(CONFIG.defaults.profile, CONFIG.defaults.sglang))
    stages = build_args.stage_args(DOCKERFILE)
    in_from_lines = set(re.findall(r"^FROM \$\{(\w+)\}", DOCKERFILE, flags=re.MULTILINE))
    unused = set(written) - set().union(*stages.values()) - in_from_lines
    assert not unused, f"build args no stage declares and no FROM names: {sorted(unused)}"


def test_the_flash_attn_stage_gets_the_plans_kernel_subset():
    plan = resolve("offline", CONFIG.defaults.sglang)
    env = build_args.stage_env(plan.build_args, DOCKERFILE, "flash-attn")
    assert env["FLASH_ATTN_VERSION"] == plan.flash_attn.version
    assert env["FLASH_ATTN_HEAD_DIMS"].split(",") == [str(d) for d in plan.flash_attn.head_dims]
    assert env["FLASH_ATTN_SPLIT_KV"] == "0" and not plan.flash_attn.split_kv  # the offline proof's smaller subset
    assert resolve("release", CONFIG.defaults.sglang).build_args["FLASH_ATTN_SPLIT_KV"] == "1"
    assert env["CXX_STD"] == str(plan.flash_attn.cxx_std)
    assert "SGLANG_VERSION" not in env


def test_the_plan_json_path_is_written_once():
    """The Dockerfile gets the path as the build arg PLAN_JSON, from the plan, and spells it nowhere; the entrypoint
    and the health probe read it from the module that defines it."""
    assert re.findall(r"/etc/[\w.-]+/plan\.json", DOCKERFILE) == []
    assert "COPY ${PLAN_DIR}/plan.json ${PLAN_JSON}" in DOCKERFILE
    assert resolve("offline", CONFIG.defaults.sglang).build_args["PLAN_JSON"] == PLAN_JSON_PATH
