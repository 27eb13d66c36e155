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

from sm120 import config as cfg
from sm120 import patching, pypi
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

KIMI_SNIPPET = """
import torch.nn as nn
import sglang
from sglang.srt.models import kimi_k25

class StandInLanguageModel:
    '''Records the calls the EAGLE-3 code paths make on the DeepSeek-V3 language model.'''
    def __init__(self):
        self.calls = []
    def get_embed_and_head(self):
        self.calls.append(["get_embed_and_head"])
        return ("EMBED", "HEAD")
    def set_embed_and_head(self, embed, head):
        self.calls.append(["set_embed_and_head", embed, head])
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.calls.append(["set_eagle3_layers_to_capture", layer_ids])

cls = kimi_k25.KimiK25ForConditionalGeneration
model = cls.__new__(cls)          # no weights, no GPU: only the wrapper object
nn.Module.__init__(model)
lm = StandInLanguageModel()
model.language_model = lm
out = {"file": kimi_k25.__file__, "version": sglang.__version__}
try:
    got = model.get_embed_and_head()                      # eagle_worker.py
    model.set_embed_and_head("E2", "H2")                  # eagle_worker.py, draft model sharing
    model.set_eagle3_layers_to_capture([1, 29, 57])       # model_runner.py, positional layer ids
    model.set_eagle3_layers_to_capture()                  # cuda_graph_runner.py / model_runner.py, default
    out.update(ok=True, got=list(got), calls=lm.calls)
except AttributeError as exc:
    out.update(ok=False, error=str(exc))
emit(out)
"""


def assert_kimi_delegates(out: dict) -> None:
    """KIMI_SNIPPET's result: each hook reached the stand-in language model with its arguments, in order (also
    used by the image suite, tests/image/test_packages.py)."""
    assert out.get("ok"), f"KimiK25ForConditionalGeneration lacks the EAGLE-3 hooks: {out.get('error')}"
    assert out["got"] == ["EMBED", "HEAD"]
    assert out["calls"] == [
        ["get_embed_and_head"],
        ["set_embed_and_head", "E2", "H2"],
        ["set_eagle3_layers_to_capture", [1, 29, 57]],
        ["set_eagle3_layers_to_capture", None],
    ]


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

SYMM_SNIPPET = """
import logging, types
from unittest import mock
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm
import sglang
from sglang.srt.distributed.device_communicators import torch_symm_mem as m

MiB = 1024 * 1024
messages = []

class Collect(logging.Handler):
    def emit(self, record):
        messages.append(record.levelname + ": " + record.getMessage())

log = logging.getLogger(m.__name__)
log.addHandler(Collect())
log.setLevel(logging.INFO)

def scenario(cc, ws, *, p2p=True, multicast=0, same_index=False):
    '''Build the communicator as rank 0 of `ws` ranks on a GPU of capability `cc`, with the driver, the
    process group and torch's symmetric memory replaced by stand-ins (this machine has no GPU).'''
    messages.clear()
    calls = []
    def all_gather_object(out, obj, group=None):
        calls.append("all_gather_object")
        out[:] = [0] * ws if same_index else list(range(ws))
    def rendezvous(buffer, group_name):
        calls.append("rendezvous")
        return types.SimpleNamespace(multicast_ptr=multicast)
    def empty(n, device=None, dtype=None):
        return torch.zeros(n, dtype=dtype)
    def kernel(name):
        def run(buf, op, group_name):
            calls.append(name)
            buf.mul_(ws)  # every rank holds the same values: their sum is ws times them
        return run
    ops = types.SimpleNamespace(two_shot_all_reduce_=kernel("two_shot"), multimem_all_reduce_=kernel("multimem"))
    # 0.5.17+ reads the server's runtime context when sizing the Inkling buffer; there is no server here.
    exec_ctx = types.SimpleNamespace(comm=types.SimpleNamespace(enable_scattered_sconv=False))
    result = {}
    with mock.patch.object(m, "get_exec", lambda: exec_ctx, create=True), \\
         mock.patch.object(m, "torch_symm_mem_available", True), \\
         mock.patch.object(torch.cuda, "set_device", lambda d: None), \\
         mock.patch.object(torch.cuda, "get_device_capability", lambda d=None: (cc, 0)), \\
         mock.patch.object(torch.cuda, "can_device_access_peer", lambda a, b: p2p), \\
         mock.patch.object(dist, "get_world_size", lambda group=None: ws), \\
         mock.patch.object(dist, "all_gather_object", all_gather_object), \\
         mock.patch.object(symm, "empty", empty), \\
         mock.patch.object(symm, "rendezvous", rendezvous), \\
         mock.patch.object(torch.ops, "symm_mem", ops, create=True):
        try:
            comm = m.TorchSymmMemCommunicator(types.SimpleNamespace(group_name="tp"), torch.device("cuda:0"))
        except Exception as exc:
            return {"error": type(exc).__name__ + ": " + str(exc), "calls": calls, "log": list(messages)}
        result.update(disabled=comm.disabled, max_size=getattr(comm, "max_size", None))
        if not comm.disabled:
            comm.device = torch.device("cpu")  # the stand-in buffer lives on the CPU
            small = torch.full((4, 7168), 0.5, dtype=torch.bfloat16)
            big = torch.empty(comm.max_size // 2, dtype=torch.bfloat16)  # exactly max_size bytes
            result["small_takes_symm_mem"] = bool(comm.should_torch_symm_mem_allreduce(small))
            result["limit_sized_goes_to_nccl"] = not comm.should_torch_symm_mem_allreduce(big)
            out = comm.all_reduce(small)
            result["reduced_ok"] = bool(torch.all(out == 0.5 * ws))
    result.update(calls=calls, log=list(messages))
    return result

out = {"file": m.__file__, "version": sglang.__version__, "scenarios": {}}
cases = {
    "cc12_ws8_p2p": dict(cc=12, ws=8),
    "cc12_ws2_p2p": dict(cc=12, ws=2),
    "cc12_ws4_p2p": dict(cc=12, ws=4),
    "cc12_ws6_p2p": dict(cc=12, ws=6),
    "cc12_ws8_no_p2p": dict(cc=12, ws=8, p2p=False),
    "cc12_ws8_same_index": dict(cc=12, ws=8, same_index=True),
    "cc12_ws3": dict(cc=12, ws=3),
    "cc11_ws8": dict(cc=11, ws=8),
    "cc9_ws8_no_multicast": dict(cc=9, ws=8),
    "cc9_ws8_multicast": dict(cc=9, ws=8, multicast=0x1000),
}
for name, kwargs in cases.items():
    out["scenarios"][name] = scenario(**kwargs)
emit(out)
"""


# From 0.5.16 SGLang raises every TorchSymmMemCommunicator's buffer (any capability) to 512 MiB while
# SGLANG_OPT_USE_INKLING_CUSTOM_AR is on (its default) for the Inkling model's fused all-reduce kernels; that
# size, not the capability table, is then the limit. With the variable at 0 the table's limits hold.
INKLING_OFF = {"SGLANG_OPT_USE_INKLING_CUSTOM_AR": "0"}


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


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_published_releases_fail_on_capability_12(sglang_python: Path):
    """The premise: without the patch, 0.5.9 crashes and later releases turn the communicator off."""
    out = _symm(sglang_python, None)
    s = out["scenarios"]["cc12_ws8_p2p"]
    if Version(out["version"]) < Version("0.5.14"):
        assert s.get("error", "").startswith("KeyError: 12"), s
    else:
        assert s["disabled"] is True
        assert any("Device capability 12 not supported" in m for m in s["log"]), s
