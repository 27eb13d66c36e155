"""`build.py build` and `build.py base` without an engine: what they would run, and their bad inputs. build checks
its own arguments (tag, registry, --target, --cache-from/--cache-to, --metadata-file) before anything runs: the
bases, the digests and buildx are never reached on a bad one (--metadata-file: buildx writes it only after the
build and the push, so a path it could not write would fail after the hours of a build)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.build import bases, buildx, digests
from sm120.image.patch_engine import read_series
from sm120.plan import config as cfg
from tests.helpers import ROOT, run_build_py, run_cli, unshare_or_skip, write_config
from tests.unit.test_cli import assert_usage, refuse


def test_print_shows_the_plans_args_labels_and_registry_tags():
    out = run_build_py("build", "--profile", "offline", "--registry", "ghcr.io/example/", "--tag", "x:y", "--print")
    assert out.returncode == 0, out.stderr
    cmd = shlex.split(out.stdout)
    assert cmd[1:3] == ["buildx", "build"]
    assert "ghcr.io/example/sglang-sm120:0.5.23-cu13.0.1-offline" in cmd and "x:y" in cmd
    assert "BASE_IMAGE=sglang-sm120-base:13.0.1-devel" in cmd
    assert "sglang-sm120.profile=offline" in cmd


def test_bad_wheelhouse_is_a_usage_error(capsys, tmp_path):
    # The wheelhouse is checked before anything is built; point the bases at a profile that needs none.
    rc, _, err = run_cli(capsys, "build", "--profile", "release", "--wheelhouse", str(tmp_path / "missing"))
    assert rc == 2
    assert "--wheelhouse" in err and len(err.strip().splitlines()) == 1


def test_base_refuses_a_registry_profile(capsys):
    rc, _, err = run_cli(capsys, "base", "--profile", "release")
    assert rc == 2 and "only a profile with bases" in err


def test_base_inputs_digest_follows_the_inputs():
    config = cfg.load(ROOT / "build.toml")
    one = bases.spec(config, config.profile("offline"))
    changed = config.model_copy(
        update={"local_bases": config.local_bases.model_copy(update={"runtime_components": ["cudart", "nvrtc"]})}
    )
    two = bases.spec(changed, changed.profile("offline"))
    assert one.digest != two.digest
    assert bases.spec(config, config.profile("offline")).digest == one.digest


def test_a_missing_package_disables_only_the_commands_that_need_it():
    """Without the docker SDK, plan and patches still run (they never talk to an engine): the rest say what is
    missing."""
    blocker = "import sys; sys.modules['docker'] = None; from sm120.cli import main; sys.exit(main(sys.argv[1:]))"
    base = subprocess.run([sys.executable, "-c", blocker, "base"], capture_output=True, text=True, cwd=ROOT)
    assert base.returncode == 2
    assert "needs the Python package 'docker'" in base.stderr and len(base.stderr.strip().splitlines()) == 1
    plan = subprocess.run([sys.executable, "-c", blocker, "plan", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert plan.returncode == 0, plan.stderr


def test_build_hands_the_plan_of_its_config_to_the_image_build(tmp_path):
    """The plan is resolved once, on the host, from the build.toml `--config` names: the staged plan.json (the image's
    /etc/sglang-sm120/plan.json) is byte for byte `plan --json` of that file, the labels and build args in the buildx
    command are the same plan's, and the patch series is its track's. Builds nothing. The profile is renamed so the
    staged directory is this test's own (a build running beside the tests keeps its own). The printed command runs
    as printed: its `build_jobs` secret is staged there too and outlives build.py, and .dockerignore keeps it out of
    the build context."""

    def alternative(text: str) -> str:
        text = text.replace("offline", "alttest").replace("port = 30000", "port = 30123")
        return text.replace("\"the reference run's settings", "\"ALT's settings")

    alt = write_config(tmp_path, edit=alternative)
    staged = ROOT / ".plan" / "alttest-0.5.9"
    try:
        out = run_build_py("build", "--config", str(alt), "--profile", "alttest", "--sglang", "0.5.9", "--print")
        assert out.returncode == 0, out.stderr
        cmd = shlex.split(out.stdout.strip().splitlines()[-1])
        plan = run_build_py("plan", "--config", str(alt), "--profile", "alttest", "--sglang", "0.5.9", "--json")
        assert plan.returncode == 0, plan.stderr
        assert (staged / "plan.json").read_text() == plan.stdout  # byte for byte
        data = json.loads(plan.stdout)
        assert data["image"]["port"] == 30123 and data["entrypoint"]["modes"]["eagle3"]["draft_tree_reason"].startswith(
            "ALT's settings"
        )
        assert "PLAN_DIR=.plan/alttest-0.5.9" in cmd and "sglang-sm120.port=30123" in cmd
        assert cmd[-1] == str(ROOT)  # the context is the checkout, wherever the config lives
        secrets = dict(s.split(",", 1) for i, s in enumerate(cmd) if i and cmd[i - 1] == "--secret")
        jobs = Path(secrets["id=build_jobs"].removeprefix("src="))
        assert jobs == staged / "build_jobs" and jobs.is_file()  # still there after build.py returned
        assert jobs.read_text() == "".join(f"{k}={v}\n" for k, v in data["build_jobs"].items())
        assert ".plan/*/build_jobs" in (ROOT / ".dockerignore").read_text().splitlines()
        version, series = read_series(staged / "series" / "series.json")
        assert version == "0.5.9"
        assert [p.name for p in series] == ["kimi-k25-eagle3-delegation", "torch-symm-mem-sm120"]
        for patch in series:  # the files the track's variants name, copied into the context
            assert patch.file is not None
            original = Path(tmp_path) / data["patches"][[p["name"] for p in data["patches"]].index(patch.name)]["path"]
            assert (staged / "series" / patch.file).read_bytes() == original.read_bytes()
    finally:
        shutil.rmtree(staged, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# build checks its own arguments before anything runs
# --------------------------------------------------------------------------------------------------

BUILD_ARGS: list[tuple[str, list[str], list[str]]] = [
    ("tag-upper-case", ["--tag", "Sglang:x"], ["--tag 'Sglang:x'", "not an image reference", "lowercase"]),
    ("tag-two-colons", ["--tag", "a:b:c"], ["--tag 'a:b:c'", "invalid reference format"]),
    ("tag-empty", ["--tag", ""], ["--tag is empty"]),
    ("tag-space", ["--tag", "a b"], ["--tag 'a b'"]),
    ("tag-too-long", ["--tag", "x:" + "t" * 200], ["--tag 'x:ttt"]),
    ("tag-bad-digest", ["--tag", "x@sha256:zz"], ["--tag 'x@sha256:zz'"]),
    ("registry-upper-case", ["--registry", "ghcr.io/OWNER"], ["--registry 'ghcr.io/OWNER'", "lower-case"]),
    ("registry-with-tag", ["--registry", "ghcr.io/owner:v1"], ["--registry 'ghcr.io/owner:v1'", "not a registry"]),
    ("registry-digest", ["--registry", "ghcr.io/o@sha256:" + "a" * 64], ["--registry", "not a registry prefix"]),
    ("registry-empty", ["--registry", ""], ["--registry ''"]),
    ("registry-url", ["--registry", "https://ghcr.io/o"], ["--registry 'https://ghcr.io/o'"]),
    ("target-unknown", ["--target", "nope"], ["--target 'nope': no such stage", "runtime"]),
    ("target-typo", ["--target", "runtim"], ["--target 'runtim'", "perhaps you meant 'runtime'"]),
    ("target-case", ["--target", "Runtime"], ["--target 'Runtime'"]),
    ("cache-type-typo", ["--cache-from", "type=regstry,ref=x"], ["unknown cache type 'regstry'", "'registry'"]),
    ("cache-no-type", ["--cache-from", "ref=ghcr.io/o/c"], ["'ref=ghcr.io/o/c': no type="]),
    ("cache-no-ref", ["--cache-from", "type=registry"], ["a registry cache needs ref=IMAGE"]),
    ("cache-bad-ref", ["--cache-to", "type=registry,ref=Bad/Ref"], ["--cache-to ref= 'Bad/Ref'"]),
    ("cache-not-key-value", ["--cache-from", "foo,bar=1"], ["'foo' is not key=value"]),
    ("cache-empty", ["--cache-to", ""], ["--cache-to is empty"]),
    ("cache-local-no-dest", ["--cache-to", "type=local"], ["a local cache needs dest=DIR"]),
    ("cache-local-no-src", ["--cache-from", "type=local,dest=x"], ["a local cache needs src=DIR"]),
    ("cache-bad-mode", ["--cache-to", "type=registry,ref=ghcr.io/o/c,mode=maximum"], ["mode='maximum'"]),
    ("cache-inline-from", ["--cache-from", "type=inline"], ["inline is a --cache-to type"]),
    ("cache-bad-shorthand", ["--cache-from", "Not/A/Ref"], ["--cache-from 'Not/A/Ref'"]),
    ("cache-unbalanced-quote", ["--cache-from", 'type=registry,ref="x'], ["--cache-from"]),
]


@pytest.fixture
def nothing_runs(monkeypatch):
    """build must not make the bases, pin the digests or call buildx before its arguments are checked."""
    refuse(monkeypatch, "ran before the arguments were checked", (bases, "make"), (buildx, "run"), (digests, "pin"))


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in BUILD_ARGS], ids=[c[0] for c in BUILD_ARGS])
def test_build_arguments_are_checked_before_anything_runs(capsys, nothing_runs, argv, expected):
    rc, _, err = run_cli(capsys, "build", "--profile", "offline", *argv)
    assert_usage(rc, err, *expected)


GOOD_BUILD_ARGS = [
    ("tag", ["--tag", "ghcr.io/owner/sglang-sm120:test-1"], "ghcr.io/owner/sglang-sm120:test-1"),
    ("tag-localhost-port", ["--tag", "localhost:5000/x:y"], "localhost:5000/x:y"),
    ("registry-host-port", ["--registry", "localhost:5000"], "localhost:5000/sglang-sm120:"),
    ("registry-namespace", ["--registry", "ghcr.io/owner/"], "ghcr.io/owner/sglang-sm120:"),
    ("target", ["--target", "patched"], "--target patched"),
    ("cache-registry", ["--cache-from", "type=registry,ref=ghcr.io/o/cache:x"], "type=registry,ref=ghcr.io/o/cache:x"),
    ("cache-shorthand", ["--cache-from", "ghcr.io/o/cache"], "ghcr.io/o/cache"),
    ("cache-to-max", ["--cache-to", "type=registry,ref=ghcr.io/o/c,mode=max"], "mode=max"),
    ("cache-local", ["--cache-to", "type=local,dest=/tmp/c"], "type=local,dest=/tmp/c"),
    ("cache-gha", ["--cache-to", "type=gha,mode=max"], "type=gha,mode=max"),
    ("cache-inline", ["--cache-to", "type=inline"], "type=inline"),
]


@pytest.mark.parametrize(("argv", "shown"), [c[1:] for c in GOOD_BUILD_ARGS], ids=[c[0] for c in GOOD_BUILD_ARGS])
def test_good_build_arguments_reach_buildx(capsys, argv, shown):
    rc, out, err = run_cli(capsys, "build", "--print", *argv)
    assert rc == 0, err
    assert shown in out


METADATA_FILES = [
    ("missing-folder", lambda tmp: tmp / "no-such" / "m.json", "no folder {tmp}/no-such (buildx writes it after"),
    ("under-a-file", lambda tmp: tmp / "file" / "m.json", "no folder {tmp}/file"),
    ("a-folder", lambda tmp: tmp, "a folder; give a file name, e.g. {tmp}/metadata.json"),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in METADATA_FILES], ids=[c[0] for c in METADATA_FILES])
def test_a_metadata_file_buildx_could_not_write_is_refused_first(capsys, nothing_runs, tmp_path, make, expected):
    (tmp_path / "file").write_text("")
    path = make(tmp_path)
    rc, _, err = run_cli(capsys, "build", "--push", "--metadata-file", str(path))
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err[-1500:])
    assert lines[0].startswith(f"build.py build: error: --metadata-file {path}: "), lines
    assert expected.format(tmp=tmp_path) in lines[0], lines


def test_a_metadata_file_in_a_read_only_folder_is_refused_first():
    unshare = unshare_or_skip()
    ro = Path("/tmp") / f"sm120-ro-metadata-{os.getpid()}"
    ro.mkdir(exist_ok=True)
    try:
        script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
        argv = [sys.executable, str(ROOT / "build.py"), "build", "--print", "--metadata-file", str(ro / "m.json")]
        proc = subprocess.run([*unshare, "sh", "-c", script, "sh", str(ro), *argv], capture_output=True, text=True)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip() == (
            f"build.py build: error: --metadata-file {ro / 'm.json'}: cannot be written (no permission, or a read-only "
            "mount)"
        )
    finally:
        ro.rmdir()


def test_a_metadata_file_in_a_folder_that_exists_is_passed_to_buildx(capsys, tmp_path):
    rc, out, err = run_cli(capsys, "build", "--print", "--metadata-file", str(tmp_path / "m.json"))
    assert rc == 0, err
    assert f"--metadata-file {tmp_path / 'm.json'}" in out
