"""T0: build.py's exit-2 contract for issue 24's classes, as tables of cases.

1. numbers past CPython's 4300-digit int() limit and floats that overflow or underflow (build.toml, plan's and
   bench's options, a bench prompts file);
3. `build.py build` checks its own arguments (tag, registry, --target, --cache-from/--cache-to) before anything
   runs;
4. empty or malformed image references in `verify --image` and `bench --image`, and their --gpus (a GPU twice);
5. plumbing: a closed or full stdout, `patches apply --dest` a file or read-only, `verify --junit` unwritable (found
   before the suite), `patches matrix --since` past the newest release, a FIFO given for --config / --prompts;
7. presets the entrypoint would refuse at every start are refused by `plan`.
Each case: the exit status, at most three lines on stderr, the message naming the value, no traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.arguments import MAX_DIGITS
from sm120.build import bases, buildx
from sm120.errors import UsageError
from sm120.patches import pypi
from sm120.plan.config import check_mode_args
from tests.helpers import ROOT, run_build_py, run_cli, unshare_or_skip, write_config
from tests.unit.test_patches_cli import FAKE_RELEASES, diff, edited, make_tree
from tests.unit.test_patches_cli import write_config as write_patch_config
from tests.unit.test_patching import ORIGINAL

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
def test_build_toml_numbers_past_the_limits(tmp_path, key, value, expected):
    config = write_config(tmp_path, edit=_set(key, value))
    proc = run_build_py("plan", "--config", str(config))
    if not expected:
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-1000:]
        return
    last = assert_usage(proc.returncode, proc.stderr, *expected)
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
        "bench-warmup",
        ["bench", "--endpoint", "h", "--label", "x", "--warmup", BIG],
        ["--warmup", f"{MAX_DIGITS} digits"],
    ),
    (
        "bench-seed",
        ["bench", "--endpoint", "h", "--label", "x", "--seed", "-" + BIG],
        ["--seed", f"{MAX_DIGITS} digits"],
    ),
    ("bench-timeout", ["bench", "--endpoint", "h", "--label", "x", "--timeout", "1e-400"], ["read as 0"]),
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
# 3. build checks its own arguments before anything runs
# --------------------------------------------------------------------------------------------------

BUILD_ARGS: list[tuple[str, list[str], list[str]]] = [
    ("tag-upper-case", ["--tag", "Sglang:x"], ["--tag 'Sglang:x'", "not an image reference", "lowercase"]),
    ("tag-two-colons", ["--tag", "a:b:c"], ["--tag 'a:b:c'", "invalid reference format"]),
    ("tag-empty", ["--tag", ""], ["--tag is empty"]),
    ("tag-space", ["--tag", "a b"], ["--tag 'a b'"]),
    ("tag-too-long", ["--tag", "x:" + "t" * 200], ["--tag 'x:ttt"]),
    ("tag-bad-digest", ["--tag", "x@sha256:zz"], ["--tag 'x@sha256:zz'"]),
    ("registry-upper-case", ["--registry", "ghcr.io/OWNER"], ["--registry 'ghcr.io/OWNER'", "lower-case"]),
    ("registry-with-tag", ["--registry", "ghcr.io/owner:v1"], ["--registry 'ghcr.io/owner:v1'", "not a registry"]),
    ("registry-digest", ["--registry", "ghcr.io/o@sha256:" + "a" * 64], ["--registry", "not a registry prefix"]),
    ("registry-empty", ["--registry", ""], ["--registry ''"]),
    ("registry-url", ["--registry", "https://ghcr.io/o"], ["--registry 'https://ghcr.io/o'"]),
    ("target-unknown", ["--target", "nope"], ["--target 'nope': no such stage", "runtime"]),
    ("target-typo", ["--target", "runtim"], ["--target 'runtim'", "perhaps you meant 'runtime'"]),
    ("target-case", ["--target", "Runtime"], ["--target 'Runtime'"]),
    ("cache-type-typo", ["--cache-from", "type=regstry,ref=x"], ["unknown cache type 'regstry'", "'registry'"]),
    ("cache-no-type", ["--cache-from", "ref=ghcr.io/o/c"], ["'ref=ghcr.io/o/c': no type="]),
    ("cache-no-ref", ["--cache-from", "type=registry"], ["a registry cache needs ref=IMAGE"]),
    ("cache-bad-ref", ["--cache-to", "type=registry,ref=Bad/Ref"], ["--cache-to ref= 'Bad/Ref'"]),
    ("cache-not-key-value", ["--cache-from", "foo,bar=1"], ["'foo' is not key=value"]),
    ("cache-empty", ["--cache-to", ""], ["--cache-to is empty"]),
    ("cache-local-no-dest", ["--cache-to", "type=local"], ["a local cache needs dest=DIR"]),
    ("cache-local-no-src", ["--cache-from", "type=local,dest=x"], ["a local cache needs src=DIR"]),
    ("cache-bad-mode", ["--cache-to", "type=registry,ref=ghcr.io/o/c,mode=maximum"], ["mode='maximum'"]),
    ("cache-inline-from", ["--cache-from", "type=inline"], ["inline is a --cache-to type"]),
    ("cache-bad-shorthand", ["--cache-from", "Not/A/Ref"], ["--cache-from 'Not/A/Ref'"]),
    ("cache-unbalanced-quote", ["--cache-from", 'type=registry,ref="x'], ["--cache-from"]),
]


def refuse(monkeypatch, why: str, *targets: tuple[object, str]) -> None:
    """Make each (module, name) fail the test if it is called: `why` says what ran too early."""

    def called(*args, **kwargs):
        raise AssertionError(why)

    for module, name in targets:
        monkeypatch.setattr(module, name, called)


@pytest.fixture
def nothing_runs(monkeypatch):
    """build must not make the bases or call buildx before its arguments are checked."""
    refuse(monkeypatch, "ran before the arguments were checked", (bases, "make"), (buildx, "run"))


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in BUILD_ARGS], ids=[c[0] for c in BUILD_ARGS])
def test_build_arguments_are_checked_before_anything_runs(capsys, nothing_runs, argv, expected):
    rc, _, err = run_cli(capsys, "build", "--profile", "offline", *argv)
    assert_usage(rc, err, *expected)


GOOD_BUILD_ARGS = [
    ("tag", ["--tag", "ghcr.io/owner/sglang-sm120:test-1"], "ghcr.io/owner/sglang-sm120:test-1"),
    ("tag-localhost-port", ["--tag", "localhost:5000/x:y"], "localhost:5000/x:y"),
    ("registry-host-port", ["--registry", "localhost:5000"], "localhost:5000/sglang-sm120:"),
    ("registry-namespace", ["--registry", "ghcr.io/owner/"], "ghcr.io/owner/sglang-sm120:"),
    ("target", ["--target", "patched"], "--target patched"),
    ("cache-registry", ["--cache-from", "type=registry,ref=ghcr.io/o/cache:x"], "type=registry,ref=ghcr.io/o/cache:x"),
    ("cache-shorthand", ["--cache-from", "ghcr.io/o/cache"], "ghcr.io/o/cache"),
    ("cache-to-max", ["--cache-to", "type=registry,ref=ghcr.io/o/c,mode=max"], "mode=max"),
    ("cache-local", ["--cache-to", "type=local,dest=/tmp/c"], "type=local,dest=/tmp/c"),
    ("cache-gha", ["--cache-to", "type=gha,mode=max"], "type=gha,mode=max"),
    ("cache-inline", ["--cache-to", "type=inline"], "type=inline"),
]


@pytest.mark.parametrize(("argv", "shown"), [c[1:] for c in GOOD_BUILD_ARGS], ids=[c[0] for c in GOOD_BUILD_ARGS])
def test_good_build_arguments_reach_buildx(capsys, argv, shown):
    rc, out, err = run_cli(capsys, "build", "--print", *argv)
    assert rc == 0, err
    assert shown in out


# --------------------------------------------------------------------------------------------------
# 4. Image references in verify --image and bench --image
# --------------------------------------------------------------------------------------------------

IMAGES = [
    ("empty", "", "is empty: give an image reference"),
    ("blank", "   ", "is empty: give an image reference"),
    ("upper-case", "Sglang-sm120:x", "'Sglang-sm120:x': not an image reference"),
    ("trailing-colon", "sglang-sm120:", "'sglang-sm120:': not an image reference"),
    ("leading-colon", ":tag", "':tag': not an image reference"),
    ("path", "../x", "'../x': not an image reference"),
    ("space", "a b", "'a b': not an image reference"),
    ("bad-digest", "repo@sha256:abc", "'repo@sha256:abc': not an image reference"),
    ("url", "https://ghcr.io/o/x", "'https://ghcr.io/o/x': not an image reference"),
]  # after "--image " (verify, checked as it runs) or "argument --image: " (bench, argparse's type)
BENCH_IMAGE = ["--env", "MODEL_PATH=/m", "--modes", "baseline"]


@pytest.mark.parametrize("command", ["verify", "bench"])
@pytest.mark.parametrize(("image", "expected"), [c[1:] for c in IMAGES], ids=[c[0] for c in IMAGES])
def test_bad_image_references_are_one_line(capsys, tmp_path, command, image, expected):
    extra = [*BENCH_IMAGE, "--out", str(tmp_path / "out")] if command == "bench" else []
    rc, _, err = run_cli(capsys, command, "--image", image, *extra)
    assert_usage(rc, err, expected)
    assert not (tmp_path / "out").exists()


# --gpus of verify (and bench --image): checked before Docker is asked. verify has no "none" (it would run no GPU
# check: leave --gpus out).
GPUS = [
    ("empty", "", "--gpus is empty"),
    ("blank", "  ", "--gpus is empty"),
    ("twice", "0,0", "--gpus '0,0': GPU 0 is listed twice"),
    ("twice-leading-zero", "1,01", "GPU 01 is listed twice"),
    ("letters", "abc", "--gpus 'abc': give all"),
    ("empty-entry", "0,,1", "--gpus '0,,1'"),
    ("negative", "-1", "--gpus '-1'"),
    ("uuid", "GPU-abc", "--gpus 'GPU-abc'"),
    ("huge-index", BIG, "(5001 characters)"),
    ("all-upper-case", "ALL", "--gpus 'ALL'"),
]


@pytest.fixture
def no_docker(monkeypatch):
    """verify and bench --image must refuse --gpus before the engine is asked (or the suite starts)."""
    from sm120.bench import cmd_bench as bench
    from sm120.verify import runner

    why = "Docker was asked before --gpus was checked"
    refuse(monkeypatch, why, (runner, "run"), (bench, "read_image_plan"))


@pytest.mark.parametrize("command", ["verify", "bench"])
@pytest.mark.parametrize(("gpus", "expected"), [c[1:] for c in GPUS], ids=[c[0] for c in GPUS])
def test_bad_gpus_are_one_line_before_docker(capsys, tmp_path, no_docker, command, gpus, expected):
    extra = [*BENCH_IMAGE, "--out", str(tmp_path / "out")] if command == "bench" else []
    rc, _, err = run_cli(capsys, command, "--image", "sglang-sm120:x", "--gpus", gpus, *extra)
    last = assert_usage(rc, err, expected)
    assert ("none" in last) == (command == "bench"), last
    assert not (tmp_path / "out").exists()


def test_verify_none_is_not_a_gpu_list(capsys, no_docker):
    rc, _, err = run_cli(capsys, "verify", "--image", "sglang-sm120:x", "--gpus", "none")
    assert_usage(rc, err, "--gpus 'none': give all, or device numbers such as 0,1")


@pytest.mark.parametrize(("gpus", "passed"), [("all", "all"), ("0, 1", "0,1"), ("3", "3")])
def test_good_gpus_reach_the_suite_normalised(monkeypatch, capsys, gpus, passed):
    from sm120.verify import runner

    seen = {}
    monkeypatch.setattr(runner, "run", lambda image, **kw: seen.update(kw["extra_env"]) or 0)
    rc, _, err = run_cli(capsys, "verify", "--image", "sglang-sm120:x", "--gpus", gpus)
    assert rc == 0, err
    assert seen == {"SM120_VERIFY_GPUS": passed}


def test_image_ids_are_references_too():
    from sm120.build import image_ref

    for value in ("a990a87c6a43", "sha256:" + "a" * 64, "a" * 64, "ghcr.io/o/x@sha256:" + "b" * 64):
        assert image_ref.check_reference(value, "--image", allow_id=True) == value
    with pytest.raises(UsageError, match="64-byte hexadecimal"):
        image_ref.check_reference("a" * 64, "--tag")


# --------------------------------------------------------------------------------------------------
# 5. Plumbing
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


@pytest.fixture
def patch_setup(tmp_path: Path) -> tuple[Path, Path]:
    after = edited(ORIGINAL, line_5="line 5 patched")
    return write_patch_config(tmp_path, diff("sglang/mod.py", ORIGINAL, after)), make_tree(tmp_path / "tree", "0.1.0")


def _apply(config: Path, tree: Path, dest: Path | str) -> subprocess.CompletedProcess[str]:
    args = ["patches", "apply", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree)]
    return run_build_py(*args, "--dest", str(dest))


DESTS = [
    ("a-file", lambda tmp: _touch(tmp / "f"), ["--dest", "a file, not a folder"]),
    ("under-a-file", lambda tmp: _touch(tmp / "f") / "sub", ["--dest", "cannot be created", "Not a directory"]),
    ("in-proc", lambda tmp: Path("/proc/sm120-no-such/dest"), ["--dest /proc/sm120-no-such/dest", "cannot be created"]),
]


def _touch(path: Path) -> Path:
    path.write_text("x")
    return path


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in DESTS], ids=[c[0] for c in DESTS])
def test_patches_apply_to_a_dest_that_cannot_be_a_tree(patch_setup, tmp_path, make, expected):
    config, tree = patch_setup
    proc = _apply(config, tree, make(tmp_path))
    assert_usage(proc.returncode, proc.stderr, *expected)


@pytest.mark.parametrize("in_place", [False, True], ids=["new-folder", "in-place"])
def test_patches_apply_to_a_read_only_dest(patch_setup, tmp_path, in_place):
    """A read-only folder (a real read-only bind mount: root writes through chmod) is found before any write."""
    unshare = unshare_or_skip()
    config, tree = patch_setup
    dest = tree if in_place else tmp_path / "ro"
    dest.mkdir(exist_ok=True)
    before = (tree / "sglang" / "mod.py").read_text()
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    argv = [sys.executable, str(ROOT / "build.py"), "patches", "apply", "--config", str(config), "--sglang", "0.1.0"]
    argv += ["--source", str(tree), "--dest", str(dest)]
    proc = subprocess.run(
        [*unshare, "sh", "-c", script, "sh", str(dest), *argv], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert_usage(proc.returncode, proc.stderr, f"--dest {dest}: cannot write into it", "Read-only file system")
    assert (tree / "sglang" / "mod.py").read_text() == before


def test_patches_matrix_since_past_the_newest_release(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(pypi, "all_releases", lambda: FAKE_RELEASES)
    monkeypatch.setenv("SGLANG_SM120_CACHE", str(tmp_path / "cache"))
    for since, expected in (
        ("99.0", "--since 99.0: no final SGLang release on PyPI is that new (the newest is 0.5.23"),
        ("0.5.24", "the newest is 0.5.23; give --since 0.5.23 or older"),
        ("latest", "--since 'latest' is not a version"),
    ):
        rc, _, err = run_cli(capsys, "patches", "matrix", "--since", since)
        assert_usage(rc, err, expected)


JUNITS = [
    ("a-directory", lambda tmp: tmp, ["a directory; give a file name"]),
    ("under-a-file", lambda tmp: _touch(tmp / "f") / "out.xml", ["is a file, not a folder"]),
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
# 7. Presets that cannot start
# --------------------------------------------------------------------------------------------------

EAGLE3_ARGS = 'args = ["--speculative-algorithm", "EAGLE3"]'
PRESETS: list[tuple[str, str, str, list[str]]] = [
    (
        "mode-abbreviation",
        EAGLE3_ARGS,
        'args = ["--speculative-algo", "EAGLE3"]',
        ["modes.eagle3.args", "--speculative-algo is an abbreviation of --speculative-algorithm"],
    ),
    (
        "mode-tp-abbreviation",
        EAGLE3_ARGS,
        'args = ["--speculative-algorithm", "EAGLE3", "--tp", "4"]',
        ["--tp is an abbreviation of --tp-size"],
    ),
    (
        "mode-ambiguous",
        EAGLE3_ARGS,
        'args = ["--speculative-algorithm", "EAGLE3", "--speculative-num", "4"]',
        ["--speculative-num is an abbreviation of 2 options"],
    ),
    (
        "mode-inline-value",
        EAGLE3_ARGS,
        'args = ["--speculative-algorithm=EAGLE3", "--po=8000"]',
        ["--po is an abbreviation of --port"],
    ),
    (
        "mode-word-first",
        EAGLE3_ARGS,
        'args = ["EAGLE3", "--speculative-algorithm", "EAGLE3"]',
        ["'EAGLE3' is not an option"],
    ),
    ("mode-second-dashes", EAGLE3_ARGS, 'args = ["--speculative-algorithm", "EAGLE3", "--", "--x"]', ["a second '--'"]),
    (
        "baseline-abbreviation",
        "args = []",
        'args = ["--mem-frac", "0.8", "--host", "0.0.0.0", "--nnode", "1"]',
        ["modes.baseline.args", "--nnode"],
    ),
    (
        "rule-abbreviation",
        'args = ["--quantization", "modelopt_fp4"]',
        'args = ["--quant", "modelopt_fp4"]',
        ['tracks."0.5.9".runtime.', "rule", "--quant is an abbreviation of --quantization"],
    ),
    (
        "rule-second-dashes",
        'args = ["--enable-torch-symm-mem"]',
        'args = ["--enable-torch-symm-mem", "--", "x"]',
        ["runtime.", "a second '--'"],
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in PRESETS], ids=[c[0] for c in PRESETS])
def test_presets_the_entrypoint_would_refuse_are_refused_by_plan(tmp_path, old, new, expected):
    config = write_config(tmp_path, edit=lambda text: text.replace(old, new, 1))
    assert new in config.read_text()
    proc = run_build_py("plan", "--config", str(config))
    assert_usage(proc.returncode, proc.stderr, "the entrypoint would refuse it at every start", *expected)


def test_presets_the_entrypoint_takes_still_plan(tmp_path):
    """Full spellings, aliases and options the entrypoint does not rely on pass (the image's own SGLang parser
    judges an unknown option at start: its option list is not known at plan time)."""
    new = 'args = ["--speculative-algorithm", "EAGLE3", "--mem-fraction-static", "0.8", "--model", "x", "--no-such"]'
    config = write_config(tmp_path, edit=lambda text: text.replace(EAGLE3_ARGS, new, 1))
    proc = run_build_py("plan", "--config", str(config))
    assert proc.returncode == 0, proc.stderr


class _Rule:
    def __init__(self, name: str, args: list[str]) -> None:
        self.name, self.args = name, args


def test_check_mode_args_takes_a_modes_args_and_its_tracks_rules():
    """The function config validation calls per (track, mode): where modes live in build.toml may change."""
    rules = [_Rule("ok", ["--enable-torch-symm-mem"]), _Rule("bad", ["--moe-runner", "triton"])]
    check_mode_args("build.toml", "eagle3", ["--speculative-algorithm", "EAGLE3"], rules[:1])
    with pytest.raises(UsageError, match=r"build.toml: tracks\.x\.runtime\.1\.args \(rule bad\): .*--moe-runner"):
        check_mode_args("build.toml", "eagle3", [], rules, rules_key="tracks.x.runtime")
    with pytest.raises(UsageError, match=r"build.toml: tracks\.x\.modes\.eagle3\.args: .*--speculative-draft"):
        check_mode_args("build.toml", "eagle3", ["--speculative-draft", "x"], mode_key="tracks.x.modes.eagle3")


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
