"""T0: `build.py bench --endpoint` against servers that answer its first two GETs badly (issue 35, class 5), as a
table of cases against the stand-in SGLang (tests/unit/bench_standin.py): /health or /server_info whose headers
arrive a byte at a time end in one line within their total deadline (a socket's read timeout restarts with
every byte), and a 401/403 on /health says the server wants an API key rather than "not ready"; exit 2 each."""

from __future__ import annotations

import functools
import time

import pytest

from sm120.bench import client
from tests.helpers import run_cli

FAST = ["--label", "baseline", "--runs", "1", "--warmup", "0", "--max-tokens", "4"]


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


CASES: list[tuple[str, dict, bool, bool, str]] = [
    # (id, stand-in behaviour, drip /server_info, --api-key-file, the line's end)
    ("health-dripped", dict(drip_health=True), False, False, "no answer to /health within 0.8 s"),
    ("server-info-dripped", {}, True, False, "no answer to /server_info within 0.8 s"),
    (
        "health-401",
        dict(health_status=401),
        False,
        False,
        "answered HTTP 401 on /health: the server wants an API key: --api-key-file FILE",
    ),
    (
        "health-403",
        dict(health_status=403),
        False,
        False,
        "answered HTTP 403 on /health: the server wants an API key: --api-key-file FILE",
    ),
    (
        "health-401-with-a-key",
        dict(health_status=401),
        False,
        True,
        "refuses the key from --api-key-file (HTTP 401 on /health): is it the key in the server's API_KEY_FILE?",
    ),
    ("health-503", dict(health_status=503), False, False, "is not ready: /health answered HTTP 503"),
]


@pytest.mark.parametrize(("behaviour", "drip", "key", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_first_answer_is_one_line_and_exit_2(
    standin, tmp_path, capsys, monkeypatch, behaviour, drip, key, expected
):
    s = standin(stall_every=0.05, **behaviour)
    if drip:
        drip_server_info(s)
    monkeypatch.setattr(client, "CONNECT_TIMEOUT_S", 0.3)
    monkeypatch.setattr(client, "probe", functools.partial(client.probe, timeout_s=0.5))
    monkeypatch.setattr(client, "check_access", functools.partial(client.check_access, timeout_s=0.5))
    extra = []
    if key:
        (tmp_path / "key").write_text("a-key-the-server-does-not-take\n")
        extra = ["--api-key-file", str(tmp_path / "key")]
    t0 = time.monotonic()
    rc, _, err = run_cli(capsys, "bench", "--endpoint", s.url, *FAST, *extra, "--out", str(tmp_path / "out"))
    assert time.monotonic() - t0 < 10  # the stand-in trickles for 30 s, a real header line for 50 min
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in err, (rc, err[-1500:])
    assert len(lines) == 1 and lines[0].startswith("build.py bench: failed: ") and lines[0].endswith(expected), err
    assert s.bodies == []  # refused before the first /generate
