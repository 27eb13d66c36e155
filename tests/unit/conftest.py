"""Fixtures shared by the T0 tests."""

from __future__ import annotations

import pytest

from tests.unit.bench_standin import Behaviour, StandIn


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
