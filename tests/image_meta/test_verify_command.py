"""T2: `build.py verify` itself. It passes on the image named by SM120_IMAGE (printing sm_120 for each kernel library),
fails, naming the check, on images derived from it that break one rule each (one small layer, loaded here and
removed), stops and cleans up on Ctrl-C, and refuses bad input with exit 2.

    SM120_IMAGE=sglang-sm120:0.5.9-cu13.0.1-offline pytest -m image tests/image_meta
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sm120 import config as cfg
from sm120 import labels, patching, pypi
from sm120.verify import docker_env, report
from tests.helpers import ROOT, run_build_py
from tests.image_meta.derive import IMAGE, needs_image

pytestmark = [pytest.mark.image, pytest.mark.docker]


def leftover(dc) -> list[str]:
    return [(c.get("Names") or [c["Id"]])[0] for c in docker_env.run_containers(dc)]


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
    assert not leftover(dc)
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
    assert not leftover(dc)


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
    assert not leftover(dc)


@needs_image
def test_ctrl_c_stops_the_run_and_removes_its_containers(dc):
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "build.py"), "verify", "--image", IMAGE],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    try:
        deadline = time.monotonic() + 120
        while not leftover(dc) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert leftover(dc), "verify started no container"
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err[-1500:]
    assert err.strip().splitlines()[-1] == "build.py verify: interrupted"
    assert not leftover(dc), f"left running after Ctrl-C: {leftover(dc)}"


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
