"""`build.py build --push-by-digest`: the image is pushed under its digest only, so no tag moves before verify."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from sm120 import cli
from sm120.build import buildx
from sm120.build import cmd_build as build
from sm120.errors import CheckFailed
from tests.helpers import run_build_py

DIGEST = "sha256:" + "ab" * 32


def test_the_command_pushes_by_digest_and_names_no_tag(monkeypatch):
    monkeypatch.setattr(buildx, "ensure_buildx", lambda: ["docker", "buildx", "build"])
    req = buildx.BuildRequest(
        context=Path("/ctx"),
        dockerfile=Path("/ctx/Dockerfile"),
        tags=["ghcr.io/o/img:1.0-cu13", "ghcr.io/o/img:1.0"],
        push_by_digest=True,
        sbom=True,
        provenance=True,
    )
    cmd = buildx.command(req)
    assert "--tag" not in cmd and "--push" not in cmd and "--load" not in cmd
    output = cmd[cmd.index("--output") + 1]
    assert output == 'type=image,"name=ghcr.io/o/img",push-by-digest=true,name-canonical=true,push=true'
    assert "--sbom=true" in cmd and "--provenance=mode=max" in cmd


def test_a_plain_push_still_tags(monkeypatch):
    monkeypatch.setattr(buildx, "ensure_buildx", lambda: ["docker", "buildx", "build"])
    cmd = buildx.command(buildx.BuildRequest(context=Path("/c"), dockerfile=Path("/c/D"), tags=["r/i:t"], push=True))
    assert cmd[cmd.index("--tag") + 1] == "r/i:t" and "--push" in cmd and "--output" not in cmd


@pytest.mark.parametrize(
    ("reference", "repository"),
    [
        ("ghcr.io/o/img:0.5.9-cu13.0.1", "ghcr.io/o/img"),
        ("localhost:5000/img:tag", "localhost:5000/img"),
        ("localhost:5000/img", "localhost:5000/img"),
        ("ghcr.io/o/img@" + DIGEST, "ghcr.io/o/img"),
        ("img", "img"),
    ],
)
def test_repository_drops_tag_and_digest_not_the_registry_port(reference, repository):
    assert buildx.repository(reference) == repository


def test_pushed_digest_reads_buildx_metadata(tmp_path):
    meta = tmp_path / "metadata.json"
    meta.write_text(json.dumps({"containerimage.digest": DIGEST, "image.name": "ghcr.io/o/img"}))
    assert buildx.pushed_digest(meta) == DIGEST


@pytest.mark.parametrize("content", ["{}", '{"containerimage.digest": "sha256:short"}', "not json"])
def test_pushed_digest_fails_without_a_digest(tmp_path, content):
    meta = tmp_path / "metadata.json"
    meta.write_text(content)
    with pytest.raises(CheckFailed):
        buildx.pushed_digest(meta)


def test_print_shows_the_digest_output_for_the_registry_repository():
    out = run_build_py("build", "--profile", "release", "--registry", "ghcr.io/example", "--push-by-digest", "--print")
    assert out.returncode == 0, out.stderr
    cmd = shlex.split(out.stdout)
    output = cmd[cmd.index("--output") + 1]
    assert output.startswith('type=image,"name=ghcr.io/example/sglang-sm120"') and "push-by-digest=true" in output
    assert "--tag" not in cmd and "--push" not in cmd


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--push-by-digest"], "needs --registry"),
        (["--push-by-digest", "--registry", "r", "--push"], "not allowed with"),
        (["--push-by-digest", "--registry", "r", "--tag", "r/x:y"], "pushes no tag"),
    ],
)
def test_push_by_digest_misuse_is_a_usage_error(args, message):
    out = run_build_py("build", "--profile", "release", *args, "--print")
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_build_prints_the_pushed_reference_from_buildx_metadata(monkeypatch, capsys):
    seen: list[buildx.BuildRequest] = []

    def fake_run(req: buildx.BuildRequest, *, echo: bool = True) -> None:
        seen.append(req)
        assert req.metadata_file is not None
        req.metadata_file.write_text(json.dumps({"containerimage.digest": DIGEST}))

    monkeypatch.setattr(buildx, "run", fake_run)
    monkeypatch.setattr(build, "_stage_wheelhouse", lambda source, wheels: None)
    assert cli.main(["build", "--profile", "release", "--registry", "ghcr.io/o", "--push-by-digest"]) == 0
    assert seen and seen[0].push_by_digest
    assert capsys.readouterr().out.strip().endswith(f"pushed ghcr.io/o/sglang-sm120@{DIGEST} (no tag moved)")
