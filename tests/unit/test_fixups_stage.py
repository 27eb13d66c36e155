"""docker/stages/fixups.sh check: `pip check` may name only the packages the track's fix-up pins set on purpose.

The script runs for real; `python3 -m pip check` answers with canned output (a python3 wrapper first on PATH),
everything else is the real interpreter (with `packaging`, as in the image)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "stages" / "fixups.sh"
TORCH_CUDNN = (
    'torch 2.9.1 has requirement nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux", '
    "but you have nvidia-cudnn-cu12 9.16.0.29."
)
OTHER = "sglang 0.5.9 has requirement transformers==4.57.1, but you have transformers 4.58.0."


def run_check(tmp_path: Path, pins: str, pip_check_output: str) -> subprocess.CompletedProcess[str]:
    wrapper = tmp_path / "bin" / "python3"
    wrapper.parent.mkdir()
    canned = tmp_path / "pip-check.txt"
    canned.write_text(pip_check_output)
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2 $3" = "-m pip check" ]; then cat {canned}; [ -s {canned} ] && exit 1; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{wrapper.parent}:{os.environ['PATH']}", FIXUP_PINS=pins)
    return subprocess.run(["bash", str(SCRIPT), "check"], capture_output=True, text=True, env=env, check=False)


@pytest.mark.parametrize(
    ("pins", "output", "ok"),
    [
        ("nvidia-cudnn-cu12==9.16.0.29", "", True),
        ("nvidia-cudnn-cu12==9.16.0.29", TORCH_CUDNN + "\n", True),
        ("nvidia-cudnn-cu12==9.16.0.29", TORCH_CUDNN + "\n" + OTHER + "\n", False),
        ("", TORCH_CUDNN + "\n", False),
        ("Nvidia_CUDNN-cu12==9.16.0.29", TORCH_CUDNN + "\n", True),
    ],
    ids=["clean", "pinned-conflict", "other-conflict", "no-pins", "name-normalised"],
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
