"""Plan resolution for every track/profile pair, from the real build.toml."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.version import Version

from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.plan import resources as res
from tests.helpers import run_build_py, track_list, write_config

ROOT = Path(__file__).resolve().parents[2]
MACHINE = res.Resources(cpus=2, memory_bytes=24 * 1024**3, source="test")
REQUIRED = {
    "profile",
    "sglang_version",
    "cuda_version",
    "torch_version",
    "flash_attn_version",
    "cuda_archs",
    "base_image",
    "runtime_base_image",
    "patches",
    "max_jobs",
    "nvcc_threads",
    "tags",
    "labels",
}


@pytest.fixture(scope="module")
def config() -> cfg.Config:
    return cfg.load(ROOT / "build.toml")


@pytest.mark.parametrize("profile", ["release", "offline"])
@pytest.mark.parametrize("sglang", ["0.5.9", "0.5.23"])
def test_every_pair_resolves_with_the_required_keys(config, profile, sglang):
    plan = planmod.resolve(config, profile=profile, sglang=sglang, machine=MACHINE).to_dict()
    assert set(plan) >= REQUIRED
    assert plan["profile"] == profile and plan["sglang_version"] == sglang
    assert plan["cuda_version"] == "13.0.1" and plan["cuda_archs"] == ["12.0"]
    for patch in plan["patches"]:
        assert set(patch) >= {"name", "path", "sha256"}
        assert len(patch["sha256"]) == 64 and (ROOT / patch["path"]).is_file()
    assert plan["labels"]["sglang-sm120.sglang.version"] == sglang
    assert plan["labels"]["sglang-sm120.cuda.version"] == "13.0.1"
    assert plan["labels"]["sglang-sm120.profile"] == profile


def test_release_is_cuda13_end_to_end(config):
    for sglang in ("0.5.9", "0.5.23"):
        plan = planmod.resolve(config, profile="release", sglang=sglang, machine=MACHINE)
        assert plan.torch_cuda == "13.0"
        assert plan.stand_ins == []
        assert plan.sgl_kernel.source in ("wheel", "pypi") and "sm_120a" in plan.sgl_kernel.archs
        assert plan.sgl_kernel.cuda == "13.0"
        assert plan.flash_attn.head_dims == [32, 64, 96, 128, 192, 256]


def test_offline_says_what_is_a_stand_in(config):
    old = planmod.resolve(config, profile="offline", sglang="0.5.9", machine=MACHINE)
    assert old.torch_cuda == "12.8" and old.torch_index is None
    assert any("torch 2.9.1" in s for s in old.stand_ins)
    assert any("sgl-kernel 0.3.21" in s for s in old.stand_ins)
    assert "stand-in" in old.labels["sglang-sm120.stand-ins"]
    new = planmod.resolve(config, profile="offline", sglang="0.5.23", machine=MACHINE)
    assert new.torch_cuda == "13.0" and new.stand_ins == []
    assert "sm_120a" in new.sgl_kernel.archs


def test_offline_differences_are_derived_from_the_profiles(config):
    keys = {d.split(":")[0] for d in planmod.resolve(config, profile="offline", machine=MACHINE).differences}
    assert {"base_image", "runtime_base_image", "bases", "flash_attn"} <= keys
    # 0.5.23 takes PyPI's sglang-kernel in both profiles; 0.5.9's comes from elsewhere in each.
    assert "sgl_kernel" not in keys
    reference = planmod.resolve(config, profile="offline", sglang="0.5.9", machine=MACHINE)
    assert "sgl_kernel" in {d.split(":")[0] for d in reference.differences}
    assert planmod.resolve(config, profile="release", machine=MACHINE).differences == []


def test_delegation_patch_is_skipped_where_no_variant_applies(config):
    plan = planmod.resolve(config, profile="offline", sglang="0.5.23", machine=MACHINE)
    assert "kimi-k25-eagle3-delegation" not in [p.name for p in plan.patches]
    assert [s.name for s in plan.patches_skipped] == ["kimi-k25-eagle3-delegation"]
    old = planmod.resolve(config, profile="offline", sglang="0.5.9", machine=MACHINE)
    assert "kimi-k25-eagle3-delegation" in [p.name for p in old.patches]


def test_flash_attn_patch_is_chosen_by_flash_attn_version(config):
    plan = planmod.resolve(config, profile="offline", sglang="0.5.23", machine=MACHINE)
    fa = [p for p in plan.patches if p.component == "flash-attn"]
    assert [p.path for p in fa] == ["patches/flash-attn/2.8.3/kernel-subset.patch"]
    assert plan.build_args["FLASH_ATTN_PATCHES"] == "patches/flash-attn/2.8.3/kernel-subset.patch"
    assert plan.build_args["CXX_STD"] == "20"


def test_build_args_and_labels_come_from_the_same_values(config):
    plan = planmod.resolve(config, profile="offline", sglang="0.5.23", machine=MACHINE)
    args, labels = plan.build_args, plan.labels
    assert args["TORCH_VERSION"] == labels["sglang-sm120.torch.version"] == "2.14.1"
    assert args["SGL_KERNEL_VERSION"] == labels["sglang-sm120.sgl-kernel.version"] == "0.4.10"
    assert args["FLASH_ATTN_HEAD_DIMS"] == "128"
    assert plan.tags == ["sglang-sm120:0.5.23-cu13.0.1-offline"]


def test_max_jobs_override_and_machine_rule(config):
    assert planmod.resolve(config, max_jobs=5, machine=MACHINE).max_jobs == 5
    small = res.Resources(cpus=16, memory_bytes=8 * 1024**3, source="test")
    assert planmod.resolve(config, machine=small).max_jobs == 1


def test_plan_cli_json_and_text():
    out = run_build_py("plan", "--json", "--sglang", "0.5.23", "--profile", "offline")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    config = cfg.load()
    assert plan["sglang_version"] == config.defaults.sglang
    assert plan["tracks"] == sorted(config.tracks, key=Version) and {"0.5.9", "0.5.23"} <= set(plan["tracks"])
    text = run_build_py("plan")
    assert text.returncode == 0 and "max_jobs" in text.stdout and "patches" in text.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["plan", "--max-jobs", "0"], "must be a positive integer"),
        (["plan", "--max-jobs", "two"], "must be a positive integer"),
        (["plan", "--sglang", "9.9.9"], "no track for SGLang '9.9.9'"),
        (["plan", "--profile", "nightly"], "unknown profile 'nightly'"),
        (["plan", "--config", "/nonexistent/build.toml"], "no such file"),
        (["plan", "--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needle):
    out = run_build_py(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0]
    assert "Traceback" not in out.stderr


def test_malformed_config_file_exits_2(tmp_path):
    bad = tmp_path / "build.toml"
    bad.write_text("[project]\nname = ")
    out = run_build_py("plan", "--config", str(bad))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "not valid TOML" in out.stderr


@pytest.mark.parametrize(
    ("profile", "track", "install", "pins"),
    [
        (
            "release",
            "0.5.9",
            "wheel",
            [
                "no-deps:nvidia-cudnn-cu13==9.16.0.29",
                "no-deps:nvidia-nccl-cu13==2.28.3",
                "no-deps:nvidia-cublas==13.1.0.3",
                "deps:cuda-python==13.1.1",
            ],
        ),
        ("offline", "0.5.9", "pypi", ["no-deps:nvidia-cudnn-cu12==9.16.0.29", "no-deps:nvidia-nccl-cu12==2.28.3"]),
        ("release", "0.5.23", "pypi", []),
        ("offline", "0.5.23", "pypi", []),
    ],
)
def test_sgl_kernel_and_fixups_per_track(config, profile, track, install, pins):
    plan = planmod.resolve(config, profile=profile, sglang=track, machine=MACHINE)
    assert plan.sgl_kernel.source == install
    assert plan.build_args["SGL_KERNEL_SOURCE"] == install
    assert [f"{f.install}:{f.requirement}" for f in plan.fixups] == pins
    assert plan.build_args["FIXUP_PINS"] == " ".join(pins)
    assert plan.labels["sglang-sm120.fixups"] == (" ".join(p.partition(":")[2] for p in pins) or "none")
    if install == "wheel":
        assert plan.build_args["SGL_KERNEL_WHEEL_URL"].endswith("+cu130-cp310-abi3-manylinux2014_x86_64.whl")
        assert len(plan.build_args["SGL_KERNEL_WHEEL_SHA256"]) == 64
    else:
        assert plan.build_args["SGL_KERNEL_WHEEL_URL"] == ""


def test_plan_json_shows_the_sgl_kernel_source_and_pins(config):
    data = planmod.resolve(config, profile="release", sglang="0.5.9", machine=MACHINE).to_dict()
    assert data["sgl_kernel"]["source"] == "wheel"
    assert any("cudnn" in f["requirement"] and "9.15" in f["reason"] for f in data["fixups"])


def test_a_pinned_wheel_is_labelled_with_its_own_version_and_archs(config):
    """The 0.5.9 release installs upstream's `+cu130` wheel: the label names that build (verify then compares the local
    part too) and the archs build.toml says it carries, not only what the plan asks for."""
    plan = planmod.resolve(config, profile="release", sglang="0.5.9", machine=MACHINE)
    wheel = config.tracks["0.5.9"].sgl_kernel.wheel
    assert plan.sgl_kernel.version == "0.3.21+cu130" == plan.build_args["SGL_KERNEL_VERSION"]
    assert plan.labels["sglang-sm120.sgl-kernel.version"] == "0.3.21+cu130"
    assert plan.sgl_kernel.archs == ["sm_" + a for a in wheel.archs] and "sm_120a" in plan.sgl_kernel.archs
    assert plan.labels["sglang-sm120.sgl-kernel.archs"] == ",".join(plan.sgl_kernel.archs)
    offline = planmod.resolve(config, profile="offline", sglang="0.5.9", machine=MACHINE)
    assert offline.sgl_kernel.version == "0.3.21"  # PyPI's wheel: no local label


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "https://example.org/v/sgl_kernel-0.3.22+cu130-cp310-abi3-manylinux2014_x86_64.whl",
            "a wheel of sgl-kernel 0.3.22+cu130",
        ),
        ("https://example.org/v/flashinfer-0.3.21-py3-none-any.whl", "a wheel of flashinfer 0.3.21"),
        ("https://example.org/v/sgl_kernel-0.3.21.whl", "is not a wheel file name"),
    ],
)
def test_a_wheel_url_of_another_package_or_version_is_exit_2(tmp_path, url, says):
    pinned = cfg.load().tracks["0.5.9"].sgl_kernel.wheel.url
    path = write_config(tmp_path, edit=lambda text: text.replace(pinned, url))
    out = run_build_py("plan", "--config", str(path), "--profile", "release", "--sglang", "0.5.9")
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "sgl_kernel.wheel.url of sgl-kernel 0.3.21" in line and says in line


def test_a_command_without_profile_uses_the_one_dev_build_uses(capsys):
    """`./dev build` builds the offline profile: plan, build and preflight take it without --profile (build.toml
    [defaults] profile); --profile release still names the published image, whose tags carry no suffix."""
    from tests.helpers import run_cli

    rc, out, err = run_cli(capsys, "plan", "--json")
    assert rc == 0 and json.loads(out)["profile"] == "offline", err
    rc, out, err = run_cli(capsys, "plan", "--json", "--profile", "release")
    assert rc == 0 and json.loads(out)["tags"] == ["sglang-sm120:0.5.23-cu13.0.1"], err
    built = run_build_py("build", "--print")
    assert built.returncode == 0 and "sglang-sm120:0.5.23-cu13.0.1-offline" in built.stdout, built.stderr


def test_the_human_plan_writes_no_python_reprs(capsys):
    """`plan` (no --json) prints each value as text: no None, no quotes, no {'head_dims': ...} (plan --json keeps
    its form: those strings are plan.json's, and images carry them)."""
    from tests.helpers import run_cli

    for profile in ("offline", "release"):
        for track in ("0.5.9", "0.5.23"):
            rc, out, err = run_cli(capsys, "plan", "--profile", profile, "--sglang", track)
            assert rc == 0, err
            text = out.split("\nlabels\n")[0]  # the labels are key=value as the image carries them
            assert not re.search(r"None|'[^' ]*'|\{|\[", text), text
    rc, out, _ = run_cli(capsys, "plan", "--profile", "offline")
    want = "  flash_attn: head_dims 128; dtypes bf16; backward off; split_kv off (release: head_dims all; dtypes fp16,"
    assert want in out
    assert "  torch_index: none (release: https://download.pytorch.org/whl/cu130)" in out


def test_a_new_track_takes_the_rules_written_once_without_a_copy(tmp_path):
    """A 0.5.24 track written with no rule of its own plans the rules whose range holds it, as 0.5.23 does; a track's
    plan holds only the not_shipped entries of its torch's CUDA major."""
    from sm120.track import stanza as track_stanza

    def add_0524(text: str) -> str:
        first, end = track_stanza.track_span(text, "0.5.23")
        lines = text.splitlines(keepends=True)
        block = "".join(lines[first:end]).replace('tracks."0.5.23"', 'tracks."0.5.24"')
        return "".join([*lines[:end], "\n", block, *lines[end:]])

    config = cfg.load(write_config(tmp_path, edit=add_0524))
    for profile in ("offline", "release"):
        new, now = (planmod.resolve(config, profile=profile, sglang=v, machine=MACHINE) for v in ("0.5.24", "0.5.23"))
        assert new.entrypoint.runtime == now.entrypoint.runtime and new.entrypoint.left_out == now.entrypoint.left_out
        assert new.not_shipped == now.not_shipped and new.build_args["NOT_SHIPPED"] == now.build_args["NOT_SHIPPED"]
        assert [p.name for p in new.patches] == [p.name for p in now.patches]
    old = planmod.resolve(config, profile="offline", sglang="0.5.9", machine=MACHINE)
    assert old.torch_cuda == "12.8" and not any("nvidia/cu13/" in g for n in old.not_shipped for g in n.paths)
    assert "nvidia/cuda_nvrtc/lib/libnvrtc.alt.so*" in old.build_args["NOT_SHIPPED"].split()


def test_a_rule_for_no_track_is_exit_2_naming_the_key(tmp_path):
    path = write_config(tmp_path, edit=lambda text: text.replace('sglang = ">=0.5.23"', 'sglang = ">=0.6"', 1))
    out = run_build_py("plan", "--config", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert f"runtime.2.sglang = '>=0.6' holds for no track (tracks: {track_list()})" in line
