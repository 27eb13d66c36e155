"""T0: the runtime stage's venv step (docker/stages/venv_copy.py, run as the Dockerfile runs it): the venv copied
without the plan's not_shipped globs (a directory with everything below it, files by pattern, `*` across
directories), links kept as links and modes kept; a glob that matches nothing stops the step naming it; a path
outside site-packages is refused. And the plan hands every track's not_shipped entries to the build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.plan import resolve as planmod
from tests.helpers import ROOT

SCRIPT = ROOT / "docker" / "stages" / "venv_copy.py"
SITE = "lib/python3.11/site-packages"


def tree(root: Path) -> Path:
    site = root / SITE
    files = {
        "keep/__init__.py": "x",
        "pkg/cu12/lib/libfoo.so": "1" * 100,
        "pkg/cu13/lib/libfoo.so": "2" * 100,
        "pkg/_ir.cu12.cpython-311.so": "3" * 50,
        "pkg/_ir.cu13.cpython-311.so": "4" * 50,
        "lib/tests/test_a.py": "t",
        "other/deep/tests/test_b.py": "t",
        "other/deep/module.py": "m",
    }
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (site / "keep" / "tool").write_text("#!/bin/sh\n")
    (site / "keep" / "tool").chmod(0o755)
    os.symlink("cu13", site / "pkg" / "current")
    (root / "bin").mkdir()
    os.symlink("python3.11", root / "bin" / "python3")
    return root


def run(source: Path, dest: Path, globs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(source), str(dest), SITE],
        env={**os.environ, "NOT_SHIPPED": globs},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_globs_are_left_out_and_the_rest_is_copied_as_it_was(tmp_path):
    source, dest = tree(tmp_path / "venv"), tmp_path / "out"
    proc = run(source, dest, "pkg/cu12 pkg/_ir.cu12.* lib/tests other/*/tests")
    assert proc.returncode == 0, proc.stderr
    site = dest / SITE
    assert not (site / "pkg/cu12").exists() and not (site / "pkg/_ir.cu12.cpython-311.so").exists()
    assert not (site / "lib/tests").exists() and not (site / "other/deep/tests").exists()
    assert (site / "pkg/cu13/lib/libfoo.so").read_text() == "2" * 100
    assert (site / "pkg/_ir.cu13.cpython-311.so").exists() and (site / "other/deep/module.py").exists()
    assert os.readlink(site / "pkg/current") == "cu13" and os.readlink(dest / "bin/python3") == "python3.11"
    assert (site / "keep/tool").stat().st_mode & 0o777 == 0o755
    assert "[venv] left out pkg/cu12" in proc.stdout and "[venv] copied" in proc.stdout


def test_a_glob_that_matches_nothing_stops_the_step_naming_it(tmp_path):
    proc = run(tree(tmp_path / "venv"), tmp_path / "out", "pkg/cu12 pkg/cu11")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"[venv] error: not_shipped 'pkg/cu11' matches nothing in {SITE}: the release changed; "
        "fix or drop that entry in build.toml"
    ]


@pytest.mark.parametrize("glob", ["/etc/passwd", "../../bin", "pkg/../../x"])
def test_a_path_outside_site_packages_is_refused(tmp_path, glob):
    proc = run(tree(tmp_path / "venv"), tmp_path / "out", glob)
    assert proc.returncode == 2 and "is not a path below site-packages" in proc.stderr


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_plan_hands_every_not_shipped_glob_to_the_build(version):
    plan = planmod.load_plan(profile="offline", sglang=version)
    globs = [g for entry in plan.not_shipped for g in entry.paths]
    assert plan.build_args["NOT_SHIPPED"].split() == globs
    assert all(entry.reason and entry.source for entry in plan.not_shipped)
