"""Errors the entrypoint reports in at most three lines on stderr, without a traceback; its log; and the one
redaction step every byte it writes passes through (SECRETS, Redacted).

No secret in any output, by construction: main() replaces sys.stdout and sys.stderr with Redacted streams for the
whole run, so every message, log line, `--help` and `--dry-run` text is written through SECRETS.redact, whatever
code wrote it. SECRETS is fed with every secret the process knows, as soon as it knows it: the key files' contents
(read first thing, before any check), the values that follow an option argparse would read as --api-key or
--admin-api-key (after `--`, in EXTRA_ARGS), the values of variables that hold a key in plain sight (API_KEY=...).
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from .key_file import MASK

PROG = "entrypoint"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SECRET_MIN_CHARS = 4  # shorter values are not redacted (a 1-character "secret" would blank every message)


def one_line(text: str) -> str:
    """Text with its control characters escaped (a newline in a path must not make a second line)."""
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def int_digits_limit() -> int:
    """CPython's limit on the digits int() converts (4300 since 3.11 and 3.10.7; 0 means none)."""
    getter = getattr(sys, "get_int_max_str_digits", None)
    return getter() if getter is not None else 0


def long_number(text: str) -> str | None:
    """'line N: a number of D digits' for the first number longer than int() converts (json and tomllib then
    raise a bare ValueError, not their decode error), or None."""
    limit = int_digits_limit()
    if not limit:
        return None
    match = re.search("[0-9_]{" + str(limit + 1) + ",}", text)
    if match is None:
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

    def __bool__(self) -> bool:
        return bool(self._forms)

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
        out: list[str] = []
        i = 0
        while i < len(text):
            if covered[i]:
                while i < len(text) and covered[i]:
                    i += 1
                out.append(MASK)
            else:
                j = i
                while j < len(text) and not covered[j]:
                    j += 1
                out.append(text[i:j])
                i = j
        return "".join(out)

    def clear(self) -> None:
        self._forms.clear()


SECRETS = Secrets()


def redact(text: str) -> str:
    return SECRETS.redact(text)


class Redacted:
    """A text stream that writes whole lines through SECRETS.redact (a secret split over two write() calls is
    still one line); flush() writes the rest. Everything else is the stream's (fileno, isatty, encoding, ...)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            head, _, self._pending = self._pending.rpartition("\n")
            self.stream.write(redact(head + "\n"))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pending, self._pending = self._pending, ""  # taken first: a failing write does not write it twice
        if pending:
            self.stream.write(redact(pending))
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
