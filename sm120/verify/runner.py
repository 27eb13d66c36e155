"""Run the image suite (sm120/verify/suite/) against one image, print what it found, and leave nothing running:
pytest (SM120_IMAGE=TAG) in a process group of its own, the run's labelled containers removed by its fixtures and
again here whatever happened (Ctrl-C and SIGTERM: docs/verification.md, stop_on_signals)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sm120.errors import SIGNALS, CheckFailed, UsageError, stop_on_signals
from sm120.plan import ROOT, image_plan, labels
from sm120.verify import docker_env, report

SUITE = Path(__file__).resolve().parent / "suite"  # the checks, shipped with build.py
GRACE_S = 10.0  # how long pytest may take to tear its containers down after Ctrl-C before it is killed
SETTLE_S = 3.0  # after an interruption: how long no container of the run may appear before cleanup ends


def preflight(tag: str) -> tuple[Any, docker_env.ImageInfo]:
    """The engine answers, the image exists and carries this project's labels (else one line, exit 2)."""
    try:
        engine = docker_env.client()
        info = docker_env.inspect(engine, tag)
    except docker_env.DockerUnavailable as exc:
        raise UsageError(str(exc)) from None
    if absent := labels.missing(info.labels):
        raise UsageError(
            f"{tag} lacks the labels {', '.join(absent[:3])}{' ...' if len(absent) > 3 else ''}: "
            "not an image made by `build.py build`, or made by an older one; rebuild it"
        )
    try:
        labels.parse(info.labels)
    except labels.LabelError as exc:
        raise UsageError(f"{tag}: {exc}") from None
    with SIGNALS.held():  # it creates a container to read the file from, and removes it: never half done
        image_plan.read(engine, tag)  # the plan the checks read: an image without one exits 2 here
    if not SUITE.is_dir():
        raise UsageError(f"the image suite {SUITE} is missing: reinstall build.py with its sm120 package")
    return engine, info


def _pytest_command(junit: Path, select: str | None, verbose: bool) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", f"--junitxml={junit}"]
    cmd += ["-v", "--durations=8"] if verbose else ["-q"]
    return [*cmd, "-rfEs", "--tb=short", "-o", "junit_logging=no", *(["-k", select] if select else [])]


def run(
    tag: str,
    *,
    junit: Path | None = None,
    select: str | None = None,
    verbose: bool = False,
    extra_env: dict[str, str] | None = None,
) -> int:
    with stop_on_signals():
        engine, _info = preflight(tag)
        run_id = docker_env.new_run_id()
        with tempfile.TemporaryDirectory(prefix="sm120-verify-") as scratch:
            junit_path = (junit or Path(scratch) / "junit.xml").resolve()  # pytest makes its folder
            report_path = Path(scratch) / "report.json"
            env = {**os.environ, **(extra_env or {}), "SM120_IMAGE": tag, "SM120_VERIFY_RUN": run_id}
            env.update(SM120_VERIFY_REPORT=str(report_path), PYTHONDONTWRITEBYTECODE="1")
            interrupted = True
            try:
                status = _run_pytest(_pytest_command(junit_path, select, verbose), env)
                interrupted = status == 2
            finally:
                _remove_run(engine, run_id, interrupted)
            return _conclude(status, report.Report.load(report_path), report.junit_outcome(junit_path))


def _remove_run(engine: Any, run_id: str, interrupted: bool) -> None:
    """Remove what is left of the run's containers; another Ctrl-C waits for this (a third one leaves at once)."""
    with SIGNALS.held():
        if left := docker_env.remove_run(engine, run_id, settle_s=SETTLE_S if interrupted else 0.0):
            print(f"verify: removed {len(left)} container(s) the suite left behind: {', '.join(left)}")
        stuck = [(c.get("Names") or [c["Id"]])[0].lstrip("/") for c in docker_env.run_containers(engine, run_id)]
        if stuck:
            print(f"verify: could not remove {', '.join(stuck)}: remove them with docker rm -f", file=sys.stderr)


def _run_pytest(cmd: Sequence[str], env: dict[str, str] | None) -> int:
    """pytest, until it ends, in a process group of its own: Ctrl-C (sent to the terminal's foreground group, this
    process) and SIGTERM (this process only) are passed on once, as SIGINT, to its whole group (pytest and its
    docker CLIs); what is left of the group after GRACE_S is killed (at once on another Ctrl-C)."""
    proc = None
    try:
        with SIGNALS.held():  # a signal while it starts is raised once `proc` is known
            proc = subprocess.Popen(list(cmd), cwd=ROOT, env=env, start_new_session=True)
        return proc.wait()
    except KeyboardInterrupt:
        if proc is not None:
            _stop(proc)
        raise


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to pytest's group, GRACE_S for its teardown (none on another Ctrl-C), then SIGKILL to what is left."""
    if proc.poll() is None:
        print(
            f"verify: stopping the checks (their teardown gets {GRACE_S:g} s; Ctrl-C again: none)",
            file=sys.stderr,
            flush=True,
        )
        _signal_group(proc.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):  # KeyboardInterrupt: Ctrl-C again
            proc.wait(timeout=GRACE_S)
    _signal_group(proc.pid, signal.SIGKILL)  # pytest if it is still there, and any docker CLI it left
    with SIGNALS.held():
        proc.wait()


def _conclude(status: int, found: report.Report | None, outcome: report.Outcome | None) -> int:
    if status == 2:  # pytest: interrupted
        raise KeyboardInterrupt
    if found is not None:
        print(f"\n{report.table(found)}")
        if found.warnings:
            print(f"{len(found.warnings)} warning(s): see the suite's summary above")
    if status == 0:
        return 0
    if status == 1 and outcome is not None and outcome.failed:
        more = len(outcome.failed) - 6  # the first six are named
        names = ", ".join(outcome.failed[:6]) + (f" and {more} more (see above)" if more > 0 else "")
        raise CheckFailed(f"{len(outcome.failed)} of {outcome.tests} checks failed: {names}")
    if status == 5:
        raise CheckFailed("no checks were collected (see -k)")
    raise CheckFailed(f"the image suite did not run to the end (pytest exit status {status}); see its output above")
