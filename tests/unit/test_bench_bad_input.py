"""T0: `build.py bench` answers bad input in one line with exit status 2, before anything is measured, as tables of
cases: flags and their combinations, numbers, endpoints, --out and a hand-edited or foreign bench.json (these
leave no new --out directory), --api-key-file (its path never shown: a key pasted there would be), and servers that
cannot be measured, against the stand-in SGLang (tests/unit/bench_standin.py): nothing listening, a 401/403 without
the key or with another one, /health not ready, /health or /server_info headers a byte at a time (bounded by the
probe's deadline, which a socket's read timeout, restarting with every byte, is not). bench_serving's runs and
Docker are the fakes of tests/unit/bench_fakes.py: no case may reach a run."""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120.bench import probe, prompts
from sm120.plan import resolve
from tests.helpers import free_port, run_cli
from tests.unit.bench_fakes import by_endpoint

PORT = resolve.load_plan().image.port
KEY = "bench-k3y-0123456789abcdef"


@pytest.fixture
def server(standin, bench_fakes, tmp_path):
    """A stand-in at which any run would be answered (and counted); a tokenizer directory."""
    s = standin()
    s.fake = bench_fakes.serving(by_endpoint({s.url: {c: [10.0] for c in (1, 2, 4, 8, 16, 32, 64)}}))
    (tmp_path / "tok").mkdir()
    return s


def one_line(rc: int, err: str) -> str:
    """The one line of a usage error (exit 2): no traceback, no other line."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, (rc, err[-2000:])
    assert lines[0].startswith("build.py bench: "), lines
    return lines[0]


# --------------------------------------------------------------------------------------------------
# Flags: exit 2 in one line, nothing measured, no --out directory left
# --------------------------------------------------------------------------------------------------

IMAGE = ["--image", "sglang-sm120:none", "--env", "MODEL_PATH=/m", "--env", "DRAFT_MODEL_PATH=/d"]
BASE = ["--label", "baseline", "--tokenizer", "{tok}"]  # with --endpoint URL (the stand-in's) first


def _deep(d: Path) -> str:
    (d / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    return str(d / "deep.jsonl")


def _file(d: Path, name: str = "f", text: str = "x") -> str:
    (d / name).write_text(text)
    return str(d / name)


# id, the arguments after `bench` ("{url}": the stand-in, "{tok}": a directory; a callable gets tmp_path and gives
# the extra arguments after --endpoint {url} and BASE), what the line says
FLAGS: list[tuple[str, list[str | None] | Callable[[Path], list[str]], str]] = [
    ("concurrency-empty", ["--concurrency", ""], "--concurrency '': give whole numbers from 1 to 4096, e.g. 1,8,32"),
    ("concurrency-zero", ["--concurrency", "0"], "--concurrency '0': give whole numbers from 1 to 4096"),
    ("concurrency-leading-zero", ["--concurrency", "01"], "--concurrency '01': give whole numbers"),
    ("concurrency-twice", ["--concurrency", "1,1"], "--concurrency '1,1': each from 1 to 4096, none twice"),
    ("concurrency-too-many", ["--concurrency", "5000"], "--concurrency '5000': each from 1 to 4096, none twice"),
    ("concurrency-letters", ["--concurrency", "a,b"], "--concurrency 'a,b': give whole numbers"),
    ("max-tokens-3", ["--max-tokens", "3"], "--max-tokens must be at least 4 (bench_serving's least output length)"),
    ("min-speedup-one-run", ["--min-speedup", "1.5", "--runs", "1"], "give --runs 2 or more"),
    ("gate-c-not-measured", ["--concurrency", "1,4", "--gate-concurrency", "3"], "3: not in --concurrency 1,4"),
    ("min-speedup-no-baseline", ["--label", "eagle3", "--min-speedup", "2"], "--min-speedup needs results for label"),
    ("env-with-endpoint", ["--env", "A=b"], "--env goes with --image, not --endpoint"),
    ("spec-grid-with-endpoint", ["--spec-grid"], "--spec-grid goes with --image, not --endpoint"),
    ("modes-with-endpoint", ["--modes", "baseline"], "--modes goes with --image, not --endpoint"),
    ("cache-volume-with-endpoint", ["--cache-volume", "v"], "--cache-volume goes with --image, not --endpoint"),
    ("label-with-a-slash", ["--label", "a/b"], "--label 'a/b': use letters, digits, '-', '_' or '.'"),
    ("label-carriage-return", ["--label", "baseline\r"], "--label 'baseline\\r': use letters"),
    ("label-tab", ["--label", "eagle3\tx"], "--label 'eagle3\\tx': control characters"),
    ("label-escape", ["--label", "\x1b[31mred"], "--label '\\x1b[31mred': control characters"),
    ("label-zero-width-space", ["--label", "eagle3\u200b"], "--label 'eagle3\\u200b': control characters"),
    ("label-leading-space", ["--label", " baseline"], "--label ' baseline': use letters"),
    ("label-trailing-space", ["--label", "baseline "], "--label 'baseline ': use letters"),
    ("baseline-carriage-return", ["--baseline", "baseline\r"], "--baseline 'baseline\\r': use letters"),
    ("tokenizer-missing", lambda d: ["--tokenizer", str(d / "none")], "--tokenizer {tmp}/none: no such directory"),
    ("tokenizer-a-file", lambda d: ["--tokenizer", _file(d)], "--tokenizer {tmp}/f: no such directory"),
    ("prompts-nested", lambda d: ["--prompts", _deep(d)], "nested too deeply"),
    ("prompts-a-directory", lambda d: ["--prompts", str(d)], "--prompts {tmp}: a directory, not a JSONL file"),
    ("prompts-missing", lambda d: ["--prompts", str(d / "none")], "--prompts {tmp}/none: cannot read it"),
    (
        "prompts-no-text",
        lambda d: ["--prompts", _file(d, "p", '{"text": "hi"}\n{"id": "b"}\n')],
        "--prompts {tmp}/p, line 2",
    ),
    # numbers: positive, finite, in ASCII digits
    ("run-timeout-inf", ["--run-timeout", "inf"], "--run-timeout: must be a positive finite number"),
    ("run-timeout-nan", ["--run-timeout", "nan"], "--run-timeout"),
    ("run-timeout-zero", ["--run-timeout", "0"], "--run-timeout"),
    ("run-timeout-overflow", ["--run-timeout", "1e999"], "--run-timeout"),
    ("run-timeout-other-digits", ["--run-timeout", "٣"], "--run-timeout"),
    ("run-timeout-underscore", ["--run-timeout", "1_0"], "--run-timeout"),
    ("run-timeout-infinity-word", ["--run-timeout", "Infinity"], "--run-timeout"),
    ("min-speedup-nan", ["--min-speedup", "nan"], "--min-speedup"),
    ("health-timeout-inf", ["--health-timeout", "inf"], "--health-timeout"),
    ("runs-other-digits", ["--runs", "٣"], "--runs"),
    ("runs-plus", ["--runs", "+3"], "--runs"),
    ("max-tokens-space", ["--max-tokens", " 5"], "--max-tokens"),
    ("seed-other-digits", ["--seed", "٣"], "--seed: must be an integer"),
    ("speedup-metric-unknown", ["--speedup-metric", "outptu"], "perhaps you meant 'output'"),
    # endpoints
    ("endpoint-port-too-big", ["--endpoint", "http://127.0.0.1:99999"], "--endpoint 'http://127.0.0.1:99999'"),
    ("endpoint-port-zero", ["--endpoint", "127.0.0.1:0"], "port '0' is not a port"),
    ("endpoint-port-letters", ["--endpoint", "http://h:abc"], "--endpoint 'http://h:abc'"),
    ("endpoint-port-other-digits", ["--endpoint", "http://h:٣٠٠٠٠"], "--endpoint"),
    ("endpoint-port-empty", ["--endpoint", "http://h:"], "the port after ':' is empty"),
    ("endpoint-port-negative", ["--endpoint", "h:-1"], "--endpoint 'h:-1'"),
    ("endpoint-port-leading-zero", ["--endpoint", "h:0080"], "port '0080' is not a port (a port is 1 to 65535"),
    ("endpoint-ipv6-leading-zero", ["--endpoint", "http://[::1]:030000"], "port '030000' is not a port"),
    ("endpoint-space-in-host", ["--endpoint", "http://h st:80"], "--endpoint"),
    ("endpoint-scheme", ["--endpoint", "ftp://h:80"], "give an http(s) URL"),
    ("endpoint-empty", ["--endpoint", " "], "--endpoint is empty"),
    # --image and its own flags
    ("label-with-image", [*IMAGE, "--label", "a"], "--label and --bench-image go with --endpoint"),
    ("bench-image-with-image", [*IMAGE, "--bench-image", "x:y"], "--label and --bench-image go with --endpoint"),
    ("image-without-model-path", ["--image", "t", "--modes", "baseline"], "--image needs --env MODEL_PATH=PATH"),
    ("image-without-draft", ["--image", "t", "--env", "MODEL_PATH=m"], "mode eagle3 needs --env DRAFT_MODEL_PATH"),
    ("modes-unknown", [*IMAGE, "--modes", "turbo"], "--modes 'turbo': the image knows baseline, eagle3"),
    ("modes-typo", [*IMAGE, "--modes", "baseline,eagle"], "perhaps you meant 'eagle3'"),
    ("modes-twice", [*IMAGE, "--modes", "baseline,baseline"], "listed twice"),
    ("models-path-without-models", [*IMAGE, "--env", "MODEL_PATH=/models/x"], "give --models DIR"),
    ("models-missing", lambda d: [*IMAGE, "--models", str(d / "none")], "--models {tmp}/none: no such directory"),
    ("model-not-on-host", lambda d: [*IMAGE, "--models", str(d), "--env", "MODEL_PATH=/models/m"], "{tmp}/m does not"),
    ("env-without-equals", [*IMAGE, "--env", "MODEL_PATH"], "--env 'MODEL_PATH': give NAME=VALUE"),
    ("env-port-letters", [*IMAGE, "--env", "PORT=abc"], "--env PORT='abc'"),
    ("env-port-range", [*IMAGE, "--env", "PORT=70000"], "--env PORT='70000'"),
    ("env-api-key-file", [*IMAGE, "--env", "API_KEY_FILE=/x"], "--env API_KEY_FILE=...: give --api-key-file FILE"),
    ("spec-grid-without-eagle3", [*IMAGE, "--modes", "baseline", "--spec-grid"], "add eagle3 to --modes"),
    ("grid-other-digits", [*IMAGE, "--spec-grid", "--grid-steps", "٣"], "--grid-steps"),
    ("gpus-letters", [*IMAGE, "--gpus", "x"], "--gpus 'x'"),
    ("gpus-other-digits", [*IMAGE, "--gpus", "١"], "--gpus '١'"),
    ("no-target", ["--label", "a"], "one of the arguments --endpoint --image is required"),
    # None: the flag before it (and BASE's) left out
    ("without-label", ["--label", None], "--endpoint needs --label NAME (e.g. --label baseline, then --label eagle3)"),
    ("without-tokenizer", ["--tokenizer", None], "--endpoint needs --tokenizer DIR: the served model's directory"),
]


def _argv(case: list[str | None] | Callable[[Path], list[str]], url: str, d: Path) -> list[str]:
    extra = case(d) if callable(case) else case
    given = {a for a in extra if a and a.startswith("--")}
    if "--image" in given or "--endpoint" in given or extra == ["--label", "a"]:
        head: list[str] = []
    else:
        head = ["--endpoint", url]
    base = [] if "--image" in given else [a.replace("{tok}", str(d / "tok")) for a in BASE]
    for flag in given & set(base):  # the case's own --label or --tokenizer replaces BASE's
        i = base.index(flag)
        del base[i : i + 2]
    argv = [*head, *base, *extra]
    return [a for a, after in zip(argv, [*argv[1:], ""], strict=True) if a is not None and after is not None]


@pytest.mark.parametrize(("case", "expected"), [c[1:] for c in FLAGS], ids=[c[0] for c in FLAGS])
def test_a_bad_flag_is_one_line_before_anything_is_measured(server, tmp_path, capsys, case, expected):
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, "bench", *_argv(case, server.url, tmp_path), "--out", str(out))
    assert expected.replace("{tmp}", str(tmp_path)) in one_line(rc, err)
    assert not any(c in err for c in "\r\t\x1b\u200b")  # a label's control characters are shown escaped
    assert server.fake.calls == [] and not out.exists()


def test_endpoint_forms():
    assert probe.normalize_endpoint("gpu-box", PORT) == f"http://gpu-box:{PORT}"
    assert probe.normalize_endpoint("127.0.0.1:31000", PORT) == "http://127.0.0.1:31000"
    assert probe.normalize_endpoint("http://h:8080/", PORT) == "http://h:8080"
    assert probe.normalize_endpoint("https://h", PORT) == "https://h"
    assert probe.normalize_endpoint("h:80", PORT) == "http://h:80"
    assert probe.normalize_endpoint("http://h:65535", PORT) == "http://h:65535"


# --------------------------------------------------------------------------------------------------
# --out and the bench.json in it
# --------------------------------------------------------------------------------------------------

OUT_DIRS: list[tuple[str, Callable[[Path], str], str]] = [
    ("out-is-a-file", lambda d: _file(d), "--out {tmp}/f: not a directory"),
    ("out-under-a-file", lambda d: _file(d) + "/sub", "--out {tmp}/f/sub: cannot write into it (Not a directory)"),
    ("bench-json-a-directory", lambda d: str((d / "o" / "bench.json").mkdir(parents=True) or d / "o"), "not a file"),
    ("bench-png-a-directory", lambda d: str((d / "p" / "bench.png").mkdir(parents=True) or d / "p"), "not a file"),
    ("out-empty", lambda d: "", "--out is empty: give a directory, e.g. --out bench-results"),
    ("out-read-only", lambda d: str((d / "ro").mkdir(mode=0o555) or d / "ro"), "--out {tmp}/ro: cannot write into"),
]
AS_ROOT = pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")


@pytest.mark.parametrize(
    ("make", "expected"),
    [pytest.param(*c[1:], id=c[0], marks=[AS_ROOT] if "read-only" in c[0] else []) for c in OUT_DIRS],
)
def test_out_problems_are_found_before_the_first_run(server, tmp_path, capsys, make, expected):
    argv = _argv([], server.url, tmp_path)
    rc, _, err = run_cli(capsys, "bench", *argv, "--out", make(tmp_path))
    assert expected.replace("{tmp}", str(tmp_path)) in one_line(rc, err) and server.fake.calls == []


def _bench_json(**changes) -> dict:
    label = {"source": {}, "server": {}, "status": "complete", "error": None, "runs": [{"concurrency": 1}]}
    return {"schema": 2, "settings": {}, "baseline": "baseline", "labels": {"old": label}, **changes}


def _label(**changes) -> dict:
    return _bench_json(labels={"old": {**_bench_json()["labels"]["old"], **changes}})


FOREIGN: list[tuple[str, str | bytes, str]] = [
    ("not-json", "{", "cannot read it"),
    ("not-utf8", b"\xff\xfe{}", "cannot read it"),
    ("nested-deeply", "[" * 100_000 + "]" * 100_000, "cannot read it"),
    ("a-list", "[]", "not a bench.json of this tool (schema 2)"),
    ("schema-1", json.dumps(_bench_json(schema=1)), "not a bench.json of this tool (schema 2)"),
    ("labels-a-list", json.dumps(_bench_json(labels=[])), "not a bench.json of this tool"),
    ("settings-a-list", json.dumps(_bench_json(settings=[])), "settings is not an object"),
    ("label-a-string", json.dumps(_bench_json(labels={"old": "x"})), "labels.old is not an object with a list"),
    ("runs-an-object", json.dumps(_label(runs={})), "labels.old is not an object with a list of runs"),
    ("status-unknown", json.dumps(_label(status="great")), "labels.old.status is 'great'"),
    ("run-a-number", json.dumps(_label(runs=[1])), "labels.old.runs.0 has no concurrency"),
    ("run-concurrency-zero", json.dumps(_label(runs=[{"concurrency": 0}])), "labels.old.runs.0 has no concurrency"),
    ("run-concurrency-a-bool", json.dumps(_label(runs=[{"concurrency": True}])), "runs.0 has no concurrency"),
    ("run-concurrency-text", json.dumps(_label(runs=[{"concurrency": "1"}])), "runs.0 has no concurrency"),
]


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in FOREIGN], ids=[c[0] for c in FOREIGN])
def test_a_hand_edited_or_foreign_bench_json_is_one_line(server, tmp_path, capsys, content, expected):
    target = tmp_path / "o" / "bench.json"
    target.parent.mkdir()
    written = content if isinstance(content, bytes) else content.encode()
    target.write_bytes(written)
    rc, _, err = run_cli(capsys, "bench", *_argv([], server.url, tmp_path), "--out", str(target.parent))
    line = one_line(rc, err)
    assert str(target) in line and expected in line and "--fresh" in line, line
    assert server.fake.calls == [] and target.read_bytes() == written  # left as it was


SHAPES = [
    ("source-a-string", _label(source="x")),
    ("server-a-list", _label(server=[])),
    ("grid-without-points", _bench_json(grid={"best": None})),
]


@pytest.mark.parametrize("content", [c[1] for c in SHAPES], ids=[c[0] for c in SHAPES])
def test_a_bench_json_with_a_misshapen_label_or_grid_is_one_line(server, tmp_path, capsys, content):
    target = tmp_path / "o" / "bench.json"
    target.parent.mkdir()
    # The settings this bench uses: the label is kept, so the report holds it.
    settings = {"max_tokens": 256, "seed": 0, "prompts": prompts.load().to_dict(), "figure": "output_tok_s"}
    target.write_text(json.dumps({**content, "settings": settings}))
    argv = [*_argv([], server.url, tmp_path), "--concurrency", "1", "--runs", "1"]
    try:
        rc, _, err = run_cli(capsys, "bench", *argv, "--out", str(target.parent))
    except Exception as exc:  # what the CLI let out as a traceback
        pytest.fail(f"{type(exc).__name__}: {exc}")
    assert str(target) in one_line(rc, err) and server.fake.calls == []


# --------------------------------------------------------------------------------------------------
# --api-key-file: its path is never shown
# --------------------------------------------------------------------------------------------------

PASTED = "sk-PASTED0key0123456789abcdef"  # a key pasted where the file's path goes
KEY_FILES: list[tuple[str, Callable[[Path], str], str]] = [
    ("missing", lambda d: str(d / PASTED), "no such file"),
    ("a-key-not-a-path", lambda d: PASTED, "no such file"),
    ("empty", lambda d: _file(d, PASTED, ""), "is empty"),
    ("two-lines", lambda d: _file(d, PASTED, f"{KEY}\n{KEY}\n"), "holds 2 lines"),
    ("too-large", lambda d: _file(d, PASTED, "x" * 5000), "is larger than 4096 bytes: not a key file"),
    ("a-directory", lambda d: str((d / PASTED).mkdir() or d / PASTED), "is not a regular file"),
    ("too-short", lambda d: _file(d, PASTED, "short\n"), "the key is shorter than 8 characters"),
    (
        "a-space",
        lambda d: _file(d, PASTED, "a key\n"),
        "the key holds a space, a control character or a non-ASCII character",
    ),
]


@pytest.mark.parametrize(("make", "problem"), [c[1:] for c in KEY_FILES], ids=[c[0] for c in KEY_FILES])
def test_a_bad_key_file_is_one_line_without_its_path(server, tmp_path, capsys, make, problem):
    out = tmp_path / "out"
    argv = [*_argv([], server.url, tmp_path), "--api-key-file", make(tmp_path), "--out", str(out)]
    rc, stdout, err = run_cli(capsys, "bench", *argv)
    assert one_line(rc, err) == (
        f"build.py bench: error: --api-key-file: {problem} (the path is not shown: a key pasted there would be)"
    )
    assert PASTED not in stdout + err and server.fake.calls == [] and not out.exists()


# --------------------------------------------------------------------------------------------------
# Servers that cannot be measured: exit 2 in one line, within the probe's deadline, before any run
# --------------------------------------------------------------------------------------------------


def drip_server_info(s) -> None:
    """The stand-in's /server_info answered as its drip_health answers /health (headers a byte at a time)."""
    base = s.httpd.RequestHandlerClass

    class Handler(base):
        def do_GET(self) -> None:
            if self.path == "/server_info":
                self._drip()
            else:
                super().do_GET()

    s.httpd.RequestHandlerClass = Handler


WANTS_A_KEY = "answered HTTP {status} on {path}: the server wants an API key: --api-key-file FILE"
REFUSED = "refuses the key from --api-key-file (HTTP 401 on {path}): is it the key in the server's API_KEY_FILE?"
# id, stand-in behaviour (None: nothing listens), drip /server_info, the key file's key, the line after "at URL"
SERVERS: list[tuple[str, dict | None, bool, str | None, str]] = [
    ("nothing-listens", None, False, None, ": connection refused"),
    ("no-key", dict(api_key=KEY), False, None, " " + WANTS_A_KEY.format(status=401, path="/server_info")),
    ("another-key", dict(api_key=KEY), False, "not-the-servers-key-0123", " " + REFUSED.format(path="/server_info")),
    ("health-401", dict(health_status=401), False, None, " " + WANTS_A_KEY.format(status=401, path="/health")),
    ("health-403", dict(health_status=403), False, None, " " + WANTS_A_KEY.format(status=403, path="/health")),
    ("health-401-with-a-key", dict(health_status=401), False, KEY, " " + REFUSED.format(path="/health")),
    ("health-503", dict(health_status=503), False, None, " is not ready: /health answered HTTP 503"),
    ("health-dripped", dict(drip_health=True), False, None, ": no answer within 0.8 s"),
    ("server-info-dripped", {}, True, None, ": no answer within 0.8 s"),
]


@pytest.mark.parametrize(
    ("behaviour", "drip", "key", "expected"), [c[1:] for c in SERVERS], ids=[c[0] for c in SERVERS]
)
def test_a_server_that_cannot_be_measured_is_one_line_and_exit_2(
    standin, bench_fakes, tmp_path, capsys, monkeypatch, behaviour, drip, key, expected
):
    if behaviour is None:
        url = f"http://127.0.0.1:{free_port()}"
    else:
        s = standin(stall_every=0.05, stall_for=5.0, **behaviour)
        url = s.url
        if drip:
            drip_server_info(s)
    fake = bench_fakes.serving(by_endpoint({}))
    monkeypatch.setattr(probe, "server_info", functools.partial(probe.server_info, deadline_s=0.8))
    (tmp_path / "tok").mkdir()
    extra = ["--api-key-file", _file(tmp_path, "key", key + "\n")] if key else []
    out = tmp_path / "out"
    t0 = time.monotonic()
    rc, stdout, err = run_cli(capsys, "bench", *_argv(extra, url, tmp_path), "--out", str(out))
    assert time.monotonic() - t0 < 10  # the stand-in drips for 5 s, a real header line for 50 min
    sglang_at = "cannot reach SGLang at" if ":" in expected[:2] or "no answer" in expected else "SGLang at"
    assert one_line(rc, err) == f"build.py bench: failed: {sglang_at} {url}{expected}"
    assert fake.calls == [] and not (out / "bench.json").exists()
    assert key is None or key not in stdout + err


def test_a_server_that_cannot_be_measured_leaves_no_new_out_directory(bench_fakes, tmp_path, capsys):
    bench_fakes.serving(by_endpoint({}))
    (tmp_path / "tok").mkdir()
    out = tmp_path / "out"
    rc, _, _ = run_cli(capsys, "bench", *_argv([], f"http://127.0.0.1:{free_port()}", tmp_path), "--out", str(out))
    assert rc == 2 and not out.exists(), sorted(p.name for p in out.iterdir())
