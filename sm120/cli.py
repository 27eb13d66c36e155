"""`build.py`: a thin argparse front over the sm120 package. Each subcommand is a `cmd_*` module of the pipeline
step it belongs to (sm120/plan/, build/, patches/, track/, verify/, bench/, deploy/)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from sm120.bench import cmd_bench
from sm120.build import cmd_base, cmd_build, cmd_preflight, cmd_sbom
from sm120.deploy import cmd_deploy
from sm120.errors import CheckFailed, UsageError, missing_package, suggest
from sm120.image.entrypoint.errors import SECRETS, Redacted
from sm120.patches import cmd_patches
from sm120.plan import cmd_plan
from sm120.plan.config import ROOT
from sm120.track import cmd_track
from sm120.verify import cmd_verify

# The subcommands, in the order `--help` lists them; each module's `register(subparsers)` declares its arguments.
COMMANDS = (
    cmd_plan,
    cmd_patches,
    cmd_track,
    cmd_base,
    cmd_preflight,
    cmd_build,
    cmd_verify,
    cmd_sbom,
    cmd_bench,
    cmd_deploy,
)


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit 2), without the usage block, naming what a misspelled
    choice or option resembles. The subcommands' parsers (and theirs) are Parsers too: argparse gives a subparser its
    parent's class."""

    _given: Sequence[str] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # every command's description as its docstring lays it out
        super().__init__(*args, **{"formatter_class": argparse.RawDescriptionHelpFormatter, **kwargs})

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(namespace, "_unknown_in"):
            namespace._unknown_in = self  # the innermost parser left them: its options are the ones they resemble
        return namespace, extras

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        namespace, extras = self.parse_known_args(args, namespace)
        where = vars(namespace).pop("_unknown_in", self)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{where.resembles(extras)}")
        return namespace

    def error(self, message: str) -> None:  # type: ignore[override]
        unknown = [a for a in self._given if a.startswith("--") and not self._known(a)]
        if unknown and "required" in message:  # a misspelled option is why the one it meant is missing
            message = f"unrecognized arguments: {unknown[0]}{self.resembles(unknown)}"
        # '; perhaps you meant X' for argparse's "invalid choice: 'x' (choose from ...)" (as cibuildwheel does)
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        closest = suggest(match.group(1), re.findall(r"'?([^',\s]+)'?", match.group(2))) if match else ""
        self.exit(2, f"{self.prog}: error: {message}{closest} (see --help)\n")

    def _known(self, arg: str) -> bool:  # argparse takes an option's prefixes too
        return any(option.startswith(arg.split("=", 1)[0]) for option in self._option_string_actions)

    def resembles(self, extras: Sequence[str]) -> str:
        """'; perhaps you meant --endpoint' for the first unknown option of `extras`, or ''."""
        options = [a.split("=", 1)[0] for a in extras if a.startswith("-")]
        return suggest(options[0], self._option_string_actions) if options else ""


def build_parser() -> Parser:
    parser = Parser(prog="build.py", description=__doc__)
    version = re.findall(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)[0]
    parser.add_argument("--version", action="version", version=f"build.py {version}", help="print the version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


class _StdoutFailed(Exception):
    """Writing standard output failed (a full disk, an I/O error): one line and exit 1. Not an OSError, so that a
    command's own handling of its files (and argparse's of --help) does not take it for theirs."""


class _GuardedStdout:
    """The stream under sys.stdout's Redacted while build.py runs (Redacted calls only its write and flush): an
    OSError from writing it becomes _StdoutFailed; BrokenPipeError stays main's own case (exit 141)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._stream, name)
        return functools.partial(self._guarded, attr) if name in ("write", "flush") else attr

    @staticmethod
    def _guarded(call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _StdoutFailed(exc.strerror or str(exc)) from None


def _stdout_to_devnull() -> None:
    """Python flushes stdout once more when it exits: point it at /dev/null (as the Python docs advise), so that
    what could not be written gives no "Exception ignored" line there either."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    stream, errors, prog = sys.stdout, sys.stderr, "build.py"
    # No secret in any output, by construction: every line written to stdout and stderr, the error lines below
    # included, goes through SECRETS.redact (the entrypoint's step), fed by the command with what it learns (bench:
    # the --api-key-file key, a password in --endpoint's URL).
    SECRETS.clear()
    sys.stdout = Redacted(_GuardedStdout(stream))  # type: ignore[assignment]
    sys.stderr = Redacted(errors)  # type: ignore[assignment]
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:  # --help (or a usage error): what --help printed reaches stdout before the exit
            sys.stdout.flush()
            raise
        prog = f"build.py {args.command}"
        code = _run(args)
        sys.stdout.flush()  # here, not at exit: `build.py plan > /dev/full` is one line below, not a traceback
        return code
    except BrokenPipeError:  # the reader went away (`build.py plan --json | head -c1`): no traceback, none at exit
        _stdout_to_devnull()
        return 141  # 128 + SIGPIPE, what a shell tool that died of the signal reports
    except _StdoutFailed as exc:  # not a usage error (exit 2): the command did its work, its output was lost
        _stdout_to_devnull()
        print(f"{prog}: error: cannot write to standard output: {exc}", file=sys.stderr)
        return 1
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()  # a last line without its newline
        sys.stdout, sys.stderr = stream, errors


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except (UsageError, CheckFailed) as exc:
        line, code = f"{'error' if isinstance(exc, UsageError) else 'failed'}: {exc}", exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C; SIGTERM where a command turns it into one (exit 143)
        line, code = getattr(exc, "what", "interrupted"), int(getattr(exc, "exit_code", 130))
    except ModuleNotFoundError as exc:  # a third-party package this command needs (the docker SDK, say)
        if str(exc.name).startswith("sm120"):
            raise
        line, code = f"error: {missing_package(exc)}", 2
    except RecursionError:  # an input (a TOML or JSON file) nested beyond reason
        line, code = "error: an input file is nested too deeply to read", 2
    print(f"build.py {args.command}: {line}", file=sys.stderr)
    return code
