"""Run the image suite (sm120/verify/suite/) against one image, print what it found, and leave nothing running.

pytest runs in a child process with SM120_IMAGE=TAG; the containers it starts carry this run's label and are
removed by the suite's own fixtures, and again here afterwards, whatever happened (a failed check, Ctrl-C,
SIGTERM from a CI runner, a crashed pytest).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .. import image_plan, labels
from ..errors import CheckFailed, UsageError
from . import docker_env, report

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(__file__).resolve().parent / "suite"  # the checks, shipped with build.py
GRACE_S = 60  # how long pytest may take to tear its containers down after Ctrl-C before it is killed
SETTLE_S = 3.0  # after an interruption: how long no container of the run may appear before cleanup ends


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
            left = docker_env.remove_run(engine, run_id, settle_s=SETTLE_S if interrupted else 0.0)
            if left:
                print(f"verify: removed {len(left)} container(s) the suite left behind: {', '.join(left)}", file=out)
        found = report.Report.load(report_path)
        outcome = report.junit_outcome(junit_path)
    return _conclude(status, found, outcome, out)


def _run_pytest(cmd: Sequence[str], env: dict[str, str]) -> int:
    """pytest in the foreground; Ctrl-C reaches it too (same process group) and it tears down its fixtures.
    SIGTERM (a CI runner cancelling) is passed on to it as SIGINT, so it tears down the same way."""
    proc = subprocess.Popen(list(cmd), cwd=ROOT, env=env)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


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
