"""T0: SGLang's admin routes and ADMIN_API_KEY_FILE (issue 35), the key's alphabet, the key options refused.

- With API_KEY_FILE and no ADMIN_API_KEY_FILE, SGLang gets an admin key nobody knows (made in the launcher's process,
  never written), so its admin routes are closed to API-key holders; --dry-run shows `--admin-api-key '********'`
  and the log says how to open them. Where the installed SGLang has no --admin-api-key, nothing is added.
- ADMIN_API_KEY_FILE is read and checked like API_KEY_FILE and reaches SGLang in-process as `--admin-api-key=KEY`
  (before `--api-key=KEY`, which stays last); on no command line, in no output.
- `--admin-api-key`, `--api-key` and every prefix argparse could take for one are refused on command lines; so is
  `--grpc-mode` with a key (SGLang's gRPC server checks none).
- A key holds only A-Z a-z 0-9 . _ ~ + / = - (a quote or a backslash would be escaped in SGLang's logged ServerArgs,
  past the mask); any other character is refused naming the rule, never the key.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.image.entrypoint import key_file
from sm120.image.entrypoint.key_file import MASK
from tests.entrypoint_helpers import clean_env, run_entrypoint, standin_run, stderr_lines

KEY = "k3y-Of-test-0123456789abcdef"
ADMIN = "adm1n-Key-of-test-fedcba9876"
LAUNCHER = key_file.LAUNCHER
URLSAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def write_key(path: Path, key: str) -> Path:
    path.write_text(key + "\n")
    return path


def with_admin_option(site: Path) -> None:
    """The stand-in SGLang's parser with SGLang's --admin-api-key, --grpc-mode and --grpc-port (0.5.9 and 0.5.23
    have all three: tests/upstream/test_entrypoint_parser.py)."""
    path = site / "sglang" / "srt" / "server_args.py"
    anchor = '        parser.add_argument("--tokenizer-worker-num", type=int, default=1)\n'
    text = path.read_text()
    assert anchor in text
    more = (
        '        parser.add_argument("--admin-api-key")\n'
        '        parser.add_argument("--grpc-mode", action="store_true")\n'
        '        parser.add_argument("--grpc-port", type=int)\n'
    )
    path.write_text(text.replace(anchor, anchor + more))


@pytest.fixture
def run(tmp_path: Path) -> dict:
    """The stand-in SGLang that knows --admin-api-key (as 0.5.9 and 0.5.23 do), 8 stand-in GPUs, two models."""
    setup = standin_run(tmp_path, TP_SIZE="8")
    with_admin_option(setup["site"])
    setup["key"] = write_key(tmp_path / "api_key", KEY)
    setup["admin"] = write_key(tmp_path / "admin_key", ADMIN)
    return setup


@pytest.fixture
def old_run(tmp_path: Path) -> dict:
    """The stand-in SGLang as it is: no --admin-api-key."""
    setup = standin_run(tmp_path, TP_SIZE="8")
    setup["key"] = write_key(tmp_path / "api_key", KEY)
    setup["admin"] = write_key(tmp_path / "admin_key", ADMIN)
    return setup


def dry_run(run: dict, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_entrypoint(["baseline", "--dry-run", *args], {**run["env"], **env})


def words(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return shlex.split(proc.stdout.strip().splitlines()[-1])


def no_secret(proc: subprocess.CompletedProcess[str], *secrets: str) -> None:
    for secret in secrets or (KEY, ADMIN):
        assert secret not in proc.stdout + proc.stderr, (secret, proc.stdout, proc.stderr)


# --------------------------------------------------------------------------------------------------
# The admin routes closed by default, opened by ADMIN_API_KEY_FILE
# --------------------------------------------------------------------------------------------------


def test_an_api_key_alone_closes_the_admin_routes_and_says_how_to_open_them(run):
    proc = dry_run(run, API_KEY_FILE=str(run["key"]))
    assert proc.returncode == 0, proc.stderr
    assert words(proc)[-4:] == ["--admin-api-key", MASK, "--api-key", MASK], words(proc)
    notes = [line for line in stderr_lines(proc) if "admin routes closed" in line]
    assert len(notes) == 1 and "set ADMIN_API_KEY_FILE to open them" in notes[0], proc.stderr
    assert "accepted by SGLang 9.9.9's own parser" in proc.stdout
    no_secret(proc)


def test_an_sglang_without_admin_key_gets_none(old_run):
    proc = dry_run(old_run, API_KEY_FILE=str(old_run["key"]))
    assert proc.returncode == 0, proc.stderr
    assert words(proc)[-2:] == ["--api-key", MASK] and "--admin-api-key" not in proc.stdout
    assert "admin routes closed" not in proc.stderr


def test_admin_api_key_file_without_an_admin_option_in_sglang_is_refused(old_run):
    proc = dry_run(old_run, API_KEY_FILE=str(old_run["key"]), ADMIN_API_KEY_FILE=str(old_run["admin"]))
    assert proc.returncode == 2
    assert "ADMIN_API_KEY_FILE: SGLang 9.9.9 has no --admin-api-key" in proc.stderr
    no_secret(proc)


def test_admin_api_key_file_is_passed_masked_before_the_api_key(run):
    proc = dry_run(run, API_KEY_FILE=str(run["key"]), ADMIN_API_KEY_FILE=str(run["admin"]))
    assert proc.returncode == 0, proc.stderr
    assert words(proc)[-4:] == ["--admin-api-key", MASK, "--api-key", MASK], words(proc)
    assert f"[entrypoint] admin API key from ADMIN_API_KEY_FILE='{run['admin']}'" in proc.stderr
    assert "admin routes closed" not in proc.stderr
    no_secret(proc)


def test_an_admin_key_alone_leaves_the_other_routes_open_and_warns(run):
    proc = dry_run(run, ADMIN_API_KEY_FILE=str(run["admin"]))
    assert proc.returncode == 0, proc.stderr
    assert words(proc)[-2:] == ["--admin-api-key", MASK] and "--api-key" not in words(proc)
    assert "with no API key" in proc.stderr
    no_secret(proc)


def test_the_same_key_for_both_is_a_warning(run):
    proc = dry_run(run, API_KEY_FILE=str(run["key"]), ADMIN_API_KEY_FILE=str(run["key"]))
    assert proc.returncode == 0, proc.stderr
    assert "ADMIN_API_KEY_FILE holds the same key as API_KEY_FILE" in proc.stderr
    no_secret(proc)


@pytest.mark.parametrize("content", [None, "", f"{ADMIN}\n{ADMIN}\n", "short"], ids=["missing", "empty", "2", "short"])
def test_a_bad_admin_key_file_exits_2_naming_the_variable(run, tmp_path, content):
    path = tmp_path / "bad_admin"
    if content is not None:
        path.write_text(content)
    proc = dry_run(run, API_KEY_FILE=str(run["key"]), ADMIN_API_KEY_FILE=str(path))
    assert proc.returncode == 2
    assert stderr_lines(proc)[0].startswith("entrypoint: error: ADMIN_API_KEY_FILE"), proc.stderr
    no_secret(proc, KEY, ADMIN, "short")


def start(run: dict, **env: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = run_entrypoint(["baseline"], {**run["env"], "FAKE_SGLANG_LOG_ARGS": "1", **env})
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads((run["tmp"] / "server.json").read_text())


def test_a_start_passes_an_admin_key_nobody_knows_in_process_only(run):
    proc, record = start(run, API_KEY_FILE=str(run["key"]))
    *_, admin_arg, api_arg = record["argv"]
    assert api_arg == f"--api-key={KEY}" and admin_arg.startswith("--admin-api-key=")
    admin = admin_arg.split("=", 1)[1]
    assert len(admin) >= 40 and set(admin) <= URLSAFE  # secrets.token_urlsafe(32)
    assert not any(KEY in word or admin in word for word in record["cmdline"]), record["cmdline"]
    assert KEY not in record["environ"] and admin not in record["environ"]
    (exec_line,) = [line for line in proc.stderr.splitlines() if line.startswith("[entrypoint] exec ")]
    assert "SM120_ADMIN_ROUTES=closed" in exec_line and f"{LAUNCHER} -m sglang.launch_server" in exec_line
    assert "--admin-api-key" not in exec_line and "--api-key" not in exec_line
    assert f"--admin-api-key={MASK}" in proc.stderr  # the stand-in logs its argv, as SGLang its ServerArgs
    no_secret(proc, KEY, admin)
    _, again = start(run, API_KEY_FILE=str(run["key"]))
    assert again["argv"][-2] != admin_arg, "a fresh admin key at each start"


def test_a_start_passes_the_admin_key_file_in_process_only(run):
    proc, record = start(run, API_KEY_FILE=str(run["key"]), ADMIN_API_KEY_FILE=str(run["admin"]))
    assert record["argv"][-2:] == [f"--admin-api-key={ADMIN}", f"--api-key={KEY}"]
    assert not any(KEY in word or ADMIN in word for word in record["cmdline"])
    assert ADMIN not in record["environ"] and "SM120_ADMIN_ROUTES" not in record["environ"]
    no_secret(proc)


# --------------------------------------------------------------------------------------------------
# Key options on command lines; --grpc-mode with a key
# --------------------------------------------------------------------------------------------------

COMMAND_LINE_KEYS = [
    # (arguments after --, EXTRA_ARGS, the file variable the hint names)
    (["--admin-api-key", ADMIN], None, "ADMIN_API_KEY_FILE"),
    ([f"--admin-api-key={ADMIN}"], None, "ADMIN_API_KEY_FILE"),
    (["--admin", ADMIN], None, "ADMIN_API_KEY_FILE"),
    (["--ad", ADMIN], None, "ADMIN_API_KEY_FILE"),
    ([], f"--admin-api {ADMIN}", "ADMIN_API_KEY_FILE"),
    (["--ap", KEY], None, "API_KEY_FILE"),  # shorter than the prefix the refusal used to look for
    ([f"--ap={KEY}"], None, "API_KEY_FILE"),
    (["--api-", KEY], None, "API_KEY_FILE"),
    ([], f"--mem-fraction-static 0.8 --ap {KEY}", "API_KEY_FILE"),
    (["--a", KEY], None, "API_KEY_FILE or ADMIN_API_KEY_FILE"),  # ambiguous: argparse may read either
]


@pytest.mark.parametrize(("args", "extra", "variable"), COMMAND_LINE_KEYS)
@pytest.mark.parametrize("with_file", [False, True], ids=["no-file", "with-file"])
def test_a_key_option_or_its_prefix_on_a_command_line_is_refused(run, args, extra, variable, with_file):
    env = {"API_KEY_FILE": str(run["key"])} if with_file else {}
    if extra is not None:
        env["EXTRA_ARGS"] = extra
    proc = dry_run(run, *(["--", *args] if args else []), **env)
    assert proc.returncode == 2, proc.stderr
    lines = stderr_lines(proc)
    assert len(lines) == 2 and "a key on a command line ends up in shell histories" in lines[0], lines
    assert f"set {variable} to it" in lines[1], lines
    no_secret(proc)


@pytest.mark.parametrize("variable", ["API_KEY_FILE", "ADMIN_API_KEY_FILE"])
def test_grpc_mode_with_a_key_is_refused(run, variable):
    proc = dry_run(run, "--", "--grpc-mode", **{variable: str(run["key"])})
    assert proc.returncode == 2
    assert f"{variable} with --grpc-mode (after --): SGLang's gRPC server does not check the key" in proc.stderr
    assert dry_run(run, "--", "--grpc-mode").returncode == 0, "without a key --grpc-mode is SGLang's business"
    no_secret(proc)


# --------------------------------------------------------------------------------------------------
# The key's alphabet
# --------------------------------------------------------------------------------------------------

GOOD_KEYS = [
    "0123456789abcdef0123456789abcdef",  # openssl rand -hex
    "q0Zk+7/aB9cD1eF2gH3iJ4kL5mN6oP7qR8sT9uV0wX=",  # openssl rand -base64
    "Xy_-9AbCdEfGhIjKlMnOpQrStUvWxYz0123456789ab",  # secrets.token_urlsafe
    "sk-proj.v1~abc+def/ghi=jkl_mno-pqr",
]
BAD_KEYS = ["back\\slash-key-0123", "quote'key-0123456", 'dquote"key-012345', "both'\"-key-012345", "star*key-0123456"]
BAD_KEYS += ["hash#key-0123456", "colon:key-0123456", "at@key-01234567", "pct%key-01234567", "semi;key-0123456"]


@pytest.mark.parametrize("key", GOOD_KEYS)
def test_the_key_alphabet_takes_what_key_generators_write(tmp_path, key):
    assert key_file.read(str(write_key(tmp_path / "k", key))).value == key


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_key_outside_the_alphabet_is_refused_naming_the_rule_not_the_key(run, tmp_path, key):
    path = write_key(tmp_path / "k", key)
    with pytest.raises(key_file.KeyFileError) as caught:
        key_file.read(str(path))
    assert caught.value.problem == "the key holds a character other than A-Z a-z 0-9 . _ ~ + / = -"
    for variable in ("API_KEY_FILE", "ADMIN_API_KEY_FILE"):
        proc = dry_run(run, **{variable: str(path)})
        assert proc.returncode == 2
        assert f"{variable}='{path}': the key holds a character other than" in stderr_lines(proc)[0], proc.stderr
        assert key not in proc.stdout + proc.stderr and repr(key)[1:-1] not in proc.stdout + proc.stderr


# --------------------------------------------------------------------------------------------------
# The launcher by itself
# --------------------------------------------------------------------------------------------------

PROBE = """
import os, sys
print("argv", *sys.argv[1:])
print("routes", os.environ.get("SM120_ADMIN_ROUTES", "<unset>"), file=sys.stderr)
with open(os.environ["PROBE_OUT"], "w") as out:  # a file: stdout and stderr are masked
    out.write("\\n".join(sys.argv[1:]))
"""


def launcher(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    (tmp_path / "probe_mod.py").write_text(PROBE)
    out = tmp_path / "probe.out"
    proc = subprocess.run(
        [sys.executable, str(LAUNCHER), "-m", "probe_mod", "--model-path", "/m"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(PROBE_OUT=str(out), **env),
        timeout=60,
        check=False,
    )
    return proc, out.read_text().splitlines() if out.exists() else []


def test_the_launcher_closes_the_admin_routes_when_told(tmp_path):
    proc, argv = launcher(tmp_path, API_KEY_FILE=str(write_key(tmp_path / "k", KEY)), SM120_ADMIN_ROUTES="closed")
    assert proc.returncode == 0, proc.stderr
    assert argv[:2] == ["--model-path", "/m"] and argv[3] == f"--api-key={KEY}"
    admin = argv[2].removeprefix("--admin-api-key=")
    assert argv[2].startswith("--admin-api-key=") and len(admin) >= 40 and set(admin) <= URLSAFE
    assert f"argv --model-path /m --admin-api-key={MASK} --api-key={MASK}" in proc.stdout
    assert "routes <unset>" in proc.stderr, "the word for the launcher is gone before SGLang runs"
    no_secret(proc, KEY, admin)


def test_the_launcher_passes_an_admin_key_file_alone(tmp_path):
    proc, argv = launcher(tmp_path, ADMIN_API_KEY_FILE=str(write_key(tmp_path / "a", ADMIN)))
    assert proc.returncode == 0, proc.stderr
    assert argv == ["--model-path", "/m", f"--admin-api-key={ADMIN}"]
    no_secret(proc)


def test_the_launcher_never_shows_a_value_that_names_no_file(tmp_path):
    proc, argv = launcher(tmp_path, API_KEY_FILE=KEY)
    assert proc.returncode == 2 and argv == []
    assert "API_KEY_FILE does not name a readable file" in proc.stderr
    no_secret(proc)
