"""T0: `build.py bench` never hangs and never loses runs (issue 24, class 6), as tables of cases.

Against the stand-in SGLang (tests/unit/bench_standin.py): a server that sends its headers a byte at a time is
ended by --timeout and --request-timeout, deadlines measured from the request's start (the socket's read timeout
restarts with every byte); a second bench on the same --out is refused (fcntl lock) instead of one label's runs
being lost; SIGTERM keeps the runs, marks the label interrupted and writes bench.md, as Ctrl-C does; a label
with a carriage return or another control character is refused; a full disk under --out (a real tmpfs of a few
pages, in a mount namespace of its own) prints what bench.json would hold and exits 1 in one line; an
--endpoint port with leading zeros is refused, as the entrypoint refuses PORT=0080.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm120.bench import client
from sm120.bench.prompts import WARMUP
from tests.helpers import ROOT, run_cli, unshare_or_skip

FAST = ["--runs", "2", "--warmup", "0", "--max-tokens", "4"]


def last_line(rc: int, err: str, code: int) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == code, (rc, err[-1500:])
    assert "Traceback" not in err
    assert 1 <= len([ln for ln in lines if ln.startswith("build.py")]) <= 1, err
    return lines[-1]


# --------------------------------------------------------------------------------------------------
# Deadlines from the request's start
# --------------------------------------------------------------------------------------------------

DRIPS: list[tuple[str, list[str], str]] = [
    ("timeout", ["--timeout", "0.5"], "no new token for 0.5 s (--timeout) after 0 tokens"),
    (
        "request-timeout",
        ["--timeout", "100", "--request-timeout", "0.8"],
        "the request took longer than its deadline of 0.8 s",
    ),
    ("both-the-shorter", ["--timeout", "0.6", "--request-timeout", "0.9"], "no new token for 0.6 s"),
]


@pytest.mark.parametrize(("extra", "expected"), [c[1:] for c in DRIPS], ids=[c[0] for c in DRIPS])
def test_headers_a_byte_at_a_time_end_the_run_in_one_line(standin, tmp_path, capsys, extra, expected):
    s = standin(ttft=0.02, tok_s=200.0, burst=1, spec=False, drip_headers_on_request=2, stall_every=0.05)
    argv = ["--endpoint", s.url, "--label", "baseline", *FAST, *extra, "--out", str(tmp_path)]
    t0 = time.monotonic()
    rc, _, err = run_cli(capsys, "bench", *argv)
    assert time.monotonic() - t0 < 60  # the stand-in would trickle for 30 s, and a header line for 50 min
    last = last_line(rc, err, 1)
    assert f"baseline run 2/2 failed: {expected}" in last and "(1 finished run kept" in last, last
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["labels"]["baseline"]["status"] == "failed" and len(data["labels"]["baseline"]["runs"]) == 1


DEADLINES = [("read-timeout", 0.4, 100.0), ("request-deadline", 100.0, 0.4)]


@pytest.mark.parametrize(("read_timeout", "deadline"), [c[1:] for c in DEADLINES], ids=[c[0] for c in DEADLINES])
def test_the_deadline_holds_while_a_read_is_blocked(standin, read_timeout, deadline):
    """The request itself, timed: it ends within a poll of its deadline, not after the 30 s the server trickles."""
    s = standin(drip_headers_on_request=1, stall_every=0.05)
    settings = client.SamplingSettings(max_tokens=4)
    t0 = time.monotonic()
    with pytest.raises(client.RunFailed):
        client.measure(
            client.new_session(), s.url, WARMUP, settings, index=1, read_timeout_s=read_timeout, deadline_s=deadline
        )
    assert time.monotonic() - t0 < 0.4 + 2.0


def test_a_health_answer_a_byte_at_a_time_is_unreachable_not_a_hang(standin, monkeypatch):
    s = standin(drip_health=True, stall_every=0.05)
    monkeypatch.setattr(client, "CONNECT_TIMEOUT_S", 0.3)
    t0 = time.monotonic()
    with pytest.raises(client.ServerUnreachable, match=r"no answer to /health within 0\.8 s"):
        client.probe(client.new_session(), s.url, timeout_s=0.5)
    assert time.monotonic() - t0 < 5


def test_the_watchdog_does_not_end_a_request_that_keeps_its_deadlines(standin, tmp_path, capsys):
    s = standin(ttft=0.05, tok_s=50.0, burst=1, spec=False)
    argv = ["--endpoint", s.url, "--label", "baseline", "--runs", "2", "--warmup", "0", "--max-tokens", "20"]
    rc, _, err = run_cli(capsys, "bench", *argv, "--timeout", "0.3", "--request-timeout", "5", "--out", str(tmp_path))
    assert rc == 0, err
    assert len(json.loads((tmp_path / "bench.json").read_text())["labels"]["baseline"]["runs"]) == 2


# --------------------------------------------------------------------------------------------------
# One writer per --out; SIGTERM like Ctrl-C
# --------------------------------------------------------------------------------------------------


def _bench_process(url: str, out: Path, label: str, runs: int = 5) -> subprocess.Popen:
    argv = ["bench", "--endpoint", url, "--label", label, "--runs", str(runs), "--warmup", "0", "--max-tokens", "8"]
    return subprocess.Popen(
        [sys.executable, str(ROOT / "build.py"), *argv, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_held(s, proc: subprocess.Popen) -> None:
    """Wait (an event, not a clock) until bench's request held by the stand-in's gate has arrived: every run before
    it is saved, and the run it is stays unfinished until the gate opens. Fails clearly when bench ended first."""
    give_up = time.monotonic() + 120
    while not s.held.wait(0.2):
        if proc.poll() is not None:
            pytest.fail(f"bench ended before request {s.behaviour.hold_on_request}: {proc.communicate()}")
        if time.monotonic() > give_up:
            s.wait_held(0)  # fails, saying how many requests arrived


def test_a_second_bench_on_the_same_out_is_refused_and_the_first_loses_nothing(standin, tmp_path, capsys):
    # The first bench's run 2 waits at the stand-in's gate while the second one tries: the first is provably
    # running (holding the lock), however slow the machine; then the gate opens and it finishes its 5 runs.
    slow = standin(ttft=0.02, tok_s=20.0, burst=1, spec=False, hold_on_request=2)
    first = _bench_process(slow.url, tmp_path, "baseline")
    same = ["--runs", "2", "--warmup", "0", "--max-tokens", "8"]  # the first one's settings: comparable labels
    try:
        _wait_held(slow, first)
        rc, _, err = run_cli(
            capsys, "bench", "--endpoint", slow.url, "--label", "eagle3", *same, "--out", str(tmp_path)
        )
        last = last_line(rc, err, 2)
        assert f"--out {tmp_path}: another build.py bench (pid {first.pid}) is writing bench.json there" in last
        assert slow.requests == 2  # the second bench sent no /generate request
        slow.release()
        _, first_err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, first_err
    data = json.loads((tmp_path / "bench.json").read_text())
    assert list(data["labels"]) == ["baseline"] and len(data["labels"]["baseline"]["runs"]) == 5
    # The lock goes with the process: the next bench on the directory measures and keeps the first label.
    rc, _, err = run_cli(capsys, "bench", "--endpoint", slow.url, "--label", "eagle3", *same, "--out", str(tmp_path))
    assert rc == 0, err
    assert sorted(json.loads((tmp_path / "bench.json").read_text())["labels"]) == ["baseline", "eagle3"]


def test_benches_one_after_another_in_one_process_each_take_the_lock(standin, tmp_path, capsys):
    s = standin(ttft=0.01, tok_s=500.0, burst=1, spec=False)
    for label in ("baseline", "eagle3", "baseline"):
        rc, _, err = run_cli(capsys, "bench", "--endpoint", s.url, "--label", label, *FAST, "--out", str(tmp_path))
        assert rc == 0, err


SIGNALS = [("sigterm", signal.SIGTERM, 143, "terminated (SIGTERM)"), ("sigint", signal.SIGINT, 130, "interrupted")]


@pytest.mark.parametrize(("signum", "code", "says"), [c[1:] for c in SIGNALS], ids=[c[0] for c in SIGNALS])
def test_sigterm_keeps_the_runs_like_ctrl_c(standin, tmp_path, signum, code, says):
    # The signal comes while run 2's request waits at the stand-in's gate: exactly run 1 is finished, on any machine.
    s = standin(ttft=0.02, tok_s=20.0, burst=1, spec=False, hold_on_request=2)
    proc = _bench_process(s.url, tmp_path, "baseline")
    try:
        _wait_held(s, proc)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert says in last_line(proc.returncode, err, code)
    data = json.loads((tmp_path / "bench.json").read_text())
    label = data["labels"]["baseline"]
    assert label["status"] == "interrupted" and len(label["runs"]) == 1
    assert "| baseline | 1 of 5 (interrupted) |" in (tmp_path / "bench.md").read_text()
    assert s.requests == 2


# --------------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------------

LABELS = [
    ("carriage-return", "--label", "baseline\r"),
    ("carriage-return-inside", "--label", "base\rline"),
    ("tab", "--label", "eagle3\tx"),
    ("escape", "--label", "\x1b[31mred"),
    ("zero-width-space", "--label", "eagle3\u200b"),
    ("leading-space", "--label", " baseline"),
    ("trailing-space", "--label", "baseline "),
    ("baseline-carriage-return", "--baseline", "baseline\r"),
]


@pytest.mark.parametrize(("flag", "name"), [c[1:] for c in LABELS], ids=[c[0] for c in LABELS])
def test_a_label_with_control_characters_is_refused(tmp_path, capsys, flag, name):
    argv = ["bench", "--endpoint", "127.0.0.1:9", "--out", str(tmp_path / "o")]
    argv += ["--label", "x"] if flag == "--baseline" else []
    rc, _, err = run_cli(capsys, *argv, flag, name)
    last = last_line(rc, err, 2)
    assert f"{flag} {name!r}" in last and "control characters or surrounding spaces" in last
    assert "\r" not in err.replace(repr(name), "")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------------
# Endpoint ports: as the entrypoint reads PORT (no leading zeros: 0080 is not the port 80 a reader sees)
# --------------------------------------------------------------------------------------------------

ENDPOINT_PORTS = [
    ("bare-leading-zero", "h:0080", "port '0080'"),
    ("url-leading-zero", "http://h:0080", "port '0080'"),
    ("ipv6-leading-zero", "http://[::1]:030000", "port '030000'"),
    ("zeros", "h:00", "port '00'"),
    ("zero", "h:0", "port '0'"),
]


@pytest.mark.parametrize(("endpoint", "expected"), [c[1:] for c in ENDPOINT_PORTS], ids=[c[0] for c in ENDPOINT_PORTS])
def test_an_endpoint_port_with_leading_zeros_is_refused(tmp_path, capsys, endpoint, expected):
    argv = ["bench", "--endpoint", endpoint, "--label", "x", "--out", str(tmp_path / "o")]
    rc, _, err = run_cli(capsys, *argv)
    last = last_line(rc, err, 2)
    assert f"--endpoint {endpoint!r}: {expected} is not a port" in last and "no leading zeros" in last, last
    assert not (tmp_path / "o").exists()


def test_endpoint_ports_without_leading_zeros_still_work():
    assert client.normalize_endpoint("h:80", 30000) == "http://h:80"
    assert client.normalize_endpoint("http://h:65535", 30000) == "http://h:65535"
    assert client.normalize_endpoint("h", 30000) == "http://h:30000"


# --------------------------------------------------------------------------------------------------
# A full disk under --out
# --------------------------------------------------------------------------------------------------


def test_a_full_disk_under_out_prints_the_runs_and_says_so(standin, tmp_path):
    """--out on a tmpfs of 16 KiB: the first saves fit, a later one does not (the atomic save needs the old and
    the new file at once). Every finished run is printed as bench.json would hold it; bench.json keeps the last
    save; one line, exit 1."""
    unshare = unshare_or_skip()
    s = standin(ttft=0.005, tok_s=2000.0, burst=1, spec=False)
    out = tmp_path / "small"
    out.mkdir()
    argv = [sys.executable, str(ROOT / "build.py"), "bench", "--endpoint", s.url, "--label", "baseline"]
    argv += ["--runs", "60", "--warmup", "0", "--max-tokens", "3", "--out", str(out)]
    script = (
        'd=$1; shift; mount -t tmpfs -o size=16k tmpfs "$d" && "$@"; rc=$?; cp "$d/bench.json" "$d.saved"; exit $rc'
    )
    proc = subprocess.run(
        [*unshare, "sh", "-c", script, "sh", str(out), *argv], capture_output=True, text=True, timeout=300, check=False
    )
    last = last_line(proc.returncode, proc.stderr, 1)
    assert f"cannot write {out / 'bench.json'} (No space left on device)" in last
    printed = json.loads(proc.stdout[proc.stdout.index("{") :])
    measured = len(printed["labels"]["baseline"]["runs"])
    assert 1 <= measured < 60 and f"all {measured} finished runs are printed above" in last
    saved = json.loads(Path(f"{out}.saved").read_text())  # what the full disk still holds: the last good save
    assert len(saved["labels"]["baseline"]["runs"]) < measured
