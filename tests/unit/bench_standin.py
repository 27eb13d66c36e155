"""A stand-in SGLang server with known timing, for the tests of `build.py bench` and its docs sample.

It speaks SGLang 0.5.9's native wire format (http_server.py / tokenizer_manager.py): POST /generate with
"stream": true answers `text/event-stream` over chunked transfer encoding, one `data: {json}\\n\\n` per decode
step with the cumulative `text`, `output_ids` and `meta_info.completion_tokens`; the last chunk has
`finish_reason` {"type": "length" | "stop", ...}, `e2e_latency` and, when speculative decoding is on,
`spec_verify_ct`, `spec_accept_length` (= completion_tokens / spec_verify_ct) and `spec_accept_rate`; then
`data: [DONE]`. GET /health, GET /server_info (server args + internal_states[0].avg_spec_accept_length), and
what SGLang's bench_serving asks besides: GET /v1/models, /get_server_info, /model_info, POST /flush_cache.

Timing: the first token arrives `ttft` seconds after the request; then `burst` tokens arrive together every
`burst / tok_s` seconds (speculative decoding's verify steps), so decode runs at `tok_s` tokens/s. Deadlines
are absolute from the moment the first chunk was sent (no drift, no catching up). Failure modes: die (close
the connection mid-stream and stop listening) on the Nth /generate request, or answer it with SGLang's error
chunk. A gate for tests that act while a benchmark is provably mid-run: with `hold_on_request` N, the Nth
/generate request waits before it is answered; `held` is set once it waits (the N-1 before it answered in full),
`release()` lets it go (`stop()` releases it too, so a shutdown never waits on it). With `api_key` (--api-key,
as SGLang's) every route but /health*, /ready* and /metrics answers 401 without `Authorization: Bearer KEY`
(SGLang's srt/utils/auth.py).

Run it by hand, like the image's entrypoint (PORT and HOST from the environment, or --port/--host):
    python3 tests/unit/bench_standin.py eagle3 --port 30001 --ttft 0.35 --tok-s 80 --burst 3
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    ttft: float = 0.35
    tok_s: float = 80.0
    burst: int = 3
    spec: bool = True  # report speculative metrics (SGLang does only with --speculative-algorithm)
    natural_tokens: int | None = None  # stop ("stop" finish) after this many tokens, if below max_new_tokens
    die_on_request: int | None = None  # 1-based /generate request on which the server dies
    die_after_tokens: int = 4
    error_on_request: int | None = None  # 1-based /generate request answered with SGLang's error chunk
    jitter: float = 0.0  # each request's delays scaled by a uniform factor in [1 - jitter, 1 + jitter]
    seed: int = 0
    health_status: int = 200
    chunked: bool = True  # False: no Transfer-Encoding, the body ends when the connection closes
    # Servers that never finish a request (for at most `stall_for` s): after `stall_after_tokens` tokens the
    # Nth /generate request gets keep-alive comment lines (": ping"), or the same chunk again, every `stall_every`.
    keepalive_on_request: int | None = None
    repeat_on_request: int | None = None
    stall_after_tokens: int = 2
    stall_every: float = 0.05
    stall_for: float = 30.0
    # The last chunk's figures as JSON's NaN / Infinity (Python's json writes them).
    nonfinite: bool = False
    # The Nth /generate request (or /health) answered with its status line and headers one byte every
    # `stall_every` s, never finished (for at most `stall_for` s): no per-read timeout ever fires.
    drip_headers_on_request: int | None = None
    drip_health: bool = False
    # SGLang's --api-key (srt/utils/auth.py): every route but /health*, /ready* and /metrics wants
    # `Authorization: Bearer KEY`, else 401 {"error": "Unauthorized"}.
    api_key: str | None = field(default=None, repr=False)
    # A careless server: the 401 body and the error chunk (error_on_request) quote the request's Authorization header.
    echo_auth: bool = False
    # A gate: the Nth /generate request waits, before any answer, until StandIn.release() (or stop()), for at
    # most `hold_for` s; StandIn.held is set when it starts to wait.
    hold_on_request: int | None = None
    hold_for: float = 120.0
    # A GPU's limit: the tokens/s it makes over all requests decoding at once. With more requests than
    # capacity / tok_s, each gets its share (a batch shares one GPU). EAGLE-3's verify steps cost capacity.
    capacity: float | None = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a read timeout in a test) leaves a broken pipe here: not worth a traceback.
        pass


class StandIn:
    def __init__(self, behaviour: Behaviour | None = None, port: int = 0, host: str = "127.0.0.1") -> None:
        self.behaviour = behaviour or Behaviour()
        self.requests = 0
        self.accept_lengths: list[float] = []
        self.bodies: list[dict[str, Any]] = []
        self.rng = random.Random(self.behaviour.seed)
        self.lock = threading.Lock()
        self.dead = False
        self.decoding = 0  # requests between their first token and their last
        self.died = False
        self.httpd = _Server((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None
        self.held = threading.Event()  # set when the request of Behaviour.hold_on_request waits at the gate
        self.gate = threading.Event()  # set: the gate is open (release())

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StandIn:
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def release(self) -> None:
        """Open the gate: the held request is answered."""
        self.gate.set()

    def wait_held(self, timeout: float = 120.0) -> None:
        """Wait until the request of Behaviour.hold_on_request waits at the gate; AssertionError if it does not
        within `timeout` s (the client never got that far: it failed, or it ended before that request)."""
        if not self.held.wait(timeout):
            raise AssertionError(
                f"/generate request {self.behaviour.hold_on_request} did not arrive within {timeout:g} s "
                f"({self.requests} arrived)"
            )

    def stop(self) -> None:
        self.release()  # a request held at the gate must not outlive the server
        if not self.dead:
            self.dead = True
            self.httpd.shutdown()
            self.httpd.server_close()

    def die(self) -> None:
        self.died = True  # at once: the listening socket closes a moment later, from another thread
        threading.Thread(target=self.stop, daemon=True).start()

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def server_info(self) -> dict[str, Any]:
        b = self.behaviour
        avg = sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0
        return {
            "model_path": "stand-in/model",
            "tp_size": 1,
            "speculative_algorithm": "EAGLE3" if b.spec else None,
            "speculative_num_steps": 2 if b.spec else None,
            "speculative_eagle_topk": 4 if b.spec else None,
            "speculative_num_draft_tokens": 16 if b.spec else None,
            "internal_states": [{"avg_spec_accept_length": avg} if b.spec else {}],
            "version": "stand-in",  # not SGLang: reports say so (bench.md, bench.png)
        }


def _handler(standin: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as uvicorn's asyncio transport sets it: without it Nagle + delayed ACK hold small
        # chunks back for ~40 ms and every burst arrives late.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _json(self, status: int, obj: Any) -> None:
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _drip(self) -> None:
            """Headers a byte at a time, never ending them (a header line under http.client's 64 KiB limit)."""
            b = standin.behaviour
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Slow: " + b"a" * 60000
            end = time.monotonic() + b.stall_for
            try:
                for i in range(len(head)):
                    if time.monotonic() > end:
                        break
                    self.wfile.write(head[i : i + 1])
                    self.wfile.flush()
                    time.sleep(b.stall_every)
            except OSError:  # the client gave up
                pass
            self.close_connection = True

        def _authorized(self) -> bool:
            """SGLang's decide_request_auth for its normal routes: open ones by prefix, else the bearer key."""
            key = standin.behaviour.api_key
            if key is None or self.path.startswith(("/health", "/ready", "/metrics")):
                return True
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode()):
                return True
            body = self.headers.get("Content-Length")
            if body:  # read it, so the connection stays usable
                self.rfile.read(int(body))
            echo = f" (got Authorization: {self.headers.get('Authorization')})" if standin.behaviour.echo_auth else ""
            self._json(401, {"error": "Unauthorized" + echo})
            return False

        def do_GET(self) -> None:
            if not self._authorized():
                return
            if self.path in ("/health", "/health_generate") and standin.behaviour.drip_health:
                self._drip()
            elif self.path in ("/health", "/health_generate"):
                self.send_response(standin.behaviour.health_status)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path in ("/server_info", "/get_server_info"):
                self._json(200, standin.server_info())
            elif self.path == "/v1/models":  # bench_serving 0.5.23 waits for it, and reads the model's name there
                self._json(200, {"object": "list", "data": [{"id": "stand-in/model", "object": "model"}]})
            elif self.path == "/model_info":
                self._json(200, {"model_path": "stand-in/model", "tokenizer_path": None, "is_generation": True})
            else:
                self._json(404, {"detail": "Not Found"})

        def _chunk(self, data: bytes) -> None:
            if standin.behaviour.chunked:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            elif data:
                self.wfile.write(data)
            else:
                self.close_connection = True  # the end of a close-delimited body
            self.wfile.flush()

        def _event(self, obj: Any) -> None:
            self._chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")

        def _stall(self, number: int, sent: int) -> None:
            b = standin.behaviour
            chunk = {"text": " tok" * sent, "output_ids": list(range(sent)), "meta_info": {"completion_tokens": sent}}
            end = time.monotonic() + b.stall_for
            try:
                while time.monotonic() < end:
                    time.sleep(b.stall_every)
                    if number == b.keepalive_on_request:
                        self._chunk(b": ping\n\n")
                    else:
                        self._event(chunk)
            except OSError:  # the client gave up
                self.close_connection = True

        def do_POST(self) -> None:
            t_created = time.time()
            t0 = time.perf_counter()
            if not self._authorized():
                return
            if self.path.startswith("/flush_cache"):  # bench_serving may flush SGLang's prefix cache
                self._json(200, {"success": True})
                return
            if self.path != "/generate":
                self._json(404, {"detail": "Not Found"})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            b = standin.behaviour
            with standin.lock:
                standin.requests += 1
                number = standin.requests
                standin.bodies.append(body)
            if number == b.hold_on_request:
                standin.held.set()
                standin.gate.wait(b.hold_for)
            if number == b.drip_headers_on_request:
                self._drip()
                return
            params = body.get("sampling_params") or {}
            max_new = int(params.get("max_new_tokens", 128))
            total = max_new if b.natural_tokens is None or params.get("ignore_eos") else min(max_new, b.natural_tokens)
            if not body.get("stream"):
                self._json(400, {"error": {"message": "the stand-in streams only"}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if b.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            if number == b.error_on_request:
                time.sleep(b.ttft)
                message = "CUDA error: an illegal memory access was encountered"
                if b.echo_auth:
                    message += f" in a request with Authorization: {self.headers.get('Authorization')}"
                self._event({"error": {"message": message}})
                self._event(b"[DONE]")
                self._chunk(b"")
                return
            factor = 1.0 + (standin.rng.uniform(-b.jitter, b.jitter) if b.jitter else 0.0)
            deadline = t0 + b.ttft * factor
            with standin.lock:
                standin.decoding += 1
            try:
                self._generate(number, body, total, max_new, t_created, factor, deadline)
            finally:
                with standin.lock:
                    standin.decoding -= 1

        def _gap(self, factor: float) -> float:
            """Seconds between two bursts: tok_s, or this request's share of the capacity."""
            b = standin.behaviour
            pace = b.tok_s if b.capacity is None else min(b.tok_s, b.capacity / max(standin.decoding, 1))
            return b.burst / pace * factor

        def _generate(
            self, number: int, body: dict[str, Any], total: int, max_new: int, t_created: float, factor: float,
            deadline: float,
        ) -> None:  # fmt: skip
            b = standin.behaviour
            sent = steps = 0
            while sent < total:
                now = time.perf_counter()
                if deadline > now:
                    time.sleep(deadline - now)
                new = 1 if sent == 0 else min(b.burst, total - sent)
                sent += new
                if sent > 1:
                    steps += 1  # a verify step (the first token comes from prefill)
                stalling = number in (b.keepalive_on_request, b.repeat_on_request)
                if stalling and sent >= b.stall_after_tokens:
                    self._stall(number, sent)
                    return
                if number == b.die_on_request and sent >= b.die_after_tokens:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    standin.die()
                    return
                meta: dict[str, Any] = {
                    "id": f"standin-{number}",
                    "finish_reason": None,
                    "prompt_tokens": len(str(body.get("text", "")).split()),
                    "completion_tokens": sent,
                    "cached_tokens": 0,
                }
                if sent >= total:
                    length = sent >= max_new
                    meta["finish_reason"] = {"type": "length", "length": sent} if length else {"type": "stop"}
                    meta["e2e_latency"] = time.time() - t_created
                    if b.spec and steps > 0:
                        accept = sent / steps
                        meta.update(
                            spec_verify_ct=steps,
                            spec_accept_length=accept,
                            spec_accept_rate=(accept - 1) / 15,
                            spec_accept_token_num=sent - steps,
                            spec_draft_token_num=steps * 15,
                        )
                        standin.accept_lengths.append(accept)
                    if b.nonfinite:
                        meta.update(e2e_latency=float("nan"), spec_accept_length=float("inf"))
                        meta["spec_accept_rate"] = float("-inf")
                self._event({"text": " tok" * sent, "output_ids": list(range(sent)), "meta_info": meta})
                if sent == 1:
                    # Decode steps start once the first token is out (a late first chunk is not caught up).
                    deadline = time.perf_counter()
                deadline += self._gap(factor)
            self._event(b"[DONE]")
            self._chunk(b"")

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="stand-in SGLang server with known timing")
    parser.add_argument(
        "mode",
        nargs="?",
        choices=["baseline", "eagle3"],
        help="like the image's entrypoint: baseline = one token per chunk, no speculative metrics",
    )
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")))
    parser.add_argument("--ttft", type=float, default=0.35, help="seconds to the first token")
    parser.add_argument("--tok-s", type=float, default=80.0, help="decode tokens per second")
    parser.add_argument("--burst", type=int, default=3, help="tokens per decode step (chunk)")
    parser.add_argument("--spec", action="store_true", help="report speculative-decoding metrics")
    parser.add_argument("--jitter", type=float, default=0.0, help="relative random variation per request")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--api-key", help="as SGLang's: every route but /health*, /ready*, /metrics wants it")
    parser.add_argument("--capacity", type=float, help="tokens/s over all requests at once (a GPU's limit)")
    args = parser.parse_args()
    spec, burst = args.spec, args.burst
    if args.mode == "baseline":
        spec, burst = False, 1
    elif args.mode == "eagle3":
        spec = True
    behaviour = Behaviour(args.ttft, args.tok_s, burst, spec, jitter=args.jitter, seed=args.seed, api_key=args.api_key)
    behaviour.capacity = args.capacity
    standin = StandIn(behaviour, port=args.port, host=args.host)
    print(f"stand-in SGLang listening on {standin.url}" + (" (API key set)" if args.api_key else ""), flush=True)
    print(f"stand-in SGLang args: {sys.argv[1:]}", flush=True)  # as SGLang logs its ServerArgs, the key included
    # As PID 1 of a container, SIGTERM (docker stop) has no default action: exit on it, as tini would make us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        standin.httpd.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
