"""T0: API_KEY_FILE (issue 29). The key file's checks (key_file.read), the entrypoint as the image runs it (the
key masked in --dry-run, the log and every error; `--api-key` on a command line refused; the warning without a
key), the exec through _with_api_key.py (the key in SGLang's sys.argv, never in its command line or
environment) and the launcher itself (stdout, stderr, logging and tracebacks masked)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm120.image.entrypoint import key_file
from sm120.image.entrypoint.key_file import MASK
from tests.entrypoint_helpers import clean_env, run_entrypoint, standin_run, stderr_lines

KEY = "k3y-Of-test-0123456789abcdef"
LAUNCHER = key_file.LAUNCHER


def write_key(path: Path, data: str | bytes = KEY + "\n") -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def no_key_anywhere(proc: subprocess.CompletedProcess[str], key: str = KEY) -> None:
    assert key not in proc.stdout and key not in proc.stderr, (proc.stdout, proc.stderr)


@pytest.fixture
def run(tmp_path: Path) -> dict:
    """The entrypoint with the stand-in SGLang (its parser takes --api-key), 8 stand-in GPUs and two models."""
    return standin_run(tmp_path, TP_SIZE="8")


def dry_run(run: dict, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_entrypoint(["eagle3", "--dry-run", *args], {**run["env"], **env})


# --------------------------------------------------------------------------------------------------
# The key file
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [KEY, KEY + "\n", KEY + "\r\n", f"  {KEY}\t\n\n", "-" + KEY, "x" * key_file.MAX_BYTES],
    ids=["bare", "newline", "crlf", "surrounding-space", "leading-dash", "largest"],
)
def test_a_good_key_file_is_read(tmp_path, data):
    key = key_file.read(str(write_key(tmp_path / "key", data)))
    assert key.value == data.strip()
    assert KEY not in repr(key) and str(key) == MASK


def test_a_kubernetes_secret_volume_is_read_through_its_links(tmp_path):
    """A Secret volume: NAME -> ..data/NAME, ..data -> ..2024_01_01_00_00_00.1/ (kubelet's atomic writer)."""
    stamp = tmp_path / "..2024_01_01_00_00_00.1"
    stamp.mkdir()
    write_key(stamp / "api-key")
    (tmp_path / "..data").symlink_to(stamp.name)
    (tmp_path / "api-key").symlink_to("..data/api-key")
    assert key_file.read(str(tmp_path / "api-key")).value == KEY


BAD_FILES = [
    # id, content (None: not written), the problem named
    ("empty", "", "is empty"),
    ("blank", " \n\n\t\n", "is empty"),
    ("two-lines", f"{KEY}\nsecond-line-of-it\n", "holds 2 lines"),
    ("cr-lines", f"{KEY}\rsecond-line-of-it", "holds 2 lines"),
    ("too-large", "x" * (key_file.MAX_BYTES + 1), f"is larger than {key_file.MAX_BYTES} bytes"),
    ("space-inside", f"{KEY} {KEY}", "holds a space"),
    ("tab-inside", f"{KEY}\t{KEY}", "holds a space, a control character"),
    ("nul-inside", f"{KEY}\0{KEY}", "control character"),
    ("non-ascii", f"{KEY}\N{EURO SIGN}", "non-ASCII character"),
    ("too-short", "abc1234", f"shorter than {key_file.MIN_CHARS} characters"),
    ("missing", None, "no such file"),
]


@pytest.mark.parametrize(("content", "problem"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_a_bad_key_file_names_the_problem_never_the_content(tmp_path, content, problem):
    path = tmp_path / "key"
    if content is not None:
        write_key(path, content)
    with pytest.raises(key_file.KeyFileError) as caught:
        key_file.read(str(path))
    text = f"{caught.value.problem} {caught.value.hint}"
    assert problem in caught.value.problem
    for secret in (KEY, "second-line-of-it", "abc1234"):
        assert secret not in text


def test_a_directory_and_a_fifo_are_refused_without_waiting(tmp_path):
    with pytest.raises(key_file.KeyFileError, match="not a regular file"):
        key_file.read(str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(key_file.KeyFileError, match="not a regular file"):
        key_file.read(str(fifo))  # no writer: a plain open() would wait for one forever
    assert time.monotonic() - started < 5


@pytest.mark.skipif(os.getuid() == 0, reason="root reads a mode-000 file: the T2 suite checks it as uid 1000")
def test_an_unreadable_file_names_the_uid_owner_and_mode(tmp_path):
    path = write_key(tmp_path / "key")
    path.chmod(0)
    with pytest.raises(key_file.KeyFileError) as caught:
        key_file.read(str(path))
    assert f"uid {os.getuid()} cannot read it" in caught.value.problem and "mode 0000" in caught.value.problem


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("node-0.cluster", False),
    ],
)
def test_loopback_hosts(host, loopback):
    assert key_file.is_loopback(host) is loopback


# --------------------------------------------------------------------------------------------------
# The entrypoint: --dry-run, errors, refusals, the warning
# --------------------------------------------------------------------------------------------------


def test_dry_run_prints_the_key_masked_last_and_checked_by_the_parser(run, tmp_path):
    key = write_key(tmp_path / "key")
    proc = dry_run(run, API_KEY_FILE=str(key))
    assert proc.returncode == 0, proc.stderr
    no_key_anywhere(proc)
    words = shlex.split(proc.stdout.strip().splitlines()[-1])
    assert words[-2:] == ["--api-key", MASK], words
    assert "# the command is accepted by SGLang 9.9.9's own parser" in proc.stdout
    assert f"[entrypoint] API key from API_KEY_FILE='{key}'" in proc.stderr
    assert "no API key" not in proc.stderr


BAD_ENTRYPOINT_FILES = [c for c in BAD_FILES if c[0] in ("empty", "two-lines", "too-large", "space-inside", "missing")]


@pytest.mark.parametrize(
    ("content", "problem"), [c[1:] for c in BAD_ENTRYPOINT_FILES], ids=[c[0] for c in BAD_ENTRYPOINT_FILES]
)
def test_a_bad_key_file_exits_2_naming_the_file(run, tmp_path, content, problem):
    path = tmp_path / "key"
    if content is not None:
        write_key(path, content)
    proc = dry_run(run, API_KEY_FILE=str(path))
    assert proc.returncode == 2, proc.stderr
    lines = stderr_lines(proc)
    assert 1 <= len(lines) <= 3 and "Traceback" not in proc.stderr
    if content is None:  # nothing there: the value may be a key pasted where the path goes, and is never shown
        assert lines[0] == (
            "entrypoint: error: API_KEY_FILE does not name a readable file (its value is not shown: it may be the "
            "key itself)"
        ), lines
        assert str(path) not in proc.stderr
    else:
        assert lines[0].startswith(f"entrypoint: error: API_KEY_FILE='{path}': ") and problem in lines[0], lines
    no_key_anywhere(proc)
    assert "second-line-of-it" not in proc.stderr


def test_a_directory_as_key_file_exits_2(run, tmp_path):
    proc = dry_run(run, API_KEY_FILE=str(tmp_path))
    assert proc.returncode == 2 and "is not a regular file" in proc.stderr, proc.stderr


def test_an_empty_api_key_file_counts_as_unset(run):
    proc = dry_run(run, API_KEY_FILE="  ")
    assert proc.returncode == 0, proc.stderr
    assert "--api-key" not in proc.stdout.splitlines()[-1]


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("after --", ["--", "--api-key", KEY]),
        ("after --", ["--", f"--api-key={KEY}"]),
        ("after --", ["--", "--api-k", KEY]),  # argparse would take the prefix
        ("in EXTRA_ARGS", {"EXTRA_ARGS": f"--mem-fraction-static 0.8 --api-key {KEY}"}),
        ("in EXTRA_ARGS", {"EXTRA_ARGS": f"--api={KEY}"}),
    ],
)
@pytest.mark.parametrize("with_file", [False, True], ids=["no-file", "with-file"])
def test_a_key_on_a_command_line_is_refused_pointing_at_api_key_file(run, tmp_path, where, value, with_file):
    env = {"API_KEY_FILE": str(write_key(tmp_path / "key", "another-key-0123456789"))} if with_file else {}
    args = value if isinstance(value, list) else []
    env.update(value if isinstance(value, dict) else {})
    proc = dry_run(run, *args, **env)
    assert proc.returncode == 2, proc.stderr
    lines = stderr_lines(proc)
    assert len(lines) == 2 and f"({where}): a key on a command line ends up in shell histories" in lines[0], lines
    assert "set API_KEY_FILE to it" in lines[1]
    no_key_anywhere(proc)
    assert "another-key-0123456789" not in proc.stderr + proc.stdout


def test_a_longer_option_that_starts_like_api_key_is_not_refused_as_one(run):
    proc = dry_run(run, "--", "--mem-fraction-static", "0.8")
    assert proc.returncode == 0, proc.stderr


def test_an_option_sglang_refuses_with_a_key_is_refused_first(run, tmp_path):
    key = write_key(tmp_path / "key")
    proc = dry_run(run, "--", "--tokenizer-worker-num", "2", API_KEY_FILE=str(key))
    assert proc.returncode == 2, proc.stderr
    assert "SGLang serves no API key with several tokenizer workers" in proc.stderr
    assert dry_run(run, "--", "--tokenizer-worker-num", "1", API_KEY_FILE=str(key)).returncode == 0


@pytest.mark.parametrize(
    ("host", "warned"),
    [(None, True), ("0.0.0.0", True), ("10.0.0.5", True), ("::", True), ("127.0.0.1", False), ("::1", False)],
)
def test_no_key_beyond_loopback_is_one_warning_line(run, host, warned):
    proc = dry_run(run, **({"HOST": host} if host else {}))
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in stderr_lines(proc) if "with no API key" in line]
    assert len(warnings) == (1 if warned else 0), proc.stderr
    if warned:
        shown = f"HOST='{host}'" if host else "--host '0.0.0.0' (default)"
        assert warnings[0] == (
            f"[entrypoint] warning: SGLang listens on {shown} with no API key: whoever reaches port 30000 can use "
            "it; set API_KEY_FILE (see --help)"
        )


def test_no_warning_on_the_nodes_that_serve_no_http(run):
    """SGLang's nodes of rank > 0 run schedulers only: the API (and its key) is node 0's."""
    env = {"NNODES": "2", "DIST_INIT_ADDR": "10.0.0.1:5000"}
    assert "with no API key" not in dry_run(run, NODE_RANK="1", **env).stderr
    assert "with no API key" in dry_run(run, NODE_RANK="0", **env).stderr


def test_help_lists_api_key_file(run):
    proc = run_entrypoint(["--help"], run["env"])
    assert proc.returncode == 0
    assert "API_KEY_FILE" in proc.stdout and "-e API_KEY_FILE=/run/secrets/api_key" in proc.stdout


# --------------------------------------------------------------------------------------------------
# The exec: through the launcher, the key in sys.argv only
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [KEY, "-starts-with-a-dash-0123"], ids=["plain", "leading-dash"])
def test_the_server_gets_the_key_in_sys_argv_never_in_its_command_line_or_environment(run, tmp_path, key):
    path = write_key(tmp_path / "key", key)
    env = {**run["env"], "API_KEY_FILE": str(path), "FAKE_SGLANG_LOG_ARGS": "1"}
    proc = run_entrypoint(["baseline"], env)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "server.json").read_text())
    assert record["argv"][-1] == f"--api-key={key}"
    assert record["argv"].count(f"--api-key={key}") == 1 and "--api-key" not in record["argv"]
    assert record["cmdline"][1:4] == [str(LAUNCHER), "-m", "sglang.launch_server"]
    assert record["cmdline"][4:] == record["argv"][:-1], "the launcher passes SGLang's options as they are"
    assert not any(key in word for word in record["cmdline"]), record["cmdline"]
    assert key not in record["environ"] and f"API_KEY_FILE={path}" in record["environ"]
    # The exec line names the launcher and holds no key; SGLang's own log (its ServerArgs) shows the mask.
    (exec_line,) = [line for line in proc.stderr.splitlines() if line.startswith("[entrypoint] exec ")]
    assert f"{LAUNCHER} -m sglang.launch_server --model-path" in exec_line and "--api-key" not in exec_line
    assert f"--api-key={MASK}" in proc.stderr and f"stdout: --model-path {run['tmp'] / 'target'}" in proc.stdout
    no_key_anywhere(proc, key)


def test_without_a_key_the_server_is_started_as_before(run, tmp_path):
    proc = run_entrypoint(["baseline"], run["env"])
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "server.json").read_text())
    assert record["cmdline"][1:3] == ["-m", "sglang.launch_server"]
    assert not any(a.startswith("--api-key") for a in record["argv"])


# --------------------------------------------------------------------------------------------------
# The launcher by itself
# --------------------------------------------------------------------------------------------------

PROBE = """
import logging, os, sys, warnings
logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)  # as SGLang's configure_logger
logging.getLogger("probe").info("server_args=%r", sys.argv)
print("printed", *sys.argv[1:])
warnings.warn("warned " + sys.argv[-1])
print("path0", sys.path[0], "name", __name__, file=sys.stderr)
if os.environ.get("PROBE_RAISE"):
    raise RuntimeError("raised " + sys.argv[-1])
sys.exit(int(os.environ.get("PROBE_STATUS", "0")))
"""


def launcher(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(**env),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("form", ["module", "script"])
def test_the_launcher_runs_the_module_with_the_key_appended_and_masks_its_output(tmp_path, form):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    key = write_key(tmp_path / "key")
    args = ["-m", "probe_mod"] if form == "module" else [str(tmp_path / "probe_mod.py")]
    proc = launcher([*args, "--model-path", "/m"], tmp_path, API_KEY_FILE=str(key), PROBE_STATUS="7")
    assert proc.returncode == 7, proc.stderr  # the module's exit status is the process's
    no_key_anywhere(proc)
    assert f"printed --model-path /m --api-key={MASK}" in proc.stdout
    assert f"server_args=['{tmp_path / 'probe_mod.py'}', '--model-path', '/m', '--api-key={MASK}']" in proc.stderr
    assert f"warned --api-key={MASK}" in proc.stderr
    # sys.path[0] as `python3 -m` (the working directory) or `python3 SCRIPT` (its directory) sets it: never the
    # launcher's own directory, whose module names would shadow others.
    assert f"path0 {tmp_path} name __main__" in proc.stderr


def test_a_traceback_shows_the_key_masked(tmp_path):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    proc = launcher(["-m", "probe_mod"], tmp_path, API_KEY_FILE=str(write_key(tmp_path / "key")), PROBE_RAISE="1")
    assert proc.returncode == 1 and f"RuntimeError: raised --api-key={MASK}" in proc.stderr, proc.stderr
    no_key_anywhere(proc)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["-m", "probe_mod"], {}, "_with_api_key.py needs API_KEY_FILE"),
        (["-m", "probe_mod"], {"API_KEY_FILE": "KEYFILE-TWO-LINES"}, "holds 2 lines"),
        ([], {"API_KEY_FILE": "KEYFILE"}, "usage: _with_api_key.py -m MODULE"),
    ],
)
def test_the_launcher_refuses_without_a_good_key(tmp_path, args, env, message):
    write_key(tmp_path / "key")
    write_key(tmp_path / "two", f"{KEY}\n{KEY}\n")
    paths = {"KEYFILE": str(tmp_path / "key"), "KEYFILE-TWO-LINES": str(tmp_path / "two")}
    proc = launcher(args, tmp_path, **{k: paths.get(v, v) for k, v in env.items()})
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    no_key_anywhere(proc)
