"""One-line errors (at most three lines on stderr, no traceback), the log, and the one redaction step: main() wraps
sys.stdout and sys.stderr in Redacted for the whole run, so whatever code writes passes through SECRETS.redact, fed
with every secret as soon as the process knows it (key files, values after a key option, keys in variables)."""

from __future__ import annotations

import difflib
import functools
import itertools
import json
import re
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from .key_file import MASK, Masked

PROG = "entrypoint"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SECRET_MIN_CHARS = 4  # shorter values are not redacted (a 1-character "secret" would blank every message)


def one_line(text: str) -> str:
    """Text with its control characters escaped (a newline in a path must not make a second line)."""
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def long_number(text: str) -> str | None:
    """'line N: a number of D digits' for the first number longer than int() converts (json and tomllib then
    raise a bare ValueError, not their decode error), or None."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()  # 4300 since 3.11 and 3.10.7; 0: no limit
    if (match := re.search("[0-9_]{" + str(limit + 1) + ",}", text) if limit else None) is None:
        return None
    line = text.count("\n", 0, match.start()) + 1
    digits = sum(c.isdigit() for c in match.group(0))
    return f"line {line}: a number of {digits} digits (Python reads at most {limit}; no setting needs a tenth of that)"


class UsageError(Exception):
    """A mistake in what the user gave (mode, option, variable, model directory, GPUs): exit status 2."""

    exit_code = 2

    def __init__(self, message: str, *details: str) -> None:
        super().__init__(message)
        self.lines = [message, *details][:3]

    def render(self) -> str:
        first, *rest = (one_line(line) for line in self.lines)
        return "".join([f"{PROG}: error: {first}\n", *(f"  {line}\n" for line in rest)])


class ImageError(UsageError):
    """The image itself is broken (its baked plan is missing or unreadable): exit status 1."""

    exit_code = 1


def parse_json(text: str, label: str, what: str, error: type[UsageError] = UsageError) -> Any:
    """json.loads, a failure as `{label} not JSON (...)`, `{label} nested too deeply to be {what}` or `{label} not
    {what} (...)` (a number longer than int() converts: json raises a bare ValueError for it)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{label} not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise error(f"{label} nested too deeply to be {what}") from None
    except ValueError as exc:
        raise error(f"{label} not {what} ({long_number(text) or clip(str(exc), 120)})") from None


def suggest(name: str, allowed: Iterable[str]) -> str:
    """'; perhaps you meant X' for the closest allowed name, or ''."""
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    return f"; perhaps you meant {close[0]}" if close else ""


def show(value: object, limit: int = 160) -> str:
    """A value as it goes into a message: quoted, and cut short when long; a secret in it is masked before the cut
    (the cut would leave a piece of it that no later redaction recognises)."""
    text = repr(redact(value) if isinstance(value, str) else value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def clip(text: str, limit: int) -> str:
    """Text cut to `limit` characters, its secrets masked first (see show)."""
    return redact(text)[:limit]


class Log:
    """Notes and warnings, kept until the entrypoint succeeds (an error prints only itself)."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []

    def note(self, message: str) -> None:
        self.entries.append(("note", message))

    def warn(self, message: str) -> None:
        self.entries.append(("warning", message))

    def lines(self) -> list[str]:
        return [message if level == "note" else f"warning: {message}" for level, message in self.entries]

    def warnings(self) -> list[str]:
        return [message for level, message in self.entries if level == "warning"]

    def flush(self, stream: TextIO) -> None:
        for line in self.lines():
            stream.write(f"[{PROG}] {one_line(line)}\n")
        stream.flush()
        self.entries.clear()


class Secrets:
    """The secrets this process knows; redact() writes MASK over every place one occurs (raw, or as repr(),
    json.dumps() or one_line() would write it: a message may quote a value)."""

    def __init__(self) -> None:
        self._forms: set[str] = set()

    def add(self, value: str | None) -> None:
        if value is None or len(value) < SECRET_MIN_CHARS:
            return
        for form in (value, value.strip(), repr(value)[1:-1], json.dumps(value)[1:-1], one_line(value)):
            if len(form) >= SECRET_MIN_CHARS:
                self._forms.add(form)

    def redact(self, text: str) -> str:
        """Every character covered by an occurrence of a secret (overlapping ones too) becomes part of one MASK
        per run: two secrets that overlap in the text leave no piece of either."""
        if not self._forms or not text:
            return text
        covered = bytearray(len(text))
        for form in self._forms:
            start = text.find(form)
            while start != -1:
                covered[start : start + len(form)] = b"\x01" * len(form)
                start = text.find(form, start + 1)
        if not any(covered):
            return text
        runs = itertools.groupby(zip(text, covered, strict=True), key=lambda pair: pair[1])
        return "".join(MASK if hit else "".join(c for c, _ in run) for hit, run in runs)

    def clear(self) -> None:
        self._forms.clear()


SECRETS = Secrets()
redact = SECRETS.redact


Redacted = functools.partial(Masked, redact=redact)  # a text stream that writes whole lines through SECRETS.redact
