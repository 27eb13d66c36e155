"""The Dockerfile's ARG defaults mirror the default plan (SGLang track and profile from build.toml)."""

from __future__ import annotations

import re
from pathlib import Path

from sm120 import config as cfg
from sm120 import plan as planmod
from sm120 import resources as res

ROOT = Path(__file__).resolve().parents[2]
MACHINE = res.Resources(cpus=2, memory_bytes=24 * 1024**3, source="test")
# Derived from the machine that builds, so they have no fixed default (MAX_JOBS) or follow the arch count.
MACHINE_DEPENDENT = {"MAX_JOBS"}


def arg_defaults(text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, value in re.findall(r"^ARG (\w+)(?:=(.*))?$", text, flags=re.MULTILINE):
        out.setdefault(name, set()).add(value)
    return out


def test_every_build_arg_is_declared_with_the_plans_default():
    plan = planmod.resolve(cfg.load(ROOT / "build.toml"), machine=MACHINE)
    declared = arg_defaults((ROOT / "Dockerfile").read_text())
    for name, value in plan.build_args.items():
        assert name in declared, f"Dockerfile does not declare ARG {name}"
        if name in MACHINE_DEPENDENT:
            continue
        assert declared[name] == {value}, f"ARG {name} defaults to {declared[name]}, the plan says {value!r}"


def test_no_arg_that_the_plan_does_not_pass():
    plan = planmod.resolve(cfg.load(ROOT / "build.toml"), machine=MACHINE)
    declared = set(arg_defaults((ROOT / "Dockerfile").read_text()))
    assert declared <= set(plan.build_args)


def test_no_syntax_line_and_stage_comments():
    text = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"^#\s*syntax=", text, flags=re.MULTILINE)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FROM "):
            before = "\n".join(lines[max(0, i - 3) : i])
            assert "# ----" in before, f"stage at line {i + 1} has no comment saying why it exists"
