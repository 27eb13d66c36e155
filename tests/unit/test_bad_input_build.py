"""T0: `build.py build --metadata-file` is checked before anything runs (issue 35, class 5): buildx writes the file
only after the build and the push, so a missing folder, a folder given as the file or a read-only folder would fail
after the hours of a build. Each is one line and exit 2, before the bases, the digests or buildx; a good path builds
(here: --print)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.build import bases, buildx, digests
from tests.helpers import ROOT, run_cli, unshare_or_skip

BAD = [
    ("missing-folder", lambda tmp: tmp / "no-such" / "m.json", "no folder {tmp}/no-such (buildx writes it after"),
    ("under-a-file", lambda tmp: tmp / "file" / "m.json", "no folder {tmp}/file"),
    ("a-folder", lambda tmp: tmp, "a folder; give a file name, e.g. {tmp}/metadata.json"),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_metadata_file_buildx_could_not_write_is_refused_first(capsys, monkeypatch, tmp_path, make, expected):
    def ran(*args, **kwargs):
        raise AssertionError("ran before --metadata-file was checked")

    for module, name in ((bases, "make"), (buildx, "run"), (digests, "pin")):
        monkeypatch.setattr(module, name, ran)
    (tmp_path / "file").write_text("")
    path = make(tmp_path)
    rc, _, err = run_cli(capsys, "build", "--push", "--metadata-file", str(path))
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err[-1500:])
    assert lines[0].startswith(f"build.py build: error: --metadata-file {path}: "), lines
    assert expected.format(tmp=tmp_path) in lines[0], lines


def test_a_metadata_file_in_a_read_only_folder_is_refused_first():
    unshare = unshare_or_skip()
    ro = Path("/tmp") / f"sm120-ro-metadata-{os.getpid()}"
    ro.mkdir(exist_ok=True)
    try:
        script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
        argv = [sys.executable, str(ROOT / "build.py"), "build", "--print", "--metadata-file", str(ro / "m.json")]
        proc = subprocess.run([*unshare, "sh", "-c", script, "sh", str(ro), *argv], capture_output=True, text=True)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip() == (
            f"build.py build: error: --metadata-file {ro / 'm.json'}: cannot be written (no permission, or a read-only "
            "mount)"
        )
    finally:
        ro.rmdir()


def test_a_metadata_file_in_a_folder_that_exists_is_passed_to_buildx(capsys, tmp_path):
    rc, out, err = run_cli(capsys, "build", "--print", "--metadata-file", str(tmp_path / "m.json"))
    assert rc == 0, err
    assert f"--metadata-file {tmp_path / 'm.json'}" in out
