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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import Log, UsageError
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


def check(cmd: Command, found: bool, environ: Mapping[str, str], log: Log) -> Outcome:
    if not found:
        summary = "SGLang is not importable here: the command was NOT checked by SGLang's parser"
        log.note(summary)
        return Outcome(False, summary)
    env = dict(environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        run = subprocess.run(
            [sys.executable, str(SCRIPT)],
            input=json.dumps(cmd.argv()),
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
    result = json.loads(lines[-1][len(MARK) :])
    version = result.get("version") or "?"
    if result["status"] == "rejected":
        error = str(result.get("error", "")).strip()
        culprit = _culprit(cmd, error)
        short = error if len(error) <= 200 else error[:196] + " ..."
        raise UsageError(
            f"SGLang {version} does not accept {culprit or 'the command'}",
            f"its parser says: {short}",
        )
    if result["status"] == "unavailable":
        summary = f"SGLang's parser could not be loaded ({result.get('error')}): the command was NOT checked"
        log.warn(summary)
        return Outcome(False, summary)
    _same_reading(cmd, result.get("values") or {}, version)
    summary = f"the command is accepted by SGLang {version}'s own parser"
    log.note(summary)
    return Outcome(True, summary)


def _same_reading(cmd: Command, values: Mapping[str, object], version: str) -> None:
    """SGLang must read the values the entrypoint checked (an abbreviation like --tp would slip past it)."""
    for option, theirs in values.items():
        ours = cmd.last(option)
        if ours is None or ours.value is None or theirs is None:
            continue
        same = str(theirs) == ours.value.strip() or (isinstance(theirs, int) and ours.value.strip() == f"+{theirs}")
        if not same:
            raise UsageError(
                f"SGLang {version} reads {option} as {theirs!r}, the entrypoint checked {ours.label()}",
                f"an abbreviated option? write SGLang's options in full (e.g. {option})",
            )
