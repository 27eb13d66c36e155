"""T2: `build.py verify` itself. It passes on the image named by SM120_IMAGE (printing sm_120 for each kernel library),
fails, naming the check, on images derived from it that break one rule each (one small layer, loaded here and
removed), stops and cleans up on Ctrl-C, and refuses bad input with exit 2.

    SM120_IMAGE=sglang-sm120:0.5.9-cu13.0.1-offline pytest -m image tests/image_meta
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sm120.patches import patching, pypi
from sm120.plan import config as cfg
from sm120.plan import labels
from sm120.verify import docker_env, report
from tests.helpers import ROOT, run_build_py
from tests.image_meta.derive import IMAGE, needs_image

pytestmark = [pytest.mark.image, pytest.mark.docker]


def _of(dc, image: str) -> list[dict]:
    """The verify containers of `image` (another image's verify may run beside: ./dev test's T2 lanes)."""
    image_id = dc.images.get(image).id
    return [c for c in docker_env.run_containers(dc) if c.get("ImageID") == image_id]


def leftover(dc, image: str) -> list[str]:
    return [(c.get("Names") or [c["Id"]])[0] for c in _of(dc, image)]


@needs_image
def test_verify_passes_on_the_image(dc, tmp_path: Path):
    junit = tmp_path / "junit.xml"
    started = time.monotonic()
    proc = run_build_py("verify", "--image", IMAGE, "--junit", str(junit))
    took = time.monotonic() - started
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert re.search(r"\b\d+ passed\b", proc.stdout), proc.stdout[-1500:]
    assert " failed" not in proc.stdout.splitlines()[-1]
    expect = labels.parse(dc.images.get(IMAGE).labels)
    # One line per kernel library, with the archs it carries: flash-attn's with the labelled arch, sgl-kernel's
    # with its arch-specific variant.
    lines = re.findall(r"^(\S+): (sm_\d+[a-z]?(?:, sm_\d+[a-z]?)*)$", proc.stdout, re.MULTILINE)
    by_lib = {lib: archs.split(", ") for lib, archs in lines}
    assert by_lib.get("flash_attn_2_cuda") and expect.flash_attn_archs[0] in by_lib["flash_attn_2_cuda"], by_lib
    assert any(lib.startswith("sgl_kernel/") and expect.sgl_kernel_required[0] in a for lib, a in by_lib.items())
    assert "package" in proc.stdout and expect.torch in proc.stdout  # the table
    outcome = report.junit_outcome(junit)
    assert outcome is not None and outcome.tests > 20 and not outcome.failed
    assert not leftover(dc, IMAGE)
    print(f"verify on {IMAGE}: {took:.0f} s")


# One rule broken per image: (the change, as `derive` keywords, the -k selection, the check to name). `USER root`
# is the configuration's User; a static CUDA library is one file added (what `COPY` would have committed).
# (A world-writable file is caught the same way; it is left out here to keep `./dev test` short: each case is one
# more `build.py verify` run.)
BROKEN = {
    "root-user": (
        {"config": {"User": "root"}},
        "test_runs_as",
        "test_hygiene::test_runs_as_the_labelled_non_root_user",
    ),
    "static-library": (
        {"add": {"/usr/local/cuda/lib64/libcublas_static.a": (b"!<arch>\n", 0o644)}},
        "test_no_devel_only_parts or test_runs_as",
        "test_jit::test_no_devel_only_parts",
    ),
}


@needs_image
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_verify_fails_naming_the_broken_check(case: str, dc, derived):
    change, select, check = BROKEN[case]
    tag = derived(IMAGE, **change)
    proc = run_build_py("verify", "--image", tag, "-k", select)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("build.py verify: failed: ") and check in last, last
    assert "Traceback" not in proc.stderr
    assert not leftover(dc, tag)


@needs_image
def test_verify_fails_when_a_patch_is_not_in_force(dc, derived):
    """The published 0.5.9 kimi_k25.py put back over the patched one: the behaviour check must catch it."""
    expect = labels.parse(dc.images.get(IMAGE).labels)
    if "kimi-k25-eagle3-delegation" not in {p.name for p in expect.patches}:
        pytest.skip("the image does not carry the kimi-k25-eagle3-delegation patch")
    published = pypi.source_tree(expect.sglang) / "sglang" / "srt" / "models" / "kimi_k25.py"
    if patching.upstream_has(cfg.load().patches["kimi-k25-eagle3-delegation"], published.parents[3]):
        pytest.skip(f"SGLang {expect.sglang} has the delegation upstream: there is no unpatched file to put back")
    site = f"/opt/venv/lib/python{expect.python}/site-packages"
    tag = derived(IMAGE, add={f"{site}/sglang/srt/models/kimi_k25.py": (published.read_bytes(), 0o644)})
    proc = run_build_py("verify", "--image", tag, "-k", "test_patch_is_in_force")
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "test_packages::test_patch_is_in_force[kimi-k25-eagle3-delegation]" in last, last
    assert "torch-symm-mem-sm120" not in last, last
    assert not leftover(dc, tag)


def _children(pid: int) -> list[int]:
    """The child processes of `pid` (pytest, for verify: in a process group of its own, not in verify's)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


STOPS = [
    ("ctrl-c", "group", signal.SIGINT, 130, "interrupted"),
    ("sigterm", "verify", signal.SIGTERM, 143, "terminated (SIGTERM)"),
]


@needs_image
@pytest.mark.parametrize(("to", "signum", "code", "says"), [c[1:] for c in STOPS], ids=[c[0] for c in STOPS])
def test_ctrl_c_stops_the_run_and_removes_its_containers(dc, to, signum, code, says):
    """The signal comes once the suite's first container runs (an event the engine reports; any phase must do):
    Ctrl-C to the whole foreground group, SIGTERM (a CI runner cancelling) to verify alone. verify ends within
    seconds (its grace for pytest's teardown is runner.GRACE_S), leaving no container and no pytest behind."""
    before = {c["Id"] for c in _of(dc, IMAGE)}  # another run's: not this one's event
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "build.py"), "verify", "--image", IMAGE],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    children: list[int] = []
    try:
        deadline = time.monotonic() + 300
        ours: list[dict] = []
        while not ours and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            ours = [c for c in _of(dc, IMAGE) if c["Id"] not in before and c.get("State") == "running"]
        assert ours, f"verify started no container (exit {proc.poll()})"
        children = _children(proc.pid)
        if to == "group":
            os.killpg(proc.pid, signum)  # what Ctrl-C does: the whole foreground group
        else:
            proc.send_signal(signum)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for child in children:  # pytest's own group, when verify did not end it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child, signal.SIGKILL)
    assert proc.returncode == code, err[-1500:]
    assert err.strip().splitlines()[-1] == f"build.py verify: {says}"
    left = [c for c in _of(dc, IMAGE) if c["Id"] not in before]
    assert not left, f"left after the signal: {[c.get('Names') for c in left]}"
    assert not [c for c in children if _running(c)], "pytest outlived verify"


def test_no_such_image_is_exit_2_in_one_line(dc):
    proc = run_build_py("verify", "--image", f"sm120-no-such-image:{uuid.uuid4().hex[:8]}")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "no image 'sm120-no-such-image:" in line and "docker images" in line


def test_an_image_without_the_projects_labels_is_exit_2(dc, derived):
    tag = derived(None, config={"Labels": {"org.example.purpose": "sm120-verify-test"}})
    proc = run_build_py("verify", "--image", tag)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"lacks the labels {labels.namespace()}." in line and "build.py build" in line
