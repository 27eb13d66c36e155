"""`python3 _with_api_key.py -m sglang.launch_server ARGS...` (or SCRIPT ARGS...): the entrypoint's launcher when a key
file is set (docs/security.md). It appends `--admin-api-key=KEY` and `--api-key=KEY` (`=`: a key that starts with '-'
stays a value) to sys.argv and runs the module in this process (runpy); key_file.py is loaded by its path: nothing
of this directory goes on sys.path."""

from __future__ import annotations

import importlib.util
import os
import runpy
import secrets
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROG = "entrypoint"
Message = dict[str, Any]


_spec = importlib.util.spec_from_file_location("_sm120_key_file", HERE / "key_file.py")
assert _spec is not None and _spec.loader is not None
key_file = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = key_file  # dataclasses look their module up there
_spec.loader.exec_module(key_file)


class HideKeys:
    """An ASGI middleware that writes ******** over the keys in every JSON answer of SGLang's app (/server_info holds
    them: docs/security.md); streams pass untouched: they never carry ServerArgs."""

    def __init__(self, app: Any, keys: Iterable[str]) -> None:
        self.app = app
        self.keys = [k for k in keys if k]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Callable[[Message], Awaitable[None]]) -> None:
        if scope.get("type") != "http" or not self.keys:
            await self.app(scope, receive, send)
            return
        start: Message = {}
        chunks: list[bytes] = []

        async def hold_json(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                if b"json" in headers.get(b"content-type", b"").lower():
                    start.update(message)
                    return
                start["pass"] = True
            if start.get("pass") or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            text = b"".join(chunks).decode("utf-8", "surrogateescape")
            body = key_file.mask(text, *self.keys).encode("utf-8", "surrogateescape")
            headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, hold_json)


def _error(*lines: str) -> int:
    sys.stderr.write(f"{PROG}: error: {lines[0]}\n" + "".join(f"  {line}\n" for line in lines[1:]))
    return 2


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "-m":
        module, script, args = argv[1], None, argv[2:]
    elif argv and not argv[0].startswith("-"):
        module, script, args = None, argv[0], argv[1:]
    else:
        return _error(f"usage: {Path(__file__).name} -m MODULE [ARGS...] | SCRIPT [ARGS...]")
    keys: dict[str, str] = {}  # option -> key
    for variable, option in key_file.FILES.items():
        if not (path := (os.environ.get(variable) or "").strip()):
            continue
        try:
            keys[option] = key_file.read(path).value
        except key_file.KeyFileError as exc:
            return _error(*key_file.describe(variable, path, exc))
    closed = os.environ.pop(key_file.ADMIN_ROUTES, "") == "closed"
    if not keys:
        return _error(f"{Path(__file__).name} needs {key_file.VARIABLE}: the file that holds the API key")
    if closed and key_file.ADMIN_OPTION not in keys:
        keys[key_file.ADMIN_OPTION] = secrets.token_urlsafe(32)  # known to nobody: the admin routes are closed

    def hide(text: str) -> str:  # SGLang's start-up log prints its ServerArgs, keys included
        return key_file.mask(text, *keys.values())

    sys.stdout = key_file.Masked(sys.stdout, hide)  # type: ignore[assignment]
    sys.stderr = key_file.Masked(sys.stderr, hide)  # type: ignore[assignment]
    added = [f"{option}={keys[option]}" for option in (key_file.ADMIN_OPTION, key_file.OPTION) if option in keys]
    sys.argv = [script or "-m", *args, *added]
    if module is not None and module.startswith("sglang."):
        try:  # on SGLang's HTTP app (srt/entrypoints/http_server.py `app`, FastAPI in 0.5.9 and 0.5.23)
            from sglang.srt.entrypoints import http_server

            http_server.app.add_middleware(HideKeys, keys=list(keys.values()))
        except Exception as exc:
            sys.stderr.write(f"[{PROG}] warning: the keys are not hidden from SGLang's /server_info ({exc!r})\n")
    if module is not None:
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(script or ""))
        runpy.run_path(script or "", run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
