"""The Docker build args: written from the plan (`write`); the Dockerfile's declarations read back (each stage
declares, without a value, the ones it uses)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the lender's benchmarks/kernel_build.py reads stages here without pydantic (plan_types needs it)
    from sm120.plan.plan_types import Plan


def write(plan: Plan) -> dict[str, str]:
    """Every build arg of the image `plan` builds, by name (sm120/plan/exported.py FACTS)."""
    from sm120.plan.exported import FACTS

    return {f.arg: f.value(plan) for f in FACTS if f.arg}


def stage_env(build_args: dict[str, str], dockerfile: str, stage: str) -> dict[str, str]:
    """The build args the Dockerfile's `stage` declares, with their values: that stage's environment."""
    return {name: build_args[name] for name in sorted(stage_args(dockerfile)[stage])}


def stages(text: str) -> dict[str, str]:
    """Stage name -> its text, from its FROM line to the next."""
    parts = re.split(r"^(?=FROM )", text[text.index("\nFROM ") + 1 :], flags=re.MULTILINE)
    return {
        match.group(1): part
        for part in parts
        if part.startswith("FROM ") and (match := re.search(r" AS ([\w-]+)", part.splitlines()[0]))
    }


def stage_args(text: str) -> dict[str, set[str]]:
    """Stage name -> the ARGs it re-declares without a value (the build args it uses)."""
    return {name: set(re.findall(r"^ARG (\w+)$", part, flags=re.MULTILINE)) for name, part in stages(text).items()}
