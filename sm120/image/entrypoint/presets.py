"""The presets baked into the image: plan.json's `entrypoint` key, from spec.PLAN_JSON_PATH or the file SM120_PLAN
names (tests), read with the module the build wrote it with; the whole plan or its `entrypoint` object alone."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import spec
from .errors import ImageError, UsageError, parse_json, show

VARIABLE = "SM120_PLAN"


@dataclass(frozen=True)
class Presets:
    spec: spec.EntrypointSpec
    source: str  # the file they were read from


def load(environ: Mapping[str, str]) -> Presets:
    """The presets from $SM120_PLAN (a user mistake: exit 2) or the image's own plan (a broken image: exit 1)."""
    chosen = environ.get(VARIABLE, "").strip()
    path = Path(chosen or spec.PLAN_JSON_PATH)
    label = f"{VARIABLE}={show(chosen)}" if chosen else f"the image's plan {path}"
    error = UsageError if chosen else ImageError
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would hold the entrypoint forever
            raise error(f"{label}: not a regular file", "it is written at build time by `build.py plan --json`")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{label}: no such file", "it is written at build time by `build.py plan --json`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{label}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    data = parse_json(text, f"{label}:", "a plan", error)
    try:
        return Presets(spec.from_plan(data), str(path))
    except spec.SpecError as exc:
        raise error(f"{label}: {exc}", "expected the output of `build.py plan --json`") from None
