"""T0: build.py as a user meets it, across its commands: the exit status, at most three lines on stderr naming the
value, no traceback, for
1. numbers past CPython's 4300-digit int() limit and floats that overflow or underflow (build.toml, plan's and
   bench's options, a bench prompts file);
2. plumbing: a closed or full stdout, a FIFO given for --config / --prompts, `verify --junit` unwritable (found
   before the suite);
3. `--version` and a misspelled option.
A command's own arguments are tested with the command: build's in test_build_command.py, --image and --gpus in
test_image_arguments.py, `patches apply --dest` and `patches matrix --since` in test_patches_cli.py, presets in
test_entrypoint_plan.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.arguments import MAX_DIGITS
from tests.helpers import ROOT, run_build_py, run_cli, unshare_or_skip, write_config

BIG = "1" + "0" * 5000


def assert_usage(rc: int, err: str, *expected: str, code: int = 2) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == code, (rc, err[-1500:])
    assert 1 <= len(lines) <= 3, err[-1500:]
    assert "Traceback" not in err
    assert all(len(line) < 700 for line in lines), "a long value must be shown cut short"
    for text in expected:
        assert text in err, (text, err[-1500:])
    return lines[-1]


def refuse(monkeypatch, why: str, *targets: tuple[object, str]) -> None:
    """Make each (module, name) fail the test if it is called: `why` says what ran too early."""

    def called(*args, **kwargs):
        raise AssertionError(why)

    for module, name in targets:
        monkeypatch.setattr(module, name, called)


def touch(path: Path) -> Path:
    path.write_text("x")
    return path


# --------------------------------------------------------------------------------------------------
# 1. Numbers beyond what Python takes
# --------------------------------------------------------------------------------------------------


def _set(key: str, value: str):
    def edit(text: str) -> str:
        lines = text.splitlines()
        i = next(n for n, line in enumerate(lines) if line.split("=")[0].strip() == key)
        lines[i] = f"{key} = {value}"
        return "\n".join(lines) + "\n"

    return edit


TOML_NUMBERS: list[tuple[str, str, str, list[str]]] = [
    ("port-5000-digits", "port", BIG, ["a number of 5001 digits", "at most 4300"]),
    ("uid-5000-digits", "uid", BIG, ["a number of 5001 digits"]),
    ("negative-5000-digits", "nvcc_threads_max", "-" + BIG, ["a number of 5001 digits"]),
    ("underscored-5000-digits", "uid", "1_" + BIG, ["digits"]),
    ("float-overflow", "compile_job_memory_gib", "1e400", ["compile_job_memory_gib = inf", "reads as inf"]),
    ("float-underflow", "compile_job_memory_gib", "1e-400", ["compile_job_memory_gib = 0.0", "reads as 0.0"]),
    ("fraction-underflow", "memory_fraction", "1e-400", ["memory_fraction = 0.0", "1e-400"]),
    ("overflow-by-product", "compile_job_memory_gib", "1e308", ["less than or equal to 1024"]),
    ("backward-overflow", "compile_job_memory_gib_backward", "1.8e308", ["compile_job_memory_gib_backward"]),
    ("threads-huge", "nvcc_threads_max", "9" * 4000, []),  # parses (4000 digits): the plan caps the threads
]


@pytest.mark.parametrize(("key", "value", "expected"), [c[1:] for c in TOML_NUMBERS], ids=[c[0] for c in TOML_NUMBERS])
def test_build_toml_numbers_past_the_limits(capsys, tmp_path, key, value, expected):
    config = write_config(tmp_path, edit=_set(key, value))
    rc, _, err = run_cli(capsys, "plan", "--config", str(config))
    if not expected:
        assert rc == 0, err[-1000:]
        return
    last = assert_usage(rc, err, *expected)
    assert "build.toml" in last


OPTION_NUMBERS: list[tuple[str, list[str], list[str]]] = [
    ("memory-gib-1e300", ["plan", "--memory-gib", "1e300"], ["--memory-gib", "'1e300'", "at most 1048576"]),
    ("memory-gib-1e309", ["plan", "--memory-gib", "1e309"], ["--memory-gib", "'1e309'", "positive finite"]),
    ("memory-gib-underflow", ["plan", "--memory-gib", "1e-400"], ["'1e-400'", "read as 0"]),
    ("memory-gib-5000-digits", ["plan", "--memory-gib", BIG], ["--memory-gib", "(5001 characters)"]),
    ("memory-gib-1e-300", ["plan", "--memory-gib", "1e-300"], ["--memory-gib", "'1e-300'", "at least 0.1"]),
    ("memory-gib-1e-10", ["plan", "--memory-gib", "1e-10"], ["--memory-gib", "'1e-10'", "at least 0.1 (GiB"]),
    ("memory-gib-0.05", ["build", "--print", "--memory-gib", "0.05"], ["--memory-gib", "'0.05'", "at least 0.1"]),
    ("cpus-zero", ["plan", "--cpus", "0"], ["--cpus", "positive integer", "'0'"]),
    ("cpus-negative", ["plan", "--cpus", "-4"], ["--cpus", "positive integer", "'-4'"]),
    ("max-jobs-zero", ["plan", "--max-jobs", "0"], ["--max-jobs", "positive integer", "'0'"]),
    ("cpus-5000-digits", ["plan", "--cpus", BIG], ["--cpus", f"at most {MAX_DIGITS} digits", "'10000000"]),
    ("max-jobs-5000-digits", ["plan", "--max-jobs", BIG], ["--max-jobs", f"at most {MAX_DIGITS} digits"]),
    (
        "bench-runs",
        ["bench", "--endpoint", "h", "--label", "x", "--runs", BIG],
        ["--runs", f"at most {MAX_DIGITS} digits"],
    ),
    (
        "bench-runs",
        ["bench", "--endpoint", "h", "--label", "x", "--runs", BIG],
        ["--runs", f"{MAX_DIGITS} digits"],
    ),
    (
        "bench-seed",
        ["bench", "--endpoint", "h", "--label", "x", "--seed", "-" + BIG],
        ["--seed", f"{MAX_DIGITS} digits"],
    ),
    ("bench-timeout", ["bench", "--endpoint", "h", "--label", "x", "--run-timeout", "1e-400"], ["read as 0"]),
]


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in OPTION_NUMBERS], ids=[c[0] for c in OPTION_NUMBERS])
def test_option_numbers_past_the_limits(capsys, argv, expected):
    rc, _, err = run_cli(capsys, *argv)
    assert_usage(rc, err, *expected)


def test_a_plan_for_a_huge_machine_is_capped_not_overflowed(capsys):
    rc, out, err = run_cli(capsys, "plan", "--memory-gib", "1048576", "--cpus", "9" * MAX_DIGITS)
    assert rc == 0, err
    assert "max_jobs" in out


def test_a_plan_for_the_smallest_machine_still_plans(capsys):
    rc, out, err = run_cli(capsys, "plan", "--memory-gib", "0.1", "--cpus", "1")
    assert rc == 0, err
    assert "0.1 GiB" in out


PROMPT_NUMBERS = [
    ("id-number", '{"text": "a"}\n{"text": "b", "id": %s}\n', "line 2", "a number of 5001 digits"),
    ("nested", '{"text": "a", "meta": {"n": [%s]}}\n', "line 1", "a number of 5001 digits"),
]


@pytest.mark.parametrize(
    ("text", "line", "expected"), [c[1:] for c in PROMPT_NUMBERS], ids=[c[0] for c in PROMPT_NUMBERS]
)
def test_a_prompts_file_number_past_the_limit(tmp_path, capsys, text, line, expected):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(text.replace("%s", BIG))
    argv = ["bench", "--endpoint", "127.0.0.1:9", "--label", "x", "--prompts", str(prompts), "--out", str(tmp_path)]
    rc, _, err = run_cli(capsys, *argv)
    assert_usage(rc, err, f"--prompts {prompts}, {line}", expected)


# --------------------------------------------------------------------------------------------------
# 2. Plumbing
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["plan", "--json"], ["plan"]], ids=["json", "text"])
def test_a_closed_stdout_is_no_traceback(argv):
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "build.py"), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    proc.stdout.close()  # the reader is gone before the first byte (`| head -c1` after its byte)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE
    assert err == "", err


FULL_STDOUT = [("plan-json", ["plan", "--json"]), ("plan", ["plan"]), ("help", ["--help"])]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [c[1] for c in FULL_STDOUT], ids=[c[0] for c in FULL_STDOUT])
def test_a_full_stdout_is_one_line_not_a_traceback(argv, unbuffered):
    """`build.py plan > /dev/full`: the write fails (with PYTHONUNBUFFERED at once, else at the last flush, which
    main does, not Python at exit): one line, exit 1 (not a usage error), no "Exception ignored"."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env |= {"PYTHONUNBUFFERED": "1"} if unbuffered else {}
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "build.py"), *argv],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, timeout=120, check=False,
        )  # fmt: skip
    last = assert_usage(proc.returncode, proc.stderr, "cannot write to standard output: No space left", code=1)
    assert last.startswith("build.py") and "Exception ignored" not in proc.stderr, proc.stderr


JUNITS = [
    ("a-directory", lambda tmp: tmp, ["a directory; give a file name"]),
    ("under-a-file", lambda tmp: touch(tmp / "f") / "out.xml", ["is a file, not a folder"]),
    ("in-proc", lambda tmp: Path("/proc/sm120-no-such/verify.xml"), ["--junit /proc/sm120-no-such/verify.xml"]),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in JUNITS], ids=[c[0] for c in JUNITS])
def test_verify_junit_is_checked_before_the_suite_runs(monkeypatch, capsys, tmp_path, make, expected):
    from sm120.verify import runner

    refuse(monkeypatch, "the suite ran before --junit was checked", (runner, "run"))
    rc, _, err = run_cli(capsys, "verify", "--image", "sglang-sm120:x", "--junit", str(make(tmp_path)))
    assert_usage(rc, err, "--junit", *expected)


def test_verify_junit_on_a_read_only_mount():
    unshare = unshare_or_skip()
    ro = Path(os.environ.get("TMPDIR", "/tmp")) / f"sm120-ro-{os.getpid()}"
    ro.mkdir(exist_ok=True)
    try:
        script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
        argv = [sys.executable, str(ROOT / "build.py"), "verify", "--image", "x:y", "--junit", str(ro / "v.xml")]
        proc = subprocess.run([*unshare, "sh", "-c", script, "sh", str(ro), *argv], capture_output=True, text=True)
        assert_usage(proc.returncode, proc.stderr, f"--junit {ro / 'v.xml'}", "Read-only file system")
    finally:
        ro.rmdir()


FIFO_READS = [
    ("plan-config", lambda fifo, out: ["plan", "--config", str(fifo)], "not a regular file"),
    ("build-config", lambda fifo, out: ["build", "--print", "--config", str(fifo)], "not a regular file"),
    (
        "bench-prompts",
        lambda fifo, out: ["bench", "--endpoint", "127.0.0.1:9", "--label", "x", "--prompts", str(fifo), "--out", out],
        "not a regular file",
    ),
]


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in FIFO_READS], ids=[c[0] for c in FIFO_READS])
def test_a_fifo_where_a_file_is_read_does_not_hang(tmp_path, argv, expected):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "build.py"), *argv(fifo, str(tmp_path / "o"))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert_usage(proc.returncode, proc.stderr, str(fifo), expected)


# --------------------------------------------------------------------------------------------------
# 3. --version, a misspelled option
# --------------------------------------------------------------------------------------------------


def test_version_prints_the_projects_version_in_one_line():
    """`build.py --version`: pyproject.toml's version."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    proc = run_build_py("--version")
    assert proc.returncode == 0 and proc.stdout == f"build.py {version}\n" and not proc.stderr


@pytest.mark.parametrize(
    ("argv", "wrong", "meant"),
    [
        (["bench", "--endpont", "http://127.0.0.1:1", "--label", "x"], "--endpont", "--endpoint"),  # a required one
        (["bench", "--endpoint", "http://127.0.0.1:1", "--label", "x", "--runz", "3"], "--runz", "--runs"),
        (["plan", "--profle", "offline"], "--profle", "--profile"),
        (["deploy", "kubernetes", "--nodez", "2"], "--nodez", "--nodes"),
    ],
    ids=["bench-endpont", "bench-runz", "plan-profle", "deploy-nodez"],
)
def test_a_misspelled_option_names_the_one_it_resembles(capsys, argv, wrong, meant):
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and not out, err
    (line,) = err.strip().splitlines()
    assert f"unrecognized arguments: {wrong}" in line and f"perhaps you meant '{meant}'" in line, line
