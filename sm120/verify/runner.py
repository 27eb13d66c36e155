"""Run the image suite (sm120/verify/suite/) against one image, print what it found, and leave nothing running.

pytest runs with SM120_IMAGE=TAG in a process group of its own; the containers it starts carry this run's label and
are removed by its fixtures, and again here afterwards whatever happened (a failed check, Ctrl-C, SIGTERM, a crash).
SIGINT and SIGTERM are handled here explicitly (SIGINT too: a verify started in the background of a script, where it
is ignored, still stops on it) as KeyboardInterrupt (exit 130) and Terminated (143); pytest's group gets SIGINT once
(it tears its fixtures down) and is killed after GRACE_S. Removing the containers is never cut short by another
signal (a third one leaves at once).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from sm120.errors import CheckFailed, Terminated, UsageError
from sm120.plan import image_plan, labels
from sm120.verify import docker_env, report

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(__file__).resolve().parent / "suite"  # the checks, shipped with build.py
GRACE_S = 10.0  # how long pytest may take to tear its containers down after Ctrl-C before it is killed
SETTLE_S = 3.0  # after an interruption: how long no container of the run may appear before cleanup ends
HELD_SIGNALS = 3  # while a held step runs (containers being removed), the signal that leaves at once


def _interruption(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


class _Signals:
    """The handler of SIGINT and SIGTERM while verify runs: raise in the main thread at once, or, inside `held()`,
    keep the signal and raise it when the block ends (a block that must not be left half done: containers being
    removed, pytest being started); the HELD_SIGNALS-th signal while held is raised at once."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: list[int] = []

    def handle(self, signum: int, frame: Any) -> None:
        if self.depth and len(self.pending) < HELD_SIGNALS - 1:
            self.pending.append(signum)
            return
        self.pending.clear()
        raise _interruption(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.depth += 1
        signum = None
        try:
            yield
        finally:
            self.depth -= 1
            if not self.depth and self.pending:
                signum = self.pending[0]
                self.pending.clear()
        if signum is not None:
            raise _interruption(signum)


SIGNALS = _Signals()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM handled by SIGNALS while the block runs (in the main thread; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, SIGNALS.handle) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def preflight(tag: str) -> tuple[Any, docker_env.ImageInfo]:
    """The engine answers, the image exists and carries this project's labels (else one line, exit 2)."""
    try:
        engine = docker_env.client()
        info = docker_env.inspect(engine, tag)
    except (docker_env.DockerUnavailable, docker_env.NoSuchImage) as exc:
        raise UsageError(str(exc)) from None
    absent = labels.missing(info.labels)
    if absent:
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
    cmd += ["-rfEs", "--tb=short", "-o", "junit_logging=no"]
    if select:
        cmd += ["-k", select]
    return cmd


def run(
    tag: str,
    *,
    junit: Path | None = None,
    select: str | None = None,
    verbose: bool = False,
    out: TextIO | None = None,
    extra_env: dict[str, str] | None = None,
) -> int:
    out = out or sys.stdout
    with stop_on_signals():
        engine, _info = preflight(tag)
        run_id = docker_env.new_run_id()
        with tempfile.TemporaryDirectory(prefix="sm120-verify-") as scratch:
            junit_path = (junit or Path(scratch) / "junit.xml").resolve()
            junit_path.parent.mkdir(parents=True, exist_ok=True)
            report_path = Path(scratch) / "report.json"
            env = {
                **os.environ,
                **(extra_env or {}),
                "SM120_IMAGE": tag,
                "SM120_VERIFY_RUN": run_id,
                "SM120_VERIFY_REPORT": str(report_path),
                "PYTHONDONTWRITEBYTECODE": "1",
            }
            interrupted = True
            try:
                status = _run_pytest(_pytest_command(junit_path, select, verbose), env)
                interrupted = status == 2
            finally:
                _remove_run(engine, run_id, interrupted, out)
            return _conclude(status, report.Report.load(report_path), report.junit_outcome(junit_path), out)


def _remove_run(engine: Any, run_id: str, interrupted: bool, out: TextIO) -> None:
    """Remove what is left of the run's containers; another Ctrl-C waits for this (a third one leaves at once)."""
    with SIGNALS.held():
        left = docker_env.remove_run(engine, run_id, settle_s=SETTLE_S if interrupted else 0.0)
        if left:
            print(f"verify: removed {len(left)} container(s) the suite left behind: {', '.join(left)}", file=out)
        stuck = [(c.get("Names") or [c["Id"]])[0].lstrip("/") for c in docker_env.run_containers(engine, run_id)]
        if stuck:
            print(f"verify: could not remove {', '.join(stuck)}: remove them with docker rm -f", file=sys.stderr)


def _run_pytest(cmd: Sequence[str], env: dict[str, str] | None) -> int:
    """pytest, until it ends, in a process group of its own: Ctrl-C (which reaches the terminal's foreground group,
    this process) and SIGTERM (this process only) are passed on once, as SIGINT, to its whole group (pytest and the
    docker CLIs it runs); what is left of the group after GRACE_S is killed (at once on another Ctrl-C)."""
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


def _conclude(status: int, found: report.Report | None, outcome: report.Outcome | None, out: TextIO) -> int:
    if status == 2:  # pytest: interrupted
        raise KeyboardInterrupt
    if found is not None:
        print("", file=out)
        print(report.table(found), file=out)
        if found.warnings:
            print(f"{len(found.warnings)} warning(s): see the suite's summary above", file=out)
    if status == 0:
        return 0
    if status == 1 and outcome is not None and outcome.failed:
        shown = outcome.failed[:6]
        more = len(outcome.failed) - len(shown)
        names = ", ".join(shown) + (f" and {more} more (see above)" if more else "")
        raise CheckFailed(f"{len(outcome.failed)} of {outcome.tests} checks failed: {names}")
    if status == 5:
        raise CheckFailed("no checks were collected (see -k)")
    raise CheckFailed(f"the image suite did not run to the end (pytest exit status {status}); see its output above")
