"""Fixtures shared by the tests of the verifier (T2)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.helpers import docker_or_skip
from tests.image_meta.derive import Files, derive, followed


@pytest.fixture(scope="module")
def dc():
    return docker_or_skip()


@pytest.fixture
def derived(dc) -> Iterator:
    """derived(base, add={path: (bytes, mode)}, remove=[paths], config={key: value}) -> the tag of `base` (None:
    scratch) plus that one layer and configuration (tests/image_meta/derive.py: `docker load`, well under a
    second, nothing committed; the added files' directories resolved in the image first, see `followed`); the
    tags are removed after the test."""
    made: list[str] = []

    def make(base: str | None, add: Files | None = None, **change) -> str:
        if base and add:
            add = followed(dc, base, add)
        tag = derive(dc, base, f"sm120-verify-test:{uuid.uuid4().hex[:10]}", add=add, **change)
        made.append(tag)
        return tag

    yield make
    for tag in made:
        dc.images.remove(tag, force=True)
