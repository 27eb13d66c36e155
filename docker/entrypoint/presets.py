"""The presets baked into the image: the `entrypoint` key of the build plan (`build.py plan --json`).

The image build writes the whole plan to /etc/sglang-sm120/plan.json; SM120_PLAN names another file (tests).
Both the whole plan and its `entrypoint` object alone are accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ImageError, UsageError, show

DEFAULT_PLAN = "/etc/sglang-sm120/plan.json"
CONDITIONS = ("always", "nvfp4", "tp>1", "single-node")


@dataclass(frozen=True)
class Mode:
    name: str
    summary: str
    args: list[str]
    draft: bool  # needs DRAFT_MODEL_PATH, an EAGLE-3 drafter
    spec_num_steps: int | None
    spec_eagle_topk: int | None
    spec_num_draft_tokens: int | None


@dataclass(frozen=True)
class Check:
    """A change is in the installed SGLang when every regex matches the file at `path` (site-packages-relative)."""

    path: str
    patterns: list[str]


@dataclass(frozen=True)
class Requires:
    patch: str
    checks: list[Check]


@dataclass(frozen=True)
class Rule:
    name: str
    when: list[str]
    env: dict[str, str]
    args: list[str]
    requires: Requires | None
    reason: str


@dataclass(frozen=True)
class LeftOut:
    args: list[str]
    reason: str


@dataclass(frozen=True)
class Presets:
    source: str
    sglang_version: str
    cuda_archs: list[str]
    port: int
    cache_dir: str
    modes: dict[str, Mode]
    runtime: list[Rule]
    left_out: list[LeftOut]


class _Bad(Exception):
    pass


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise _Bad(f"{where}.{key} is missing")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Bad(f"{where}.{key} is {type(value).__name__}, not {getattr(kind, '__name__', kind)}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Bad(f"{where} is not a list of strings")
    return list(value)


def _optional_int(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _Bad(f"{where}.{key} is {value!r}, not an integer >= 1")
    return value


def _mode(name: str, raw: Any) -> Mode:
    where = f"modes.{name}"
    return Mode(
        name=name,
        summary=_get(raw, "summary", str, where),
        args=_strings(raw.get("args", []), f"{where}.args"),
        draft=bool(raw.get("draft", False)),
        spec_num_steps=_optional_int(raw, "spec_num_steps", where),
        spec_eagle_topk=_optional_int(raw, "spec_eagle_topk", where),
        spec_num_draft_tokens=_optional_int(raw, "spec_num_draft_tokens", where),
    )


def _rule(index: int, raw: Any) -> Rule:
    where = f"runtime[{index}]"
    when = raw.get("when", ["always"]) if isinstance(raw, Mapping) else None
    when = [when] if isinstance(when, str) else when
    for condition in _strings(when, f"{where}.when"):
        if condition not in CONDITIONS:
            raise _Bad(f"{where}.when has {condition!r} (known: {', '.join(CONDITIONS)})")
    env = raw.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise _Bad(f"{where}.env is not a table of strings")
    requires = None
    if raw.get("requires") is not None:
        req = raw["requires"]
        checks = [
            Check(_get(c, "path", str, f"{where}.requires.checks"), _strings(c.get("patterns"), f"{where}.patterns"))
            for c in _get(req, "checks", list, f"{where}.requires")
        ]
        requires = Requires(_get(req, "patch", str, f"{where}.requires"), checks)
    return Rule(
        name=_get(raw, "name", str, where),
        when=when,
        env=dict(env),
        args=_strings(raw.get("args", []), f"{where}.args"),
        requires=requires,
        reason=_get(raw, "reason", str, where),
    )


def parse(data: Any, source: str) -> Presets:
    """Presets from a decoded plan (or its `entrypoint` object); raises _Bad naming the broken key."""
    if isinstance(data, Mapping) and "entrypoint" in data:
        data = data["entrypoint"]
    modes = _get(data, "modes", Mapping, "entrypoint")
    if not modes:
        raise _Bad("entrypoint.modes is empty")
    return Presets(
        source=source,
        sglang_version=_get(data, "sglang_version", str, "entrypoint"),
        cuda_archs=_strings(_get(data, "cuda_archs", list, "entrypoint"), "entrypoint.cuda_archs"),
        port=_get(data, "port", int, "entrypoint"),
        cache_dir=_get(data, "cache_dir", str, "entrypoint"),
        modes={name: _mode(name, raw) for name, raw in modes.items()},
        runtime=[_rule(i, raw) for i, raw in enumerate(_get(data, "runtime", list, "entrypoint"))],
        left_out=[
            LeftOut(_strings(_get(r, "args", list, "left_out"), "left_out.args"), _get(r, "reason", str, "left_out"))
            for r in _get(data, "left_out", list, "entrypoint")
        ],
    )


def load(environ: Mapping[str, str]) -> Presets:
    """The presets from $SM120_PLAN (a user mistake: exit 2) or the image's own plan (a broken image: exit 1)."""
    chosen = environ.get("SM120_PLAN", "").strip()
    path = Path(chosen or DEFAULT_PLAN)
    label = f"SM120_PLAN={show(chosen)}" if chosen else f"the image's plan {path}"
    error = UsageError if chosen else ImageError
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{label}: no such file", "it is written at build time by `build.py plan --json`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{label}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return parse(json.loads(text), str(path))
    except json.JSONDecodeError as exc:
        raise error(f"{label}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise error(f"{label}: nested too deeply to be a plan") from None
    except _Bad as exc:
        raise error(f"{label}: {exc}", "expected the output of `build.py plan --json`") from None
