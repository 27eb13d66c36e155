"""The two errors that the CLI turns into one line on stderr and an exit status, never a traceback.

Standard library only and nothing else in it: the patch engine (sm120/image/patch_engine.py) imports it, and the
Dockerfile's `patched` stage copies exactly the engine and this file, so only an edit here or in the engine re-runs
that stage. The CLI imports both through sm120/errors.py, which also holds what only the CLI needs.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user (a flag, build.toml, a version): exit status 2."""

    exit_code = 2


class CheckFailed(Exception):
    """A check or build that ran and failed (a patch conflict, a failed stage): exit status 1."""

    exit_code = 1
