"""Errors the entrypoint reports in at most three lines on stderr, without a traceback; and its log."""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable
from typing import TextIO

PROG = "entrypoint"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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
    """A value as it goes into a message: quoted, and cut short when long."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


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
