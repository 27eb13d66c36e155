"""T0: the FlashInfer first-start census (sm120/plan/flashinfer_census.toml) is complete data, and the parts of
benchmarks/flashinfer_census.py that run without FlashInfer (reading the census, ninja's log, the pack's rules)
do what docs/first-start/README.md says. The builds themselves run on a machine with nvcc (the H200 lender)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def census_mod():
    spec = importlib.util.spec_from_file_location("flashinfer_census", ROOT / "benchmarks" / "flashinfer_census.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_module_says_what_builds_it_and_why(census_mod):
    census = census_mod.load_census(census_mod.CENSUS)
    assert census["census"]["sglang"] == "0.5.23" and census["census"]["flashinfer"] == "0.7.2"
    assert census["modules"], "the census lists no module"
    for module in census["modules"]:
        assert module["gen"].startswith("flashinfer.jit.") and ":gen_" in module["gen"], module["name"]
        assert module["reason"] and module["models"] and module["modes"] and module["when"], module["name"]
        assert set(module["modes"]) <= {"baseline", "eagle3"}, module["name"]
    for entry in census.get("sglang_jit", []) + census.get("not_built", []):
        assert entry["reason"]


def test_the_toml_names_the_modules_the_doc_measures(census_mod):
    census = census_mod.load_census(census_mod.CENSUS)
    page = (ROOT / "docs" / "first-start" / "README.md").read_text()
    for module in census["modules"]:
        assert f"`{module['name']}`" in page, module["name"]
    measured = json.loads((ROOT / "docs" / "first-start" / "2026-12-03-h200-other-modules.json").read_text())
    moe = json.loads((ROOT / "docs" / "first-start" / "2026-12-03-h200-fused_moe_120.json").read_text())
    names = {m["name"] for m in measured["modules"] + moe["modules"]}
    assert names == {m["name"] for m in census["modules"] if m.get("measure")}


def test_ninja_log_keeps_the_last_entry_of_each_output_longest_first(census_mod, tmp_path):
    (tmp_path / ".ninja_log").write_text(
        "# ninja log v7\n0\t5000\t0\ta.cuda.o\t1\n0\t1000\t0\tb.o\t2\n100\t2100\t0\ta.cuda.o\t3\n"
    )
    assert census_mod.ninja_log(tmp_path) == [
        {"output": "a.cuda.o", "seconds": 2.0},
        {"output": "b.o", "seconds": 1.0},
    ]
    assert census_mod.ninja_log(tmp_path / "missing") == []


@pytest.mark.parametrize(
    ("member", "kept"),
    [
        ("flashinfer/jit/fused_moe.py", True),
        ("flashinfer/data/csrc/sampling.cu", True),
        ("flashinfer/data/csrc/nv_internal/cpp/kernels/quantization.cu", True),
        ("flashinfer/data/csrc/fused_moe/noAuxTcKernels.cu", True),
        ("flashinfer/data/csrc/fused_moe/cutlass_backend/cutlass_fused_moe_instantiation.cu", True),
        ("flashinfer/data/csrc/fused_moe/cake_mxfp4_situ_moe/x.cu", False),
        ("flashinfer/data/csrc/cake_dsv4/sm_120a/x.cu", False),
        ("flashinfer/data/cutlass/include/cute/tensor.hpp", True),
        ("flashinfer/data/cutlass/tools/util/include/cutlass/util/packed_stride.hpp", True),
        ("flashinfer/data/cutlass/python/cutlass_library/library.py", False),
        ("flashinfer/experimental/b12x/moe/kernel.py", False),
        ("flashinfer/fused_moe/backends/cudnn_frost/artifacts/nvfp4/selected.json", False),
        ("flashinfer/fused_moe/backends/cudnn_frost/__init__.py", True),
        ("flashinfer_python-0.7.2.dist-info/METADATA", True),
    ],
)
def test_the_pack_keeps_what_the_census_modules_read(census_mod, member, kept):
    assert (census_mod.PACKED.fullmatch(member) is not None) is kept
