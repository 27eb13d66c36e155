"""The final command parsed by the installed SGLang's own CLI parser, before a ten-minute model load.

It runs in a child interpreter (this one: the image's venv python), so SGLang's import noise stays out of
the entrypoint's output, and with CUDA_VISIBLE_DEVICES="" so the check never touches a GPU. An unknown
option or a bad value is exit 2, naming where it came from; no SGLang here is a note, not an error.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import Log, UsageError, redact, suggest
from .options import Command, canonical

SCRIPT = Path(__file__).with_name("_parse_in_sglang.py")
MARK = "SM120-PARSE-RESULT "
TIMEOUT_S = 300


@dataclass(frozen=True)
class Outcome:
    checked: bool
    summary: str  # one line for --dry-run's output


def _culprit(cmd: Command, message: str) -> str:
    """The item an argparse message is about, with its source ('--foo (after --)'), or ''."""
    for token in re.findall(r"--[A-Za-z0-9][\w-]*", message):
        option = canonical(token)
        for item in reversed(cmd.items()):
            if item.option == option or item.tokens[0].split("=", 1)[0] == token:
                return item.label()
    return ""


def _unknown_hint(error: str, known: list[str]) -> str | None:
    """'perhaps you meant --tp-size' for the first unrecognized option of an argparse message."""
    match = re.search(r"unrecognized arguments: (\S+)", error)
    if not match or not known:
        return None
    hint = suggest(match.group(1).split("=", 1)[0], known)
    return hint.removeprefix("; ") or None


def check(cmd: Command, found: bool, environ: Mapping[str, str], log: Log, relied_on: Collection[str] = ()) -> Outcome:
    if not found:
        summary = "SGLang is not importable here: the command was NOT checked by SGLang's parser"
        log.note(summary)
        return Outcome(False, summary)
    env = dict(environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        run = subprocess.run(
            [sys.executable, str(SCRIPT)],
            input=json.dumps({"argv": cmd.argv(), "options": sorted(relied_on)}),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        summary = f"SGLang's parser did not answer in {TIMEOUT_S} s: the command was NOT checked"
        log.warn(summary)
        return Outcome(False, summary)
    lines = [line for line in run.stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        summary = f"SGLang's parser failed to run ({tail}): the command was NOT checked"
        log.warn(summary)
        return Outcome(False, summary)
    try:
        result = json.loads(lines[-1][len(MARK) :])
    except ValueError:
        result = {"status": "unavailable", "error": "unreadable answer"}
    version = result.get("version") or "?"
    if result.get("status") == "rejected":
        error = str(result.get("error", "")).strip()
        culprit = _culprit(cmd, error)
        error = redact(error)  # before the cut: a piece of a secret is no longer one
        short = error if len(error) <= 200 else error[:196] + " ..."
        hint = _unknown_hint(error, list(result.get("options") or []))
        raise UsageError(
            f"SGLang {version} does not accept {culprit or 'the command'}",
            f"its parser says: {short}",
            *([hint] if hint else []),
        )
    if result["status"] == "unavailable":
        summary = f"SGLang's parser could not be loaded ({result.get('error')}): the command was NOT checked"
        log.warn(summary)
        return Outcome(False, summary)
    _same_reading(cmd, result.get("readings") or {}, version)
    summary = f"the command is accepted by SGLang {version}'s own parser"
    log.note(summary)
    return Outcome(True, summary)


def _same_reading(cmd: Command, readings: Mapping[str, Any], version: str) -> None:
    """SGLang must read what the entrypoint checked, for every option the checks and rules rely on: one it
    did not see (an abbreviation, a --config file) must be at SGLang's default."""
    for option, reading in readings.items():
        if not isinstance(reading, Mapping) or canonical(option) != option:  # an alias: its option is compared
            continue
        if option == "--config":  # the file's options are merged into the command: they are compared instead
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
