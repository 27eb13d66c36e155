"""Before a sweep: is an SGLang server there, does it take the key, and what does it serve (host side, `requests`).

Each request has one deadline in all: it runs in a daemon thread the caller stops waiting for, so a server that
sends its headers a byte at a time cannot hold bench (a socket's read timeout restarts with every byte).
"""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import urlsplit

from sm120.errors import CheckFailed, UsageError
from sm120.image.entrypoint.assemble import INTEGERS

PORTS = INTEGERS["--port"]  # the image's entrypoint's bounds of a port
PORT_RULE = f"a port is {PORTS[0]} to {PORTS[1]} in ASCII digits, no leading zeros"
AUTH_STATUSES = (401, 403)  # SGLang's key check (srt/utils/auth.py): 401 Unauthorized, 403 for admin routes
# What /server_info says that makes two results comparable (the rest, the keys' places included, is not kept).
SERVER_KEYS = ("version", "model_path", "served_model_name", "tp_size", "dp_size", "attention_backend")
SERVER_KEYS += ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps")
SERVER_KEYS += ("speculative_eagle_topk", "speculative_num_draft_tokens", "cuda_graph_max_bs")


class ServerUnreachable(CheckFailed):
    """No SGLang server answers at the endpoint: exit status 2, like a wrong flag."""

    exit_code = 2


class KeyRefused(CheckFailed):
    """The server wants an API key, or another one (HTTP 401/403): exit status 2, like a missing flag."""

    exit_code = 2


def is_port(text: str) -> bool:
    return bool(re.fullmatch(r"[1-9][0-9]{0,4}", text)) and PORTS[0] <= int(text) <= PORTS[1]


def normalize_endpoint(text: str, default_port: int) -> str:
    """'host', 'host:port' or a URL -> 'http://host:port'. A bare host gets the image's port (build.toml)."""
    raw = text.strip()
    if not raw:
        raise UsageError("--endpoint is empty: give a URL such as http://127.0.0.1:PORT")
    if not raw.isascii() or any(c.isspace() for c in raw):
        raise UsageError(f"--endpoint {text!r}: not a URL (spaces or non-ASCII characters)")
    raw = raw if "://" in raw else "http://" + raw
    try:
        parts = urlsplit(raw)
        _ = parts.port
    except ValueError:
        raise UsageError(f"--endpoint {text!r}: not a valid URL ({PORT_RULE})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--endpoint {text!r}: give an http(s) URL such as http://127.0.0.1:{default_port}")
    host_port = parts.netloc.rsplit("@", 1)[-1].rsplit("]", 1)[-1]
    if ":" in host_port:
        port_text = host_port.rpartition(":")[2]
        if not port_text:
            raise UsageError(f"--endpoint {text!r}: the port after ':' is empty (e.g. :{default_port})")
        if not is_port(port_text):
            raise UsageError(f"--endpoint {text!r}: port {port_text!r} is not a port ({PORT_RULE})")
    elif "://" not in text:
        raw = f"{parts.scheme}://{parts.netloc}:{default_port}{parts.path}"
    return raw.rstrip("/")


def _get(url: str, headers: dict[str, str], deadline_s: float) -> Any:
    import requests  # here: build.py's other commands need no HTTP client

    box: dict[str, Any] = {}

    def fetch() -> None:
        try:
            box["response"] = requests.get(url, headers=headers, timeout=(5, deadline_s))
        except requests.RequestException as exc:
            box["error"] = exc

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    thread.join(deadline_s)
    if "response" in box:
        return box["response"]
    if "error" not in box:
        reason = f"no answer within {deadline_s:g} s"
    elif match := re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(box["error"])):
        reason = match.group(1).strip().rstrip(".").lower()
    elif "Timeout" in type(box["error"]).__name__:
        reason = "connection timed out"
    else:
        reason = "the connection failed or was closed"
    raise ServerUnreachable(f"cannot reach SGLang at {url.rsplit('/', 1)[0]}: {reason}")


def _ask(endpoint: str, path: str, key: str | None, deadline_s: float) -> Any:
    response = _get(f"{endpoint}{path}", {"Authorization": f"Bearer {key}"} if key else {}, deadline_s)
    if (status := response.status_code) in AUTH_STATUSES:
        raise KeyRefused(
            f"SGLang at {endpoint} refuses the key from --api-key-file (HTTP {status} on {path}): "
            "is it the key in the server's API_KEY_FILE?"
            if key
            else f"SGLang at {endpoint} answered HTTP {status} on {path}: the server wants an API key: "
            "--api-key-file FILE"
        )
    return response


def health(endpoint: str, key: str | None, deadline_s: float = 10.0) -> None:
    """ServerUnreachable unless GET /health answers 200; KeyRefused on 401/403 (SGLang leaves /health open; a proxy
    in front may not)."""
    if (status := _ask(endpoint, "/health", key, deadline_s).status_code) != 200:
        raise ServerUnreachable(f"SGLang at {endpoint} is not ready: /health answered HTTP {status}")


def server_info(endpoint: str, key: str | None, deadline_s: float = 30.0) -> dict[str, Any]:
    health(endpoint, key, min(deadline_s, 10.0))
    resp = _ask(endpoint, "/server_info", key, deadline_s)
    try:
        info = resp.json() if resp.status_code == 200 else {}
    except ValueError:
        info = {}
    if not isinstance(info, dict):
        return {}
    return {k: info[k] for k in SERVER_KEYS if k in info and isinstance(info[k], (str, int, float, type(None)))}
