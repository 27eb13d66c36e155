"""The Dockerfile's ARGs: no copy of the plan (only the bases and Python have defaults), every ARG a stage
declares is one the plan passes; nothing that depends on the builder's size reaches a layer's cache key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sm120.image.entrypoint.preflight import CACHE_VARIABLES
from sm120.plan import build_args
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.plan import resources as res

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Dockerfile").read_text()
CONFIG = cfg.load(ROOT / "build.toml")
SMALL = res.Resources(cpus=2, memory_bytes=8 * 1024**3, source="test")
LARGE = res.Resources(cpus=64, memory_bytes=256 * 1024**3, source="test")


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def top_defaults() -> dict[str, str]:
    """The Dockerfile's `ARG NAME=default` declarations above its first FROM."""
    head = TEXT[: TEXT.index("\nFROM ")]
    return {name: _unquote(value) for name, value in re.findall(r"^ARG (\w+)=(.*)$", head, flags=re.MULTILINE)}


def stages() -> dict[str, str]:
    return build_args.stages(TEXT)


def test_no_copy_of_the_plan_in_the_dockerfile():
    """Only what a person sets by hand has a default; every ARG a stage uses is passed by `build.py build`."""
    assert set(top_defaults()) == {"BASE_IMAGE", "RUNTIME_BASE_IMAGE", "PYTHON_VERSION"}
    plan = planmod.resolve(CONFIG, machine=SMALL)
    for name, used in build_args.stage_args(TEXT).items():
        extra = sorted(used - set(plan.build_args))
        assert not extra, f"stage {name} declares {extra}: no plan fact"
    used = set().union(*build_args.stage_args(TEXT).values()) | set(top_defaults())
    assert set(plan.build_args) <= used, f"the plan passes {sorted(set(plan.build_args) - used)}, no stage uses it"


def test_no_syntax_line_and_stage_comments():
    assert not re.search(r"^#\s*syntax=", TEXT, flags=re.MULTILINE)
    lines = TEXT.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FROM "):
            before = "\n".join(lines[max(0, i - 3) : i])
            assert "# ----" in before, f"stage at line {i + 1} has no comment saying why it exists"


@pytest.mark.parametrize("profile", sorted(CONFIG.profiles))
@pytest.mark.parametrize("track", sorted(CONFIG.tracks))
def test_builders_of_any_size_share_the_compiled_layers(profile: str, track: str):
    """Two plans for different machines give the same build args: the flash-attn and sgl-kernel layers' cache
    keys (their ARGs, their RUN text) cannot differ; the parallelism reaches them only as a secret."""
    small = planmod.resolve(CONFIG, profile=profile, sglang=track, machine=SMALL)
    large = planmod.resolve(CONFIG, profile=profile, sglang=track, machine=LARGE)
    assert small.build_jobs != large.build_jobs, "the two machines should get different parallelism"
    assert small.build_args == large.build_args
    for stage in ("flash-attn", "sgl-kernel"):
        text = stages()[stage]
        assert "id=build_jobs" in text, f"stage {stage} does not read the build_jobs secret"
        used = build_args.stage_args(TEXT)[stage]
        assert used <= set(small.build_args)
        assert not used & {"MAX_JOBS", "NVCC_THREADS", *small.build_jobs}


def test_one_job_budget_split_between_stages_that_compile_together():
    jobs = planmod._build_jobs(16, 1, ["flash-attn", "sgl-kernel"])
    assert int(jobs["FLASH_ATTN_MAX_JOBS"]) + int(jobs["SGL_KERNEL_MAX_JOBS"]) == 16
    alone = planmod._build_jobs(16, 1, ["flash-attn"])
    assert alone["FLASH_ATTN_MAX_JOBS"] == "16"
    assert planmod._build_jobs(1, 1, ["flash-attn", "sgl-kernel"])["SGL_KERNEL_MAX_JOBS"] == "1"


def test_the_cache_variables_are_the_entrypoints_list():
    """The runtime ENV points exactly the variables of CACHE_VARIABLES under ${CACHE_DIR}, each where it says."""
    runtime = stages()["runtime"]
    found = dict(re.findall(r"^\s+(\w+)=\$\{CACHE_DIR\}(\S*?) ?\\?$", runtime, flags=re.MULTILINE))
    want = {var.name: f"/{var.under}" if var.under else "" for var in CACHE_VARIABLES}
    assert found == want, "the Dockerfile's runtime ENV and sm120/image/entrypoint/preflight.py CACHE_VARIABLES differ"
