"""Presets that could never start: build.toml's mode args and runtime-rule args, checked by `build.py plan` with
the entrypoint's own checks (sm120/image/entrypoint/options.py `check_preset`), so an image is not built around a
preset its entrypoint refuses at every start.

`check_mode_args` takes one mode's args and the rules of the track it runs with; config validation calls it
for every (track, mode) pair, whatever shape build.toml gives modes (global, or per track).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from sm120.image.entrypoint import errors as entrypoint_errors
from sm120.image.entrypoint.options import check_preset

from .errors import UsageError


class _Rule(Protocol):
    name: str
    args: list[str]


def _refuse(key: str, exc: entrypoint_errors.UsageError) -> UsageError:
    text = "; ".join(entrypoint_errors.one_line(line) for line in exc.lines)
    return UsageError(f"{key}: the entrypoint would refuse it at every start: {text}")


def check_mode_args(
    file: str,
    mode: str,
    args: Sequence[str],
    rules: Iterable[_Rule] = (),
    *,
    mode_key: str | None = None,
    rules_key: str = "runtime",
) -> None:
    """Raise UsageError ('build.toml: modes.eagle3.args: ...') for a mode's args or a rule's args that the
    entrypoint refuses; `mode_key` and `rules_key` are where they are written in the file."""
    try:
        check_preset(list(args), f"preset {mode}")
    except entrypoint_errors.UsageError as exc:
        raise _refuse(f"{file}: {mode_key or f'modes.{mode}'}.args", exc) from None
    for i, rule in enumerate(rules):
        try:
            check_preset(list(rule.args), f"rule {rule.name}")
        except entrypoint_errors.UsageError as exc:
            raise _refuse(f"{file}: {rules_key}.{i}.args (rule {rule.name})", exc) from None
