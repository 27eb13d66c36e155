"""T0: signals, as in the image: tini (PID 1 there) runs the entrypoint, which execs a stand-in server
(`python -m sglang.launch_server` from tests/entrypoint_helpers.fake_sglang). SIGTERM sent to tini (what
`docker stop` does) reaches the server, and tini exits with the server's status."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.entrypoint_helpers import ENTRYPOINT, clean_env, fake_nvidia_smi, fake_sglang, kimi_target, synthetic_plan

TINI = shutil.which("tini") or "/usr/bin/tini"
pytestmark = pytest.mark.skipif(
    not Path(TINI).exists(), reason="tini is not installed (Debian package `tini`: apt-get install -y tini)"
)


def _complete_json(path: Path) -> bool:
    """The stand-in server writes its record with write_text (open, then write): it exists empty for a moment."""
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60, ready=Path.exists) -> None:
    deadline = time.monotonic() + timeout
    while not ready(path):
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"exited with {proc.returncode} before {path.name} appeared:\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path.name} did not appear in {timeout} s")
        time.sleep(0.05)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, [("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0")])
    (tmp_path / "cache").mkdir()
    return clean_env(
        SM120_PLAN=str(synthetic_plan(tmp_path / "plan.json")),
        MODEL_PATH=str(kimi_target(tmp_path / "target")),
        PYTHONPATH=str(fake_sglang(tmp_path / "site")),
        PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        SM120_CACHE_DIR=str(tmp_path / "cache"),
        FAKE_SGLANG_RECORD=str(tmp_path / "server.json"),
        FAKE_SGLANG_SERVE="1",
    )


def under_tini(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    # -s: register as a child subreaper, since tini is not PID 1 here (in the image it is)
    return subprocess.Popen(
        [TINI, "-s", "--", sys.executable, str(ENTRYPOINT), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("status", [42, 0])
def test_sigterm_reaches_sglang_and_tini_exits_with_its_status(env, tmp_path, status):
    proc = under_tini(["baseline"], {**env, "FAKE_SGLANG_TERM_STATUS": str(status)})
    try:
        record_path = tmp_path / "server.json"
        wait_for(record_path, proc, ready=_complete_json)  # written after its SIGTERM handler is in place
        record = json.loads(record_path.read_text())
        # The entrypoint exec'd: the server is tini's own child, no Python process in between.
        assert record["ppid"] == proc.pid
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "server.term").read_text() == str(int(signal.SIGTERM))  # the server got SIGTERM
    assert proc.returncode == status, err


def test_a_program_run_through_the_entrypoint_gets_the_signal_too(env, tmp_path):
    ready = tmp_path / "ready"
    script = f"trap 'exit 5' TERM; touch {ready}; while :; do sleep 0.05; done"
    proc = under_tini(["sh", "-c", script], env)
    try:
        wait_for(ready, proc)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 5


def test_an_error_before_the_exec_is_tinis_status(env):
    proc = under_tini(["turbo"], env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "unknown mode 'turbo'" in err
