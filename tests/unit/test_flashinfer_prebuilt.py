"""T0: FlashInfer's modules prebuilt in the image (issue #36): build.toml's choice resolved against the census
(sm120/plan/prebuilt.py), the build stage's manifest (docker/stages/flashinfer_prebuilt.py) and the entrypoint's
start-up line about it (sm120/image/entrypoint/prebuilt.py). The build itself is proven at T2 (a real module built
in the offline image and loaded there without nvcc: sm120/verify/suite/test_jit.py)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest

from sm120.errors import UsageError
from sm120.image.entrypoint import prebuilt as at_start
from sm120.image.entrypoint.errors import Log
from sm120.plan import prebuilt, resolve
from sm120.verify import report

ROOT = Path(__file__).resolve().parents[2]
CENSUS = [m["name"] for m in prebuilt.census()["modules"]]
FLASHINFER = prebuilt.census()["census"]["flashinfer"]
FLASHINFER_TRACK = prebuilt.census()["census"]["sglang"]


def stage():
    spec = importlib.util.spec_from_file_location("stage", ROOT / "docker" / "stages" / "flashinfer_prebuilt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def names(plan):
    return [m["name"] for m in plan["modules"]]


def test_census_means_every_module_and_leaves_nothing_to_compile():
    chosen = prebuilt.resolve("census", FLASHINFER, "k")
    assert names(chosen) == CENSUS and chosen["first_start_builds"] == []
    assert all(m["gen"].startswith("flashinfer.jit.") for m in chosen["modules"])


def test_a_subset_leaves_the_rest_to_the_first_start_in_census_order():
    chosen = prebuilt.resolve([CENSUS[-1], CENSUS[0]], FLASHINFER, "k")
    assert names(chosen) == [CENSUS[0], CENSUS[-1]]
    assert chosen["first_start_builds"] == CENSUS[1:-1]


def test_a_track_on_another_flashinfer_prebuilds_nothing_and_says_why():
    chosen = prebuilt.resolve("census", "0.6.3", "k")
    assert chosen["modules"] == [] and chosen["first_start_builds"] == []
    assert f"the census is of FlashInfer {FLASHINFER}, this track pins 0.6.3" in chosen["note"]


def test_a_misspelled_module_is_named_with_the_allowed_ones():
    with pytest.raises(UsageError) as err:
        prebuilt.resolve(["sampeling"], FLASHINFER, "profiles.offline.flashinfer_prebuilt")
    message = str(err.value)
    assert "profiles.offline.flashinfer_prebuilt names 'sampeling'" in message
    assert "perhaps you meant 'sampling'" in message and "\n" not in message


def test_the_compile_jobs_are_sized_by_the_largest_module_chosen():
    assert prebuilt.job_memory_gib(prebuilt.resolve([], FLASHINFER, "k")) == 0
    moe = prebuilt.job_memory_gib(prebuilt.resolve("census", FLASHINFER, "k"))
    assert moe == max(m["job_memory_gib"] for m in prebuilt.census()["modules"]) > 10


@pytest.mark.parametrize(("profile", "built"), [("release", CENSUS), ("offline", ["dsv3_fused_routing"])])
def test_the_default_tracks_release_leaves_nothing_to_compile_and_offline_proves_one(profile, built):
    plan = resolve.load_plan(profile=profile, sglang=FLASHINFER_TRACK, cpus=16, memory_gib=128)
    assert names(plan.flashinfer_prebuilt) == built
    assert sorted(built + plan.flashinfer_prebuilt["first_start_builds"]) == sorted(CENSUS)
    assert json.loads(plan.build_args["FLASHINFER_PREBUILT"]) == plan.flashinfer_prebuilt
    assert plan.labels["sglang-sm120.flashinfer.prebuilt"] == ",".join(built)
    assert int(plan.build_jobs["FLASHINFER_MAX_JOBS"]) >= 1


def test_the_stage_writes_from_the_build_arg_the_manifest_the_entrypoint_reads(tmp_path, monkeypatch, installed):
    chosen = prebuilt.resolve([], FLASHINFER, "k")
    monkeypatch.setenv("FLASHINFER_PREBUILT", json.dumps(chosen))
    assert stage().main(tmp_path / "aot") == 0  # no module: FlashInfer is not even imported
    manifest = json.loads((tmp_path / "aot" / at_start.MANIFEST).read_text())
    assert manifest == {
        "flashinfer": FLASHINFER,
        "arch_list": "12.0f",
        "first_start_builds": CENSUS,
        "note": "",
        "modules": {},
    }
    log = Log()
    at_start.check(log, tmp_path / "aot")
    assert log.lines() == [
        "FlashInfer modules for sm_120: none prebuilt; compiled at first use, where the model takes them "
        f"(docs/first-start): {', '.join(CENSUS)}"
    ]


def _manifest(directory: Path, built: str, modules: list[str], left: list[str], note: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = {"flashinfer": built, "arch_list": "12.0f", "modules": {m: {} for m in modules}}
    (directory / at_start.MANIFEST).write_text(json.dumps({**data, "first_start_builds": left, "note": note}))
    return directory


@pytest.fixture
def installed(monkeypatch):
    version = {"flashinfer-python": "0.7.2"}
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version[name])
    return version


def test_at_start_the_log_says_what_is_prebuilt_and_what_will_compile(tmp_path, installed):
    log = Log()
    at_start.check(log, _manifest(tmp_path, "0.7.2", ["dsv3_fused_routing"], ["fused_moe_120", "sampling"]))
    assert log.lines() == [
        "FlashInfer modules for sm_120: prebuilt: dsv3_fused_routing; compiled at first use, where the model takes "
        "them (docs/first-start): fused_moe_120, sampling"
    ]


def test_at_start_another_flashinfer_than_the_modules_were_built_for_is_a_warning(tmp_path, installed):
    installed["flashinfer-python"] = "0.7.3"
    log = Log()
    at_start.check(log, _manifest(tmp_path, "0.7.2", ["dsv3_fused_routing"], []))
    (warning,) = log.warnings()
    assert warning.startswith("FlashInfer 0.7.3 is installed, but its prebuilt modules (dsv3_fused_routing) are of")
    assert "install flashinfer-python==0.7.2 again" in warning


def test_at_start_a_track_without_prebuilt_modules_says_why_and_an_image_without_a_manifest_says_nothing(
    tmp_path, installed
):
    log = Log()
    at_start.check(log, _manifest(tmp_path / "a", "", [], [], note="the census is of FlashInfer 0.7.2"))
    assert log.lines() == ["FlashInfer modules for sm_120: the census is of FlashInfer 0.7.2"]
    log = Log()
    at_start.check(log, tmp_path / "none")
    at_start.check(log, None)  # no flashinfer package on this host's path
    assert log.lines() == []


def test_verify_prints_the_census_beside_the_decisions_with_what_the_image_prebuilt():
    rep = report.Report(image="img")
    rep.startup = {
        "decisions": {
            "kimi-k25-nvfp4/baseline": {"moe_runner": "flashinfer_cutlass", "fp4_gemm_runner": "flashinfer_cutlass"},
            "kimi-k25-nvfp4-mla/eagle3": {"moe_runner": "auto", "fp4_gemm_runner": "flashinfer_cutlass"},
            "deepseek-v3/eagle3": {"moe_runner": "auto", "fp4_gemm_runner": "flashinfer_cutlass"},
        }
    }
    rep.flashinfer = prebuilt.resolve(["dsv3_fused_routing"], FLASHINFER, "k")
    rows = {line.split()[0]: line.split()[1:] for line in report.table(rep).splitlines()[1:] if line.strip()}
    # SGLang's decisions choose: the MoE only where the MoE runner is FlashInfer's CUTLASS one.
    assert rows["fused_moe_120"] == ["compiles", "kimi-k25-nvfp4/baseline"]
    assert rows["fp4_gemm_cutlass_sm120"] == ["compiles", "kimi-k25-nvfp4-mla/eagle3,", "kimi-k25-nvfp4/baseline"]
    assert rows["dsv3_fused_routing"] == ["prebuilt", "deepseek-v3/eagle3"]
    assert rows["sampling"][0] == "compiles" and len(rows["sampling"]) == 4
    rep.flashinfer = prebuilt.resolve("census", "0.6.3", "k")
    assert "the census is of FlashInfer" in report.table(rep).splitlines()[-1]
