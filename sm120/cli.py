"""`build.py`: a thin argparse front over the sm120 package. Subcommands live in sm120/commands/."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from .errors import CheckFailed, UsageError, suggest

# Subcommand modules, in the order `--help` lists them.
COMMANDS = ["plan", "patches", "track", "base", "preflight", "build", "verify", "sbom", "bench", "deploy"]


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit 2), without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}{_closest(message)} (see --help)\n")


def _closest(message: str) -> str:
    """'; perhaps you meant X' for argparse's "invalid choice: 'x' (choose from ...)" (as cibuildwheel does)."""
    match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if not match:
        return ""
    return suggest(match.group(1), re.findall(r"'?([^',\s]+)'?", match.group(2)))


MAX_DIGITS = 18  # no count or size here needs more; int() would refuse past 4300 digits with a traceback


def shown(text: str, limit: int = 40) -> str:
    """A value as an error message quotes it: repr, cut short when long (a 5000-digit number is one word)."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else quoted[: limit - 4] + "...'" + f" ({len(text)} characters)"


def _digits(text: str, what: str) -> None:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise argparse.ArgumentTypeError(f"must be {what} of at most {MAX_DIGITS} digits, got {shown(text)}")


def positive_int(text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        raise argparse.ArgumentTypeError(f"must be a positive integer (ASCII digits), got {shown(text)}")
    _digits(text, "a positive integer")
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def integer(text: str) -> int:
    if not re.fullmatch(r"-?[0-9]+", text):
        raise argparse.ArgumentTypeError(f"must be an integer (ASCII digits), got {shown(text)}")
    _digits(text, "an integer")
    return int(text)


def non_negative_int(text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        raise argparse.ArgumentTypeError(f"must be a non-negative integer (ASCII digits), got {shown(text)}")
    _digits(text, "a non-negative integer")
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A positive, finite number in plain ASCII decimal (float() also takes 'inf', '1_0' and other digits)."""
    if not re.fullmatch(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text):
        raise argparse.ArgumentTypeError(f"must be a positive finite number such as 30 or 0.5, got {shown(text)}")
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        why = " (it is read as 0: too small for a double)" if value == 0 and re.search("[1-9]", text) else ""
        raise argparse.ArgumentTypeError(f"must be a positive finite number such as 30 or 0.5, got {shown(text)}{why}")
    return value


def add_config_args(parser: argparse.ArgumentParser, *, sglang: bool = True, profile: bool = True) -> None:
    """The options every plan-reading subcommand shares."""
    parser.add_argument("--config", metavar="FILE", help="build.toml to read (default: the checkout's)")
    if profile:
        parser.add_argument("--profile", metavar="NAME", help="profile from build.toml (default: defaults.profile)")
    if sglang:
        parser.add_argument("--sglang", metavar="VERSION", help="SGLang track (default: defaults.sglang)")


MAX_MEMORY_GIB = 1 << 20  # 1 PiB: far above any builder, far below where GiB -> bytes overflows a float
MIN_MEMORY_GIB = 0.1  # below it the plan would show 0.0 GiB and 0 jobs: no builder has less


def memory_gib(text: str) -> float:
    value = positive_float(text)
    if value < MIN_MEMORY_GIB:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_MEMORY_GIB} (GiB: ~100 MiB), got {shown(text)}")
    if value > MAX_MEMORY_GIB:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_MEMORY_GIB} (GiB: 1 PiB), got {shown(text)}")
    return value


def add_machine_args(parser: argparse.ArgumentParser) -> None:
    """The options that plan for another builder than this machine (plan, build)."""
    parser.add_argument("--max-jobs", type=positive_int, metavar="N", help="override the derived compile parallelism")
    parser.add_argument(
        "--cpus", type=positive_int, metavar="N", help="plan for a machine with N CPUs (default: this one)"
    )
    parser.add_argument(
        "--memory-gib", type=memory_gib, metavar="G", help="plan for a machine with G GiB (default: this one)"
    )


def _needs(command: str, package: str):
    def fail(args: argparse.Namespace) -> int:
        raise UsageError(
            f"needs the Python package {package!r}, which this interpreter lacks: "
            "run ./dev setup (or pip install -r requirements.txt)"
        )

    return fail


def build_parser() -> Parser:
    parser = Parser(prog="build.py", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"sm120.commands.{name}")
        except ModuleNotFoundError as exc:
            # A third-party package this command needs is missing (e.g. the docker SDK, build.py run by a Python
            # without requirements.txt): the other commands still work; this one says what to do.
            unavailable = sub.add_parser(name, help="(unavailable here: a Python package it needs is missing)")
            unavailable.add_argument("rest", nargs=argparse.REMAINDER)
            unavailable.set_defaults(func=_needs(name, str(exc.name).split(".")[0]))
            continue
        module.register(sub)
    return parser


class _StdoutFailed(Exception):
    """Writing standard output failed (a full disk, an I/O error): one line and exit 1, not a traceback. Not an
    OSError, so that a command's own handling of its files (and argparse's of --help) does not take it for theirs."""


def _guarded(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except BrokenPipeError:  # the reader went away: main's own case (exit 141, silently)
        raise
    except OSError as exc:
        raise _StdoutFailed(exc.strerror or str(exc)) from None


class _GuardedStdout:
    """sys.stdout while build.py runs: an OSError from writing it is told apart from any other OSError."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return _guarded(self._stream.write, text)

    def writelines(self, lines: Iterable[str]) -> None:
        _guarded(self._stream.writelines, lines)

    def flush(self) -> None:
        _guarded(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _stdout_to_devnull() -> None:
    """Python flushes stdout once more when it exits: point it at /dev/null (as the Python docs advise), so that
    what could not be written gives no "Exception ignored" line there either."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stdout_closed() -> int:
    """The reader of stdout went away (`build.py plan --json | head -c1`): no traceback, and none at exit either."""
    _stdout_to_devnull()
    return 141  # 128 + SIGPIPE, what a shell tool that died of the signal reports


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit:  # --help (or a usage error): what --help printed reaches stdout before the exit
        sys.stdout.flush()
        raise


def main(argv: Sequence[str] | None = None) -> int:
    stream, prog = sys.stdout, "build.py"
    sys.stdout = _GuardedStdout(stream)  # type: ignore[assignment]
    try:
        args = _parse(argv)
        prog = f"build.py {args.command}"
        code = _run(args)
        sys.stdout.flush()  # here, not at exit: `build.py plan > /dev/full` is one line below, not a traceback
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except _StdoutFailed as exc:  # not a usage error (exit 2): the command did its work, its output was lost
        _stdout_to_devnull()
        print(f"{prog}: error: cannot write to standard output: {exc}", file=sys.stderr)
        return 1
    finally:
        sys.stdout = stream


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"build.py {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except CheckFailed as exc:
        print(f"build.py {args.command}: failed: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C; SIGTERM where a command turns it into one (exit 143)
        print(f"build.py {args.command}: {getattr(exc, 'what', 'interrupted')}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 130))
    except RecursionError:  # an input (a TOML or JSON file) nested beyond reason
        print(f"build.py {args.command}: error: an input file is nested too deeply to read", file=sys.stderr)
        return 2
