"""Fixtures shared by the tests of the verifier (T2)."""

from __future__ import annotations

import pytest

from tests.helpers import docker_or_skip


@pytest.fixture(scope="module")
def dc():
    return docker_or_skip()
