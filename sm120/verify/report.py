"""What a `verify` run found: the report the suite writes ($SM120_VERIFY_REPORT, JSON: the facts its checks measured;
one a failed check never reached prints as `?`), the table the command prints, the failed checks."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from tabulate import tabulate

from sm120.plan.prebuilt import census

# The decision table: (row, setting). `draft attention` is the draft's own setting, else what it inherits.
DECISION_ROWS: tuple[tuple[str, str], ...] = (
    ("quantization", "quantization"),
    ("quant config (loader)", "quant_config"),
    ("attention backend", "attention_backend"),
    ("prefill / decode attention", "prefill_decode_attention"),
    ("draft attention backend", "speculative_draft_attention_backend"),
    ("draft model (attention)", "draft_model"),
    ("vision attention backend", "mm_attention_backend"),
    ("MoE runner (server args)", "moe_runner_backend"),
    ("MoE runner (scheduler)", "moe_runner"),
    ("draft MoE runner", "speculative_moe_runner_backend"),
    ("FP4 GEMM (server args)", "fp4_gemm_runner_backend"),
    ("FP4 GEMM (scheduler)", "fp4_gemm_runner"),
    ("FP8 GEMM (scheduler)", "fp8_gemm_runner"),
    ("DeepGEMM JIT", "deep_gemm.ENABLE_JIT_DEEPGEMM"),
    ("CUDA graph", "cuda_graph"),
    ("page size", "page_size"),
    ("KV cache dtype", "kv_cache_dtype"),
    ("mem fraction static", "mem_fraction_static"),
    ("chunked prefill size", "chunked_prefill_size"),
    ("torch symm-mem all-reduce", "enable_torch_symm_mem"),
    ("custom all-reduce disabled", "disable_custom_all_reduce"),
    ("FlashInfer all-reduce fusion", "enable_flashinfer_allreduce_fusion"),
    ("speculative (steps/topk/draft)", "speculative"),
    ("overlap scheduling", "overlap_schedule"),
)


PACKAGES = ("torch", "sglang", "sgl_kernel", "flashinfer", "flash_attn")


class Report(BaseModel):
    image: str = ""
    image_id: str = ""
    size: int = 0
    profile: str = ""
    python: str = ""
    expected: dict[str, str] = {}  # import name -> label version
    found: dict[str, str] = {}  # import name -> version in the image
    kernels: list[dict[str, Any]] = []  # {library, archs, required, extra, ...}
    warnings: list[str] = []
    # The start-up check (T2.5): persona, cuDNN, per case (family/mode) SGLang's decisions or its refusal.
    startup: dict[str, Any] = {}
    flashinfer: dict[str, Any] = {}  # the image's plan's flashinfer_prebuilt

    @classmethod
    def load(cls, path: Path) -> Report | None:
        try:
            return cls.model_validate_json(path.read_text())
        except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
            return None


def human_size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def arch_line(kernel: dict[str, Any]) -> str:
    """`flash_attn_2_cuda: sm_120` (the line the issue asks for, one per kernel library)."""
    archs = ", ".join(kernel.get("archs") or []) or "no device code"
    ptx = kernel.get("ptx") or []
    return f"{kernel['library']}: {archs}" + (f" (PTX {', '.join(ptx)})" if ptx else "")


def _plain(rows: list[list[str]], headers: list[str]) -> list[str]:
    return tabulate(rows, headers, tablefmt="plain", disable_numparse=True).splitlines()


def table(report: Report) -> str:
    short_id = report.image_id.split(":", 1)[-1][:12] if report.image_id else "?"
    rows = [
        f"image      {report.image} ({short_id}, {human_size(report.size) if report.size else '?'})",
        f"profile    {report.profile or '?'}",
        f"python     {report.python or '?'}",
        "",
    ]
    packages = [[name, report.expected.get(name, "?"), report.found.get(name, "?")] for name in PACKAGES]
    rows += _plain(packages, ["package", "label", "found in the image"])
    if report.kernels:
        rows += ["", *_plain([arch_line(k).split(": ", 1) for k in report.kernels], ["kernel library", "SASS archs"])]
    else:
        rows += ["", "kernel library SASS archs: ? (the kernel checks did not run)"]
    if report.startup:
        rows += ["", *decision_table(report.startup)]
    if report.startup and report.flashinfer:
        rows += ["", *census_table(report.startup.get("decisions") or {}, report.flashinfer)]
    return "\n".join(rows)


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def decision_table(startup: dict[str, Any]) -> list[str]:
    """SGLang's start-up decisions on the sm_120 persona: one column per model and mode, one row per decision."""
    decided: dict[str, dict[str, Any]] = startup.get("decisions") or {}
    refused: dict[str, str] = startup.get("refused") or {}
    cases = sorted({*decided, *refused}, key=lambda c: (c.split("/")[0], c.split("/")[-1] != "baseline"))
    rows = [f"start-up on the sm_120 persona: {startup.get('persona', '?')}, cuDNN {startup.get('cudnn', '?')}"]
    if not cases:
        return [*rows, "  ? (the start-up check did not run)"]
    body = []
    for label, key in DECISION_ROWS:
        cells = [_shown(decided[case].get(key)) if case in decided else "refused" for case in cases]
        if any(cell not in ("-", "refused") for cell in cells):
            body.append([label, *cells])
    rows += _plain(body, ["decision", *(c + (" (refused)" if c in refused else "") for c in cases)])
    for case, why in sorted(refused.items()):
        rows += [f"{case}: SGLang refused to start: {part[:300]}" for part in why.split(" || ")]
    return rows


def census_table(decided: dict[str, dict[str, Any]], prebuilt: dict[str, Any]) -> list[str]:
    """The FlashInfer modules a first start builds (sm120/plan/flashinfer_census.toml), per start-up case where
    SGLang's decisions above choose them, and whether the image holds each prebuilt."""
    rows = [f"FlashInfer {prebuilt.get('flashinfer', '?')} modules a first start builds on sm_120 (census)"]
    if prebuilt.get("note"):
        return [*rows, f"  {prebuilt['note']}"]
    built = {m["name"] for m in prebuilt.get("modules", [])}
    body = []
    for module in census()["modules"]:
        cases = [
            case
            for case, decisions in sorted(decided.items())
            if case.split("/")[-1] in module["modes"]
            and any(case.split("/")[0].startswith(f) for f in module["families"])
            and all(decisions.get(key) in values for key, values in module.get("decided_by", {}).items())
        ]
        if cases:
            body.append([module["name"], "prebuilt" if module["name"] in built else "compiles", ", ".join(cases)])
    return rows + (_plain(body, ["module", "in the image", "needed by"]) if body else ["  none needed"])


@dataclass(frozen=True)
class Outcome:
    tests: int
    failed: list[str]  # short names of failed or errored checks
    skipped: int


def junit_outcome(path: Path) -> Outcome | None:
    """Failed checks from pytest's JUnit XML (a failure or an error in setup/teardown both count)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    cases = list(root.iter("testcase"))
    skipped, failed = 0, {}  # failed: name -> None, each name once, in order
    for case in cases:
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            failed[f"{case.get('classname', '').rsplit('.', 1)[-1] or '?'}::{case.get('name', '?')}"] = None
        elif "skipped" in tags:
            skipped += 1
    return Outcome(len(cases), list(failed), skipped)
