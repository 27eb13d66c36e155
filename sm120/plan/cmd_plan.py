"""`build.py plan`: print the resolved build plan."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sm120.arguments import add_config_args, add_machine_args
from sm120.plan import config as cfg
from sm120.plan import resolve
from sm120.plan.plan_types import Plan, sm


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="print the resolved build plan", description=__doc__)
    add_config_args(p)
    add_machine_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = cfg.load(args.config)
    plan = resolve.plan_from_args(config, args)
    if args.json:
        sys.stdout.write(plan.to_json())
    else:
        differences = resolve.differences(config, plan.profile, config.track(plan.sglang_version))
        print(render(plan, differences, config.project.published_profile))
    return 0


def text(value: Any) -> str:
    """A value of build.toml as the plan prints it: lists joined, tables as `key value; ...`, none as `none`."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ", ".join(text(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k} {text(v)}" for k, v in value.items())
    return str(value)


_INSTALL_WORDS = {
    "source": "compiled from source",
    "pypi": "PyPI wheel",
    "wheel": "upstream's prebuilt wheel, pinned by sha256",
}


def render(plan: Plan, differences: list[tuple[str, Any, Any]], published: str) -> str:
    """The human-readable plan: every value as text, none as Python writes it."""
    flash_attn, sgl_kernel = plan.flash_attn, plan.sgl_kernel
    wheel = f"\n                 {sgl_kernel.wheel_url}  sha256:{sgl_kernel.wheel_sha256[:16]}"
    lines = [
        f"profile          {plan.profile}",
        f"SGLang           {plan.sglang_version}",
        f"CUDA             {plan.cuda_version}  archs: {', '.join(sm(a) for a in plan.cuda_archs)}",
        f"python           {plan.python_version}",
        f"torch            {plan.torch_version} (CUDA {plan.torch_cuda}, from {plan.torch_index or 'PyPI'})",
        f"flashinfer       {plan.flashinfer_version}",
        f"flash-attn       {flash_attn.version} compiled for {', '.join('sm_' + a for a in flash_attn.archs)}; "
        f"head dims {', '.join(map(str, flash_attn.head_dims))}; {', '.join(flash_attn.dtypes)}; "
        f"backward {'on' if flash_attn.backward else 'off'}; split-KV {'on' if flash_attn.split_kv else 'off'}; "
        f"C++{flash_attn.cxx_std}",
        f"sgl-kernel       {sgl_kernel.package} {sgl_kernel.version} "
        f"({_INSTALL_WORDS[sgl_kernel.source]}, CUDA {sgl_kernel.cuda}, {', '.join(sgl_kernel.archs)})"
        + (wheel if sgl_kernel.wheel_url else ""),
        f"base image       {plan.base_image} ({plan.bases})",
        f"runtime base     {plan.runtime_base_image}",
        f"max_jobs         {plan.max_jobs}  nvcc_threads {plan.nvcc_threads}",
        f"                 {plan.parallelism_reason}",
        "                 split (build_jobs secret): " + ", ".join(f"{k}={v}" for k, v in plan.build_jobs.items()),
        "fix-ups          " + (", ".join(f.requirement for f in plan.fixups) or "none"),
        "patches",
    ]
    lines += [f"  {p.name:<32} {p.path}  sha256:{p.sha256[:16]}" for p in plan.patches]
    lines += [f"  {s.name:<32} skipped: {s.reason}" for s in plan.patches_skipped]
    if not plan.patches and not plan.patches_skipped:
        lines.append("  (none)")
    lines += ["tags", *(f"  {t}" for t in plan.tags)]
    if differences:
        lines.append(f"differs from the published profile ({published})")
        lines += [f"  {key}: {text(mine)} ({published}: {text(theirs)})" for key, mine, theirs in differences]
    for title, items in (("stand-ins", plan.stand_ins), ("warnings", plan.warnings)):
        lines += [title, *(f"  {item}" for item in items)] if items else []
    lines += ["labels", *(f"  {k}={v}" for k, v in plan.labels.items())]
    return "\n".join(lines)
