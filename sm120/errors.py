"""Errors that the CLI turns into one line on stderr and an exit status, never a traceback, and its suggestions.
UsageError and CheckFailed live in sm120/image/exit_errors.py (the image build copies it, not this module)."""

from __future__ import annotations

import contextlib
import difflib
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from sm120.image.exit_errors import CheckFailed as CheckFailed
from sm120.image.exit_errors import UsageError as UsageError


def suggest(name: object, allowed: Iterable[str]) -> str:
    """'; perhaps you meant X' for the closest allowed name (as cibuildwheel does), or ''. The one spelling of it
    for build.py (build.toml, the CLI's choices, bench); the image's entrypoint, standard library only, has its own."""
    close = difflib.get_close_matches(str(name), list(allowed), n=1, cutoff=0.6)
    return f"; perhaps you meant {close[0]!r}" if close else ""


def say(message: str) -> None:
    """A progress line on stderr, where it never mixes with a command's output."""
    print(message, file=sys.stderr, flush=True)


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


HELD_SIGNALS = 3  # while a held step runs (containers being removed), the signal that leaves at once


def _interruption(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


class _Signals:
    """SIGINT and SIGTERM raise at once, or inside `held()` (a block never left half done: containers being removed,
    pytest being started) when the block ends; the HELD_SIGNALS-th signal while held is raised at once."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: list[int] = []

    def handle(self, signum: int, frame: Any) -> None:
        if self.depth and len(self.pending) < HELD_SIGNALS - 1:
            self.pending.append(signum)
            return
        self.pending.clear()
        raise _interruption(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            pending, self.pending = (self.pending, []) if not self.depth else ([], self.pending)
        if pending:
            raise _interruption(pending[0])


SIGNALS = _Signals()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM handled by SIGNALS while the block runs (in the main thread; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, SIGNALS.handle) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
