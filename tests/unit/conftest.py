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


@pytest.fixture(autouse=True)
def image_plan_of_the_default_track(monkeypatch):
    """`bench --image` reads what it serves from the image's own plan.json (sm120.image_plan, tested on real images in
    T2: tests/unit/test_bench_docker.py, the suite's test_plan.py). The T0 tests name images that do not exist and
    stand in for Docker: their image serves build.toml's default plan."""
    from sm120 import plan as planmod
    from sm120.commands import bench

    plan = planmod.load_plan()
    monkeypatch.setattr(bench, "read_image_plan", lambda image: plan)
