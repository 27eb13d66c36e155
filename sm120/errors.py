"""Errors that the CLI turns into one line on stderr and an exit status, never a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UsageError(Exception):
    """Bad input from the user (a flag, build.toml, a version): exit status 2."""

    exit_code = 2


class CheckFailed(Exception):
    """A check or build that ran and failed (a patch conflict, a failed stage): exit status 1."""

    exit_code = 1


def suggest(name: object, allowed: Iterable[str]) -> str:
    """'; perhaps you meant X' for the closest allowed name (as cibuildwheel does), or ''. The one spelling of it
    for build.py (build.toml, the CLI's choices, bench); the image's entrypoint, standard library only, has its own."""
    close = difflib.get_close_matches(str(name), list(allowed), n=1, cutoff=0.6)
    return f"; perhaps you meant {close[0]!r}" if close else ""
