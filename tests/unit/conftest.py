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
