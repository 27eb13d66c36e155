"""The keys SGLang serves with, read from files, never from a variable or a command line (docs/security.md: why,
and why a key's characters are ALPHABET only). No imports from this package: the launcher (_with_api_key.py) loads
it by its path; the entrypoint and `build.py bench --api-key-file` share this reader."""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

VARIABLE = "API_KEY_FILE"
OPTION = "--api-key"
ADMIN_VARIABLE = "ADMIN_API_KEY_FILE"
ADMIN_OPTION = "--admin-api-key"
SECRET_PATH = "/run/secrets/api_key"  # where the examples, Compose, Kubernetes and `bench --image` mount the key
FILES = {VARIABLE: OPTION, ADMIN_VARIABLE: ADMIN_OPTION}  # each key file variable and the option it feeds
# Set by the entrypoint for the launcher only (never by a user: the entrypoint refuses it): "closed" makes the
# launcher pass an admin key nobody knows. It is no secret: the key itself is made in the launcher's process.
ADMIN_ROUTES = "SM120_ADMIN_ROUTES"
MASK = "********"
ALPHABET = "A-Z a-z 0-9 . _ ~ + / = -"
_ALLOWED = re.compile(rb"[A-Za-z0-9._~+/=-]+")
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


def _read_bytes(path: str) -> bytes:
    """Up to MAX_BYTES + 1 bytes of a regular file (O_NONBLOCK: a FIFO does not hang the entrypoint)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise KeyFileError("is not a regular file", "a key file holds the key alone, on one line")
    with open(fd, "rb") as handle:
        return handle.read(MAX_BYTES + 1)


def read(path: str) -> ApiKey:
    """The key in `path`: one line of printable ASCII without spaces (what an HTTP header carries), at least
    MIN_CHARS long; surrounding whitespace (the newline `echo` writes) is dropped. Raises KeyFileError."""
    try:
        data = _read_bytes(path)
    except FileNotFoundError:
        raise KeyFileError("no such file", f"mount the secret there, e.g. -v /path/on/host:{SECRET_PATH}:ro") from None
    except PermissionError:
        try:
            st = os.stat(path)
            owner = f" (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
        except OSError:
            owner = ""
        uid = os.getuid()
        raise KeyFileError(
            f"uid {uid} cannot read it{owner}", f"let uid {uid} read it: on the host, chown {uid} FILE (or chmod a+r)"
        ) from None
    except OSError as exc:
        raise KeyFileError(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise KeyFileError(f"is larger than {MAX_BYTES} bytes: not a key file", "it holds the key alone, on one line")
    if not (text := data.strip(b" \t\r\n")):
        raise KeyFileError("is empty", f"write the key into it, {GOOD_KEY}")
    if b"\n" in text or b"\r" in text:
        raise KeyFileError(f"holds {len(text.splitlines())} lines", "it holds the key alone, on one line")
    if any(not 0x21 <= byte <= 0x7E for byte in text):
        raise KeyFileError(
            "the key holds a space, a control character or a non-ASCII character",
            f"a key is printable ASCII without spaces (it travels in an HTTP header), {GOOD_KEY}",
        )
    if not _ALLOWED.fullmatch(text):
        raise KeyFileError(
            f"the key holds a character other than {ALPHABET}",
            f"(a quote or a backslash is escaped in SGLang's logged ServerArgs, past the mask), {GOOD_KEY}",
        )
    if len(text) < MIN_CHARS:
        raise KeyFileError(f"the key is shorter than {MIN_CHARS} characters", f"use a longer one, {GOOD_KEY}")
    return ApiKey(path, text.decode("ascii"))


def describe(variable: str, path: str, exc: KeyFileError) -> list[str]:
    """The lines of an error about a key file variable: its value is shown where something is there (a path),
    never otherwise (a key pasted where the path goes, `API_KEY_FILE=sk-...`, names no file)."""
    if path and os.path.lexists(path):
        return [f"{variable}={path!r}: {exc.problem}", *([exc.hint] if exc.hint else [])]
    return [
        f"{variable} does not name a readable file (its value is not shown: it may be the key itself)",
        f"set {variable} to the path of a file that holds the key, e.g. a secret mounted at /run/secrets/...",
    ]


def candidates(path: str) -> list[str]:
    """What a key file holds, line by line, as secrets to keep out of every message: read whatever its checks
    would say (a file of two lines, of a bad character, ...), never raising. Empty when nothing is readable."""
    try:
        data = _read_bytes(path)
    except (OSError, ValueError):  # KeyFileError too: not a regular file
        return []
    return [line.strip() for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]


def is_loopback(host: str | None) -> bool:
    """Whether SGLang listening on `host` can be reached from this machine (this container) only."""
    if host is None or host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True  # None: SGLang's own default, 127.0.0.1
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def mask(text: str, *keys: str) -> str:
    for key in sorted((k for k in keys if k), key=len, reverse=True):
        text = text.replace(key, MASK)
    return text


class Masked:
    """A text stream that writes whole lines through `redact` (a key split over two write() calls is still one
    line); flush() writes the rest. Everything else is the stream's (fileno, isatty, encoding, ...)."""

    def __init__(self, stream: TextIO, redact: Callable[[str], str]) -> None:
        self.stream = stream
        self._redact = redact
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            head, _, self._pending = self._pending.rpartition("\n")
            self.stream.write(self._redact(head + "\n"))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pending, self._pending = self._pending, ""  # taken first: a failing write does not write it twice
        if pending:
            self.stream.write(self._redact(pending))
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
