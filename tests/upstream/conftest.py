"""T1 fixtures: the real SGLang releases of the tracks in build.toml, in cached CPU-only venvs.

    @pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
    def test_something(sglang_python):            # a Path to that release's python executable
        out = run_snippet(sglang_python, "import sglang; emit(sglang.__version__)")

The track list comes from build.toml (`sorted(sm120.plan.config.load().tracks, key=Version)`); `run_snippet`
is `tests.upstream.env.run_snippet` (also offered as a fixture).
Every test collected under tests/upstream is marked `upstream` (T1) automatically.
The first run builds each venv (minutes, a few GiB each, under ~/.cache/sglang-sm120/upstream); later
runs reuse them.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from packaging.version import Version

from sm120.plan import config as cfg
from tests.helpers import run_build_py
from tests.upstream import env as upstream_env

TRACKS: list[str] = sorted(cfg.load().tracks, key=Version)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sglang-track",
        metavar="VERSION",
        help="run only the tests parametrized with this track (what `build.py track check VERSION` runs)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.upstream)
    track = config.getoption("sglang_track", default=None)
    if track is None:
        return
    if track not in TRACKS:
        raise pytest.UsageError(f"--sglang-track {track}: not a track of build.toml ({', '.join(TRACKS)})")
    # A test belongs to the track when one of its parameters is that version (sglang_python, version, a case's
    # track); tests of no track or of several fixed releases are left out.
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (keep if here in item.path.parents and track in params.values() else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def sglang_python(request: pytest.FixtureRequest) -> Path:
    """The python executable of the cached venv for SGLang `request.param` (default: defaults.sglang)."""
    version = getattr(request, "param", None) or cfg.load().defaults.sglang
    try:
        return upstream_env.ensure(version)
    except (upstream_env.UpstreamEnvError, upstream_env.UsageError) as exc:
        pytest.fail(f"T1 environment for sglang {version}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def run_snippet():
    """`run_snippet(python, code, **kw)`: run code in an upstream interpreter, return what it emit()ted."""
    return upstream_env.run_snippet


@pytest.fixture(scope="session")
def patched_tree(tmp_path_factory: pytest.TempPathFactory):
    """patched_tree(version): `build.py patches apply --sglang V --dest DIR` from PyPI's wheel (what the image build
    runs), made once per session for every test that needs it."""

    @functools.cache
    def make(version: str) -> Path:
        dest = tmp_path_factory.mktemp(f"patched-{version}") / "site-packages"
        proc = run_build_py("patches", "apply", "--sglang", version, "--dest", str(dest))
        assert proc.returncode == 0, proc.stderr
        return dest

    return make
