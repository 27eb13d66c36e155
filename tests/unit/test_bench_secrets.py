"""T0: no secret in any output of `build.py bench`, by construction. For generated keys (the key file's alphabet,
lengths 8, 32 and 200) and a password in --endpoint's URL, bench runs (in this process, its file descriptors
captured) against the stand-in SGLang (tests/unit/bench_standin.py; `echo_auth` quotes the Authorization header in
its 401 body) through a successful sweep whose bench_serving line quotes `Authorization: Bearer KEY` in a failed
request's error, a run that fails with that text, a 401, an unreachable server and a bad --out named by the key:
neither the key nor the password is in stdout, stderr or any file under --out."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

import pytest

from sm120.bench import serving
from tests.helpers import free_port, run_cli
from tests.unit.bench_fakes import fabricate

ALPHABET = string.ascii_letters + string.digits + "._~+/=-"  # key_file.py's [A-Za-z0-9._~+/=-]
URL_SAFE = string.ascii_letters + string.digits + "._~-"  # a password as it stands in a URL's user info
MASKED = "Authorization: Bearer ********"


def secrets_for(length: int) -> tuple[str, str]:
    rng = random.Random(length)
    return "".join(rng.choice(ALPHABET) for _ in range(length)), "".join(rng.choice(URL_SAFE) for _ in range(16))


def with_password(url: str, password: str) -> str:
    return url.replace("http://", f"http://bench:{password}@", 1)


def assert_no_secret(output: str, out: Path, *secrets: str) -> None:
    files = {p: p.read_bytes().decode("latin-1") for p in out.rglob("*") if p.is_file()} if out.is_dir() else {}
    for secret in secrets:
        assert secret not in output, output
        for path, text in files.items():
            assert secret not in text, path


@pytest.mark.parametrize("length", [8, 32, 200])
def test_no_secret_in_any_output(standin, bench_fakes, tmp_path, capfd, length):
    key, password = secrets_for(length)
    echoed = f"Traceback (most recent call last):\naiohttp.ClientResponseError: 401, sent Authorization: Bearer {key}"
    fail_with: list[BaseException] = []

    def answer(job: serving.Job, concurrency: int, repeat: int) -> dict[str, Any]:
        assert key not in " ".join(job.argv(concurrency, 10, "/bench/dataset-10.json", "/bench/result.jsonl"))
        if fail_with:
            raise fail_with[0]
        return fabricate(concurrency, 100.0, 0.1, 0.01, failed=1, error=echoed)

    fake = bench_fakes.serving(answer)
    (tmp_path / "tok").mkdir()

    def bench(name: str, endpoint: str, out: Path | None = None) -> tuple[int, str, Path]:
        where = tmp_path / name
        where.mkdir()
        (where / "api_key").write_text(key + "\n")
        out = out or where / "out"
        argv = ["--endpoint", endpoint, "--label", "baseline", "--tokenizer", str(tmp_path / "tok")]
        argv += ["--concurrency", "1", "--runs", "1", "--api-key-file", str(where / "api_key"), "--out", str(out)]
        rc, stdout, stderr = run_cli(capfd, "bench", *argv)
        return rc, stdout + stderr, out

    # A successful sweep: a failed request's error quotes the key; kept in bench.json, the key masked.
    served = standin(api_key=key, echo_auth=True)
    rc, output, out = bench("ok", served.url)
    assert rc == 0, output
    assert json.loads((out / "bench.json").read_text())["labels"]["baseline"]["runs"][0]["error"] == (
        "aiohttp.ClientResponseError: 401, sent " + MASKED
    )
    assert_no_secret(output, out, key, password)
    assert {job.api_key_file for job, _ in fake.calls} == {tmp_path / "ok" / "api_key"}

    # A password in the URL (a keyless server): recorded without the user info.
    keyless = standin()
    rc, output, out = bench("url", with_password(keyless.url, password))
    assert rc == 0, output
    assert_no_secret(output, out, key, password)
    source = json.loads((out / "bench.json").read_text())["labels"]["baseline"]["source"]
    assert source == {"endpoint": keyless.url, "credentials": "given in the URL, not recorded"}

    # A run that fails with a message quoting the key: the message kept, the key masked.
    fail_with.append(serving.RunFailed(f"no request completed at concurrency 1: 401, sent Authorization: Bearer {key}"))
    rc, output, out = bench("failed", served.url)
    assert rc == 1 and MASKED in output.splitlines()[-1], output
    assert MASKED in json.loads((out / "bench.json").read_text())["labels"]["baseline"]["error"]
    assert MASKED in (out / "bench.md").read_text()
    assert_no_secret(output, out, key, password)

    # Refused (a 401 whose body quotes the header), with the password in the URL every message quotes.
    other = standin(api_key="another-key-0123456789", echo_auth=True)
    rc, output, out = bench("401", with_password(other.url, password))
    assert rc == 2 and "HTTP 401" in output, output
    assert_no_secret(output, out, key, password)

    # Nothing listens there.
    rc, output, out = bench("gone", with_password(f"http://127.0.0.1:{free_port()}", password))
    assert rc == 2 and "cannot reach" in output, output
    assert_no_secret(output, out, key, password)

    # A bad --out, found after the key was read, whose message quotes it: --out under a file, named by the key.
    (tmp_path / "file").write_text("")
    rc, output, out = bench("bad", with_password(keyless.url, password), tmp_path / "file" / key)
    assert rc == 2 and "--out" in output, output
    assert_no_secret(output, out, key, password)
    assert "********" in output or "//" in key  # quoted, and masked (a path writes "//" as "/")
