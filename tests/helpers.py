"""Helpers shared by the test suites (import as `tests.helpers`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def track_list() -> str:
    """build.toml's tracks as the one-line errors list them, oldest first ("0.5.9, 0.5.23")."""
    from packaging.version import Version

    from sm120.plan import config as cfg

    return ", ".join(sorted(cfg.load().tracks, key=Version))


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


def write_config(tmp_path: Path, text: str | None = None, edit=None) -> Path:
    """A copy of the real build.toml (and the patch files it names) in tmp_path, optionally edited."""
    source = (ROOT / "build.toml").read_text()
    if edit is not None:
        source = edit(source)
    if text is not None:
        source = text
    for patch in (ROOT / "patches").rglob("*.patch"):
        target = tmp_path / patch.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(patch.read_bytes())
    path = tmp_path / "build.toml"
    path.write_text(source)
    return path


def docker_or_skip() -> Any:
    """A Docker SDK client of the engine (sm120.verify.docker_env.client), or the test is skipped saying why."""
    import pytest

    from sm120.verify import docker_env

    try:
        return docker_env.client()
    except docker_env.DockerUnavailable as exc:
        pytest.skip(str(exc))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def without_track(text: str, version: str) -> str:
    """build.toml's text without [tracks."version"] (its tables, as `build.py track add` finds a track's block), with
    defaults.sglang moved to the newest track left when it named that one, and without the rules of that track alone:
    the file `track add` starts from."""
    import re

    from packaging.version import Version

    from sm120.errors import UsageError
    from sm120.track import stanza as track_stanza

    lines = text.splitlines(keepends=True)
    while True:
        try:
            first, end = track_stanza.track_span("".join(lines), version)
        except UsageError:  # no table of that track left
            break
        lines[first:end] = []
    out = "".join(lines)
    tracks = set(re.findall(r'^\[\[?tracks\."([^"]+)"', out, re.MULTILINE))
    newest = max(tracks, key=Version)
    out = re.sub(rf'^(sglang\s*=\s*)"{re.escape(version)}"', rf'\g<1>"{newest}"', out, count=1, flags=re.MULTILINE)
    return _without_rules_of_no_track(out)


def _without_rules_of_no_track(text: str) -> str:
    """Without the rules written once ([[runtime]], [[left_out]], [[not_shipped]]) whose range holds for no track left
    (an entry for no track is a config error)."""
    import tomllib

    from sm120.plan import config as cfg

    data = tomllib.loads(text)
    lines = text.splitlines(keepends=True)
    for key in cfg.RULES:
        headers = [i for i, line in enumerate(lines) if line.rstrip() == f"[[{key}]]"]
        for i, entry in reversed(list(zip(headers, data.get(key, []), strict=True))):
            if not any(cfg.in_range(entry.get("sglang"), v) for v in data["tracks"]):
                end = next(n for n in range(i, len(lines)) if not lines[n].strip())  # an entry ends at a blank line
                del lines[i : end + 1]
    out = "".join(lines)
    left = tomllib.loads(out)
    assert all(entry in data[key] for key in cfg.RULES for entry in left.get(key, [])), "an entry was cut in two"
    return out


def unshare_or_skip() -> list[str]:
    """`unshare -Urm`: a user and mount namespace of the test's own, for real bind mounts, read-only mounts and
    small tmpfs (root's chmod binds nothing); the test is skipped, saying why, where that is not allowed."""
    import shutil

    import pytest

    exe = shutil.which("unshare")
    if exe is None or subprocess.run([exe, "-Urm", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("unshare -Urm is not allowed here: no mount namespace of the test's own")
    return [exe, "-Urm"]


def process_alive(pid: int) -> bool:
    """Running (a zombie, or a pid gone, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def process_gone(pid: int, timeout: float = 10) -> bool:
    """Whether pid stops running within timeout s (a bound for an end already signalled, not a wait for work)."""
    end = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


MAKE_TOKENIZER = """
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
corpus = ["Request tok write a function code story", "0 1 2 3 4 5 6 7 8 9 ."]
tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained("/tok")
"""


def offline_tokenizer(dc: Any, image: str, directory: Path) -> Path:
    """A small tokenizer (the `tokenizers` library's WordLevel model, saved by transformers) made offline in a
    container of `image`, as this user, into `directory`: what bench_serving loads in place of a model's."""
    from sm120.plan import image_plan

    volumes = {str(directory): {"bind": "/tok", "mode": "rw"}}
    create = {"entrypoint": [], "user": f"{os.getuid()}:{os.getgid()}", "network_mode": "none", "volumes": volumes}
    image_plan.output(
        dc, image, "test", command=["python3", "-c", MAKE_TOKENIZER], environment={"HOME": "/tmp"}, **create
    )
    assert (directory / "tokenizer.json").is_file()
    return directory
