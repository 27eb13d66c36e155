"""Fixtures shared by the T0 tests."""

from __future__ import annotations

import signal
import threading

import pytest

from tests.unit.bench_standin import Behaviour, StandIn


@pytest.fixture(scope="session", autouse=True)
def sigint_as_a_terminal_gives_it():
    """pytest started in the background of a script (`pytest ... &` without job control) inherits SIGINT ignored,
    and so would every build.py a test starts: a test that sends it SIGINT (Ctrl-C) would wait on a program that
    never sees it. Give SIGINT its default here, as a terminal's foreground job has it (children get SIG_DFL)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture
def standin():
    servers: list[StandIn] = []

    def make(**kw) -> StandIn:
        s = StandIn(Behaviour(**kw)).start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def bench_fakes(monkeypatch):
    """bench without Docker or SGLang: serving.run answered by fabricated bench_serving lines, the engine a
    FakeDocker whose server containers are stand-ins (tests/unit/bench_fakes.py)."""
    from tests.unit.bench_fakes import BenchFakes

    fakes = BenchFakes(monkeypatch)
    yield fakes
    fakes.close()


@pytest.fixture(autouse=True)
def image_plan_of_the_default_track(monkeypatch):
    """`bench --image` reads what it serves from the image's own plan.json (sm120.plan.image_plan, tested on real
    images in T2: the verify suite's test_plan.py). The T0 tests name images that do not exist and stand in for
    Docker: their image serves build.toml's default plan."""
    from sm120.bench import cmd_bench as bench
    from sm120.plan import resolve as planmod

    plan = planmod.load_plan()
    monkeypatch.setattr(bench, "read_image_plan", lambda image: plan)
