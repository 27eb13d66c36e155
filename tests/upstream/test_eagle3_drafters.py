"""T1: build.toml's [eagle3_drafters] facts hold on the real SGLang releases from PyPI (read from the wheels'
sources with the entrypoint's own registry reader, as the image's entrypoint reads its installed SGLang):

- the release named `since` registers the class, and the final release before it does not;
- every track from `since` registers it (what the entrypoint's error names), every track before does not.
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from sm120.image.entrypoint import sglang_source
from sm120.patches import pypi
from sm120.patches.cmd_patches import MATRIX_FLOOR
from sm120.plan import config as cfg
from sm120.plan.resolve import resolve

CONFIG = cfg.load()
DRAFTERS = sorted(CONFIG.eagle3_drafters)


def registered(version: str) -> sglang_source.InstalledSGLang:
    return sglang_source.InstalledSGLang(pypi.source_tree(version) / "sglang")


def _previous_final(version: str) -> str:
    older = [v for v in pypi.final_releases(MATRIX_FLOOR) if Version(v) < Version(version)]
    assert older, f"no final release before {version} on PyPI"
    return older[-1]


@pytest.mark.parametrize("name", DRAFTERS)
def test_since_is_the_first_release_with_the_class(name: str):
    since = CONFIG.eagle3_drafters[name].since
    assert registered(since).registered(name), f"sglang {since} does not register {name}"
    before = _previous_final(since)
    assert not registered(before).registered(name), f"sglang {before} already registers {name}: move `since`"


# One case per track, so that `build.py track check VERSION` (pytest --sglang-track) runs it for that track.
@pytest.mark.parametrize("version", sorted(CONFIG.tracks, key=Version))
@pytest.mark.parametrize("name", DRAFTERS)
def test_the_tracks_named_in_the_error_have_the_class(name: str, version: str):
    spec = resolve(CONFIG, profile="offline", sglang=version).entrypoint
    has = registered(version).registered(name)
    assert has == (version in spec.drafters[name].tracks), (version, name)
