"""T2: the offline bases have the shape of the release bases (docker/base/release-facts.toml), fact by fact.

A fact the offline bases cannot reproduce is skipped with the file's reason, never passed. The bases are the
offline profile's (made by `build.py base`, which `./dev test` runs before the image build).
"""

from __future__ import annotations

import pytest

from sm120.build import base_facts
from sm120.plan import config as cfg
from tests.helpers import ROOT

pytestmark = [pytest.mark.image, pytest.mark.docker]
CONFIG = cfg.load(ROOT / "build.toml")
OFFLINE = next(p for p in CONFIG.profiles.values() if p.bases == "local")
IMAGES = {"devel": OFFLINE.base_image, "runtime": OFFLINE.runtime_base_image}
FACTS = base_facts.load(CONFIG)
CASES = [(flavour, fact) for fact in FACTS for flavour in fact.images]


@pytest.fixture(scope="module")
def outcomes(dc) -> dict[tuple[str, str], base_facts.Outcome]:
    found = {}
    for flavour, image in IMAGES.items():
        try:
            dc.images.get(image)
        except Exception:
            pytest.fail(f"{image} is missing: run `python3 build.py base` (./dev test does)", pytrace=False)
        for outcome in base_facts.check(dc, image, flavour, FACTS):
            found[(flavour, outcome.fact.id)] = outcome
    return found


@pytest.mark.parametrize(("flavour", "fact"), CASES, ids=[f"{flavour}-{fact.id}" for flavour, fact in CASES])
def test_offline_base_has_the_release_fact(outcomes, flavour: str, fact: base_facts.Fact):
    outcome = outcomes[(flavour, fact.id)]
    if outcome.status == "not reproduced":
        pytest.skip(f"not reproducible offline: {outcome.detail}")
    assert outcome.status == "held", f"{IMAGES[flavour]}: {fact.id}: found {outcome.detail}; {fact.why} ({fact.source})"
