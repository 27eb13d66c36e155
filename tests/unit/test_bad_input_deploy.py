"""T0: `deploy kubernetes --registry` takes exactly the prefixes `build --registry` takes (issue 35, class 5): one
check (sm120/build/image_ref.py `check_registry`), so a manifest never names an image that build could not push.
A refused prefix is the same one line and exit 2 from both commands; an accepted one reaches both outputs."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli

DEPLOY = ["deploy", "kubernetes", "--nodes", "2", "--gpus", "8", "--mode", "baseline", "--model-path", "/models/m"]

REFUSED = [
    ("upper-case", "GHCR.IO/Owner"),
    ("upper-case-namespace", "ghcr.io/Owner"),
    ("url", "https://ghcr.io/owner"),
    ("tag", "ghcr.io/owner:latest"),
    ("digest", "ghcr.io/owner@sha256:" + "a" * 64),
    ("space", "ghcr.io/my org"),
    ("empty", ""),
    ("slash", "/"),
]

ACCEPTED = [
    ("host", "ghcr.io/owner", "ghcr.io/owner/sglang-sm120:"),
    ("trailing-slash", "ghcr.io/owner/", "ghcr.io/owner/sglang-sm120:"),
    ("host-port", "localhost:5000", "localhost:5000/sglang-sm120:"),
    ("nested", "registry.example.com/team/sub", "registry.example.com/team/sub/sglang-sm120:"),
]


def one_line(rc: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err[-1500:])
    return lines[0].split(": error: ", 1)[1]


@pytest.mark.parametrize("registry", [c[1] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_both_commands_refuse_the_same_prefix_in_the_same_words(capsys, tmp_path, registry):
    build = one_line(*run_cli(capsys, "build", "--print", "--registry", registry)[::2])
    deploy = one_line(*run_cli(capsys, *DEPLOY, "--registry", registry, "--out", str(tmp_path / "out"))[::2])
    assert build == deploy and build.startswith(f"--registry {registry!r}"), (build, deploy)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("registry", "shown"), [c[1:] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_both_commands_take_the_same_prefix(capsys, tmp_path, registry, shown):
    rc, out, err = run_cli(capsys, "build", "--print", "--registry", registry)
    assert rc == 0 and shown in out, err
    rc, out, err = run_cli(capsys, *DEPLOY, "--registry", registry, "--out", str(tmp_path / "out"))
    assert rc == 0 and f"image {shown}" in out, err
