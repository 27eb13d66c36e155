"""The final command parsed by the installed SGLang's own CLI parser, before a ten-minute model load: in a child
interpreter (SGLang's import noise stays out of the entrypoint's output) with CUDA_VISIBLE_DEVICES="" (no GPU is
touched). A refusal is exit 2, naming where the option came from; no SGLang here is a note, not an error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from . import _parse_in_sglang
from ._parse_in_sglang import MARK
from .errors import Log, UsageError, redact, suggest
from .options import Command, canonical, check_spelling
from .sglang_source import InstalledSGLang

SCRIPT = Path(_parse_in_sglang.__file__)
TIMEOUT_S = 300


def _culprit(cmd: Command, message: str) -> str:
    """The item an argparse message is about, with its source ('--foo (after --)'), or ''."""
    for token in re.findall(r"--[A-Za-z0-9][\w-]*", message):
        option = canonical(token)
        for item in reversed(cmd.items()):
            if item.option == option or item.tokens[0].split("=", 1)[0] == token:
                return item.label()
    return ""


def check(
    cmd: Command,
    installed: InstalledSGLang | None,
    environ: Mapping[str, str],
    log: Log,
    relied_on: Collection[str] = (),
) -> str:
    """One line for --dry-run's output: whether SGLang's parser accepts the command (else UsageError)."""
    if installed is None:
        return _said(log.note, "SGLang is not importable here: the command was NOT checked by SGLang's parser")
    try:
        run = subprocess.run(
            [sys.executable, str(SCRIPT)],
            input=json.dumps({"argv": cmd.argv(), "options": sorted(relied_on)}),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env={**environ, "CUDA_VISIBLE_DEVICES": ""},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _said(log.warn, f"SGLang's parser did not answer in {TIMEOUT_S} s: the command was NOT checked")
    if not (lines := [line for line in run.stdout.splitlines() if line.startswith(MARK)]):
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return _said(log.warn, f"SGLang's parser failed to run ({tail}): the command was NOT checked")
    try:
        result = json.loads(lines[-1][len(MARK) :])
    except ValueError:
        result = {"status": "unavailable", "error": "unreadable answer"}
    version = installed.version or "?"
    if result.get("status") == "rejected":
        # an abbreviation (the parser takes none): refused as the entrypoint refuses one against its own list
        check_spelling(cmd, result.get("options") or (), installed.version)
        error = str(result.get("error", "")).strip()
        culprit = _culprit(cmd, error)
        error = redact(error)  # before the cut: a piece of a secret is no longer one
        unknown = re.search(r"unrecognized arguments: (\S+)", error)
        hint = suggest(unknown.group(1).split("=", 1)[0], result.get("options") or []) if unknown else ""
        raise UsageError(
            f"SGLang {version} does not accept {culprit or 'the command'}",
            f"its parser says: {error if len(error) <= 200 else error[:196] + ' ...'}",
            *([hint.removeprefix("; ")] if hint else []),
        )
    if result["status"] == "unavailable":
        return _said(
            log.warn, f"SGLang's parser could not be loaded ({result.get('error')}): the command was NOT checked"
        )
    _same_reading(cmd, result.get("readings") or {}, version)
    return _said(log.note, f"the command is accepted by SGLang {version}'s own parser")


def _said(say: Callable[[str], None], summary: str) -> str:
    say(summary)
    return summary


def _same_reading(cmd: Command, readings: Mapping[str, Any], version: str) -> None:
    """SGLang must read what the entrypoint checked, for every option the checks and rules rely on: one it
    did not see (an abbreviation, a --config file) must be at SGLang's default."""
    for option, reading in readings.items():
        # an alias: its option is compared; --config: the file's options are merged into the command, compared instead
        if not isinstance(reading, Mapping) or canonical(option) != option or option == "--config":
            continue
        ours = cmd.last(canonical(option))  # the entrypoint's own reading: an alias it does not know is not seen
        theirs, default = reading.get("value"), reading.get("default")
        if reading.get("flag"):
            same = (ours is not None) == (theirs != default)
        elif ours is None:
            same = theirs == default
        elif isinstance(theirs, list):
            same = [str(v) for v in theirs] == ours.values
        else:
            same = theirs is not None and str(theirs) == ours.value
        if not same:
            checked = ours.label() if ours is not None else f"no {option} (SGLang's default {default!r})"
            raise UsageError(
                f"SGLang {version} reads {option} as {theirs!r}, the entrypoint checked {checked}",
                f"an abbreviated option or a --config file? write SGLang's options in full (e.g. {option}) "
                "in EXTRA_ARGS or after --",
            )
