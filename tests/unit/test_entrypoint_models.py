"""T0: what the entrypoint reads from model directories (NVFP4 detection, the drafter) and from an installed
SGLang's files (registered drafters, a target's EAGLE-3 hooks, a patch's change), without importing SGLang."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120.image.entrypoint import models, options, sglang_source
from sm120.image.entrypoint.errors import UsageError
from tests.entrypoint_helpers import eagle3_draft, fake_sglang, kimi_target, write_model


def open_dir(path: Path, source: str = "MODEL_PATH"):
    return models.open_model(options.Item(["--model-path", str(path)], source))


# --------------------------------------------------------------------------------------------------
# NVFP4 detection (SGLang's ModelOpt parsing: configs/model_config.py)
# --------------------------------------------------------------------------------------------------

NVFP4_CASES = [
    (
        "modelopt-in-config",
        {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}},
        None,
        "modelopt_fp4",
    ),
    ("no-method-fp4", {"quantization_config": {"quant_algo": "FP4"}}, None, "modelopt_fp4"),
    ("nested-quantization", {"quantization_config": {"quantization": {"quant_algo": "NVFP4"}}}, None, "modelopt_fp4"),
    (
        "in-text-config",
        {"text_config": {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}},
        None,
        "modelopt_fp4",
    ),
    (
        "hf-quant-config-file",
        {},
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}},
        "modelopt_fp4",
    ),
    (
        "mixed-with-nvfp4",
        {
            "quantization_config": {
                "quant_method": "modelopt",
                "quant_algo": "MIXED_PRECISION",
                "quantized_layers": {"l.0": {"quant_algo": "NVFP4"}},
            }
        },
        None,
        "modelopt_mixed",
    ),
    (
        "mixed-fp8-only",
        {"quantization_config": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {"l.0": {"quant_algo": "FP8"}}}},
        None,
        "w4afp8",
    ),
    ("modelopt-fp8", {"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}, None, "modelopt"),
    (
        "compressed-tensors",
        {"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4"}},
        None,
        "compressed-tensors",
    ),
    ("fp8-blockwise", {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, None, "fp8"),
    ("bf16", {}, None, None),
]


@pytest.mark.parametrize(
    ("config", "hf_quant", "expected"), [c[1:] for c in NVFP4_CASES], ids=[c[0] for c in NVFP4_CASES]
)
def test_quantization_as_sglang_reads_it(tmp_path, config, hf_quant, expected):
    extra = {"hf_quant_config.json": hf_quant} if hf_quant else None
    model = open_dir(write_model(tmp_path / "m", {"architectures": ["X"], **config}, extra))
    assert models.quantization(model) == expected


def test_quantization_of_a_repo_id_is_unknown():
    assert models.quantization(open_dir(Path("nvidia/Kimi-K2.5-NVFP4"))) is None


# --------------------------------------------------------------------------------------------------
# The drafter
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"])
def test_eagle3_drafters(tmp_path, arch):
    assert models.check_drafter(open_dir(eagle3_draft(tmp_path / "d", architecture=arch), "DRAFT_MODEL_PATH")) == arch


@pytest.mark.parametrize(
    ("arch", "text"),
    [
        ("LlamaForCausalLM", "not an EAGLE-3 drafter"),
        ("LlamaForCausalLMEagle", "EAGLE-1/2"),
        ("DeepseekV3ForCausalLMNextN", "not an EAGLE-3 drafter"),
    ],
)
def test_not_eagle3_drafters(tmp_path, arch, text):
    draft = open_dir(eagle3_draft(tmp_path / "d", architecture=arch), "DRAFT_MODEL_PATH")
    with pytest.raises(UsageError, match=text) as info:
        models.check_drafter(draft)
    assert info.value.lines[0].startswith(f"DRAFT_MODEL_PATH='{tmp_path / 'd'}': architecture {arch}")


def test_target_values_from_text_config(tmp_path):
    target = open_dir(kimi_target(tmp_path / "t"))
    assert target.architecture == "KimiK25ForConditionalGeneration"
    assert (target.text_value("hidden_size"), target.text_value("vocab_size")) == (7168, 163840)


# --------------------------------------------------------------------------------------------------
# The installed SGLang, read from its files
# --------------------------------------------------------------------------------------------------


def test_locate_finds_nothing_without_sglang(tmp_path):
    assert sglang_source.locate([str(tmp_path)]) is None


def test_version_and_registry(tmp_path):
    installed = sglang_source.locate([str(fake_sglang(tmp_path, version="0.5.9"))])
    assert installed.version == "0.5.9"
    assert installed.registered("LlamaForCausalLMEagle3") and not installed.registered("Eagle3DeepseekV2ForCausalLM")
    assert installed.registered_like("Eagle3") == ["LlamaForCausalLMEagle3"]


def test_target_hooks_through_base_classes(tmp_path):
    hooks = ("get_embed_and_head", "set_eagle3_layers_to_capture")
    bare = sglang_source.locate([str(fake_sglang(tmp_path / "a", kimi_hooks=False))])
    assert bare.methods_missing("DeepseekV3ForCausalLM", hooks) == []  # inherited from DeepseekV2 -> EagleHooks
    assert bare.methods_missing("KimiK25ForConditionalGeneration", hooks) == list(hooks)
    assert bare.methods_missing("NoSuchModel", hooks) is None  # cannot tell: not an error
    patched = sglang_source.locate([str(fake_sglang(tmp_path / "b", kimi_hooks=True))])
    assert patched.methods_missing("KimiK25ForConditionalGeneration", hooks) == []


def test_getattr_delegation_cannot_be_told(tmp_path):
    site = fake_sglang(tmp_path)
    (site / "sglang/srt/models/wrapper.py").write_text(
        "class Wrapper(object):\n    def __getattr__(self, name):\n        return getattr(self.inner, name)\n"
    )
    installed = sglang_source.locate([str(site)])
    assert installed.methods_missing("Wrapper", ["set_eagle3_layers_to_capture"]) is None


def test_has_change(tmp_path):
    checks = [("sglang/srt/distributed/device_communicators/all_reduce_utils.py", [r"^\s*12: \{"])]
    without = sglang_source.locate([str(fake_sglang(tmp_path / "a", symm_mem_12=False))])
    assert without.has_change(checks) == (False, checks[0][0])
    with_it = sglang_source.locate([str(fake_sglang(tmp_path / "b", symm_mem_12=True))])
    assert with_it.has_change(checks) == (True, "")
    assert with_it.has_change([("sglang/missing.py", ["x"])]) == (False, "sglang/missing.py")
