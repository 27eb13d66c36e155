"""T0: `build.py track add` on a checkout it cannot write (issue 35, class 5), on the recorded PyPI metadata of
tests/unit/test_track_add.py: `--dry-run` writes nothing, not even a temporary file, so it prints the stanza where
every write fails; without it, one line and exit 2 naming build.toml, no traceback, build.toml unchanged."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sm120.track import facts as track_facts
from tests.helpers import run_cli, without_track, write_config
from tests.unit.test_track_add import VERSION, Recorded

CASES = [
    # (id, extra arguments, exit status, what stdout holds, the one line on stderr ends with)
    ("dry-run", ["--dry-run"], 0, f'\n[tracks."{VERSION}"]\n', None),
    ("write", [], 2, "", "cannot write it (Read-only file system); nothing written"),
]


@pytest.mark.parametrize(("extra", "code", "printed", "err_end"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_read_only_checkout(capsys, monkeypatch, tmp_path, extra, code, printed, err_end):
    config = write_config(tmp_path, edit=lambda text: without_track(text, VERSION))
    before = sorted(p.name for p in tmp_path.iterdir()), config.read_text()
    monkeypatch.setattr(track_facts, "PyPISources", lambda progress=None: Recorded())

    def read_only(self, *args, **kwargs):  # every file write of the command, as on a read-only mount
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "write_text", read_only)
    monkeypatch.setattr(Path, "write_bytes", read_only)
    rc, out, err = run_cli(capsys, "track", "add", VERSION, *extra, "--config", str(config))
    assert rc == code and "Traceback" not in err, (rc, err[-1500:])
    assert printed in out, out[:200]
    if err_end is not None:
        lines = [line for line in err.splitlines() if line.startswith("build.py")]
        assert len(lines) == 1 and lines[0].endswith(f"{config}: {err_end}"), err
    assert (sorted(p.name for p in tmp_path.iterdir()), config.read_text()) == before
