"""T0: `build.py verify` stops within seconds on Ctrl-C (SIGINT) and SIGTERM, in every phase, and removes what it
started, without Docker or an image: a driver runs build.py's CLI with the runner's Docker side replaced (preflight,
the removal of the run's containers) and pytest replaced by a stand-in that reports, on a line of its output and in
a log, where it is; the test sends the signal when that line has arrived (an event, not a clock).

What is proved: pytest runs in a process group of its own that gets the signal once, as SIGINT; a pytest that
ignores it, and the programs it started (docker CLIs), are killed after the grace; the run's containers are removed
afterwards whatever happened, a Ctrl-C during that removal does not cut it short; SIGINT stops verify even when it was
started with SIGINT ignored (the background of a script); exit 130 "interrupted" / 143 "terminated (SIGTERM)".
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sm120.verify import runner
from tests.helpers import ROOT, process_alive, process_gone

# build.py's CLI, with the runner's Docker side and pytest replaced (see the module's docstring).
DRIVER = r"""
import json, os, signal, sys, time
from pathlib import Path

if os.environ.get("DRIVER_SIGINT_IGNORED"):  # as a program started in the background of a script finds it
    signal.signal(signal.SIGINT, signal.SIG_IGN)

from sm120 import cli
from sm120.verify import runner

LOG = Path(os.environ["VERIFY_LOG"])
PHASE = os.environ["VERIFY_PHASE"]


def log(**event):
    with LOG.open("a") as f:
        f.write(json.dumps(event) + "\n")


def preflight(tag):
    if PHASE == "preflight":
        print("phase: preflight", flush=True)
        time.sleep(600)
    return object(), None


def remove_run(engine, run_id, *, settle_s=0.0, limit_s=60.0):
    log(event="remove_run", run_id=run_id, settle_s=settle_s)
    if PHASE == "cleanup":
        print("phase: cleanup", flush=True)
        end = time.monotonic() + 60
        while not runner.SIGNALS.pending and time.monotonic() < end:  # until the test's Ctrl-C has arrived
            time.sleep(0.01)
    log(event="removed", run_id=run_id)
    return []


runner.preflight = preflight
runner.docker_env.remove_run = remove_run
runner.docker_env.run_containers = lambda engine, run_id=None: []
runner._pytest_command = lambda junit, select, verbose: [sys.executable, "-c", os.environ["FAKE_PYTEST"]]
if os.environ.get("GRACE_S"):
    runner.GRACE_S = float(os.environ["GRACE_S"])
sys.exit(cli.main(["verify", "--image", "sglang-sm120:test"]))
"""

# pytest's stand-in: it starts a program that ignores SIGINT (as a docker CLI may not end on it) in its own process
# group, tears down on SIGINT (exit 2, as pytest) or ignores it ("stubborn"), and says where it is.
FAKE_PYTEST = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path

PHASE = os.environ["VERIFY_PHASE"]


def log(**event):
    with Path(os.environ["VERIFY_LOG"]).open("a") as f:
        f.write(json.dumps(event) + "\n")


if PHASE == "cleanup":
    sys.exit(0)
helper = subprocess.Popen(["sleep", "600"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))


def teardown(signum, frame):
    log(event="teardown")
    sys.exit(2)


signal.signal(signal.SIGINT, signal.SIG_IGN if PHASE == "stubborn" else teardown)
log(event="pytest", pid=os.getpid(), pgid=os.getpgrp(), sid=os.getsid(0), helper=helper.pid)
print("phase: pytest", flush=True)
while True:
    time.sleep(1)
"""


class Verify:
    """The driver in a session of its own (as a terminal's foreground job), its output read line by line."""

    def __init__(self, tmp_path: Path, phase: str, **env: str) -> None:
        self.log = tmp_path / "verify.log"
        environ = {**os.environ, "PYTHONPATH": str(ROOT), "VERIFY_LOG": str(self.log), "VERIFY_PHASE": phase}
        environ.update(FAKE_PYTEST=FAKE_PYTEST, **env)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_phase(self, phase: str, timeout: float = 120) -> None:
        """Until the line `phase: PHASE` arrives: verify (or its pytest) is there and stays there."""
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"verify did not reach {phase!r} within {timeout:g} s; stderr: {''.join(self.err)}")
            if line is None:
                self.proc.wait()
                pytest.fail(f"verify ended ({self.proc.returncode}) before {phase!r}: {''.join(self.err)}")
            if line == f"phase: {phase}":
                return

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: its whole foreground group

    def result(self, timeout: float = 60) -> tuple[int, str, list[dict]]:
        """Exit status, stderr and the log's events, once verify has ended (within `timeout` s of the signal)."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        for reader in self.readers:
            reader.join(timeout=10)  # EOF once every process that holds the pipes has ended
        return self.proc.returncode, "".join(self.err), self.events()

    def events(self) -> list[dict]:
        return [json.loads(ln) for ln in self.log.read_text().splitlines()] if self.log.exists() else []

    def kill(self) -> None:
        """Whatever is left: the driver's session, and the stand-in pytest's own."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for event in self.events():
            if event["event"] == "pytest" and process_alive(event["pid"]):
                os.killpg(event["pgid"], signal.SIGKILL)


def last_line(err: str) -> str:
    return [ln for ln in err.splitlines() if ln.strip()][-1]


@pytest.fixture
def verify(tmp_path):
    started: list[Verify] = []

    def make(phase: str, **env: str) -> Verify:
        v = Verify(tmp_path, phase, **env)
        started.append(v)
        return v

    yield make
    for v in started:
        v.kill()


SIGNALS = [
    ("ctrl-c", "ctrl_c", 130, "interrupted", {}),
    ("sigterm", "sigterm", 143, "terminated (SIGTERM)", {}),
    ("ctrl-c-sigint-ignored-at-start", "ctrl_c", 130, "interrupted", {"DRIVER_SIGINT_IGNORED": "1"}),
]


@pytest.mark.parametrize(("how", "code", "says", "env"), [c[1:] for c in SIGNALS], ids=[c[0] for c in SIGNALS])
def test_a_signal_while_the_checks_run_tears_them_down_and_removes_the_run(verify, how, code, says, env):
    v = verify("pytest", **env)
    v.wait_phase("pytest")
    if how == "ctrl_c":
        v.ctrl_c()
    else:
        v.proc.send_signal(signal.SIGTERM)  # a CI runner cancelling: verify alone
    rc, err, events = v.result()
    assert rc == code, err
    assert last_line(err) == f"build.py verify: {says}" and "Traceback" not in err, err
    kinds = [e["event"] for e in events]
    assert kinds == ["pytest", "teardown", "remove_run", "removed"], events  # torn down, then the run removed
    started = events[0]
    assert started["pgid"] == started["pid"] == started["sid"]  # pytest in a process group (a session) of its own
    assert events[2]["settle_s"] == runner.SETTLE_S  # after an interruption: late creations are waited for
    assert process_gone(started["pid"]) and process_gone(started["helper"]), "a process of the checks outlived verify"


def test_checks_that_ignore_the_signal_are_killed_after_the_grace(verify):
    assert runner.GRACE_S <= 15  # "within seconds"; here 2 s, to keep the test short
    v = verify("stubborn", GRACE_S="2")
    v.wait_phase("pytest")
    v.ctrl_c()
    rc, err, events = v.result()
    assert rc == 130 and last_line(err) == "build.py verify: interrupted", err
    assert "verify: stopping the checks" in err
    assert [e["event"] for e in events] == ["pytest", "remove_run", "removed"], events
    assert process_gone(events[0]["pid"]) and process_gone(events[0]["helper"]), (
        "a process of the checks outlived verify"
    )


def test_a_signal_before_the_checks_start_stops_verify(verify):
    v = verify("preflight")
    v.wait_phase("preflight")
    v.ctrl_c()
    rc, err, events = v.result()
    assert rc == 130 and last_line(err) == "build.py verify: interrupted", err
    assert events == []  # no pytest started, no container of a run to remove


def test_ctrl_c_while_the_run_is_removed_waits_for_the_removal(verify):
    v = verify("cleanup")
    v.wait_phase("cleanup")
    v.ctrl_c()
    rc, err, events = v.result()
    assert rc == 130 and last_line(err) == "build.py verify: interrupted", err
    assert [e["event"] for e in events] == ["remove_run", "removed"], events
