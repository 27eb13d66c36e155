"""build.toml's runtime rules for the image's SGLang track (what sm_120 needs), and the flags left out. The user
overrides every rule: with a variable the rule sets, an option it passes, or SKIP_RUNTIME_RULES=name."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .assemble import Effective
from .errors import Log, UsageError, show
from .models import NVFP4_METHODS
from .options import Command, canonical, group
from .sglang_source import InstalledSGLang
from .spec import CONDITIONS, EntrypointSpec, RuleFacts, RuntimeRuleSpec


def skipped(spec: EntrypointSpec, environ: Mapping[str, str]) -> set[str]:
    raw = environ.get("SKIP_RUNTIME_RULES", "").strip()
    names = {n for n in re.split(r"[,\s]+", raw) if n}
    known = [rule.name for rule in spec.runtime]
    if "all" in names:
        return set(known)
    if unknown := sorted(names - set(known)):
        raise UsageError(
            f"SKIP_RUNTIME_RULES={show(raw)}: no rule named {show(unknown[0])}",
            f"rules of SGLang {spec.sglang_version}: {', '.join(known) or 'none'}; or 'all'",
        )
    return names


def describe(rule: RuntimeRuleSpec) -> str:
    return " ".join([*(f"{k}={v}" for k, v in rule.env.items()), *rule.args])


def apply(
    spec: EntrypointSpec,
    cmd: Command,
    effective: Effective,
    quantization: str | None,
    target_known: bool,
    installed: InstalledSGLang | None,
    environ: Mapping[str, str],
    log: Log,
) -> list[str]:
    """Add the rules that apply to cmd (args) and cmd.env; log each decision; return the applied names."""
    skip = skipped(spec, environ)
    user_quantization = cmd.value("--quantization")
    quantization = user_quantization or quantization
    nvfp4 = True if quantization in NVFP4_METHODS else (False if target_known or user_quantization else None)
    facts = RuleFacts(tp=effective.tp, nnodes=effective.nnodes, nvfp4=nvfp4)
    applied = []
    for rule in spec.runtime:
        what = f"sm_120 rule {rule.name} ({describe(rule)})"
        if rule.name in skip:
            log.note(f"{what} skipped: SKIP_RUNTIME_RULES")
            continue
        results = {condition: CONDITIONS[condition](facts) for condition in rule.when}
        if None in results.values():
            log.note(f"{what} not applied: cannot tell whether the target is NVFP4 (not a local directory)")
            continue
        if failed := [c for c, ok in results.items() if not ok]:
            log.note(f"{what} not applied: {', '.join(failed)} does not hold")
            continue
        if rule.requires is not None:
            if installed is None:
                log.note(f"{what}: the {rule.requires.patch} change is not verified (SGLang is not installed here)")
            else:
                present, lacking = installed.has_change([(c.path, c.patterns) for c in rule.requires.checks])
                if not present:
                    log.note(
                        f"{what} not applied: the installed SGLang {installed.version or ''} lacks the "
                        f"{rule.requires.patch} change ({lacking})"
                    )
                    continue
        for key, value in rule.env.items():
            if key in environ:
                log.note(f"{what}: {key}={show(environ[key])} from the environment is kept")
            else:
                cmd.env[key] = value
        for item in group(list(rule.args), f"rule {rule.name}"):
            if (user := cmd.overriding(item.option)) is not None:
                log.note(f"{what}: {item.option} is yours ({user.label()})")
            else:
                cmd.put(item)
        applied.append(rule.name)
        log.note(f"{what} applied: {rule.reason}")
    return applied


def left_out(spec: EntrypointSpec, cmd: Command, log: Log) -> None:
    """Log the reference run's flags this track leaves out on sm_120; warn when the user passes one anyway."""
    for entry in spec.left_out:
        if (user := cmd.overriding(canonical(entry.args[0]))) is not None:
            log.warn(f"{user.label()} is passed as you asked, but: {entry.reason}")
        else:
            log.note(f"left out {' '.join(entry.args)}: {entry.reason}")
