"""`build.py build` and `build.py base` without an engine: what they would run, and their bad inputs."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from sm120.build import bases
from sm120.image.patch_engine import read_series
from sm120.plan import config as cfg
from tests.helpers import ROOT, run_build_py, write_config


def test_print_shows_the_plans_args_labels_and_registry_tags():
    out = run_build_py("build", "--profile", "offline", "--registry", "ghcr.io/example/", "--tag", "x:y", "--print")
    assert out.returncode == 0, out.stderr
    cmd = shlex.split(out.stdout)
    assert cmd[1:3] == ["buildx", "build"]
    assert "ghcr.io/example/sglang-sm120:0.5.23-cu13.0.1-offline" in cmd and "x:y" in cmd
    assert "BASE_IMAGE=sglang-sm120-base:13.0.1-devel" in cmd
    assert "sglang-sm120.profile=offline" in cmd


def test_bad_wheelhouse_is_a_usage_error(tmp_path, monkeypatch):
    # The wheelhouse is checked before anything is built; point the bases at a profile that needs none.
    out = run_build_py("build", "--profile", "release", "--wheelhouse", str(tmp_path / "missing"))
    assert out.returncode == 2
    assert "--wheelhouse" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_base_refuses_a_registry_profile():
    out = run_build_py("base", "--profile", "release")
    assert out.returncode == 2 and "only a profile with bases" in out.stderr


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
    import subprocess
    import sys

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
