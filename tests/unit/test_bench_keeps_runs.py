"""T0: `build.py bench` never loses a finished run. A run that fails, Ctrl-C and SIGTERM during the Nth run (raised
or sent by the fake bench_serving at that run: no timing) leave bench.json with the N-1 runs before it, the label
marked failed or interrupted, and bench.md saying so; exit 1, 130, 143. Ctrl-C stops bench also when it started
with SIGINT ignored (a background job of a script), and bench puts the handlers back when it ends. A second bench
on the same --out is refused while the first holds it; a full disk under --out prints what bench.json would hold; a
label measured again when bench_serving cannot run (no Docker Engine, no bench image) keeps its runs."""

from __future__ import annotations

import errno
import json
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sm120 import cli
from sm120.bench import results, serving
from tests.helpers import run_cli
from tests.unit.bench_fakes import by_endpoint

SPEEDS = {1: [100.0, 110.0], 4: [300.0, 320.0]}


class NotHandled(Exception):
    """The test's own SIGTERM handler: bench did not handle SIGTERM (the default would end pytest)."""


@pytest.fixture
def guarded_sigterm() -> Iterator[None]:
    def not_handled(signum: int, frame: object) -> None:
        raise NotHandled("SIGTERM reached the test's handler, not bench's")

    previous = signal.signal(signal.SIGTERM, not_handled)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def measure(standin, bench_fakes, tmp_path, capsys) -> Callable[..., tuple[int, str, str]]:
    """bench --endpoint (a stand-in) --label NAME --concurrency 1,4 --runs 2 into tmp_path/out; at_run(job, c,
    repeat, n) may act on the nth run (from 1, counted over the whole test) before it is answered."""
    s = standin()
    answer = by_endpoint({s.url: SPEEDS})
    (tmp_path / "tok").mkdir()
    calls: list[int] = []

    def run(label: str, at_run: Callable[..., None] | None = None, *extra: str) -> tuple[int, str, str]:
        def answered(job: serving.Job, concurrency: int, repeat: int) -> dict[str, Any]:
            calls.append(1)
            if at_run is not None:
                at_run(job, concurrency, repeat, len(calls))
            return answer(job, concurrency, repeat)

        bench_fakes.serving(answered)
        argv = ["--endpoint", s.url, "--label", label, "--tokenizer", str(tmp_path / "tok"), "--concurrency", "1,4"]
        return run_cli(capsys, "bench", *argv, "--runs", "2", "--out", str(tmp_path / "out"), *extra)

    return run


def on_run(n: int, act: BaseException | Callable[[], None]) -> Callable[..., None]:
    """At the nth run: raise `act`, or call it."""

    def at_run(job: serving.Job, concurrency: int, repeat: int, number: int) -> None:
        if number == n and isinstance(act, BaseException):
            raise act
        if number == n:
            act()

    return at_run


def send(signum: int) -> Callable[[], None]:
    return lambda: os.kill(os.getpid(), signum)  # its handler runs in this (the main) thread before kill returns


RUN_FAILED = "bench_serving exited with status 1: CUDA error"
STOPS = [
    # id, what happens at eagle3's third run (its first at c=4), exit status, status, bench's last line
    ("ctrl-c", KeyboardInterrupt(), 130, "interrupted", "build.py bench: interrupted"),
    ("sigint", send(signal.SIGINT), 130, "interrupted", "build.py bench: interrupted"),
    (
        "sigterm",
        send(signal.SIGTERM),
        143,
        "interrupted",
        "build.py bench: terminated (SIGTERM): the finished runs are kept",
    ),
    ("run-failed", serving.RunFailed(RUN_FAILED), 1, "failed", f"build.py bench: failed: {RUN_FAILED}"),
]


@pytest.mark.usefixtures("guarded_sigterm")
@pytest.mark.parametrize(("act", "code", "status", "line"), [c[1:] for c in STOPS], ids=[c[0] for c in STOPS])
def test_a_stop_during_a_run_keeps_the_runs_before_it(measure, tmp_path, act, code, status, line):
    assert measure("baseline")[0] == 0  # runs 1-4
    rc, _, err = measure("eagle3", on_run(4 + 3, act))
    assert rc == code, err
    assert err.strip().splitlines()[-1] == line and "Traceback" not in err
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    baseline, eagle3 = data["labels"]["baseline"], data["labels"]["eagle3"]
    assert baseline["status"] == "complete" and len(baseline["runs"]) == 4
    assert eagle3["status"] == status and [(r["concurrency"], r["repeat"]) for r in eagle3["runs"]] == [(1, 1), (1, 2)]
    error = line.removeprefix("build.py bench: failed: ") if status == "failed" else None
    assert eagle3["error"] == (error or "the benchmark stopped during this label")
    assert list(data["speedup"]["eagle3"]) == ["1"]  # the finished runs still give their speedup
    md = (tmp_path / "out" / "bench.md").read_text()
    assert f"Status: {status}: {eagle3['error']}." in md.split("### eagle3", 1)[1]
    assert (tmp_path / "out" / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # pytest's, put back
    assert signal.getsignal(signal.SIGTERM).__name__ == "not_handled"  # the test's, put back


def test_ctrl_c_stops_bench_that_started_with_sigint_ignored(measure, tmp_path):
    """A script's background job starts with SIGINT ignored: bench installs Python's handler for its run (a Ctrl-C
    then stops it, keeping the runs) and puts the ignored one back when it ends."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rc, _, err = measure("baseline", on_run(2, send(signal.SIGINT)))
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 130 and err.strip().endswith("build.py bench: interrupted"), err
    assert len(json.loads((tmp_path / "out" / "bench.json").read_text())["labels"]["baseline"]["runs"]) == 1
    assert after == signal.SIG_IGN


def test_a_second_bench_on_the_same_out_is_refused_and_the_first_loses_nothing(measure, standin, tmp_path, capsys):
    """The second bench starts while the first one is provably mid-run (inside its second run), holding --out."""
    second: dict[str, Any] = {}
    other = standin()

    def another_bench() -> None:
        argv = ["bench", "--endpoint", other.url, "--label", "eagle3", "--tokenizer", str(tmp_path / "tok")]
        second["rc"] = cli.main([*argv, "--concurrency", "1,4", "--runs", "2", "--out", str(tmp_path / "out")])
        second["err"] = capsys.readouterr().err

    rc, _, err = measure("baseline", on_run(2, another_bench))
    assert rc == 0, err
    refusal = [line for line in second["err"].splitlines() if line.startswith("build.py bench:")]
    assert second["rc"] == 2 and refusal == [
        f"build.py bench: error: --out {tmp_path / 'out'}: another build.py bench (pid {os.getpid()}) is writing "
        "bench.json there; wait for it to finish, or give this one another --out"
    ], second["err"]
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert list(data["labels"]) == ["baseline"] and len(data["labels"]["baseline"]["runs"]) == 4
    # The lock goes when bench ends: the next bench on the directory measures and keeps the first label.
    assert measure("eagle3")[0] == 0
    assert list(json.loads((tmp_path / "out" / "bench.json").read_text())["labels"]) == ["baseline", "eagle3"]


def test_a_full_disk_under_out_prints_the_runs_and_says_so(measure, tmp_path, monkeypatch):
    """From the third save of bench.json on (after run 1 was saved), no space is left: every finished run is printed
    as bench.json would hold it; bench.json keeps the last save; one line, exit 1."""
    saves = []
    real = results.tempfile.mkstemp

    def mkstemp(*args: Any, **kw: Any) -> Any:
        saves.append(1)
        if len(saves) >= 3:  # 1: the label started, 2: run 1, 3: run 2
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kw)

    monkeypatch.setattr(results.tempfile, "mkstemp", mkstemp)
    rc, stdout, err = measure("baseline")
    bench_json = tmp_path / "out" / "bench.json"
    assert rc == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"build.py bench: failed: cannot write {bench_json} (No space left on device): all 2 finished runs are printed "
        "above as bench.json would hold them"
    )
    printed = json.loads(stdout[stdout.index("{") :])
    assert [r["output_tok_s"] for r in printed["labels"]["baseline"]["runs"]] == SPEEDS[1]
    assert len(json.loads(bench_json.read_text())["labels"]["baseline"]["runs"]) == 1


@pytest.mark.parametrize("engine", ["unreachable", "without-the-bench-image"])
def test_measuring_a_label_again_without_bench_serving_leaves_its_runs(
    measure, bench_fakes, tmp_path, monkeypatch, engine
):
    """bench_serving cannot run (no Docker Engine, no image to run it from): exit 2, the label measured before kept."""
    import docker

    def unreachable():
        raise docker.errors.DockerException("Error while fetching server API version: connection refused")

    assert measure("baseline")[0] == 0
    before = json.loads((tmp_path / "out" / "bench.json").read_text())["labels"]
    bench_fakes.engine.missing.add("sglang-sm120:gone")
    if engine == "unreachable":
        monkeypatch.setattr(docker, "from_env", unreachable)
    rc, _, err = measure("baseline", None, "--bench-image", "sglang-sm120:gone")
    assert rc == 2 and "Traceback" not in err, err
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["labels"] == before
