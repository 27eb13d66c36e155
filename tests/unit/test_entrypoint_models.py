"""T0: what the entrypoint reads from model directories (NVFP4 detection, the drafter) and from an installed
SGLang's files (registered drafters, a target's EAGLE-3 hooks, a patch's change), without importing SGLang; and,
through the entrypoint's --dry-run, what is worth a line before a ten-minute load: TP that does not divide the
attention heads, a quant_method the installed SGLang does not know, a repo-id-looking path that is a mounted model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sm120.image.entrypoint import models, options, sglang_source
from sm120.image.entrypoint.errors import UsageError
from tests.entrypoint_helpers import (
    ENTRYPOINT,
    eagle3_draft,
    fake_sglang,
    kimi_target,
    run_entrypoint,
    standin_run,
    write_model,
)
from tests.helpers import unshare_or_skip
from tests.unit.test_entrypoint_bad_input import assert_refused


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


# --------------------------------------------------------------------------------------------------
# Through --dry-run: worth a clear line before a ten-minute load
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def setup(tmp_path: Path) -> dict:
    """The entrypoint run as a process: the stand-in SGLang, 8 fake GPUs, a synthetic plan, two models."""
    return standin_run(tmp_path)


def _target(path: Path, heads: int, **extra) -> str:
    text = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_attention_heads": heads}
    return str(write_model(path, {**text, **extra}))


HEADS = [
    ("tp3-of-64", 64, "3", {}, ["TP 3 does not divide the target's 64 attention heads", "allowed TP sizes"]),
    ("tp6-of-64", 64, "6", {}, ["TP 6 does not divide the target's 64 attention heads"]),
    ("tp8-of-12", 12, "8", {}, ["TP 8 does not divide the target's 12 attention heads"]),
    ("tp2-of-7", 7, "2", {}, ["TP 2 does not divide the target's 7"]),
]


@pytest.mark.parametrize(("heads", "tp", "extra", "expected"), [c[1:] for c in HEADS], ids=[c[0] for c in HEADS])
def test_tp_that_does_not_divide_the_attention_heads(setup, tmp_path, heads, tp, extra, expected):
    env = {**setup["env"], "MODEL_PATH": _target(tmp_path / "t", heads), "TP_SIZE": tp, **extra}
    assert_refused(run_entrypoint(["baseline", "--dry-run"], env), *expected)


def test_tp_heads_of_the_drafter_and_the_ones_that_fit(setup, tmp_path):
    env = {**setup["env"], "MODEL_PATH": _target(tmp_path / "t", 64), "TP_SIZE": "8"}
    assert run_entrypoint(["eagle3", "--dry-run"], env).returncode == 0
    draft = eagle3_draft(tmp_path / "d", num_attention_heads=12)
    assert_refused(
        run_entrypoint(["eagle3", "--dry-run"], {**env, "DRAFT_MODEL_PATH": str(draft)}),
        "TP 8 does not divide the drafter's 12 attention heads",
    )
    # DP attention splits the heads over TP / DP ranks instead: left to SGLang.
    dp = {**env, "TP_SIZE": "6", "EXTRA_ARGS": "--enable-dp-attention --dp-size 6"}
    proc = run_entrypoint(["baseline", "--dry-run"], dp)
    assert "does not divide" not in proc.stderr


def _quantization_list(site: Path, names: list[str]) -> None:
    path = site / "sglang" / "srt" / "layers" / "quantization" / "__init__.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = ", ".join(f'"{n}": object' for n in names)
    path.write_text(f"BASE_QUANTIZATION_METHODS = {{{entries}}}\nBASE_QUANTIZATION_METHODS.update({{'mxfp4': 1}})\n")


QUANT = [
    ("unknown", "fp6_magic", 2, ["quant_method 'fp6_magic' is no quantization SGLang 9.9.9 knows"]),
    ("upper-case-known", "FP8", 0, []),
    ("known", "fp8", 0, []),
    ("from-update", "mxfp4", 0, []),
    ("modelopt-nvfp4", "modelopt", 0, []),
]


@pytest.mark.parametrize(("method", "rc", "expected"), [c[1:] for c in QUANT], ids=[c[0] for c in QUANT])
def test_an_unknown_quant_method_is_refused_against_the_installed_list(setup, tmp_path, method, rc, expected):
    _quantization_list(setup["site"], ["fp8", "modelopt", "modelopt_fp4", "compressed-tensors"])
    quant = {"quant_method": method, **({"quant_algo": "NVFP4"} if method == "modelopt" else {})}
    target = write_model(tmp_path / "q", {"architectures": ["DeepseekV3ForCausalLM"], "quantization_config": quant})
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "MODEL_PATH": str(target)})
    if rc == 2:
        assert_refused(proc, "MODEL_PATH=", *expected)
    else:
        assert proc.returncode == 0, proc.stderr


def test_an_unknown_quant_method_passes_where_the_list_cannot_be_read(setup, tmp_path):
    quant = {"quant_method": "fp6_magic"}  # the stand-in SGLang has no quantization list
    target = write_model(tmp_path / "q", {"architectures": ["DeepseekV3ForCausalLM"], "quantization_config": quant})
    assert run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "MODEL_PATH": str(target)}).returncode == 0


def test_a_repo_id_looking_path_that_is_a_mounted_model(setup, tmp_path):
    """MODEL_PATH=org/name would be downloaded from Hugging Face while /models/org/name is mounted: refused, naming
    the directory. A real bind mount in a mount namespace of its own (unshare), as `-v /models:/models` makes."""
    unshare = unshare_or_skip()
    models, point = tmp_path / "host-models", tmp_path / "models"
    kimi_target(models / "org" / "name", architecture="DeepseekV3ForCausalLM")
    point.mkdir()
    env = {**setup["env"], "MODEL_PATH": "org/name"}
    script = 'mount --bind "$1" "$2" && exec "$3" "$4" baseline --dry-run'
    proc = subprocess.run(
        [*unshare, "sh", "-c", script, "sh", str(models), str(point), sys.executable, str(ENTRYPOINT)],
        capture_output=True, text=True, env=env, cwd=tmp_path / "host-models" / "org", timeout=120, check=False,
    )  # fmt: skip
    assert_refused(proc, "MODEL_PATH='org/name'", "read as a Hugging Face repo id", f"{point}/org/name")
    # Without the mount it is a repo id SGLang downloads, as before.
    assert run_entrypoint(["baseline", "--dry-run"], env).returncode == 0


def test_mounted_dirs_reads_the_mount_table(tmp_path):
    from sm120.image.entrypoint import models

    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "23 22 0:5 / /proc rw - proc proc rw\n"
        "24 22 8:1 /srv/models /models ro - ext4 /dev/sda1 rw\n"
        "25 22 8:1 /srv/x /mnt/with\\040space rw - ext4 /dev/sda1 rw\n"
        "26 22 0:6 / /dev/shm rw - tmpfs shm rw\n"
    )
    assert models.mounted_dirs(str(table)) == [Path("/models"), Path("/mnt/with space")]
    assert models.mounted_dirs(str(tmp_path / "none")) == []
