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
