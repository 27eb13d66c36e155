"""Helpers shared by the test suites (import as `tests.helpers`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_build_py(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """build.py as a user runs it: a separate process, its exit status and its output."""
    return subprocess.run(
        [sys.executable, str(ROOT / "build.py"), *args], capture_output=True, text=True, cwd=cwd, env=env, check=False
    )


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """build.py's main in this process (a second faster than a process): exit status, stdout, stderr."""
    from sm120 import cli

    try:
        rc = cli.main(list(args))
    except SystemExit as exc:  # argparse's own usage errors
        rc = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err
