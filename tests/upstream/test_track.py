"""T1: `build.py track add` on PyPI's real metadata reproduces today's 0.5.23 track, and `build.py track check` runs
that track's T1 checks.

The reference is build.toml's own [tracks."0.5.23"], written by hand before the command existed: from a build.toml
copy without it, `track add 0.5.23` must derive the same value for every key it derives (track_facts.DERIVED). It
reads the sglang wheel (the one `patches check` reads, cached), torch's METADATA and ATen.h and the kernel wheel's
compiled libraries by range requests (about 45 MB of sglang-kernel 0.4.10's 373 MB, cached).

`track check` runs the tests of this directory selected for the track (`--sglang-track`), which this same T1 run
also runs in full: here the command is run end to end with a `-k` selection of two of them (its patches check
first, then pytest with the selection); the whole `track check 0.5.23` is run by hand (docs/ci.md gives the time).
These tests are parametrized with no track, so `--sglang-track` never selects them (no recursion).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sm120.plan import config as cfg
from sm120.track import facts as track_facts
from tests.helpers import ROOT, run_build_py, without_track, write_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REFERENCE = "0.5.23"  # the track whose stanza `track add` must reproduce (the "done when")
CONFIG = cfg.load()


def get(data: dict, path: tuple[str, ...]):
    for key in path:
        data = data[key]
    return data


def test_track_add_reproduces_the_0_5_23_track_from_pypi(tmp_path: Path):
    assert REFERENCE in CONFIG.tracks, f"build.toml has no [tracks.{REFERENCE!r}] to compare with"
    copy = write_config(tmp_path, edit=lambda text: without_track(text, REFERENCE))
    assert REFERENCE not in cfg.load(copy).tracks
    proc = run_build_py("track", "add", REFERENCE, "--dry-run", "--config", str(copy))
    assert proc.returncode == 0, proc.stderr[-3000:]
    stanza = tomllib.loads(proc.stdout)["tracks"][REFERENCE]
    mine = tomllib.loads((ROOT / "build.toml").read_text())["tracks"][REFERENCE]
    differ = {
        path: (get(stanza, path), get(mine, path))
        for path in track_facts.DERIVED
        if get(stanza, path) != get(mine, path)
    }
    assert not differ, f"track add read other facts than build.toml holds (read, build.toml): {differ}"
    assert "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl: DT_NEEDED libcudart.so.13" in proc.stdout

    # Written for real, the copy loads and plans the track as build.toml's own does, for both profiles.
    proc = run_build_py("track", "add", REFERENCE, "--config", str(copy))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for profile in ("offline", "release"):
        got = run_build_py("plan", "--config", str(copy), "--sglang", REFERENCE, "--profile", profile, "--json")
        want = run_build_py("plan", "--sglang", REFERENCE, "--profile", profile, "--json")
        assert got.returncode == 0 and want.returncode == 0, got.stderr + want.stderr
        ours, theirs = json.loads(got.stdout), json.loads(want.stdout)
        for key in ("torch_version", "torch_cuda", "sgl_kernel", "flashinfer_version", "sglang_version", "patches"):
            assert ours[key] == theirs[key], (profile, key)


def test_track_check_runs_the_tracks_t1_checks():
    select = "test_check_on_the_pinned_track or test_the_installed_option_list_is_read_from_server_args"
    proc = run_build_py("track", "check", REFERENCE, "-k", select)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "torch-symm-mem-sm120: applied" in proc.stdout, "the patches check ran first"
    assert "2 passed" in proc.stdout and f"track check {REFERENCE}: passed" in proc.stderr
    bad = run_build_py("track", "check", "0.5.8")
    assert bad.returncode == 2 and "no track for SGLang '0.5.8'" in bad.stderr


def test_sglang_track_selects_exactly_that_tracks_tests():
    def collect(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pytest", "tests/upstream", "--collect-only", "-q", "-p", "no:cacheprovider"]
        return subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, check=False)

    every = [line for line in collect().stdout.splitlines() if "::" in line]
    for track in CONFIG.tracks:
        proc = collect(f"--sglang-track={track}")
        assert proc.returncode == 0, proc.stderr
        chosen = [line for line in proc.stdout.splitlines() if "::" in line]
        mine = [t for t in every if f"[{track}" in t or f"-{track}]" in t or f"-{track}-" in t]
        assert chosen and sorted(chosen) == sorted(mine), track
        assert not any("test_track.py" in t for t in chosen)
    proc = collect("--sglang-track=0.5.8")
    assert proc.returncode == 4 and "--sglang-track 0.5.8: not a track of build.toml" in proc.stderr
