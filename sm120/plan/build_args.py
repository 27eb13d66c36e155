"""The Docker build args: written from the plan (`write`); the Dockerfile's declarations read back (each stage
declares, without a value, the ones it uses)."""

from __future__ import annotations

import re

from sm120.plan.exported import FACTS
from sm120.plan.plan_types import Plan


def write(plan: Plan) -> dict[str, str]:
    """Every build arg of the image `plan` builds, by name (sm120/plan/exported.py FACTS)."""
    return {f.arg: f.value(plan) for f in FACTS if f.arg}


def stage_env(build_args: dict[str, str], dockerfile: str, stage: str) -> dict[str, str]:
    """The build args the Dockerfile's `stage` declares, with their values: that stage's environment."""
    return {name: build_args[name] for name in sorted(stage_args(dockerfile)[stage])}


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def dockerfile_defaults(text: str) -> dict[str, str]:
    """The Dockerfile's `ARG NAME=default` declarations above its first FROM."""
    head = text[: text.index("\nFROM ")]
    return {name: _unquote(value) for name, value in re.findall(r"^ARG (\w+)=(.*)$", head, flags=re.MULTILINE)}


def stages(text: str) -> dict[str, str]:
    """Stage name -> its text, from its FROM line to the next."""
    parts = re.split(r"^(?=FROM )", text[text.index("\nFROM ") + 1 :], flags=re.MULTILINE)
    out = {}
    for part in parts:
        match = re.search(r" AS ([\w-]+)", part.splitlines()[0]) if part.startswith("FROM ") else None
        if match:
            out[match.group(1)] = part
    return out


def stage_args(text: str) -> dict[str, set[str]]:
    """Stage name -> the ARGs it re-declares without a value (the build args it uses)."""
    return {name: set(re.findall(r"^ARG (\w+)$", part, flags=re.MULTILINE)) for name, part in stages(text).items()}
