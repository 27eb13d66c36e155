"""`build.py`: a thin argparse front over the sm120 package. Subcommands live in sm120/commands/."""

from __future__ import annotations

import argparse
import importlib
import math
import re
import sys
from collections.abc import Sequence

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


def positive_int(text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        raise argparse.ArgumentTypeError(f"must be a positive integer (ASCII digits), got {text!r}")
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def integer(text: str) -> int:
    if not re.fullmatch(r"-?[0-9]+", text):
        raise argparse.ArgumentTypeError(f"must be an integer (ASCII digits), got {text!r}")
    return int(text)


def non_negative_int(text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        raise argparse.ArgumentTypeError(f"must be a non-negative integer (ASCII digits), got {text!r}")
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A positive, finite number in plain ASCII decimal (float() also takes 'inf', '1_0' and other digits)."""
    if not re.fullmatch(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text):
        raise argparse.ArgumentTypeError(f"must be a positive finite number such as 30 or 0.5, got {text!r}")
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number such as 30 or 0.5, got {text!r}")
    return value


def add_config_args(parser: argparse.ArgumentParser, *, sglang: bool = True, profile: bool = True) -> None:
    """The options every plan-reading subcommand shares."""
    parser.add_argument("--config", metavar="FILE", help="build.toml to read (default: the checkout's)")
    if profile:
        parser.add_argument("--profile", metavar="NAME", help="profile from build.toml (default: defaults.profile)")
    if sglang:
        parser.add_argument("--sglang", metavar="VERSION", help="SGLang track (default: defaults.sglang)")


def add_machine_args(parser: argparse.ArgumentParser) -> None:
    """The options that plan for another builder than this machine (plan, build)."""
    parser.add_argument("--max-jobs", type=positive_int, metavar="N", help="override the derived compile parallelism")
    parser.add_argument(
        "--cpus", type=positive_int, metavar="N", help="plan for a machine with N CPUs (default: this one)"
    )
    parser.add_argument(
        "--memory-gib", type=positive_float, metavar="G", help="plan for a machine with G GiB (default: this one)"
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
            # A third-party package this command needs is missing (e.g. the docker SDK inside the image,
            # where only `plan` and `patches` run): the other commands still work; this one says what to do.
            unavailable = sub.add_parser(name, help="(unavailable here: a Python package it needs is missing)")
            unavailable.add_argument("rest", nargs=argparse.REMAINDER)
            unavailable.set_defaults(func=_needs(name, str(exc.name).split(".")[0]))
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"build.py {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except CheckFailed as exc:
        print(f"build.py {args.command}: failed: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"build.py {args.command}: interrupted", file=sys.stderr)
        return 130
    except RecursionError:  # an input (a TOML or JSON file) nested beyond reason
        print(f"build.py {args.command}: error: an input file is nested too deeply to read", file=sys.stderr)
        return 2
