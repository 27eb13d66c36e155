"""T0: `allreduce-sweep --json FILE` that could not be written is refused before the sweep (issue 35, class 5): the
file is written after minutes of measuring, so a missing folder, a folder, a path under a file or a read-only mount
is one line and exit 2 first, before a GPU is looked at."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.image.allreduce import __main__ as sweep_main
from tests.helpers import ROOT, unshare_or_skip

BAD = [
    ("missing-folder", lambda tmp: tmp / "no-such" / "out.json", "not a file in an existing directory"),
    ("a-folder", lambda tmp: tmp, "not a file in an existing directory"),
    ("under-a-file", lambda tmp: tmp / "file" / "out.json", "not a file in an existing directory"),
]


def _unused(*args, **kwargs):
    raise AssertionError("the sweep started before --json was checked")


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_json_path_the_sweep_could_not_write_is_refused_first(capsys, tmp_path, make, expected):
    (tmp_path / "file").write_text("")
    path = make(tmp_path)
    assert sweep_main.main(["--json", str(path)], make_machine=_unused, launcher=_unused) == 2
    err = capsys.readouterr().err
    assert err == f"allreduce-sweep: error: --json {str(path)!r}: {expected}\n", err


def test_a_json_path_on_a_read_only_mount_is_refused_first():
    unshare = unshare_or_skip()
    ro = Path("/tmp") / f"sm120-ro-sweep-{os.getpid()}"
    ro.mkdir(exist_ok=True)
    try:
        script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
        argv = [sys.executable, "-m", "sm120.image.allreduce", "--json", str(ro / "out.json")]
        proc = subprocess.run(
            [*unshare, "sh", "-c", script, "sh", str(ro), *argv], capture_output=True, text=True, cwd=ROOT, check=False
        )
        assert proc.returncode == 2, (proc.returncode, proc.stderr)
        assert proc.stderr == (
            f"allreduce-sweep: error: --json {str(ro / 'out.json')!r}: cannot be written (no permission, or a "
            "read-only mount)\n"
        )
    finally:
        ro.rmdir()
