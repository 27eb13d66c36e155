"""docker/stages/fixups.sh: `apply` installs each fix-up pin the way its build.toml `install` says (upstream's
`--force-reinstall --no-deps`, or with its dependencies), in order; `check`: `pip check` may name only the packages
the track's fix-up pins set on purpose.

The script runs for real; `python3 -m pip check` answers with canned output and `python3 -m pip install` records its
arguments (a python3 wrapper first on PATH), everything else is the real interpreter (with `packaging`, as in the
image). tests/upstream/test_release_resolution.py runs `check` on a real resolution of the release pins."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.plan import resources as res

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "stages" / "fixups.sh"
TORCH_CUDNN = (
    'torch 2.9.1 has requirement nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux", '
    "but you have nvidia-cudnn-cu12 9.16.0.29."
)
OTHER = "sglang 0.5.9 has requirement transformers==4.57.1, but you have transformers 4.58.0."


def run_script(tmp_path: Path, command: str, pins: str, pip_check_output: str = "") -> subprocess.CompletedProcess[str]:
    wrapper = tmp_path / "bin" / "python3"
    wrapper.parent.mkdir(exist_ok=True)
    canned = tmp_path / "pip-check.txt"
    canned.write_text(pip_check_output)
    installs = tmp_path / "pip-install.log"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2 $3" = "-m pip check" ]; then cat {canned}; [ -s {canned} ] && exit 1; exit 0; fi\n'
        f'if [ "$1 $2 $3" = "-m pip install" ]; then shift 3; echo "$*" >> {installs}; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{wrapper.parent}:{os.environ['PATH']}", FIXUP_PINS=pins, WHEELHOUSE=str(tmp_path))
    return subprocess.run(["bash", str(SCRIPT), command], capture_output=True, text=True, env=env, check=False)


def run_check(tmp_path: Path, pins: str, pip_check_output: str) -> subprocess.CompletedProcess[str]:
    return run_script(tmp_path, "check", pins, pip_check_output)


@pytest.mark.parametrize(
    ("pins", "output", "ok"),
    [
        ("no-deps:nvidia-cudnn-cu12==9.16.0.29", "", True),
        ("no-deps:nvidia-cudnn-cu12==9.16.0.29", TORCH_CUDNN + "\n", True),
        ("no-deps:nvidia-cudnn-cu12==9.16.0.29", TORCH_CUDNN + "\n" + OTHER + "\n", False),
        ("", TORCH_CUDNN + "\n", False),
        ("no-deps:Nvidia_CUDNN-cu12==9.16.0.29", TORCH_CUDNN + "\n", True),
        ("deps:transformers==4.58.0", OTHER + "\n", True),
    ],
    ids=["clean", "pinned-conflict", "other-conflict", "no-pins", "name-normalised", "with-deps-pin"],
)
def test_pip_check_allows_only_the_pins_conflicts(tmp_path: Path, pins: str, output: str, ok: bool):
    result = run_check(tmp_path, pins, output)
    assert (result.returncode == 0) is ok, result.stdout + result.stderr
    if not ok:
        assert "no fix-up pin explains" in result.stderr
        assert "pip check:" in result.stdout


def test_unknown_command_is_a_usage_error():
    result = subprocess.run(["bash", str(SCRIPT), "frobnicate"], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "usage" in result.stderr


def test_apply_installs_each_pin_in_order_in_its_own_mode(tmp_path: Path):
    pins = "no-deps:nvidia-nccl-cu13==2.28.3 no-deps:nvidia-cublas==13.1.0.3 deps:cuda-python==13.1.1"
    result = run_script(tmp_path, "apply", pins)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "pip-install.log").read_text().splitlines() == [
        "--progress-bar off --force-reinstall --no-deps nvidia-nccl-cu13==2.28.3",
        "--progress-bar off --force-reinstall --no-deps nvidia-cublas==13.1.0.3",
        "--progress-bar off cuda-python==13.1.1",
    ]


def test_the_plans_pins_are_what_apply_takes():
    """build_args writes FIXUP_PINS in the form fixups.sh reads: every release and offline pin is INSTALL:REQ."""
    config = cfg.load()
    machine = res.Resources(cpus=2, memory_bytes=24 * 1024**3, source="test")
    for profile in config.profiles:
        for track in config.tracks:
            plan = planmod.resolve(config, profile=profile, sglang=track, machine=machine)
            tokens = plan.build_args["FIXUP_PINS"].split()
            assert tokens == [f"{f.install}:{f.requirement}" for f in plan.fixups]
            assert all(t.partition(":")[0] in ("no-deps", "deps") for t in tokens)


@pytest.mark.parametrize("pins", ["nvidia-nccl-cu13==2.28.3", "force:nvidia-nccl-cu13==2.28.3", "no-deps:"])
def test_a_pin_without_a_known_install_mode_is_exit_2(tmp_path: Path, pins: str):
    result = run_script(tmp_path, "apply", pins)
    assert result.returncode == 2 and "FIXUP_PINS entry" in result.stdout
    assert not (tmp_path / "pip-install.log").exists()
