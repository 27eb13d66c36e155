"""sm120/image/entrypoint/_with_api_key.py's HideKeys: the keys leave no JSON answer of SGLang's app (/server_info
holds ServerArgs and the launch command), however the body is split; streams and other content pass untouched. T2
checks that the launcher installs it on the image's real SGLang app (sm120/verify/suite/test_entrypoint.py, a real
start)."""

from __future__ import annotations

import asyncio
import json

from sm120.image.entrypoint._with_api_key import HideKeys

K, R = "api-KEY-0123456789._~+/=-", "admin-key-R-nobody-knows"


def answer(content_type: bytes, *chunks: bytes):
    async def app(scope, receive, send):
        headers = [(b"content-type", content_type), (b"content-length", str(sum(map(len, chunks))).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})

    return app


def call(app, keys=(K, R), scope_type="http") -> list[dict]:
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    asyncio.run(HideKeys(app, keys=list(keys))({"type": scope_type, "path": "/server_info"}, receive, send))
    return sent


def body(sent: list[dict]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_server_info_loses_both_keys_and_the_length_follows():
    info = json.dumps({"api_key": K, "admin_api_key": R, "launch_command": f"x --admin-api-key={R} --api-key={K}"})
    raw = info.encode()
    sent = call(answer(b"application/json", raw[:20], raw[20:45], raw[45:]))  # a key split across chunks
    out = body(sent)
    assert K.encode() not in out and R.encode() not in out
    data = json.loads(out)
    assert data["api_key"] == data["admin_api_key"] == "********"
    assert data["launch_command"] == "x --admin-api-key=******** --api-key=********"
    headers = dict(sent[0]["headers"])
    assert headers[b"content-length"] == str(len(out)).encode()


def test_a_stream_and_plain_text_pass_untouched():
    for content_type in (b"text/event-stream", b"text/plain"):
        chunk = f"data: {K}\n\n".encode()  # generated text is the user's, not ours to change
        assert body(call(answer(content_type, chunk, chunk))) == chunk + chunk


def test_no_keys_or_no_http_changes_nothing():
    raw = json.dumps({"api_key": K}).encode()
    assert body(call(answer(b"application/json", raw), keys=())) == raw
    assert call(answer(b"application/json", raw), scope_type="lifespan")[-1]["body"] == raw
