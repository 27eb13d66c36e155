"""The `--gpus` value of the commands that start a container with GPUs (bench --image, verify), checked before
Docker is asked: `all`, `none` where the command takes it, or device numbers, each named once."""

from __future__ import annotations

import re

from sm120.arguments import MAX_DIGITS, shown  # no host has a billion GPUs; int() of a 5000-digit entry is a traceback
from sm120.errors import UsageError


def check_gpus(value: str, flag: str = "--gpus", *, allow_none: bool = False) -> str:
    """Raise UsageError unless value is all (none), or comma-separated device numbers; return it normalised
    ("0, 1" -> "0,1"), the form Docker's device request and the verify suite take."""
    words = ("all", "none") if allow_none else ("all",)
    allowed = f"give {', '.join(words)}, or device numbers such as 0,1"
    if value in words:
        return value
    if not value.strip():
        raise UsageError(f"{flag} is empty: {allowed}")
    devices = [d.strip() for d in value.split(",")]
    if not all(re.fullmatch(rf"[0-9]{{1,{MAX_DIGITS}}}", d) for d in devices):
        raise UsageError(f"{flag} {shown(value, 62)}: {allowed}")
    numbers = [int(d) for d in devices]
    if (twice := next((d for i, d in enumerate(devices) if int(d) in numbers[:i]), None)) is not None:
        raise UsageError(f"{flag} {shown(value, 62)}: GPU {twice} is listed twice; {allowed}, each once")
    return ",".join(str(n) for n in numbers)
