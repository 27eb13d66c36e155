"""The BuildKit driver: the buildx command it runs, and the one line it prints when a stage fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120.build import buildx
from sm120.errors import CheckFailed

PLAIN_FAILURE = """\
#17 [flash-attn 2/3] COPY patches/flash-attn/ /opt/build/patches/flash-attn/
#17 DONE 0.1s
#18 [flash-attn 3/3] RUN --mount=type=secret,id=ca_bundle bash /opt/build/flash-attn.sh
#18 46.05 ERROR: Failed to build one or more wheels
#18 ERROR: executor failed running [/bin/bash -o pipefail -c bash /opt/build/flash-attn.sh]: exit code: 1
------
 > [flash-attn 3/3] RUN --mount=type=secret,id=ca_bundle bash /opt/build/flash-attn.sh:
#18 46.05 ERROR: Failed to build one or more wheels
------
ERROR: failed to solve: executor failed running [/bin/bash -o pipefail -c bash /opt/build/flash-attn.sh]: exit code: 1
"""

PATCH_FAILURE = """\
#21 [patched 4/4] RUN cd /opt/sglang-sm120/src && python build.py patches apply --sglang 0.5.9
#21 1.2 build.py patches: failed: sglang 0.5.9: torch-symm-mem-sm120 conflicts: sglang/srt/x.py hunk #2 at 40
------
 > [patched 4/4] RUN cd /opt/sglang-sm120/src && python build.py patches apply --sglang 0.5.9:
------
ERROR: failed to solve: executor failed running: exit code: 1
"""


def test_failure_names_the_stage_and_step():
    line = buildx.failure_summary(PLAIN_FAILURE.splitlines())
    assert line.startswith("stage 'flash-attn' step 3/3 failed: RUN")
    assert "\n" not in line


def test_failure_in_the_patch_stage_names_patch_file_and_hunk():
    line = buildx.failure_summary(PATCH_FAILURE.splitlines())
    assert "stage 'patched' step 4/4" in line
    assert "torch-symm-mem-sm120" in line and "hunk #2" in line


def test_failure_before_any_stage():
    line = buildx.failure_summary(["ERROR: failed to solve: base image not found"])
    assert "before any stage ran" in line


def test_command_carries_plan_and_secret(monkeypatch, tmp_path):
    monkeypatch.setattr(buildx, "ensure_buildx", lambda: ["docker", "buildx", "build"])
    bundle = tmp_path / "ca.pem"
    bundle.write_text("x")
    monkeypatch.setenv("PIP_CERT", str(bundle))
    req = buildx.BuildRequest(
        context=Path("/ctx"),
        dockerfile=Path("/ctx/Dockerfile"),
        tags=["a:b"],
        target="runtime",
        build_args={"TORCH_VERSION": "2.9.1"},
        labels={"k": "v w"},
        cache_from=["type=registry,ref=x"],
        push=True,
        sbom=True,
        provenance=True,
    )
    cmd = buildx.command(req)
    assert cmd[:3] == ["docker", "buildx", "build"] and cmd[-1] == "/ctx"
    assert cmd[cmd.index("--build-arg") : cmd.index("--build-arg") + 2] == ["--build-arg", "TORCH_VERSION=2.9.1"]
    assert "--label" in cmd and "k=v w" in cmd
    assert f"id=ca_bundle,src={bundle}" in cmd
    assert "--push" in cmd and "--load" not in cmd
    assert "--sbom=true" in cmd and "--provenance=mode=max" in cmd


def test_run_raises_check_failed_with_the_stage(monkeypatch, tmp_path):
    script = tmp_path / "fake-buildx"
    script.write_text("#!/bin/sh\ncat <<'EOF'\n" + PLAIN_FAILURE + "EOF\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setattr(buildx, "ensure_buildx", lambda: [str(script)])
    req = buildx.BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile")
    with pytest.raises(CheckFailed, match="stage 'flash-attn' step 3/3"):
        buildx.run(req, echo=False)
