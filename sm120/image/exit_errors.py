"""The two errors that the CLI and the patch engine turn into one line on stderr and an exit status."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user (a flag, build.toml, a version): exit status 2."""

    exit_code = 2


class CheckFailed(Exception):
    """A check or build that ran and failed (a patch conflict, a failed stage): exit status 1."""

    exit_code = 1
