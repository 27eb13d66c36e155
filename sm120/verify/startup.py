"""The host side of the start-up check (tier T2.5, sm120/verify/suite/test_startup.py): the model configs it writes, the
decisions it reads back from SGLang, the sm_120 traps it holds them against, and the kernel-library failures.

The in-image side is startup_probe.py (copied into the container, run by the image's Python). Everything here
is plain data in, plain data out, so it is unit-tested without an image (tests/unit/test_startup.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sm120.image.entrypoint.models import EAGLE3_MARK as EAGLE3_MARK

if TYPE_CHECKING:
    from sm120.plan.config import Sm120Trap

# Architectures the project supports (README: Kimi-K2.5, the DeepSeek-V3 family); the EAGLE-3 drafters are
# every `*Eagle3*` class of the installed SGLang (what the entrypoint accepts), found by the probe.
SUPPORTED = ("KimiK25ForConditionalGeneration", "DeepseekV3ForCausalLM")

# What a kernel library's failure looks like in an import error (module names and shared objects).
KERNEL_LIBRARIES = ("sgl_kernel", "flashinfer", "flash_attn", "deep_gemm", "flash_mla", "triton", "tvm_ffi", "cutlass")

# SGLang start-up modules imported under the persona beyond the model registry (the scheduler, the model
# runner, the EAGLE worker, the layers they build): their module-level kernel imports must load.
START_UP_MODULES = (
    "sglang.srt.managers.scheduler",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.speculative.eagle_worker",  # up to 0.5.1x
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.layers.attention.vision",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.flashinfer_mla_backend",
    "sglang.srt.layers.moe.fused_moe_triton.layer",
    "sglang.srt.layers.quantization.modelopt_quant",
    "sglang.srt.layers.quantization.fp8",
)


# Model directories (config.json only: the fields SGLang's model config reads; no weights)

_DEEPSEEK_V3_TEXT: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}


def deepseek_v3() -> dict[str, dict[str, Any]]:
    """deepseek-ai/DeepSeek-V3's config.json (FP8 block-wise weights, as published)."""
    config = dict(_DEEPSEEK_V3_TEXT)
    config["quantization_config"] = {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    }
    return {"config.json": config}


_NVFP4_EXCLUDE = ["lm_head", "*.mlp.gate", "*self_attn*", "vision_tower*", "mm_projector*"]


def kimi_k25_nvfp4() -> dict[str, dict[str, Any]]:
    """A Kimi-K2.5 NVFP4 checkpoint's config.json and hf_quant_config.json (ModelOpt export: NVFP4 experts,
    BF16 attention and vision tower), the fields SGLang's KimiK25Config and ModelOpt parsing read."""
    text = dict(_DEEPSEEK_V3_TEXT)
    text.update(
        model_type="kimi_k2",
        bos_token_id=163584,
        eos_token_id=163585,
        first_k_dense_replace=1,
        max_position_embeddings=262144,
        n_group=1,
        n_routed_experts=384,
        num_attention_heads=64,
        num_key_value_heads=64,
        num_nextn_predict_layers=0,
        rms_norm_eps=1e-05,
        rope_scaling={
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "factor": 64.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
        rope_theta=50000.0,
        routed_scaling_factor=2.827,
        topk_group=1,
        vocab_size=163840,
    )
    quant = {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16, "exclude_modules": _NVFP4_EXCLUDE}
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "media_placeholder_token_id": 163605,
        "pad_token_id": 163839,
        "torch_dtype": "bfloat16",
        "text_config": text,
        "vision_config": {
            "patch_size": 14,
            "init_pos_emb_height": 64,
            "init_pos_emb_width": 64,
            "init_pos_emb_time": 4,
            "pos_emb_type": "divided_fixed",
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "merge_kernel_size": [2, 2],
            "video_attn_type": "spatial_temporal",
            "merge_type": "sd2_tpool",
            "mm_projector_type": "patchmerger",
            "mm_hidden_size": 1152,
            "projector_hidden_act": "gelu",
            "projector_ln_eps": 1e-05,
            "text_hidden_size": 7168,
        },
        "quantization_config": {"quant_method": "modelopt", **quant},
    }
    hf_quant = {"producer": {"name": "modelopt", "version": "0.37.0"}, "quantization": quant}
    return {"config.json": config, "hf_quant_config.json": hf_quant}


def _drafter(target: Mapping[str, Any], architecture: str, model_type: str, **fields: Any) -> dict[str, dict[str, Any]]:
    """A one-layer EAGLE-3 drafter's config.json: `fields`, then what every drafter here shares."""
    layers = int(target["num_hidden_layers"])
    aux = {"eagle_aux_hidden_state_layer_ids": [1, layers // 2 - 1, layers - 4], "use_aux_hidden_state": True}
    config = {"architectures": [architecture], "model_type": model_type, **fields, "eagle_config": aux}
    config.update(intermediate_size=18432, hidden_act="silu", num_hidden_layers=1, draft_vocab_size=32000)
    config.update(tie_word_embeddings=False, torch_dtype="bfloat16")
    return {"config.json": config}


def eagle3_drafter(target_text: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A Llama EAGLE-3 drafter for a target (SpecForge's layout): the target's hidden size and vocab."""
    fields = {k: target_text[k] for k in ("hidden_size", "vocab_size", "max_position_embeddings", "rope_theta")}
    fields.update(num_attention_heads=64, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-05)
    return _drafter(target_text, "LlamaForCausalLMEagle3", "llama", **fields)


def eagle3_mla_drafter(target_text: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """An MLA EAGLE-3 drafter (Eagle3DeepseekV2ForCausalLM, SGLang >= 0.5.12; e.g. lightseekorg's
    kimi-k2.5-eagle3-mla): the fields srt/models/kimi_k25_eagle3.py and SGLang's model config read for it, the target's
    attention shape, hidden size and vocab. Written from SGLang's reader, not copied from a published checkpoint (none
    is reachable here)."""
    mla = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    shape = ("hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size", "rms_norm_eps")
    rope = ("max_position_embeddings", "rope_theta", "rope_scaling")
    fields = {key: target_text[key] for key in (*mla, *shape, *rope)}
    return _drafter(target_text, "Eagle3DeepseekV2ForCausalLM", "deepseek_v3", **fields)


@dataclass(frozen=True)
class Family:
    key: str
    target: dict[str, dict[str, Any]]
    drafter: Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]] = eagle3_drafter
    draft_only: bool = False  # only the draft modes (its baseline is another family's: the same target)

    @property
    def text(self) -> Mapping[str, Any]:
        config = self.target["config.json"]
        return config.get("text_config", config)

    @property
    def draft(self) -> dict[str, dict[str, Any]]:
        return self.drafter(self.text)

    @property
    def draft_class(self) -> str:
        return self.draft["config.json"]["architectures"][0]


FAMILIES = (
    Family("kimi-k25-nvfp4", kimi_k25_nvfp4()),
    Family("deepseek-v3", deepseek_v3()),
    # Upstream's Kimi-K2.5 recipe drafts with an MLA drafter (sgl-project/sglang PR #27714); the published
    # sm_120 EAGLE-3 gains (Kimi-K2.6, 8x RTX PRO 6000) use that kind. Tracks whose SGLang lacks the class refuse it.
    Family("kimi-k25-nvfp4-mla", kimi_k25_nvfp4(), eagle3_mla_drafter, True),
)


def cases(modes: Mapping[str, bool]) -> list[str]:
    """Every family/mode case for an image's modes (name -> needs a drafter): a draft-only family in its draft modes."""
    return [f"{f.key}/{m}" for f in FAMILIES for m, draft in modes.items() if draft or not f.draft_only]


def family(case: str) -> Family:
    key = case.split("/", 1)[0]
    return next(f for f in FAMILIES if f.key == key)


def model_files(root: str) -> dict[str, str]:
    """name under `root` -> JSON text, for copy_in: ROOT/<family>/target/..., ROOT/<family>/draft/..."""
    files = {}
    for family in FAMILIES:
        for role, content in (("target", family.target), ("draft", family.draft)):
            for name, data in content.items():
                files[f"{root}/{family.key}/{role}/{name}"] = json.dumps(data, indent=1)
    return files


# The entrypoint's command and SGLang's decisions

_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def split_command(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """`VAR=v ... /opt/venv/bin/python3 -m sglang.launch_server ARGS` (the last line of `--dry-run`) -> (env, ARGS)."""
    env: dict[str, str] = {}
    rest = list(argv)
    while rest and _ENV.match(rest[0]):
        key, value = rest.pop(0).split("=", 1)
        env[key] = value
    if rest[1:3] != ["-m", "sglang.launch_server"] or not rest[0].rpartition("/")[2].startswith("python"):
        raise ValueError(f"not an SGLang launch command: {' '.join(argv)[:200]}")
    return env, rest[3:]


def option_value(args: Sequence[str], option: str) -> str | None:
    """The value after `option` in ARGS (the entrypoint writes each option once), or None."""
    return args[list(args).index(option) + 1] if option in args else None


def decisions(case: Mapping[str, Any]) -> dict[str, Any]:
    """What SGLang decided for one case: its settings, the scheduler's runners, DeepGEMM, and derived rows."""
    settings = dict(case.get("settings") or {})
    out: dict[str, Any] = dict(settings)
    for key, value in (case.get("runners") or {}).items():
        if key == "load_error":
            out["quant_config"] = f"refused: {value.get('type')}"
        elif key not in ("error", "draft_model"):
            out[key] = value
    for key, value in (case.get("deep_gemm") or {}).items():
        out[f"deep_gemm.{key}"] = value
    attention = settings.get("attention_backend")
    prefill = settings.get("prefill_attention_backend") or attention
    decode = settings.get("decode_attention_backend") or attention
    if "attention_backend" in settings:
        out["prefill_decode_attention"] = f"{prefill} / {decode}"
    if settings.get("speculative_algorithm"):
        out["speculative_draft_attention_backend"] = settings.get("speculative_draft_attention_backend") or decode
        steps, topk, tokens = (
            settings.get(k) for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
        )
        out["speculative"] = f"{settings['speculative_algorithm']} {steps}/{topk}/{tokens}"
        draft = (case.get("runners") or {}).get("draft_model")
        if isinstance(draft, dict) and "attention_arch" in draft:
            out["draft_model"] = f"{draft.get('architecture')} ({draft['attention_arch']})"
            out["draft_attention"] = draft["attention_arch"]
    if "disable_overlap_schedule" in settings:
        out["overlap_schedule"] = "off" if settings["disable_overlap_schedule"] else "on"
    graphs = settings.get("cuda_graph_config")
    if isinstance(graphs, dict):  # 0.5.2x: one record per phase (backend full/breakable/disabled, max_bs, bs)
        out["cuda_graph"] = "; ".join(f"{name} {_graphs(graphs.get(name) or {})}" for name in ("decode", "prefill"))
    elif "disable_cuda_graph" in settings:  # 0.5.9: one switch, cuda_graph_max_bs and cuda_graph_bs
        off = settings["disable_cuda_graph"]
        bs, max_bs = settings.get("cuda_graph_bs"), settings.get("cuda_graph_max_bs")
        out["cuda_graph"] = _graphs({"backend": "disabled"} if off else {"max_bs": max_bs, "bs": bs})
    return out


def _graphs(phase: Mapping[str, Any]) -> str:
    """`full, max bs 512, 3 sizes`, `disabled` (a phase's backend, when it has one, first)."""
    if phase.get("backend") == "disabled":
        return "disabled"
    bs = phase.get("bs")
    parts = [phase.get("backend"), f"max bs {phase['max_bs']}" if phase.get("max_bs") is not None else None]
    return ", ".join(p for p in (*parts, f"{len(bs)} sizes" if isinstance(bs, list) else None) if p)


@dataclass(frozen=True)
class TrapHit:
    case: str
    setting: str
    value: Any
    trap: Sm120Trap

    def message(self, version: str) -> str:
        return (
            f"{self.case}: SGLang {version} decided {self.setting} = {self.value!r} on sm_120, a trap: "
            f"{self.trap.reason}; set {self.trap.fix}"
        )


def trap_hits(traps: Iterable[Sm120Trap], version: str, cases: Mapping[str, Mapping[str, Any]]) -> list[TrapHit]:
    """Every (case, setting) whose decision lands on a trap that holds for this release and quantization."""
    hits = []
    for case_id, decided in cases.items():
        for trap in traps:
            if trap.applies(version, decided.get("quantization"), decided.get("draft_attention")):
                hits += [TrapHit(case_id, setting, value, trap) for setting, value in trap.hits(dict(decided))]
    return hits


# Import failures: which kernel library, from which SGLang module


def kernel_library(failure: Mapping[str, Any]) -> str | None:
    """The kernel library an import failure comes from (its missing module, its statement or its message)."""
    for text in (failure.get("missing"), failure.get("statement"), failure.get("message")):
        for lib in KERNEL_LIBRARIES:
            if text and re.search(rf"\b{lib}\b", str(text)):
                return lib
    return None


def describe_failure(failure: Mapping[str, Any]) -> str:
    where = failure.get("module") or failure.get("sglang_frame") or "?"
    line = f" line {failure['line']}: {failure['statement']}" if failure.get("statement") else ""
    return f"{where}{line} -> {failure.get('type')}: {failure.get('message', '')[:900]}"


def refusal(case: Mapping[str, Any]) -> str:
    """Why SGLang would not start a case (its launch checks, then its model loader), or ''."""
    reasons = [describe_failure(case["error"])] if case.get("error") else []
    if load_error := (case.get("runners") or {}).get("load_error"):
        reasons.append("model loader: " + describe_failure(load_error))
    return " || ".join(reasons)
