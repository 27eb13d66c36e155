"""Fixtures of every suite."""

from __future__ import annotations

import signal
import threading

import pytest


@pytest.fixture(scope="session", autouse=True)
def signals_as_a_terminal_gives_them():
    """pytest started in the background of a script (`pytest ... &` without job control) inherits SIGINT ignored,
    and so would every build.py a test starts: a test that sends it SIGINT (Ctrl-C) would wait on a program that
    never sees it. Give SIGINT its default here, as a terminal's foreground job has it (children get SIG_DFL).
    SIGTERM (how ./dev test stops a background T2 lane) stops the session as Ctrl-C does: fixtures torn down, so no
    container or derived image outlives it."""
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    yield
