"""T0: `build.py bench --endpoint` against a stand-in SGLang server with known timing (tests/unit/bench_standin.py).

The stand-in speaks SGLang 0.5.9's streaming /generate wire format; the figures bench reports must match the
timing the stand-in was given, within a few percent.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sm120.bench import client, prompts
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests.helpers import free_port, run_build_py, run_cli

PORT = planmod.resolve(cfg.load()).image.port


def bench(capsys, *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "bench", *argv)


def load(out: Path) -> dict:
    return json.loads((out / "bench.json").read_text())


def test_reports_the_stand_ins_timing_350ms_ttft_80_tok_s_in_bursts_of_3(standin, tmp_path, capsys):
    # 49 tokens = 1 from prefill + 16 verify steps of 3 tokens, 37.5 ms apart.
    s = standin(ttft=0.35, tok_s=80.0, burst=3, spec=True)
    rc, out, err = bench(
        capsys, "--endpoint", s.url, "--label", "eagle3", "--runs", "3", "--warmup", "0", "--max-tokens", "49",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 0, err
    data = load(tmp_path)
    label = data["labels"]["eagle3"]
    assert label["status"] == "complete"
    assert len(label["runs"]) == 3
    for run in label["runs"]:
        # Never earlier than the server's delay; later by the HTTP stack's few ms (more on a loaded machine).
        assert 0.35 <= run["ttft_s"] <= 0.35 * 1.08
        assert run["decode_tok_s"] == pytest.approx(80.0, rel=0.05)
        assert run["e2e_tok_s"] == pytest.approx(49 / (0.35 + 48 / 80), rel=0.05)
        # Tokens come from SGLang's counter, not from chunks: 17 chunks carried 49 tokens.
        assert run["completion_tokens"] == 49
        assert run["chunks"] == 17
        assert run["tokens_per_chunk"] == pytest.approx(3.0)
        # The accept length is SGLang's own figure, completion_tokens / spec_verify_ct.
        assert run["spec_verify_ct"] == 16
        assert run["spec_accept_length"] == pytest.approx(49 / 16)
        assert run["finish_reason"] == "length"
    summary = label["summary"]
    assert summary["decode_tok_s"]["mean"] == pytest.approx(80.0, rel=0.03)
    assert summary["ttft_s"]["mean"] == pytest.approx(0.35, rel=0.05)
    assert summary["spec_accept_length"]["mean"] == pytest.approx(49 / 16)
    for key in ("mean", "median", "min", "max", "stdev", "ci95_low", "ci95_high"):
        assert key in summary["decode_tok_s"]
    assert label["server"]["speculative_algorithm"] == "EAGLE3"
    assert label["server"]["avg_spec_accept_length"] == pytest.approx(49 / 16)
    printed = re.search(r"eagle3 +3 runs +decode (\d+\.\d)", out)
    assert printed and float(printed.group(1)) == pytest.approx(80.0, rel=0.03), out
    assert (tmp_path / "bench.md").is_file() and (tmp_path / "bench.png").stat().st_size > 10_000


def test_requests_use_sglang_sampling_params_greedy_with_a_seed(standin, tmp_path, capsys):
    s = standin(ttft=0.01, tok_s=400.0, burst=1, spec=False)
    rc, _, err = bench(
        capsys, "--endpoint", s.url, "--label", "baseline", "--runs", "3", "--warmup", "1", "--max-tokens", "5",
        "--seed", "7", "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 0, err
    assert len(s.bodies) == 4  # one warm-up + three runs
    assert s.bodies[0]["text"] == prompts.WARMUP.text  # not a timed prompt: no prefix-cache hit for run 1
    shipped = prompts.load()
    assert prompts.WARMUP.text not in {p.text for p in shipped.prompts}
    for i, body in enumerate(s.bodies[1:]):
        assert body["stream"] is True
        assert body["sampling_params"] == {
            "max_new_tokens": 5,
            "temperature": 0.0,
            "sampling_seed": 7,
            "ignore_eos": False,
        }
        assert body["text"] == shipped.prompts[i].text
    runs = load(tmp_path)["labels"]["baseline"]["runs"]
    assert [r["prompt_id"] for r in runs] == [p.id for p in shipped.prompts[:3]]
    assert all(r["spec_accept_length"] is None for r in runs)


def test_two_labels_in_one_directory_give_the_speedup_and_the_gate(standin, tmp_path, capsys):
    base = standin(ttft=0.05, tok_s=60.0, burst=1, spec=False)
    spec = standin(ttft=0.05, tok_s=120.0, burst=3, spec=True)
    common = ["--runs", "3", "--warmup", "0", "--max-tokens", "31", "--out", str(tmp_path)]
    rc, _, err = bench(capsys, "--endpoint", base.url, "--label", "baseline", *common)
    assert rc == 0, err
    rc, _, err = bench(capsys, "--endpoint", spec.url, "--label", "eagle3", "--min-speedup", "1.5", *common)
    assert rc == 0, err
    assert "keeping baseline" in err
    data = load(tmp_path)
    assert set(data["labels"]) == {"baseline", "eagle3"}
    sp = data["speedup"]["eagle3"]["decode_tok_s"]
    assert sp["ratio"] == pytest.approx(2.0, rel=0.05)
    assert sp["ci95_low"] <= sp["ratio"] <= sp["ci95_high"]
    e2e = data["speedup"]["eagle3"]["e2e_tok_s"]
    expected = (31 / (0.05 + 30 / 120)) / (31 / (0.05 + 30 / 60))
    assert e2e["ratio"] == pytest.approx(expected, rel=0.04)
    assert data["gate"]["passed"] is True
    md = (tmp_path / "bench.md").read_text()
    assert "| baseline |" in md and "| eagle3 |" in md
    assert re.search(r"\| ×(1\.9\d|2\.0\d)\d \(", md), md

    # The same measurement against a higher bar: exit 1, one line naming the figures.
    rc, _, err = bench(capsys, "--endpoint", spec.url, "--label", "eagle3", "--min-speedup", "2.5", *common)
    assert rc == 1
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(
        r"build\.py bench: failed: eagle3 / baseline decode_tok_s = (1\.9\d\d|2\.0\d\d) "
        r"\(95 % CI \d\.\d+–\d\.\d+\) is below --min-speedup 2\.5",
        last,
    ), last
    assert load(tmp_path)["gate"]["passed"] is False


def test_a_server_that_dies_mid_run_keeps_the_finished_runs(standin, tmp_path, capsys):
    s = standin(ttft=0.02, tok_s=200.0, burst=2, spec=True, die_on_request=3, die_after_tokens=5)
    rc, _, err = bench(
        capsys, "--endpoint", s.url, "--label", "eagle3", "--runs", "5", "--warmup", "0", "--max-tokens", "11",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 1
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("build.py bench: failed: eagle3 run 3/5 failed: ")
    assert "2 finished runs kept" in last
    label = load(tmp_path)["labels"]["eagle3"]
    assert len(label["runs"]) == 2
    assert label["status"] == "failed"
    assert "run 3/5" in label["error"]
    assert (tmp_path / "bench.md").is_file()


def test_an_error_chunk_mid_run_ends_the_benchmark(standin, tmp_path, capsys):
    s = standin(ttft=0.02, tok_s=200.0, burst=1, spec=False, error_on_request=2)
    rc, _, err = bench(
        capsys, "--endpoint", s.url, "--label", "baseline", "--runs", "4", "--warmup", "0", "--max-tokens", "5",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 1
    last = err.strip().splitlines()[-1]
    assert "baseline run 2/4 failed: server error: CUDA error: an illegal memory access" in last
    assert len(load(tmp_path)["labels"]["baseline"]["runs"]) == 1


def test_an_unreachable_server_exits_2_with_one_line(tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    rc, _, err = bench(capsys, "--endpoint", url, "--label", "baseline", "--out", str(tmp_path / "r"))
    assert rc == 2
    assert err.strip() == f"build.py bench: failed: cannot reach SGLang at {url}: connection refused"
    assert not (tmp_path / "r" / "bench.json").exists()


def test_a_server_not_ready_exits_2(standin, tmp_path, capsys):
    s = standin(health_status=503)
    rc, _, err = bench(capsys, "--endpoint", s.url, "--label", "baseline", "--out", str(tmp_path))
    assert rc == 2
    assert err.strip() == f"build.py bench: failed: SGLang at {s.url} is not ready: /health answered HTTP 503"


def test_as_a_process_a_dying_server_gives_no_traceback(standin, tmp_path):
    s = standin(ttft=0.02, tok_s=200.0, burst=1, spec=False, die_on_request=2, die_after_tokens=2)
    proc = run_build_py(
        "bench", "--endpoint", s.url, "--label", "baseline", "--runs", "3", "--warmup", "0", "--max-tokens", "6",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("build.py bench: failed: baseline run 2/3 failed: ")
    assert sum("failed:" in ln for ln in lines) == 1
    assert len(json.loads((tmp_path / "bench.json").read_text())["labels"]["baseline"]["runs"]) == 1


def test_results_measured_with_other_settings_are_not_mixed(standin, tmp_path, capsys):
    s = standin(ttft=0.01, tok_s=400.0, burst=1, spec=False)
    args = ["--endpoint", s.url, "--runs", "2", "--warmup", "0", "--out", str(tmp_path)]
    assert bench(capsys, *args, "--label", "baseline", "--max-tokens", "4")[0] == 0
    rc, _, err = bench(capsys, *args, "--label", "eagle3", "--max-tokens", "8")
    assert rc == 2
    assert "was measured with max_tokens 4, this run uses 8" in err
    rc, _, err = bench(capsys, *args, "--label", "eagle3", "--max-tokens", "8", "--fresh")
    assert rc == 0, err
    assert set(load(tmp_path)["labels"]) == {"eagle3"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--endpoint", "http://127.0.0.1:1"], "--endpoint needs --label NAME"),
        (["--image", "x", "--label", "a"], "--label goes with --endpoint"),
        (["--endpoint", "http://127.0.0.1:1", "--label", "a", "--env", "A=b"], "--env goes with --image"),
        (["--endpoint", "http://127.0.0.1:1", "--label", "a", "--spec-grid"], "--spec-grid goes with --image"),
        (["--endpoint", "http://127.0.0.1:1", "--label", "eagle3", "--min-speedup", "1.02"], "--min-speedup needs"),
        (["--endpoint", "http://127.0.0.1:1", "--label", "a", "--max-tokens", "1"], "at least 2"),
        (["--endpoint", "http://127.0.0.1:1", "--label", "a/b"], "--label 'a/b'"),
        (["--endpoint", "ftp://x", "--label", "a"], "give an http(s) URL"),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv, message, tmp_path, capsys):
    rc, _, err = bench(capsys, *argv, "--out", str(tmp_path))
    assert rc == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_bad_prompt_files_are_usage_errors(tmp_path, capsys):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "a", "text": "hello"}\n{"id": "b"}\n')
    rc, _, err = bench(capsys, "--endpoint", "127.0.0.1:1", "--label", "a", "--prompts", str(bad))
    assert rc == 2
    assert f"--prompts {bad}, line 2" in err
    rc, _, err = bench(capsys, "--endpoint", "127.0.0.1:1", "--label", "a", "--prompts", str(tmp_path / "none"))
    assert rc == 2 and "cannot read it" in err


def test_missing_arguments_is_an_argparse_usage_error():
    proc = run_build_py("bench")
    assert proc.returncode == 2
    assert "one of the arguments --endpoint --image is required" in proc.stderr


def test_endpoint_forms():
    assert client.normalize_endpoint("gpu-box", PORT) == f"http://gpu-box:{PORT}"
    assert client.normalize_endpoint("127.0.0.1:31000", PORT) == "http://127.0.0.1:31000"
    assert client.normalize_endpoint("http://h:8080/", PORT) == "http://h:8080"
    assert client.normalize_endpoint("https://h", PORT) == "https://h"


def test_shipped_prompts_are_varied_and_stable():
    shipped = prompts.load()
    categories = {p.category for p in shipped.prompts}
    assert {"code", "chat", "reasoning"} <= categories
    assert len(shipped.prompts) >= 9
    assert len({p.id for p in shipped.prompts}) == len(shipped.prompts)
    assert shipped.name == "shipped" and len(shipped.sha256) == 64


def test_a_body_delimited_by_closing_the_connection_is_timed_as_it_arrives(standin, tmp_path, capsys):
    # Not what uvicorn sends, but what a proxy in between may turn the stream into.
    s = standin(ttft=0.05, tok_s=100.0, burst=2, spec=True, chunked=False)
    rc, _, err = bench(
        capsys, "--endpoint", s.url, "--label", "eagle3", "--runs", "2", "--warmup", "0", "--max-tokens", "21",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 0, err
    for run in load(tmp_path)["labels"]["eagle3"]["runs"]:
        assert run["decode_tok_s"] == pytest.approx(100.0, rel=0.05)
        assert run["chunks"] == 11


def test_a_server_that_stalls_fails_the_run_after_the_timeout(standin, tmp_path, capsys):
    s = standin(ttft=1.5, tok_s=100.0, burst=1, spec=False)
    rc, _, err = bench(
        capsys, "--endpoint", s.url, "--label", "baseline", "--runs", "1", "--warmup", "0", "--max-tokens", "3",
        "--timeout", "0.3", "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 1
    # The deadline names itself whichever clock noticed it (the socket's read timeout or the watchdog, issue 24).
    assert "baseline run 1/1 failed: no new token for 0.3 s (--timeout) after 0 tokens" in err.strip().splitlines()[-1]
