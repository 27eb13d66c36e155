"""One measured request against a running SGLang server, through its native HTTP API.

Wire format (read from SGLang 0.5.9's http_server.py and tokenizer_manager.py; 0.5.23 is the same):
POST /generate {"text", "sampling_params", "stream": true} answers `text/event-stream` with `data: {json}\\n\\n`
chunks and a final `data: [DONE]\\n\\n`. Each chunk holds the cumulative `text`, `output_ids` (cumulative unless
the server runs with --stream-output) and `meta_info` with the cumulative `completion_tokens`. The last chunk
has a `finish_reason` (a dict: type stop | length | abort), `e2e_latency` and, with speculative decoding,
`spec_verify_ct`, `spec_accept_length` (= completion_tokens / spec_verify_ct) and `spec_accept_rate`. An error
during generation arrives as a chunk `{"error": {"message": ...}}`, then [DONE].

Tokens are counted from `completion_tokens`, never from chunks: one chunk carries several tokens under
speculative decoding, and a slow reader gets several decode steps merged into one chunk.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
import requests.adapters
import urllib3
import urllib3.connection

from sm120.bench.prompts import Prompt
from sm120.errors import CheckFailed, UsageError
from sm120.image.entrypoint.assemble import INTEGERS
from sm120.image.entrypoint.errors import clip

CONNECT_TIMEOUT_S = 5.0
DEFAULT_DEADLINE_S = 1800.0  # one request in all: a first request may wait for JIT compiles
MAX_LINE_BYTES = 64 << 20
PORTS = INTEGERS["--port"]  # the image's entrypoint's bounds of a port
PORT_RULE = f"a port is {PORTS[0]} to {PORTS[1]} in ASCII digits, no leading zeros"


def is_port(text: str) -> bool:
    """A port as the image's entrypoint takes one (PORT, --port): ASCII digits, no leading zeros, within PORTS."""
    return bool(re.fullmatch(r"[1-9][0-9]{0,4}", text)) and PORTS[0] <= int(text) <= PORTS[1]


# ---------------------------------------------------------------------------------------------------------
# Deadlines that hold while a read is blocked. A socket's read timeout restarts with every byte, so a server
# that sends its headers (or anything) a byte at a time would outlive --timeout and --request-timeout; the
# per-read checks in measure() run only between reads. A watchdog thread judges the deadlines every 50 ms and,
# when one passes, shuts the request's socket down, which ends the blocked read at once. The socket is found
# through the connection class of DeadlineAdapter's pools (registered as the response is read).
# ---------------------------------------------------------------------------------------------------------

_ACTIVE = threading.local()
WATCH_POLL_S = 0.05


class _Watchdog:
    def __init__(self, reason: Callable[[], str | float | None]) -> None:
        """reason(): why a deadline has passed, else the seconds left until the earliest one (or None)."""
        self._reason = reason
        self.fired: str | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-deadline", daemon=True)

    def attach(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            if self.fired is not None:
                self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _run(self) -> None:
        wait = WATCH_POLL_S
        while not self._stop.wait(wait):
            why = self._reason()
            if isinstance(why, float):  # nothing overdue: sleep until the earliest deadline could pass
                wait = min(max(why, WATCH_POLL_S), 60.0)  # (Event.wait refuses a huge timeout)
                continue
            if why is not None:
                with self._lock:
                    self.fired = why
                    for sock in self._sockets:
                        self._shut(sock)
                return

    def __enter__(self) -> _Watchdog:
        self._previous = getattr(_ACTIVE, "watch", None)
        _ACTIVE.watch = self
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        _ACTIVE.watch = self._previous


def _attach(sock: socket.socket | None) -> None:
    watch = getattr(_ACTIVE, "watch", None)
    if watch is not None:
        watch.attach(sock)


class _WatchedHTTPConnection(urllib3.connection.HTTPConnection):
    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        _attach(self.sock)
        return super().getresponse(*args, **kwargs)


class _WatchedHTTPSConnection(urllib3.connection.HTTPSConnection):
    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        _attach(self.sock)
        return super().getresponse(*args, **kwargs)


class _Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _TLSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class DeadlineAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose connections hand their socket to the deadline watchdog of the request."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}


def new_session() -> requests.Session:
    """A requests session whose requests the deadlines here can end (every bench request goes through one)."""
    session = requests.Session()
    watched(session)
    return session


def watched(session: requests.Session) -> requests.Session:
    """Mount DeadlineAdapter on a session (once), so that a blocked read can be ended at its deadline."""
    for prefix in ("http://", "https://"):
        if not isinstance(session.adapters.get(prefix), DeadlineAdapter):
            session.mount(prefix, DeadlineAdapter())
    return session


def _total(seconds: float, what: str) -> _Watchdog:
    end = time.monotonic() + seconds
    return _Watchdog(lambda: what if time.monotonic() > end else end - time.monotonic())


class ServerUnreachable(CheckFailed):
    """No SGLang server answers at the endpoint: exit status 2, like a wrong flag."""

    exit_code = 2


class RunFailed(Exception):
    """A request that did not finish: the server died, errored or aborted it."""


class KeyRefused(CheckFailed):
    """The server wants an API key, or another one (HTTP 401/403): exit status 2, like a missing flag."""

    exit_code = 2


AUTH_STATUSES = (401, 403)  # SGLang's key check (srt/utils/auth.py): 401 Unauthorized, 403 for admin routes


def key_refused(session: requests.Session, endpoint: str, status: int, path: str) -> KeyRefused:
    if "Authorization" in session.headers:
        return KeyRefused(
            f"SGLang at {endpoint} refuses the key from --api-key-file (HTTP {status} on {path}): "
            "is it the key in the server's API_KEY_FILE?"
        )
    return KeyRefused(
        f"SGLang at {endpoint} answered HTTP {status} on {path}: the server wants an API key: --api-key-file FILE"
    )


def check_access(session: requests.Session, endpoint: str, timeout_s: float = 30.0) -> None:
    """Raise KeyRefused when GET /server_info (behind SGLang's key; /health is not) answers 401 or 403."""
    status = _status(session, endpoint, "/server_info", timeout_s)
    if status in AUTH_STATUSES:
        raise key_refused(session, endpoint, status, "/server_info")


@dataclass(frozen=True)
class SamplingSettings:
    max_tokens: int
    temperature: float = 0.0
    seed: int = 0
    ignore_eos: bool = False

    def sampling_params(self) -> dict[str, Any]:
        # SGLang's SamplingParams (0.5.9 and 0.5.23) takes `sampling_seed`; with temperature 0 it samples greedily
        # (top_k = 1) and the seed only matters if a user raises the temperature.
        return {
            "max_new_tokens": self.max_tokens,
            "temperature": self.temperature,
            "sampling_seed": self.seed,
            "ignore_eos": self.ignore_eos,
        }


@dataclass
class RunResult:
    index: int  # 1-based within its label
    prompt_id: str
    category: str
    ttft_s: float  # request sent -> first chunk carrying a token
    decode_tok_s: float | None  # tokens after the first chunk / time after the first chunk
    e2e_tok_s: float  # completion tokens / (request sent -> last chunk)
    completion_tokens: int
    prompt_tokens: int | None
    e2e_s: float
    decode_s: float
    chunks: int  # chunks that carried tokens, the first included
    tokens_per_chunk: float | None  # decode tokens / decode chunks: ~accept length when the reader keeps up
    finish_reason: str | None
    server_e2e_latency_s: float | None
    spec_accept_length: float | None  # SGLang's own figure (completion_tokens / spec_verify_ct)
    spec_accept_rate: float | None
    spec_verify_ct: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def normalize_endpoint(text: str, default_port: int) -> str:
    """'host', 'host:port' or a URL -> 'http://host:port'. A bare host gets the image's port (build.toml)."""
    raw = text.strip()
    if not raw:
        raise UsageError("--endpoint is empty: give a URL such as http://127.0.0.1:PORT")
    if "://" not in raw:
        raw = "http://" + raw
        try:
            parts = urlsplit(raw)
            port = parts.port
        except ValueError:
            raise UsageError(f"--endpoint {text!r}: not a valid URL ({PORT_RULE})") from None
        if port is None and parts.hostname and not parts.netloc.endswith(":"):
            raw = f"http://{parts.hostname}:{default_port}{parts.path}"
    try:
        parts = urlsplit(raw)
        _ = parts.port
    except ValueError:
        raise UsageError(f"--endpoint {text!r}: not a valid URL ({PORT_RULE})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--endpoint {text!r}: give an http(s) URL such as http://127.0.0.1:{default_port}")
    port_text = parts.netloc.rsplit("]", 1)[-1].rpartition(":")[2] if ":" in parts.netloc.rsplit("]", 1)[-1] else ""
    if port_text and not is_port(port_text):
        raise UsageError(f"--endpoint {text!r}: port {port_text!r} is not a port ({PORT_RULE})")
    if ":" in parts.netloc.rsplit("]", 1)[-1] and not port_text:
        raise UsageError(f"--endpoint {text!r}: the port after ':' is empty (e.g. :{default_port})")
    if not raw.isascii() or any(c.isspace() for c in raw):
        raise UsageError(f"--endpoint {text!r}: not a URL (spaces or non-ASCII characters)")
    return raw.rstrip("/")


def describe(exc: BaseException) -> str:
    """A short reason from a requests exception, without urllib3's nested reprs."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "connection timed out"
    if isinstance(exc, (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError)):
        return "no data before the read timeout"
    if isinstance(exc, (requests.exceptions.ChunkedEncodingError, urllib3.exceptions.ProtocolError)):
        return "connection closed in the middle of the stream"
    text = str(exc)
    match = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if match:
        return match.group(1).strip().rstrip(".").lower()
    if "RemoteDisconnected" in text or "Connection aborted" in text:
        return "connection closed by the server"
    return clip(text.splitlines()[0], 160) if text else type(exc).__name__


def _status(session: requests.Session, endpoint: str, path: str, timeout_s: float) -> int:
    """GET path's HTTP status within timeout_s in all, plus the connect (a server that sends its headers a byte
    at a time cannot hold bench); ServerUnreachable when no status came."""
    watched(session)
    limit = CONNECT_TIMEOUT_S + timeout_s
    watch = _total(limit, f"no answer to {path} within {limit:g} s")
    try:
        with watch, session.get(f"{endpoint}{path}", timeout=(CONNECT_TIMEOUT_S, timeout_s), stream=True) as resp:
            status = resp.status_code
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        reason = watch.fired or describe(exc)
        raise ServerUnreachable(f"cannot reach SGLang at {endpoint}: {reason}") from None
    if watch.fired is not None:  # cut off in the middle of its headers (http.client takes EOF as their end)
        raise ServerUnreachable(f"cannot reach SGLang at {endpoint}: {watch.fired}")
    return status


def probe(session: requests.Session, endpoint: str, timeout_s: float = 10.0) -> None:
    """Raise ServerUnreachable unless GET /health answers 200 (within timeout_s in all, plus the connect),
    KeyRefused when it answers 401 or 403 (SGLang leaves /health open; a proxy in front may not)."""
    status = _status(session, endpoint, "/health", timeout_s)
    if status in AUTH_STATUSES:
        raise key_refused(session, endpoint, status, "/health")
    if status != 200:
        raise ServerUnreachable(f"SGLang at {endpoint} is not ready: /health answered HTTP {status}")


def _bounded_json(session: requests.Session, url: str, deadline_s: float, limit: int = 1 << 22) -> Any:
    """GET url's JSON body within deadline_s in all (a server that trickles bytes cannot hold bench), or None."""
    t0 = time.monotonic()
    watched(session)
    watch = _total(deadline_s, "deadline")
    with watch, session.get(url, timeout=(CONNECT_TIMEOUT_S, deadline_s), stream=True) as resp:
        if resp.status_code != 200 or watch.fired is not None:
            return None
        body = b""
        for chunk in resp.iter_content(65536):
            body += chunk
            if len(body) > limit or time.monotonic() - t0 > deadline_s:
                return None
    return json.loads(body, parse_constant=_no_constant)


def server_info(session: requests.Session, endpoint: str) -> dict[str, Any]:
    """What the server says about itself (GET /server_info, 0.5.9+): the settings that make a result comparable."""
    try:
        info = _bounded_json(session, f"{endpoint}/server_info", 30.0)
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError, ValueError, RecursionError):
        return {}
    if not isinstance(info, dict):
        return {}
    keys = [
        "version",
        "model_path",
        "served_model_name",
        "tp_size",
        "dp_size",
        "attention_backend",
        "speculative_algorithm",
        "speculative_draft_model_path",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "cuda_graph_max_bs",
    ]
    out: dict[str, Any] = {k: info[k] for k in keys if k in info and isinstance(info[k], (str, int, float, type(None)))}
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        avg = _finite(states[0].get("avg_spec_accept_length"))
        if avg is not None:
            out["avg_spec_accept_length"] = avg
    return out


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _no_constant(name: str) -> None:
    """json's NaN / Infinity / -Infinity: not numbers a figure can be made of (read as missing)."""
    return None


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _finish(meta: dict[str, Any]) -> tuple[bool, str | None, str | None]:
    """(finished, finish type, abort message)."""
    reason = meta.get("finish_reason")
    if reason is None:
        return False, None, None
    if isinstance(reason, dict):
        kind = str(reason.get("type"))
        return True, kind, (str(reason.get("message") or "aborted") if kind == "abort" else None)
    return True, str(reason), None


def _number(meta: dict[str, Any], key: str) -> float | None:
    return _finite(meta.get(key))


def _lines(resp: requests.Response, check: Callable[[], None]) -> Iterator[bytes]:
    """The response's lines as soon as their bytes arrive; `check` runs after every read (the deadlines).

    read1 returns whatever has arrived, with chunked transfer encoding (SGLang behind uvicorn) and with a body
    delimited by the connection's close alike; requests' iter_lines(chunk_size=None) would wait for the whole
    body in the second case and time every token at the end.
    """
    buffer = b""
    while True:
        data = resp.raw.read1(65536)
        check()
        if not data:
            break
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r")
        if len(buffer) > MAX_LINE_BYTES:
            raise RunFailed(f"a line of more than {MAX_LINE_BYTES} bytes from /generate: not SGLang's stream")
    if buffer:
        yield buffer


def measure(
    session: requests.Session,
    endpoint: str,
    prompt: Prompt,
    settings: SamplingSettings,
    *,
    index: int,
    read_timeout_s: float,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> RunResult:
    """Send one streaming /generate request and time it. Raises RunFailed when it does not finish.

    Two clocks bound it: no new token for read_timeout_s (a server that sends keep-alive comment lines or
    repeats a chunk keeps a socket's read timeout from ever firing), and deadline_s for the whole request.
    """
    body = {"text": prompt.text, "sampling_params": settings.sampling_params(), "stream": True}
    t0 = time.perf_counter()
    progress = {"t": t0, "tokens": 0}

    def overdue() -> str | None:
        """Which deadline has passed, measured from the request's start (and from the last new token)."""
        why = due()
        return why if isinstance(why, str) else None

    def due() -> str | float:
        """overdue()'s reason, or the seconds until a deadline could pass (the watchdog sleeps that long)."""
        now = time.perf_counter()
        if now - t0 > deadline_s:
            return (
                f"the request took longer than its deadline of {deadline_s:g} s (--request-timeout) "
                f"after {_tokens(progress['tokens'])}"
            )
        if now - progress["t"] > read_timeout_s:
            return (
                f"no new token for {read_timeout_s:g} s (--timeout) after {_tokens(progress['tokens'])}: "
                "the server sends keep-alive lines, repeats chunks without tokens or trickles its bytes"
            )
        return min(t0 + deadline_s, progress["t"] + read_timeout_s) - now

    watched(session)
    with _Watchdog(due) as watch:
        return _measure(session, endpoint, prompt, body, index, read_timeout_s, t0, progress, overdue, watch)


def _measure(
    session: requests.Session,
    endpoint: str,
    prompt: Prompt,
    body: dict[str, Any],
    index: int,
    read_timeout_s: float,
    t0: float,
    progress: dict[str, Any],
    overdue: Callable[[], str | None],
    watch: _Watchdog,
) -> RunResult:
    """measure()'s request, read under the watchdog: a deadline that passed names itself, whichever clock (the
    watchdog's, the socket's read timeout, the check between reads) noticed it first."""

    def check() -> None:
        why = overdue()
        if why is not None:
            raise RunFailed(why)

    try:
        resp = session.post(f"{endpoint}/generate", json=body, stream=True, timeout=(CONNECT_TIMEOUT_S, read_timeout_s))
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise RunFailed(watch.fired or overdue() or describe(exc)) from None
    if watch.fired is not None:  # cut off in the middle of its headers (http.client takes EOF as their end)
        resp.close()
        raise RunFailed(watch.fired)
    t_first: float | None = None
    first_tokens = last_tokens = chunks = 0
    final: dict[str, Any] | None = None
    t_end = t0
    with resp:
        _check_status(session, endpoint, resp)
        try:
            for line in _lines(resp, check):
                now = time.perf_counter()
                if not line.startswith(b"data:"):
                    continue
                if line[5:].strip() == b"[DONE]":
                    break
                obj, meta, tokens = _chunk(line[5:].strip())
                if tokens > last_tokens:
                    if t_first is None:
                        t_first, first_tokens = now, tokens
                    chunks += 1
                    last_tokens = tokens
                    progress["t"], progress["tokens"] = now, tokens
                done, kind, abort = _finish(meta)
                if abort is not None:
                    raise RunFailed(f"request aborted by the server: {clip(' '.join(abort.split()), 200)}")
                if done:
                    final, t_end = {**obj, "_finish_type": kind}, now
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise RunFailed(watch.fired or overdue() or f"{describe(exc)} after {last_tokens} tokens") from None
    if final is None and watch.fired is not None:  # the watchdog ended the stream, not the server
        raise RunFailed(watch.fired)
    return _result(prompt, index, final, (t0, t_first, t_end), (first_tokens, last_tokens, chunks))


def _result(
    prompt: Prompt,
    index: int,
    final: dict[str, Any] | None,
    times: tuple[float, float | None, float],
    counts: tuple[int, int, int],
) -> RunResult:
    """The run's figures from its stream: times (sent, first token, last chunk), counts (tokens by the first chunk,
    tokens in all, chunks with tokens); RunFailed when it ended before its last chunk or without a token."""
    (t0, t_first, t_end), (first_tokens, last_tokens, chunks) = times, counts
    if final is None:
        raise RunFailed(f"stream ended without its last chunk after {last_tokens} tokens")
    if t_first is None or last_tokens == 0:
        raise RunFailed("the server finished without generating a token")
    meta = final.get("meta_info") if isinstance(final.get("meta_info"), dict) else {}
    decode_tokens, decode_s = last_tokens - first_tokens, t_end - t_first
    return RunResult(
        index=index,
        prompt_id=prompt.id,
        category=prompt.category,
        ttft_s=t_first - t0,
        decode_tok_s=decode_tokens / decode_s if decode_tokens > 0 and decode_s > 0 else None,
        e2e_tok_s=last_tokens / (t_end - t0),
        completion_tokens=last_tokens,
        prompt_tokens=_count(meta.get("prompt_tokens")),
        e2e_s=t_end - t0,
        decode_s=decode_s,
        chunks=chunks,
        tokens_per_chunk=decode_tokens / (chunks - 1) if chunks > 1 else None,
        finish_reason=final.get("_finish_type"),
        server_e2e_latency_s=_number(meta, "e2e_latency"),
        spec_accept_length=_number(meta, "spec_accept_length"),
        spec_accept_rate=_number(meta, "spec_accept_rate"),
        spec_verify_ct=_count(meta.get("spec_verify_ct")),
    )


def _check_status(session: requests.Session, endpoint: str, resp: requests.Response) -> None:
    """/generate's answer before its stream: a refused key (exit 2) or another HTTP error (the run fails)."""
    if resp.status_code in AUTH_STATUSES:
        raise key_refused(session, endpoint, resp.status_code, "/generate")
    if resp.status_code != 200:
        try:
            text = resp.text
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
            text = ""
        detail = clip(" ".join(text.split()), 200) if text else ""  # masked before the cut
        raise RunFailed(f"/generate answered HTTP {resp.status_code}" + (f": {detail}" if detail else ""))


def _chunk(payload: bytes) -> tuple[dict[str, Any], dict[str, Any], int]:
    """One `data:` chunk: (its JSON, its meta_info, the completion tokens so far: meta_info's count, else the
    length of output_ids); RunFailed for what SGLang never sends, or for its error chunk."""
    try:
        obj = json.loads(payload, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise RunFailed(f"unreadable chunk from /generate: {clip(repr(payload), 84)}") from None
    if not isinstance(obj, dict):
        raise RunFailed(f"unexpected chunk from /generate: {clip(repr(payload), 84)}")
    if "error" in obj:
        err = obj["error"]
        message = err.get("message") if isinstance(err, dict) else err
        raise RunFailed(f"server error: {clip(' '.join(str(message).split()), 200)}")
    meta = obj.get("meta_info") if isinstance(obj.get("meta_info"), dict) else {}
    tokens = _count(meta.get("completion_tokens"))
    ids = obj.get("output_ids")
    return obj, meta, tokens if tokens is not None else len(ids) if isinstance(ids, list) else 0


def _count(value: Any) -> int | None:
    """A count the server sent: an int (a JSON true is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
