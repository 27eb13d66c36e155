"""T1: the patch series against the real SGLang releases of the tracks (wheels from PyPI), and the behaviour of the
patched code in each track's own interpreter (sglang installed --no-deps, torch at the track's version, CPU only).

The behaviour tests run the same code on the patched tree and on the release as published: the published 0.5.9
must fail them, so they cannot pass by accident.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from sm120.patches import patching, pypi
from sm120.plan import config as cfg
from sm120.verify.behaviour import (
    BAD_MAX_SIZES,
    INKLING_OFF,
    KIMI_SNIPPET,
    MAX_SIZES_ENV,
    SYMM_SNIPPET,
    assert_kimi_delegates,
    assert_symm_sm120,
)
from tests.helpers import run_build_py
from tests.upstream import env as upstream_env

CONFIG = cfg.load()
TRACKS = sorted(CONFIG.tracks, key=Version)

# What `patches check` must say for the pinned tracks (the "done when").
EXPECTED = {
    "0.5.9": {"kimi-k25-eagle3-delegation": "applied", "torch-symm-mem-sm120": "applied"},
    "0.5.23": {"kimi-k25-eagle3-delegation": "already upstream", "torch-symm-mem-sm120": "applied"},
}

SYMM_MEM = "sglang/srt/distributed/device_communicators/torch_symm_mem.py"
KIMI = "sglang/srt/models/kimi_k25.py"


def statuses(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        name, _, rest = line.partition(": ")
        if line.startswith("sglang "):  # a conflict line: "sglang V: NAME: conflict: ..."
            name, _, rest = rest.partition(": ")
        out[name] = rest.split(" (")[0].split(":")[0]
    return out


@pytest.mark.parametrize("version", TRACKS)
def test_check_on_the_pinned_track(version: str):
    proc = run_build_py("patches", "check", "--sglang", version)
    assert proc.returncode == 0, proc.stderr
    found = statuses(proc.stdout)
    sglang_patches = [n for n in CONFIG.tracks[version].patches if CONFIG.patches[n].component == "sglang"]
    assert sorted(found) == sorted(sglang_patches)
    if version in EXPECTED:
        assert found == EXPECTED[version]
    assert "conflict" not in found.values()


@pytest.mark.parametrize("version", TRACKS)
def test_patched_tree_carries_every_change_and_apply_is_idempotent(version: str, patched_tree, tmp_path: Path):
    tree = patched_tree(version)
    # The entrypoint decides `requires_patch` rules with these checks on the installed files: they must hold.
    for name in CONFIG.tracks[version].patches:
        patch = CONFIG.patches[name]
        if patch.component == "sglang":
            assert patching.upstream_has(patch, tree), f"{name}: its upstream_check fails on the patched tree"
    # Apply again, in place (what a second Docker build step would do): nothing applied twice.
    proc = run_build_py("patches", "apply", "--sglang", version, "--source", str(tree), "--dest", str(tree))
    assert proc.returncode == 0, proc.stderr
    assert set(statuses(proc.stdout).values()) <= {"already applied", "already upstream"}


@pytest.mark.parametrize("version", TRACKS)
def test_apply_in_place_on_a_pip_installed_tree_like_the_docker_build(version: str, tmp_path: Path):
    """What the image's `patched` stage does: pip installs the release, then patches site-packages in place."""
    site = tmp_path / "site-packages"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), f"sglang=={version}"]
    subprocess.run(pip, check=True)
    before = (site / KIMI).read_text()
    proc = run_build_py("patches", "apply", "--sglang", version, "--source", str(site), "--dest", str(site))
    assert proc.returncode == 0, proc.stderr
    assert statuses(proc.stdout) == EXPECTED.get(version, statuses(proc.stdout))
    changed = (site / KIMI).read_text() != before
    assert changed == (EXPECTED.get(version, {}).get("kimi-k25-eagle3-delegation") == "applied")
    assert "can_device_access_peer" in (site / SYMM_MEM).read_text()


def test_unpatched_releases_lack_the_changes():
    tree_059 = pypi.source_tree("0.5.9")
    tree_0523 = pypi.source_tree("0.5.23")
    kimi, symm = CONFIG.patches["kimi-k25-eagle3-delegation"], CONFIG.patches["torch-symm-mem-sm120"]
    assert not patching.upstream_has(kimi, tree_059)
    assert patching.upstream_has(kimi, tree_0523)
    assert not patching.upstream_has(symm, tree_059)
    assert not patching.upstream_has(symm, tree_0523)


def test_a_release_missing_from_pypi():
    proc = run_build_py("patches", "check", "--sglang", "0.5.999")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "sglang 0.5.999 is not on PyPI (newest final release:" in line


# ---------------------------------------------------------------------------------------------------
# Behaviour: kimi_k25 delegation
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sglang_python, version", [(v, v) for v in TRACKS], indirect=["sglang_python"])
def test_kimi_k25_delegates_the_eagle3_hooks(sglang_python: Path, version: str, patched_tree):
    tree = patched_tree(version)
    out = upstream_env.run_snippet(sglang_python, KIMI_SNIPPET, pythonpath=[tree])
    assert Path(out["file"]).is_relative_to(tree), "the venv's own sglang was imported, not the patched tree"
    assert out["version"] == version
    assert_kimi_delegates(out)


@pytest.mark.parametrize("sglang_python", ["0.5.9"], indirect=True)
def test_unpatched_0_5_9_kimi_k25_lacks_the_hooks(sglang_python: Path):
    out = upstream_env.run_snippet(sglang_python, KIMI_SNIPPET)
    assert out["version"] == "0.5.9"
    assert not out["ok"]
    assert "get_embed_and_head" in out["error"]


# ---------------------------------------------------------------------------------------------------
# Behaviour: torch symmetric memory on capability 12
# ---------------------------------------------------------------------------------------------------


@functools.cache
def _symm(python: Path, tree: Path | None, inkling_off: bool = True) -> dict:
    return upstream_env.run_snippet(
        python, SYMM_SNIPPET, pythonpath=[tree] if tree else [], env=INKLING_OFF if inkling_off else {}
    )


@pytest.mark.parametrize("sglang_python, version", [(v, v) for v in TRACKS], indirect=["sglang_python"])
class TestPatchedSymmMem:
    """What the torch-symm-mem-sm120 header promises, on the patched code of each track."""

    @pytest.fixture
    def run(self, sglang_python: Path, version: str, patched_tree) -> dict:
        tree = patched_tree(version)
        out = _symm(sglang_python, tree)
        assert Path(out["file"]).is_relative_to(tree)
        assert out["version"] == version
        return out["scenarios"]

    def test_with_the_inkling_default_the_buffer_is_upstreams_512_mib(self, sglang_python, version, patched_tree):
        s = _symm(sglang_python, patched_tree(version), inkling_off=False)["scenarios"]["cc12_ws8_p2p"]
        expected = 512 * 2**20 if Version(version) >= Version("0.5.16") else 8 * 2**20
        assert (s["disabled"], s["max_size"]) == (False, expected)
        assert s["calls"][-1] == "two_shot"

    def test_the_image_suites_check_passes(self, run):
        assert_symm_sm120({"scenarios": run})  # what `build.py verify` asserts in the image

    def test_capability_12_with_p2p_runs_two_shot_below_the_limit(self, run):
        s = run["cc12_ws8_p2p"]
        assert "error" not in s, s
        assert s["disabled"] is False
        assert s["max_size"] == 8 * 2**20
        assert s["small_takes_symm_mem"] and s["limit_sized_goes_to_nccl"]
        assert s["reduced_ok"]
        assert s["calls"] == ["all_gather_object", "rendezvous", "two_shot"]
        assert any(
            "two-shot all-reduce (capability 12, world size 8, multicast not available) below 8 MiB, NCCL above" in m
            for m in s["log"]
        ), s["log"]

    @pytest.mark.parametrize("ws, mib", [(2, 16), (4, 16), (6, 8)])
    def test_capability_12_limits_for_every_world_size(self, run, ws: int, mib: int):
        s = run[f"cc12_ws{ws}_p2p"]
        assert (s["disabled"], s["max_size"]) == (False, mib * 2**20)
        assert s["calls"][-1] == "two_shot"

    @pytest.mark.parametrize("case", ["cc12_ws8_no_p2p", "cc12_ws8_same_index"])
    def test_without_p2p_it_is_off_before_rendezvous_with_a_clear_line(self, run, case: str):
        s = run[case]
        assert s["disabled"] is True
        assert "rendezvous" not in s["calls"]
        assert any(
            m.startswith("WARNING") and "no peer-to-peer access" in m and "falls back to NCCL" in m for m in s["log"]
        ), s["log"]

    def test_unknown_world_size_and_capability_are_refused_not_raised(self, run):
        assert run["cc12_ws3"]["disabled"] is True
        assert any("World size 3 not supported" in m for m in run["cc12_ws3"]["log"])
        assert run["cc11_ws8"]["disabled"] is True
        assert any("Device capability 11 not supported" in m for m in run["cc11_ws8"]["log"])

    def test_multimem_still_needs_multicast(self, run):
        off = run["cc9_ws8_no_multicast"]
        assert off["disabled"] is True
        assert any("multicast operations are not supported" in m for m in off["log"])
        on = run["cc9_ws8_multicast"]
        assert on["disabled"] is False
        assert on["calls"][-1] == "multimem"

    # SM120_SYMM_MEM_MAX_SIZES: the per-world-size limit without a rebuild

    def test_the_limit_override_is_honoured_for_its_world_size(self, run):
        s = run["cc12_ws2_override"]
        assert "error" not in s, s
        assert (s["disabled"], s["max_size"]) == (False, 512 * 2**10)
        assert s["small_takes_symm_mem"] and s["limit_sized_goes_to_nccl"]  # 56 KiB below it, 512 KiB not
        assert s["calls"] == ["all_gather_object", "rendezvous", "two_shot"] and s["reduced_ok"]
        line = f"limit for world size 2 set to 512 KiB by {MAX_SIZES_ENV} (built-in: 16 MiB)."
        assert f"INFO: TorchSymmMemCommunicator: {line}" in s["log"], s["log"]
        assert any("world size 2, multicast not available) below 512 KiB, NCCL above" in m for m in s["log"]), s["log"]

    def test_the_override_lists_world_sizes_and_leaves_the_others_alone(self, run):
        listed = run["cc12_ws8_override_list"]
        assert (listed["disabled"], listed["max_size"]) == (False, 32 * 2**20)
        other = run["cc12_ws4_override_other"]
        assert (other["disabled"], other["max_size"]) == (False, 16 * 2**20)
        assert (
            f"INFO: TorchSymmMemCommunicator: {MAX_SIZES_ENV} has no entry for world size 4; built-in limit 16 MiB."
            in other["log"]
        )
        assert not any(m.startswith("WARNING") for m in other["log"])

    def test_the_override_applies_on_any_capability(self, run):
        s = run["cc9_ws2_override"]
        assert (s["disabled"], s["max_size"]) == (False, 4 * 2**20)
        assert s["calls"][-1] == "two_shot"

    @pytest.mark.parametrize("name", sorted(BAD_MAX_SIZES))
    def test_a_bad_override_falls_back_to_the_built_in_limit_with_a_warning(self, run, name: str):
        s = run[f"cc12_ws8_bad_{name}"]
        assert "error" not in s, s
        assert (s["disabled"], s["max_size"]) == (False, 8 * 2**20)
        (warning,) = [m for m in s["log"] if m.startswith("WARNING")]
        assert f"{MAX_SIZES_ENV}={BAD_MAX_SIZES[name]!r} is not WS:SIZE[,WS:SIZE...]" in warning
        assert "SIZE from 4KiB to 512MiB" in warning
        assert warning.endswith("keeping the built-in limit of 8 MiB for world size 8.")
        assert s["calls"][-1] == "two_shot"  # still on, at the built-in limit


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_published_releases_fail_on_capability_12(sglang_python: Path):
    """The premise: without the patch, 0.5.9 crashes and later releases turn the communicator off."""
    out = _symm(sglang_python, None)
    with pytest.raises(AssertionError):  # the image suite's check (verify) fails on the published release too
        assert_symm_sm120(out)
    # the override is the patch's: the published code keeps capability 9's 64 MiB at 2 ranks
    assert out["scenarios"]["cc9_ws2_override"]["max_size"] == 64 * 2**20
    s = out["scenarios"]["cc12_ws8_p2p"]
    if Version(out["version"]) < Version("0.5.14"):
        assert s.get("error", "").startswith("KeyError: 12"), s
    else:
        assert s["disabled"] is True
        assert any("Device capability 12 not supported" in m for m in s["log"]), s
