"""T0: no secret in any output of `build.py bench`, by construction (issue #35). For generated keys (the key file's
alphabet, several lengths) and a password in --endpoint's URL, bench runs as a user runs it (a process) against the
stand-in server (tests/unit/bench_standin.py, whose `echo_auth` quotes the Authorization header in its 401 body and
error chunk) through its refusal and failure paths and a successful run: neither the key nor the password is in its
stdout, its stderr or any file under --out."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest

from tests.helpers import free_port, run_build_py

ALPHABET = string.ascii_letters + string.digits + "._~+/=-"  # key_file.py's [A-Za-z0-9._~+/=-]
URL_SAFE = string.ascii_letters + string.digits + "._~-"  # a password as it stands in a URL's user info
FAST = dict(ttft=0.01, tok_s=500.0, burst=1, spec=False)
COMMON = ["--label", "baseline", "--runs", "1", "--warmup", "0", "--max-tokens", "3"]


def secrets_for(length: int) -> tuple[str, str]:
    rng = random.Random(length)
    return "".join(rng.choice(ALPHABET) for _ in range(length)), "".join(rng.choice(URL_SAFE) for _ in range(16))


def with_password(url: str, password: str) -> str:
    return url.replace("http://", f"http://bench:{password}@", 1)


def bench(where: Path, key: str, endpoint: str, out: Path | None = None) -> tuple[int, str, Path]:
    """Run bench with the key in where/api_key; (exit status, stdout + stderr, --out)."""
    where.mkdir(exist_ok=True)
    key_path = where / "api_key"
    key_path.write_text(key + "\n")
    out = out or where / "out"
    proc = run_build_py("bench", "--endpoint", endpoint, *COMMON, "--api-key-file", str(key_path), "--out", str(out))
    return proc.returncode, proc.stdout + proc.stderr, out


def assert_no_secret(output: str, out: Path, *secrets: str) -> None:
    files = {p: p.read_bytes().decode("latin-1") for p in out.rglob("*") if p.is_file()} if out.is_dir() else {}
    for secret in secrets:
        assert secret not in output, output
        for path, text in files.items():
            assert secret not in text, path


@pytest.mark.parametrize("length", [8, 23, 64, 200])
def test_no_secret_in_any_output(standin, tmp_path, length):
    key, password = secrets_for(length)

    # A successful run: the key is sent, bench.json and bench.md name the endpoint without its user info.
    served = standin(**FAST, api_key=key, echo_auth=True)
    rc, output, out = bench(tmp_path / "ok", key, served.url)
    assert rc == 0, output
    assert_no_secret(output, out, key, password)

    # A password in the URL (a keyless server: requests sends it as Basic auth), recorded without its user info.
    keyless = standin(**FAST)
    rc, output, out = bench(tmp_path / "url", key, with_password(keyless.url, password))
    assert rc == 0, output
    assert_no_secret(output, out, key, password)
    source = json.loads((out / "bench.json").read_text())["labels"]["baseline"]["source"]
    assert source["endpoint"] == keyless.url and "credentials" in source
    assert "credentials given" in (out / "bench.md").read_text()

    # The server's error chunk quotes `Authorization: Bearer KEY`: the message is kept, the key masked.
    failing = standin(**FAST, api_key=key, echo_auth=True, error_on_request=1)
    rc, output, out = bench(tmp_path / "chunk", key, failing.url)
    assert rc == 1, output
    assert "Authorization: Bearer ********" in output
    assert "Authorization: Bearer ********" in (out / "bench.json").read_text()
    assert_no_secret(output, out, key, password)

    # Refused (401, its body quoting the header) with the password in the URL every message quotes.
    other = standin(**FAST, api_key="another-key-0123456789", echo_auth=True)
    rc, output, out = bench(tmp_path / "401", key, with_password(other.url, password))
    assert rc == 2 and "HTTP 401" in output, output
    assert_no_secret(output, out, key, password)

    # Nothing listens there.
    rc, output, out = bench(tmp_path / "gone", key, with_password(f"http://127.0.0.1:{free_port()}", password))
    assert rc == 2 and "cannot reach" in output, output
    assert_no_secret(output, out, key, password)

    # A bad argument found after the key was read, whose message quotes it: --out under a file, named by the key.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "file").write_text("")
    rc, output, out = bench(tmp_path / "bad", key, with_password(served.url, password), tmp_path / "bad" / "file" / key)
    assert rc == 2 and "--out" in output, output
    assert_no_secret(output, out, key, password)
    assert "********" in output or "//" in key  # quoted, and masked (a path writes "//" as "/")
