"""T0: `build.py bench` never hangs and answers bad input in one line (issue 15, class 4), as tables of cases.

Against the stand-in SGLang (tests/unit/bench_standin.py): servers that keep a request open without new
tokens (keep-alive comment lines, the same chunk again, tokens too slow for the request's deadline) end the
run with one line and exit 1, the finished runs kept and the report saying the label stopped short;
non-finite numbers from the server are not figures; `--timeout` and friends must be positive finite numbers;
`--out` problems, bad endpoint ports and hand-edited or foreign bench.json files are exit 2 before the first
request; intervals of quantities that cannot be negative stop at zero.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120.bench import report, stats
from sm120.bench.results import Label, Results
from tests.helpers import ROOT, run_cli


def bench(capsys, *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "bench", *argv)


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err
    return lines[-1]


# --------------------------------------------------------------------------------------------------
# Servers that would hold bench forever
# --------------------------------------------------------------------------------------------------

# id, stand-in behaviour, extra bench arguments, what the last line says
HANGING: list[tuple[str, dict, list[str], str]] = [
    (
        "keep-alive-lines",
        {"keepalive_on_request": 2},
        ["--timeout", "0.5"],
        "no new token for 0.5 s (--timeout) after 1 token:",
    ),
    (
        "repeated-chunks",
        {"repeat_on_request": 2},
        ["--timeout", "0.5"],
        "no new token for 0.5 s (--timeout) after 2 tokens",
    ),
    (
        "keep-alive-before-the-first-token",
        {"keepalive_on_request": 2, "stall_after_tokens": 1},
        ["--timeout", "0.4"],
        "no new token for 0.4 s",
    ),
    (
        "slower-than-the-deadline",
        {"tok_s": 20.0},
        ["--request-timeout", "0.6", "--max-tokens", "40"],
        "took longer than its deadline of 0.6 s (--request-timeout)",
    ),
]


@pytest.mark.parametrize(("behaviour", "extra", "expected"), [c[1:] for c in HANGING], ids=[c[0] for c in HANGING])
def test_a_server_that_never_finishes_ends_the_run_in_one_line(standin, tmp_path, capsys, behaviour, extra, expected):
    s = standin(ttft=0.02, burst=1, spec=False, **{"tok_s": 200.0, **behaviour})
    args = ["--endpoint", s.url, "--label", "baseline", "--runs", "3", "--warmup", "0", "--max-tokens", "6"]
    t0 = time.monotonic()
    rc, _, err = bench(capsys, *args, *extra, "--out", str(tmp_path))
    assert time.monotonic() - t0 < 15
    assert rc == 1
    last = one_line(err)
    assert expected in last, last
    data = json.loads((tmp_path / "bench.json").read_text())
    label = data["labels"]["baseline"]
    kept = 0 if "deadline" in expected else 1
    assert len(label["runs"]) == kept and label["status"] == "failed"
    assert f"baseline | {kept} of 3 (failed)" in (tmp_path / "bench.md").read_text()


def test_non_finite_numbers_from_the_server_are_not_figures(standin, tmp_path, capsys):
    s = standin(ttft=0.02, tok_s=200.0, burst=2, spec=True, nonfinite=True)
    rc, _, err = bench(
        capsys, "--endpoint", s.url, "--label", "eagle3", "--runs", "2", "--warmup", "0", "--max-tokens", "7",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 0, err

    def refuse(name: str) -> None:
        raise AssertionError(f"bench.json holds {name}")

    data = json.loads((tmp_path / "bench.json").read_text(), parse_constant=refuse)
    for run in data["labels"]["eagle3"]["runs"]:
        assert run["spec_accept_length"] is None and run["server_e2e_latency_s"] is None
        assert run["spec_accept_rate"] is None and run["completion_tokens"] == 7


# --------------------------------------------------------------------------------------------------
# Usage errors: exit 2, one line, before any request
# --------------------------------------------------------------------------------------------------

NUMBER_ARGS: list[tuple[str, list[str], str]] = [
    ("timeout-inf", ["--timeout", "inf"], "--timeout: must be a positive finite number"),
    ("timeout-nan", ["--timeout", "nan"], "--timeout"),
    ("timeout-zero", ["--timeout", "0"], "--timeout"),
    ("timeout-negative", ["--timeout", "-1"], "--timeout"),
    ("timeout-overflow", ["--timeout", "1e999"], "--timeout"),
    ("timeout-other-digits", ["--timeout", "٣"], "--timeout"),
    ("timeout-underscore", ["--timeout", "1_0"], "--timeout"),
    ("timeout-infinity-word", ["--timeout", "Infinity"], "--timeout"),
    ("request-timeout-inf", ["--request-timeout", "inf"], "--request-timeout"),
    ("min-speedup-nan", ["--min-speedup", "nan"], "--min-speedup"),
    ("health-timeout-inf", ["--health-timeout", "inf"], "--health-timeout"),
    ("runs-other-digits", ["--runs", "٣"], "--runs"),
    ("runs-plus", ["--runs", "+3"], "--runs"),
    ("warmup-negative", ["--warmup", "-1"], "--warmup"),
    ("max-tokens-space", ["--max-tokens", " 5"], "--max-tokens"),
]

ENDPOINTS: list[tuple[str, str, str]] = [
    ("port-too-big", "http://127.0.0.1:99999", "--endpoint 'http://127.0.0.1:99999'"),
    ("port-zero", "127.0.0.1:0", "port '0'"),
    ("port-letters", "http://h:abc", "--endpoint 'http://h:abc'"),
    ("port-other-digits", "http://h:٣٠٠٠٠", "--endpoint"),
    ("port-empty", "http://h:", "the port after ':' is empty"),
    ("port-negative", "h:-1", "--endpoint 'h:-1'"),
    ("space-in-host", "http://h st:80", "--endpoint"),
    ("scheme", "ftp://h:80", "give an http(s) URL"),
    ("empty", " ", "--endpoint is empty"),
]


def _file(path: Path) -> Path:
    path.write_text("x")
    return path


OUT_DIRS: list[tuple[str, Callable[[Path], str], str]] = [
    ("out-is-a-file", lambda d: str(_file(d / "f")), "not a directory"),
    ("out-under-a-file", lambda d: str(_file(d / "f") / "sub"), "cannot be created"),
    ("bench-json-is-a-directory", lambda d: str((d / "o" / "bench.json").mkdir(parents=True) or d / "o"), "not a file"),
    ("bench-png-is-a-directory", lambda d: str((d / "p" / "bench.png").mkdir(parents=True) or d / "p"), "not a file"),
    ("out-empty", lambda d: "", "--out is empty"),
]


@pytest.mark.parametrize(("extra", "expected"), [c[1:] for c in NUMBER_ARGS], ids=[c[0] for c in NUMBER_ARGS])
def test_numbers_must_be_positive_finite_ascii(standin, tmp_path, capsys, extra, expected):
    s = standin()
    rc, _, err = run_cli(capsys, "bench", "--endpoint", s.url, "--label", "a", *extra, "--out", str(tmp_path))
    assert rc == 2, err
    assert expected in one_line(err) and len(err.strip().splitlines()) == 1
    assert s.requests == 0


@pytest.mark.parametrize(("url", "expected"), [c[1:] for c in ENDPOINTS], ids=[c[0] for c in ENDPOINTS])
def test_bad_endpoints_are_one_line(tmp_path, capsys, url, expected):
    rc, _, err = bench(capsys, "--endpoint", url, "--label", "a", "--out", str(tmp_path))
    assert rc == 2
    assert expected in one_line(err) and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in OUT_DIRS], ids=[c[0] for c in OUT_DIRS])
def test_out_problems_are_found_before_the_first_request(standin, tmp_path, capsys, make, expected):
    s = standin()
    rc, _, err = bench(capsys, "--endpoint", s.url, "--label", "a", "--out", make(tmp_path))
    assert rc == 2
    assert expected in one_line(err) and len(err.strip().splitlines()) == 1
    assert s.requests == 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_out_directory_without_write_permission(standin, tmp_path, capsys):
    s = standin()
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    rc, _, err = bench(capsys, "--endpoint", s.url, "--label", "a", "--out", str(locked))
    assert rc == 2 and "cannot write into it" in err and s.requests == 0


def _bench_json(**changes) -> dict:
    run = {"decode_tok_s": 50.0, "e2e_tok_s": 40.0, "ttft_s": 0.3, "completion_tokens": 10}
    data = {
        "schema": 1,
        "settings": {},
        "baseline": "baseline",
        "labels": {"old": {"source": {}, "server": {}, "status": "complete", "error": None, "runs": [run]}},
    }
    data.update(changes)
    return data


def _label(**changes) -> dict:
    return _bench_json(labels={"old": {**_bench_json()["labels"]["old"], **changes}})


def _run(**changes) -> dict:
    run = {"decode_tok_s": 50.0, "e2e_tok_s": 40.0, "ttft_s": 0.3, "completion_tokens": 10, **changes}
    return _label(runs=[run])


FOREIGN: list[tuple[str, str | bytes, str]] = [
    ("not-json", "{", "cannot read it"),
    ("not-utf8", b"\xff\xfe{}", "cannot read it"),
    ("a-list", "[]", "not a bench.json of this tool"),
    ("other-schema", json.dumps(_bench_json(schema=2)), "not a bench.json of this tool"),
    ("labels-a-list", json.dumps(_bench_json(labels=[])), "not a bench.json of this tool"),
    ("settings-a-list", json.dumps(_bench_json(settings=[])), "settings is a list"),
    ("baseline-a-number", json.dumps(_bench_json(baseline=1)), "baseline is a int"),
    ("label-a-string", json.dumps(_bench_json(labels={"old": "x"})), "labels.old is not an object"),
    ("runs-an-object", json.dumps(_label(runs={})), "labels.old.runs is a dict"),
    ("run-a-number", json.dumps(_label(runs=[1])), "labels.old.runs.0 is not an object"),
    ("status-unknown", json.dumps(_label(status="great")), "labels.old.status is 'great'"),
    ("error-a-list", json.dumps(_label(error=[])), "labels.old.error is not text"),
    ("figure-a-string", json.dumps(_run(decode_tok_s="fast")), "decode_tok_s is 'fast', not a finite number"),
    ("figure-nan", json.dumps(_run(ttft_s=float("nan"))), "ttft_s is 'NaN'"),
    ("figure-infinity", json.dumps(_run(e2e_tok_s=float("inf"))), "e2e_tok_s is 'Infinity'"),
    ("figure-overflow", json.dumps(_run(e2e_tok_s=1)).replace('"e2e_tok_s": 1', '"e2e_tok_s": 1e999'), "e2e_tok_s"),
    ("figure-negative", json.dumps(_run(ttft_s=-1)), "cannot be negative"),
    ("figure-a-bool", json.dumps(_run(completion_tokens=True)), "completion_tokens is True"),
    ("grid-garbage", json.dumps(_bench_json(grid={"points": [{"steps": "2"}]})), "grid.points"),
    ("nested-deeply", "[" * 100_000 + "]" * 100_000, "cannot read it"),
]


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in FOREIGN], ids=[c[0] for c in FOREIGN])
def test_a_hand_edited_or_foreign_bench_json_is_one_line(standin, tmp_path, capsys, content, expected):
    s = standin()
    target = tmp_path / "bench.json"
    target.write_bytes(content if isinstance(content, bytes) else content.encode())
    rc, _, err = bench(capsys, "--endpoint", s.url, "--label", "a", "--out", str(tmp_path))
    assert rc == 2, err
    last = one_line(err)
    assert len(err.strip().splitlines()) == 1 and str(target) in last and expected in last, last
    assert "--fresh" in last and s.requests == 0


# --------------------------------------------------------------------------------------------------
# An interrupted run says so; intervals stay at or above zero
# --------------------------------------------------------------------------------------------------


def test_an_interrupted_run_says_so_in_bench_md_and_bench_png(standin, tmp_path):
    # Ctrl-C comes while run 2's request waits at the stand-in's gate: exactly run 1 is finished, on any machine.
    s = standin(ttft=0.02, tok_s=20.0, burst=1, spec=False, hold_on_request=2)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "build.py"), "bench", "--endpoint", s.url, "--label", "baseline",
         "--runs", "5", "--warmup", "0", "--max-tokens", "8", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        give_up = time.monotonic() + 120
        while not s.held.wait(0.2):  # an event; the loop only notices a bench that ended or never got there
            if proc.poll() is not None:
                pytest.fail(f"bench ended before its run 2: {proc.communicate()}")
            if time.monotonic() > give_up:
                s.wait_held(0)  # fails, saying how many requests arrived
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["labels"]["baseline"]["status"] == "interrupted" and len(data["labels"]["baseline"]["runs"]) == 1
    md = (tmp_path / "bench.md").read_text()
    assert "**Incomplete: baseline: 1 of 5 runs (interrupted).**" in md
    assert "| baseline | 1 of 5 (interrupted) |" in md
    assert (tmp_path / "bench.png").stat().st_size > 10_000
    assert "INCOMPLETE: baseline: 1 of 5 runs (interrupted)" in report.plot_title(data)


SPREADS = [
    ("ttft-wide", "ttft_s", [0.01, 0.02, 3.0]),
    ("decode-two-runs", "decode_tok_s", [1.0, 90.0]),
    ("tokens", "completion_tokens", [1, 1, 256]),
]


@pytest.mark.parametrize(("key", "values"), [c[1:] for c in SPREADS], ids=[c[0] for c in SPREADS])
def test_intervals_of_non_negative_figures_stop_at_zero(key, values):
    plain = stats.summarize(values)
    assert plain.ci95_low is not None and plain.ci95_low < 0  # the t interval alone would go below zero
    label = Label("x", source={}, runs=[{key: v} for v in values], status="complete")
    summary = label.summary()[key]
    assert summary["ci95_low"] == 0.0 and summary["ci95_high"] == plain.ci95_high
    results = Results(settings={"runs": len(values)}, labels={"x": label})
    assert "(0.0" in report.markdown(results) or key == "completion_tokens"


def _deep_prompts(d: Path) -> str:
    (d / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    return str(d / "deep.jsonl")


IMAGE = ["--image", "sglang-sm120:none", "--env", "MODEL_PATH=/m", "--env", "DRAFT_MODEL_PATH=/d"]
# id, arguments (a callable gets the temporary directory), what the one line says
OTHER_ARGS: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("prompts-nested", lambda d: ["--prompts", _deep_prompts(d)], "nested too deeply"),
    ("prompts-a-directory", lambda d: ["--prompts", str(d)], "a directory, not a JSONL file"),
    ("seed-other-digits", lambda d: ["--seed", "٣"], "--seed: must be an integer"),
    ("grid-other-digits", lambda d: [*IMAGE, "--spec-grid", "--modes", "eagle3", "--grid-steps", "٣"], "--grid-steps"),
    ("gpus-other-digits", lambda d: [*IMAGE, "--gpus", "١"], "--gpus '١'"),
    ("env-port-letters", lambda d: [*IMAGE, "--env", "PORT=abc"], "--env PORT='abc'"),
    ("env-port-range", lambda d: [*IMAGE, "--env", "PORT=70000"], "--env PORT='70000'"),
    ("modes-typo", lambda d: [*IMAGE, "--modes", "baseline,eagle"], "perhaps you meant 'eagle3'"),
    ("models-missing", lambda d: [*IMAGE, "--models", str(d / "none")], "--models"),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in OTHER_ARGS], ids=[c[0] for c in OTHER_ARGS])
def test_other_bench_arguments_are_one_line(tmp_path, capsys, make, expected):
    argv = make(tmp_path)
    if "--image" not in argv:
        argv = ["--endpoint", "127.0.0.1:1", "--label", "a", *argv]
    rc, _, err = run_cli(capsys, "bench", *argv, "--out", str(tmp_path / "out"))
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and expected in one_line(err), err
