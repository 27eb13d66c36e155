"""What several `build.py` commands share of their arguments: the argparse `type=` functions for numbers, and the
option groups of the commands that read build.toml. An argument type used by one command lives beside it."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

# The longest number an option takes, the image's entrypoint's figure: int() would refuse past 4300 digits with a
# traceback, and no count or size here needs more.
from sm120.image.entrypoint.assemble import MAX_DIGITS as MAX_DIGITS


def shown(text: str, limit: int = 40) -> str:
    """A value as an error message quotes it: repr, cut short when long (a 5000-digit number is one word)."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else quoted[: limit - 4] + "...'" + f" ({len(text)} characters)"


def integer(minimum: int | None = None) -> Callable[[str], int]:
    """argparse type: an integer in ASCII digits (int() also takes '+5', ' 5', '5_0' and other scripts' digits) of
    at most MAX_DIGITS digits, at least `minimum` (None, 0 or 1)."""
    what = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}[minimum]

    def parse(text: str) -> int:
        if not re.fullmatch(r"[0-9]+" if minimum is not None else r"-?[0-9]+", text):
            raise argparse.ArgumentTypeError(f"must be {what} (ASCII digits), got {shown(text)}")
        if len(text.lstrip("-")) > MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"must be {what} of at most {MAX_DIGITS} digits, got {shown(text)}")
        value = int(text)
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


positive_int = integer(1)


def positive_float(text: str) -> float:
    """A positive, finite number in plain ASCII decimal (float() also takes 'inf', '1_0' and other digits)."""
    value = float(text) if re.fullmatch(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text) else math.nan
    if not (math.isfinite(value) and value > 0):
        why = " (it is read as 0: too small for a double)" if value == 0 and re.search("[1-9]", text) else ""
        raise argparse.ArgumentTypeError(f"must be a positive finite number such as 30 or 0.5, got {shown(text)}{why}")
    return value


MAX_MEMORY_GIB = 1 << 20  # 1 PiB: far above any builder, far below where GiB -> bytes overflows a float
MIN_MEMORY_GIB = 0.1  # below it the plan would show 0.0 GiB and 0 jobs: no builder has less


def memory_gib(text: str) -> float:
    value = positive_float(text)
    if value < MIN_MEMORY_GIB:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_MEMORY_GIB} (GiB: ~100 MiB), got {shown(text)}")
    if value > MAX_MEMORY_GIB:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_MEMORY_GIB} (GiB: 1 PiB), got {shown(text)}")
    return value


def add_config_args(parser: argparse.ArgumentParser, *, sglang: bool = True, profile: bool = True) -> None:
    parser.add_argument("--config", metavar="FILE", help="build.toml to read (default: the checkout's)")
    if profile:
        parser.add_argument(
            "--profile",
            metavar="NAME",
            help="profile from build.toml (default: its defaults.profile, the one ./dev build uses)",
        )
    if sglang:
        parser.add_argument("--sglang", metavar="VERSION", help="SGLang track (default: defaults.sglang)")


def add_machine_args(parser: argparse.ArgumentParser) -> None:
    """The options that plan for another builder than this machine (plan, build)."""
    parser.add_argument("--max-jobs", type=positive_int, metavar="N", help="override the derived compile parallelism")
    parser.add_argument(
        "--cpus", type=positive_int, metavar="N", help="plan for a machine with N CPUs (default: this one)"
    )
    parser.add_argument(
        "--memory-gib", type=memory_gib, metavar="G", help="plan for a machine with G GiB (default: this one)"
    )
