"""Errors that the CLI turns into one line on stderr and an exit status, never a traceback, and its suggestions.

UsageError and CheckFailed are defined in sm120/image/exit_errors.py (the one module the patch engine imports, which the
image build copies); this module is the CLI side, never copied into the image, so editing it re-runs no stage.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from sm120.image.exit_errors import CheckFailed as CheckFailed
from sm120.image.exit_errors import UsageError as UsageError


def suggest(name: object, allowed: Iterable[str]) -> str:
    """'; perhaps you meant X' for the closest allowed name (as cibuildwheel does), or ''. The one spelling of it
    for build.py (build.toml, the CLI's choices, bench); the image's entrypoint, standard library only, has its own."""
    close = difflib.get_close_matches(str(name), list(allowed), n=1, cutoff=0.6)
    return f"; perhaps you meant {close[0]!r}" if close else ""


def missing_package(exc: ModuleNotFoundError) -> str:
    """What to say when a third-party package is missing (build.py run by a Python without requirements.txt)."""
    return (
        f"needs the Python package {str(exc.name).split('.')[0]!r}, which this interpreter lacks: "
        "run ./dev setup (or pip install -r requirements.txt)"
    )


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI runner cancelling the job, `docker stop` of a wrapper): handled as Ctrl-C is, exit 143. The CLI
    prints `what` (the class's, or a command's subclass's) and exits with `exit_code`."""

    exit_code = 143
    what = "terminated (SIGTERM)"
