"""Message sizes as the sweep and SM120_SYMM_MEM_MAX_SIZES write them: a whole number of KiB or MiB (4K, 512KiB,
8M, 16MiB), or a range 4K..64M (every power-of-two multiple of 4K up to 64M, and 64M itself)."""

from __future__ import annotations

import argparse
import re

KiB = 1024
MiB = 1024 * 1024

# What SM120_SYMM_MEM_MAX_SIZES accepts (the patch's bounds): a limit the sweep prints must be one of these.
LIMIT_MIN, LIMIT_MAX = 4 * KiB, 512 * MiB
# What the sweep measures: its own communicator holds the largest size plus 4 KiB, within the patch's bound.
SIZE_MIN, SIZE_MAX = 4 * KiB, 256 * MiB
DEFAULT_RANGE = "4K..64M"

_UNITS = {"K": KiB, "KiB": KiB, "M": MiB, "MiB": MiB}
_SIZE = re.compile(r"([1-9][0-9]{0,6})(KiB|K|MiB|M)")
FORM = "a whole number of KiB or MiB: 4K, 512KiB, 8M, 16MiB"


class SizeError(argparse.ArgumentTypeError):
    """A size that is not one, or out of the bounds; the message names the value (argparse's `type=` says it)."""


def _shown(text: str) -> str:
    """A value as a message quotes it, cut short when long (a 5000-digit size is one word)."""
    quoted = repr(text)
    return quoted if len(quoted) <= 40 else quoted[:36] + "...'"


def parse_size(text: str) -> int:
    if (match := _SIZE.fullmatch(text.strip())) is None:
        raise SizeError(f"{_shown(text)} is not a size ({FORM})")
    return int(match[1]) * _UNITS[match[2]]


def parse_limits(text: str) -> dict[int, int]:
    """SM120_SYMM_MEM_MAX_SIZES (`TP:SIZE[,TP:SIZE...]`) as the patch reads it: {world size: limit}. SizeError for
    what the patch would ignore with a warning, keeping its built-in limits: an entry not TP:SIZE, a unit it does
    not take, a world size twice, a limit out of its bounds."""
    limits: dict[int, int] = {}
    for entry in text.split(","):
        tp, colon, size_text = entry.partition(":")
        if not colon or not re.fullmatch(r"\s*[1-9][0-9]{0,2}\s*", tp):
            raise SizeError(
                f"{_shown(entry.strip())} is not TP:SIZE (one entry per TP, e.g. 4:8MiB or 2:512KiB,4:2MiB)"
            )
        size = parse_size(size_text)
        if int(tp) in limits:
            raise SizeError(f"TP {int(tp)} is given twice (one entry per TP)")
        if not LIMIT_MIN <= size <= LIMIT_MAX:
            raise SizeError(
                f"{format_size(size)} is out of range ({format_size(LIMIT_MIN)} to {format_size(LIMIT_MAX)})"
            )
        limits[int(tp)] = size
    return limits


def parse_sizes(text: str) -> list[int]:
    """'4K..64M' or '4K,64K,1M' (items may be ranges): the sizes, ascending, each once, within the bounds."""
    sizes: set[int] = set()
    for item in text.split(","):
        if not item.strip():
            raise SizeError(f"{text!r} has an empty item (sizes are separated by commas: 4K,64K,1M)")
        low_text, dots, high_text = item.partition("..")
        low = parse_size(low_text)
        high = parse_size(high_text) if dots else low
        if high < low:
            raise SizeError(f"{item.strip()!r}: the range ends below its start")
        if bad := [size for size in (low, high) if not SIZE_MIN <= size <= SIZE_MAX]:
            raise SizeError(
                f"{format_size(bad[0])} is out of range (the sweep measures {format_size(SIZE_MIN)} "
                f"to {format_size(SIZE_MAX)})"
            )
        sizes.update({low << k for k in range((high // low).bit_length())}, {high})  # low, 2 low, 4 low... high
    return sorted(sizes)


def format_size(size: int) -> str:
    """The shortest exact form: 16MiB, 512KiB (the form the patch reads back)."""
    for unit, name in ((MiB, "MiB"), (KiB, "KiB")):
        if size % unit == 0:
            return f"{size // unit}{name}"
    return f"{size}B"


def human(size: int) -> str:
    """For tables: '16 MiB', '512 KiB'."""
    text = format_size(size)
    return f"{text[:-3]} {text[-3:]}" if text.endswith("iB") else text
