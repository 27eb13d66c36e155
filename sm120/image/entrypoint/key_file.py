"""The API key SGLang serves with (`--api-key`), read from a file: API_KEY_FILE, e.g. a Docker, Compose or
Kubernetes secret mounted at /run/secrets/NAME. Standard library only and no imports from this package: the
entrypoint (api_key.py), the launcher in SGLang's interpreter (_with_api_key.py) and `build.py bench
--api-key-file` share this reader.

Why a file: a key in an environment variable shows in `docker inspect`, one on a command line in shell
histories, CI logs and `ps`. SGLang 0.5.9 and 0.5.23 take the key only as `--api-key` (no variable, no file:
srt/server_args.py), so the entrypoint starts SGLang through _with_api_key.py, which appends `--api-key=KEY`
to SGLang's sys.argv inside the process: its command line (/proc/PID/cmdline, what `ps` and `docker top` show)
never holds the key. Both releases log their ServerArgs at start-up with the key in it (0.5.9
`server_args=ServerArgs(...)`, 0.5.23 `server_args={...}`, srt/entrypoints/engine.py): the launcher writes
the key as MASK on the process's stdout and stderr. SGLang leaves /health*, /metrics (and 0.5.23 /ready*)
open (srt/utils/auth.py), so the image's HEALTHCHECK needs no key.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

VARIABLE = "API_KEY_FILE"
OPTION = "--api-key"
MASK = "********"
MAX_BYTES = 4096  # a key is tens of characters; a larger file is not a key file
MIN_CHARS = 8
LAUNCHER = Path(__file__).with_name("_with_api_key.py")
GOOD_KEY = "e.g. `openssl rand -hex 32 > FILE`"


@dataclass(frozen=True)
class ApiKey:
    path: str
    value: str = field(repr=False)

    def __str__(self) -> str:
        return MASK


class KeyFileError(ValueError):
    """What is wrong with a key file, never its content: `problem` follows the caller's name for the file."""

    def __init__(self, problem: str, hint: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


def _unreadable(path: str, exc: OSError) -> KeyFileError:
    if isinstance(exc, FileNotFoundError):
        return KeyFileError("no such file", "mount the secret there, e.g. -v /path/on/host:/run/secrets/api_key:ro")
    if isinstance(exc, PermissionError):
        try:
            st = os.stat(path)
            owner = f" (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
        except OSError:
            owner = ""
        uid = os.getuid()
        return KeyFileError(
            f"uid {uid} cannot read it{owner}", f"let uid {uid} read it: on the host, chown {uid} FILE (or chmod a+r)"
        )
    return KeyFileError(f"cannot be read ({exc.strerror or exc})")


def read(path: str) -> ApiKey:
    """The key in `path`: one line of printable ASCII without spaces (what an HTTP header carries), at least
    MIN_CHARS long; surrounding whitespace (the newline `echo` writes) is dropped. Raises KeyFileError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: a FIFO does not hang the entrypoint
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise KeyFileError("is not a regular file", "a key file holds the key alone, on one line")
        data = b""
        while len(data) <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise _unreadable(path, exc) from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise KeyFileError(f"is larger than {MAX_BYTES} bytes: not a key file", "it holds the key alone, on one line")
    text = data.strip(b" \t\r\n")
    if not text:
        raise KeyFileError("is empty", f"write the key into it, {GOOD_KEY}")
    if b"\n" in text or b"\r" in text:
        lines = len(text.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"))
        raise KeyFileError(f"holds {lines} lines", "it holds the key alone, on one line")
    if any(not 0x21 <= byte <= 0x7E for byte in text):
        raise KeyFileError(
            "the key holds a space, a control character or a non-ASCII character",
            f"a key is printable ASCII without spaces (it travels in an HTTP header), {GOOD_KEY}",
        )
    if len(text) < MIN_CHARS:
        raise KeyFileError(f"the key is shorter than {MIN_CHARS} characters", f"use a longer one, {GOOD_KEY}")
    return ApiKey(path, text.decode("ascii"))


def is_loopback(host: str | None) -> bool:
    """Whether SGLang listening on `host` can be reached from this machine (this container) only."""
    if host is None:
        return True  # SGLang's own default, 127.0.0.1
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def mask(text: str, key: str) -> str:
    return text.replace(key, MASK) if key else text


class Masked:
    """A text stream that writes MASK in place of the key (SGLang's start-up log prints its ServerArgs)."""

    def __init__(self, stream: TextIO, key: str) -> None:
        self._stream = stream
        self._key = key

    def write(self, text: str) -> int:
        self._stream.write(mask(text, self._key))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)
