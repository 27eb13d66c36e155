"""The host side of the start-up check (T2.5, sm120/verify/suite/test_startup.py): the model configs it writes,
the decisions it reads back from SGLang (from startup_probe.py, run in the image), the sm_120 traps it holds them
against, and the kernel-library failures. Plain data in and out: unit-tested without an image (tests/unit/)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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


# Model directories, config files only (the fields SGLang's model config reads; no weights). startup_models.json:
# deepseek-v3 is deepseek-ai/DeepSeek-V3's config.json (FP8 block-wise weights, as published); kimi-k25-nvfp4 a
# Kimi-K2.5 NVFP4 checkpoint's config.json and hf_quant_config.json (ModelOpt export: NVFP4 experts, BF16 attention
# and vision tower), the fields SGLang's KimiK25Config and ModelOpt parsing read. Its one-layer EAGLE-3 drafters take
# the target's hidden size and vocab (`from_target`): llama as SpecForge writes them; mla (Eagle3DeepseekV2ForCausalLM,
# SGLang >= 0.5.12, e.g. lightseekorg's kimi-k2.5-eagle3-mla) also the target's attention shape, the fields
# srt/models/kimi_k25_eagle3.py and SGLang's model config read, written from SGLang's reader (no published
# checkpoint is reachable here).
_MODELS = json.loads(Path(__file__).with_name("startup_models.json").read_text())
TARGETS: dict[str, dict[str, dict[str, Any]]] = _MODELS["targets"]


@dataclass(frozen=True)
class Family:
    key: str
    target: dict[str, dict[str, Any]]
    drafter: str = "llama"  # the kind of its EAGLE-3 drafter (startup_models.json "drafters")
    draft_only: bool = False  # only the draft modes (its baseline is another family's: the same target)

    @property
    def text(self) -> Mapping[str, Any]:
        config = self.target["config.json"]
        return config.get("text_config", config)

    @property
    def draft(self) -> dict[str, dict[str, Any]]:
        """The EAGLE-3 drafter's config.json for the target (from the text config of its config.json)."""
        spec, layers = _MODELS["drafters"][self.drafter], int(self.text["num_hidden_layers"])
        aux = {"eagle_aux_hidden_state_layer_ids": [1, layers // 2 - 1, layers - 4], "use_aux_hidden_state": True}
        config = {**spec["config"], **{key: self.text[key] for key in spec["from_target"]}, "eagle_config": aux}
        return {"config.json": {**config, **_MODELS["drafters"]["shared"]}}

    @property
    def draft_class(self) -> str:
        return self.draft["config.json"]["architectures"][0]


FAMILIES = (
    Family("kimi-k25-nvfp4", TARGETS["kimi-k25-nvfp4"]),
    Family("deepseek-v3", TARGETS["deepseek-v3"]),
    # Upstream's Kimi-K2.5 recipe drafts with an MLA drafter (sgl-project/sglang PR #27714); the published
    # sm_120 EAGLE-3 gains (Kimi-K2.6, 8x RTX PRO 6000) use that kind. Tracks whose SGLang lacks the class refuse it.
    Family("kimi-k25-nvfp4-mla", TARGETS["kimi-k25-nvfp4"], "mla", True),
)


def cases(modes: Mapping[str, bool]) -> list[str]:
    """Every family/mode case for an image's modes (name -> needs a drafter): a draft-only family in its draft modes."""
    return [f"{f.key}/{m}" for f in FAMILIES for m, draft in modes.items() if draft or not f.draft_only]


def family(case: str) -> Family:
    return next(f for f in FAMILIES if f.key == case.split("/", 1)[0])


def model_files(root: str) -> dict[str, str]:
    """name under `root` -> JSON text, for copy_in: ROOT/<family>/target/..., ROOT/<family>/draft/..."""
    files = {}
    for family in FAMILIES:
        for role, content in (("target", family.target), ("draft", family.draft)):
            for name, data in content.items():
                files[f"{root}/{family.key}/{role}/{name}"] = json.dumps(data, indent=1)
    return files


# The entrypoint's command and SGLang's decisions


def split_command(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """`VAR=v ... /opt/venv/bin/python3 -m sglang.launch_server ARGS` (the last line of `--dry-run`) -> (env, ARGS)."""
    pairs = list(itertools.takewhile(re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=").match, argv))
    env, rest = dict(pair.split("=", 1) for pair in pairs), list(argv[len(pairs) :])
    if rest[1:3] != ["-m", "sglang.launch_server"] or not rest[0].rpartition("/")[2].startswith("python"):
        raise ValueError(f"not an SGLang launch command: {' '.join(argv)[:200]}")
    return env, rest[3:]


def option_value(args: Sequence[str], option: str) -> str | None:
    """The value after `option` in ARGS (the entrypoint writes each option once), or None."""
    return args[list(args).index(option) + 1] if option in args else None


def decisions(case: Mapping[str, Any]) -> dict[str, Any]:
    """What SGLang decided for one case: its settings, the scheduler's runners, DeepGEMM, and derived rows."""
    settings, runners = case.get("settings") or {}, case.get("runners") or {}
    out: dict[str, Any] = dict(settings)
    for key, value in runners.items():
        if key == "load_error":
            out["quant_config"] = f"refused: {value.get('type')}"
        elif key not in ("error", "draft_model"):
            out[key] = value
    out.update({f"deep_gemm.{key}": value for key, value in (case.get("deep_gemm") or {}).items()})
    attention = settings.get("attention_backend")
    prefill = settings.get("prefill_attention_backend") or attention
    decode = settings.get("decode_attention_backend") or attention
    if "attention_backend" in settings:
        out["prefill_decode_attention"] = f"{prefill} / {decode}"
    if settings.get("speculative_algorithm"):
        out["speculative_draft_attention_backend"] = settings.get("speculative_draft_attention_backend") or decode
        sizes = (str(settings.get(f"speculative_{k}")) for k in ("num_steps", "eagle_topk", "num_draft_tokens"))
        out["speculative"] = f"{settings['speculative_algorithm']} {'/'.join(sizes)}"
        draft = runners.get("draft_model")
        if isinstance(draft, dict) and "attention_arch" in draft:
            out["draft_model"] = f"{draft.get('architecture')} ({draft['attention_arch']})"
            out["draft_attention"] = draft["attention_arch"]
    if "disable_overlap_schedule" in settings:
        out["overlap_schedule"] = "off" if settings["disable_overlap_schedule"] else "on"
    graphs = settings.get("cuda_graph_config")
    if isinstance(graphs, dict):  # 0.5.2x: one record per phase (backend full/breakable/disabled, max_bs, bs)
        out["cuda_graph"] = "; ".join(f"{name} {_graphs(graphs.get(name) or {})}" for name in ("decode", "prefill"))
    elif "disable_cuda_graph" in settings:  # 0.5.9: one switch, cuda_graph_max_bs and cuda_graph_bs
        phase = {"max_bs": settings.get("cuda_graph_max_bs"), "bs": settings.get("cuda_graph_bs")}
        out["cuda_graph"] = _graphs({"backend": "disabled"} if settings["disable_cuda_graph"] else phase)
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
    texts = [str(t) for t in (failure.get("missing"), failure.get("statement"), failure.get("message")) if t]
    return next((lib for text in texts for lib in KERNEL_LIBRARIES if re.search(rf"\b{lib}\b", text)), None)


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
