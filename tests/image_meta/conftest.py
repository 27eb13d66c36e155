"""Fixtures shared by the tests of the verifier (T2)."""

from __future__ import annotations

import pytest

from sm120.verify import docker_env


@pytest.fixture(scope="module")
def dc():
    try:
        return docker_env.client()
    except docker_env.DockerUnavailable as exc:
        pytest.skip(str(exc))
