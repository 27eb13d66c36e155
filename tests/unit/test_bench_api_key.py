"""T0: `build.py bench --api-key-file` against the stand-in SGLang server with a key (tests/unit/bench_standin.py,
SGLang's auth rules: /health open, everything else wants `Authorization: Bearer KEY`). With the key it measures;
without it, or with another, one line and exit 2; the key reaches neither bench.json, bench.md nor the output.
(`--image` with a key: tests/unit/test_bench_image.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from sm120.bench import client, prompts
from tests.helpers import run_cli

KEY = "bench-k3y-0123456789abcdef"
FAST = dict(ttft=0.01, tok_s=500.0, burst=1, spec=False)
COMMON = ["--label", "baseline", "--runs", "2", "--warmup", "0", "--max-tokens", "5"]


def key_file(tmp_path: Path, key: str = KEY) -> Path:
    path = tmp_path / "api_key"
    path.write_text(key + "\n")
    return path


def everything_written(out: Path, *streams: str) -> str:
    files = [p.read_bytes().decode(errors="replace") for p in out.rglob("*") if p.is_file() and p.suffix != ".png"]
    return "\n".join([*files, *streams])


def test_with_the_key_bench_measures(standin, tmp_path, capsys):
    s = standin(**FAST, api_key=KEY)
    out = tmp_path / "out"
    rc, stdout, stderr = run_cli(
        capsys, "bench", "--endpoint", s.url, *COMMON, "--out", str(out), "--api-key-file", str(key_file(tmp_path))
    )
    assert rc == 0, stderr
    assert len(s.bodies) == 2  # both runs reached /generate, past the key check
    written = everything_written(out, stdout, stderr)
    assert "bench.json" in {p.name for p in out.iterdir()} and KEY not in written


def test_without_a_key_it_is_one_line_and_exit_2(standin, tmp_path, capsys):
    s = standin(**FAST, api_key=KEY)
    rc, _, stderr = run_cli(capsys, "bench", "--endpoint", s.url, *COMMON, "--out", str(tmp_path / "out"))
    assert rc == 2
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [
        f"build.py bench: failed: SGLang at {s.url} answered HTTP 401 on /server_info: the server wants an API key: "
        "--api-key-file FILE"
    ], stderr
    assert s.bodies == []  # found before the first request


def test_another_key_is_named_as_refused(standin, tmp_path, capsys):
    s = standin(**FAST, api_key=KEY)
    wrong = key_file(tmp_path, "not-the-servers-key-0123")
    rc, stdout, stderr = run_cli(
        capsys, "bench", "--endpoint", s.url, *COMMON, "--out", str(tmp_path / "out"), "--api-key-file", str(wrong)
    )
    assert rc == 2
    assert f"SGLang at {s.url} refuses the key from --api-key-file (HTTP 401 on /server_info)" in stderr
    assert "not-the-servers-key-0123" not in stdout + stderr


def test_a_key_for_a_server_without_one_is_harmless(standin, tmp_path, capsys):
    s = standin(**FAST)
    rc, _, stderr = run_cli(
        capsys, "bench", "--endpoint", s.url, *COMMON, "--out", str(tmp_path / "out"), "--api-key-file",
        str(key_file(tmp_path)),
    )  # fmt: skip
    assert rc == 0, stderr


@pytest.mark.parametrize(
    ("content", "problem"),
    [("", "is empty"), (f"{KEY}\n{KEY}\n", "holds 2 lines"), (None, "no such file"), ("x" * 5000, "is larger than")],
)
def test_a_bad_key_file_is_exit_2_before_any_request(standin, tmp_path, capsys, content, problem):
    s = standin(**FAST, api_key=KEY)
    path = tmp_path / "api_key"
    if content is not None:
        path.write_text(content)
    rc, stdout, stderr = run_cli(
        capsys, "bench", "--endpoint", s.url, *COMMON, "--out", str(tmp_path / "out"), "--api-key-file", str(path)
    )
    assert rc == 2
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 3 and f"--api-key-file '{path}': {problem}" in lines[0], stderr
    assert KEY not in stdout + stderr and s.requests == 0 and not (tmp_path / "out").exists()


def test_a_401_on_generate_alone_is_the_same_line(standin):
    """A server whose /server_info is open (or missing) but /generate wants the key: measure() says so."""
    s = standin(**FAST, api_key=KEY)
    with requests.Session() as session:
        with pytest.raises(client.KeyRefused, match="HTTP 401 on /generate: the server wants an API key"):
            client.measure(
                session, s.url, prompts.WARMUP, client.SamplingSettings(max_tokens=3), index=1, read_timeout_s=5
            )
        session.headers["Authorization"] = f"Bearer {KEY}"
        run = client.measure(
            session, s.url, prompts.WARMUP, client.SamplingSettings(max_tokens=3), index=1, read_timeout_s=5
        )
    assert run.completion_tokens == 3


def test_the_stand_in_leaves_health_open_like_sglang(standin):
    s = standin(**FAST, api_key=KEY)
    assert requests.get(f"{s.url}/health", timeout=5).status_code == 200
    assert requests.get(f"{s.url}/server_info", timeout=5).status_code == 401
    bearer = {"Authorization": f"bearer {KEY}"}  # SGLang compares the scheme case-insensitively
    assert requests.get(f"{s.url}/server_info", headers=bearer, timeout=5).status_code == 200
