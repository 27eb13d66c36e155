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

import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3

from ..errors import CheckFailed, UsageError
from .prompts import Prompt

CONNECT_TIMEOUT_S = 5.0
DEFAULT_DEADLINE_S = 1800.0  # one request in all: a first request may wait for JIT compiles
MAX_LINE_BYTES = 64 << 20


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
    try:
        with session.get(f"{endpoint}/server_info", timeout=(CONNECT_TIMEOUT_S, timeout_s), stream=True) as resp:
            status = resp.status_code
    except requests.RequestException:
        return  # /generate tells, with a clearer reason
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
            raise UsageError(f"--endpoint {text!r}: not a valid URL (a port is 1 to 65535)") from None
        if port is None and parts.hostname and not parts.netloc.endswith(":"):
            raw = f"http://{parts.hostname}:{default_port}{parts.path}"
    try:
        parts = urlsplit(raw)
        _ = parts.port
    except ValueError:
        raise UsageError(f"--endpoint {text!r}: not a valid URL (a port is 1 to 65535)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--endpoint {text!r}: give an http(s) URL such as http://127.0.0.1:{default_port}")
    port_text = parts.netloc.rsplit("]", 1)[-1].rpartition(":")[2] if ":" in parts.netloc.rsplit("]", 1)[-1] else ""
    if port_text and not (re.fullmatch(r"[0-9]{1,5}", port_text) and 1 <= int(port_text) <= 65535):
        raise UsageError(f"--endpoint {text!r}: port {port_text!r} is not a port (1 to 65535, ASCII digits)")
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
    return text.splitlines()[0][:160] if text else type(exc).__name__


def probe(session: requests.Session, endpoint: str, timeout_s: float = 10.0) -> None:
    """Raise ServerUnreachable unless GET /health answers 200."""
    try:
        with session.get(f"{endpoint}/health", timeout=(CONNECT_TIMEOUT_S, timeout_s), stream=True) as resp:
            status = resp.status_code
    except requests.RequestException as exc:
        raise ServerUnreachable(f"cannot reach SGLang at {endpoint}: {describe(exc)}") from None
    if status != 200:
        raise ServerUnreachable(f"SGLang at {endpoint} is not ready: /health answered HTTP {status}")


def _bounded_json(session: requests.Session, url: str, deadline_s: float, limit: int = 1 << 22) -> Any:
    """GET url's JSON body within deadline_s in all (a server that trickles bytes cannot hold bench), or None."""
    t0 = time.monotonic()
    with session.get(url, timeout=(CONNECT_TIMEOUT_S, deadline_s), stream=True) as resp:
        if resp.status_code != 200:
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

    def check() -> None:
        now = time.perf_counter()
        if now - t0 > deadline_s:
            raise RunFailed(
                f"the request took longer than its deadline of {deadline_s:g} s (--request-timeout) "
                f"after {_tokens(progress['tokens'])}"
            )
        if now - progress["t"] > read_timeout_s:
            raise RunFailed(
                f"no new token for {read_timeout_s:g} s (--timeout) after {_tokens(progress['tokens'])}: "
                "the server sends keep-alive lines or repeats chunks without tokens"
            )

    try:
        resp = session.post(f"{endpoint}/generate", json=body, stream=True, timeout=(CONNECT_TIMEOUT_S, read_timeout_s))
    except requests.RequestException as exc:
        raise RunFailed(describe(exc)) from None
    with resp:
        if resp.status_code in AUTH_STATUSES:
            raise key_refused(session, endpoint, resp.status_code, "/generate")
        if resp.status_code != 200:
            detail = " ".join(resp.text.split())[:200] if resp.text else ""
            raise RunFailed(f"/generate answered HTTP {resp.status_code}" + (f": {detail}" if detail else ""))
        t_first: float | None = None
        first_tokens = 0
        last_tokens = 0
        chunks = 0
        final: dict[str, Any] | None = None
        t_end = t0
        try:
            for line in _lines(resp, check):
                now = time.perf_counter()
                if not line or not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                try:
                    obj = json.loads(payload, parse_constant=_no_constant)
                except (ValueError, RecursionError):
                    raise RunFailed(f"unreadable chunk from /generate: {payload[:80]!r}") from None
                if not isinstance(obj, dict):
                    raise RunFailed(f"unexpected chunk from /generate: {payload[:80]!r}")
                if "error" in obj:
                    err = obj["error"]
                    message = err.get("message") if isinstance(err, dict) else err
                    raise RunFailed(f"server error: {' '.join(str(message).split())[:200]}")
                meta = obj.get("meta_info")
                meta = meta if isinstance(meta, dict) else {}
                tokens = meta.get("completion_tokens")
                if not isinstance(tokens, int) or isinstance(tokens, bool):
                    ids = obj.get("output_ids")
                    tokens = len(ids) if isinstance(ids, list) else 0
                if tokens > last_tokens:
                    if t_first is None:
                        t_first, first_tokens = now, tokens
                    chunks += 1
                    last_tokens = tokens
                    progress["t"], progress["tokens"] = now, tokens
                done, kind, abort = _finish(meta)
                if abort is not None:
                    raise RunFailed(f"request aborted by the server: {' '.join(abort.split())[:200]}")
                if done:
                    final, t_end = obj, now
                    final["_finish_type"] = kind
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise RunFailed(f"{describe(exc)} after {last_tokens} tokens") from None
    if final is None:
        raise RunFailed(f"stream ended without its last chunk after {last_tokens} tokens")
    if t_first is None or last_tokens == 0:
        raise RunFailed("the server finished without generating a token")
    meta = final.get("meta_info")
    meta = meta if isinstance(meta, dict) else {}
    decode_tokens = last_tokens - first_tokens
    decode_s = t_end - t_first
    verify = meta.get("spec_verify_ct")
    prompt_tokens = meta.get("prompt_tokens")
    return RunResult(
        index=index,
        prompt_id=prompt.id,
        category=prompt.category,
        ttft_s=t_first - t0,
        decode_tok_s=decode_tokens / decode_s if decode_tokens > 0 and decode_s > 0 else None,
        e2e_tok_s=last_tokens / (t_end - t0),
        completion_tokens=last_tokens,
        prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) and not isinstance(prompt_tokens, bool) else None,
        e2e_s=t_end - t0,
        decode_s=decode_s,
        chunks=chunks,
        tokens_per_chunk=decode_tokens / (chunks - 1) if chunks > 1 else None,
        finish_reason=final.get("_finish_type"),
        server_e2e_latency_s=_number(meta, "e2e_latency"),
        spec_accept_length=_number(meta, "spec_accept_length"),
        spec_accept_rate=_number(meta, "spec_accept_rate"),
        spec_verify_ct=verify if isinstance(verify, int) and not isinstance(verify, bool) else None,
    )
