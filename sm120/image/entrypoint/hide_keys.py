"""An ASGI middleware that takes the server's keys out of every JSON answer, installed on SGLang's own app by the
key launcher (_with_api_key.py) before SGLang starts.

SGLang answers /server_info (and /get_server_info, /model_info) with its ServerArgs, `api_key` and `admin_api_key`
included, and 0.5.23 adds the launch command, which holds both (`--api-key=KEY`): any holder of the API key could
read the admin key there, admin routes closed or not. Each key's bytes in a JSON body become ********. Streams
(text/event-stream) pass untouched: they carry generated text, never ServerArgs. Standard library only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

MASK = b"********"
Message = dict[str, Any]
ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Any]


def scrub(body: bytes, keys: Iterable[bytes]) -> bytes:
    for key in sorted(keys, key=len, reverse=True):  # a key inside a longer one: the longer first
        body = body.replace(key, MASK)
    return body


class HideKeys:
    def __init__(self, app: ASGIApp, keys: Iterable[str]) -> None:
        self.app = app
        self.keys = [k.encode() for k in keys if k]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Callable[[Message], Awaitable[None]]) -> None:
        if scope.get("type") != "http" or not self.keys:
            await self.app(scope, receive, send)
            return
        start: Message = {}
        chunks: list[bytes] = []

        async def hold_json(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                if b"json" not in headers.get(b"content-type", b"").lower():
                    start["pass"] = True
                    await send(message)
                    return
                start.update(message)
                return
            if start.get("pass") or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = scrub(b"".join(chunks), self.keys)
            headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, hold_json)


def install(keys: Iterable[str]) -> None:
    """On SGLang's HTTP app (srt/entrypoints/http_server.py `app`, a FastAPI app in 0.5.9 and 0.5.23)."""
    from sglang.srt.entrypoints import http_server  # SGLang's interpreter: the launcher runs there

    http_server.app.add_middleware(HideKeys, keys=list(keys))
