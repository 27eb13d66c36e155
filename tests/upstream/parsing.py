"""SGLang's own command-line parser in a T1 interpreter: several commands parsed in one import of SGLang."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

TIMEOUT_S = 600  # importing SGLang's server_args takes 10-40 s on a small CPU machine

PARSE = """
import argparse
from sglang.srt.server_args import ServerArgs
from sglang.version import __version__

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise SystemExit("rejected: " + message)

parser = Parser()
ServerArgs.add_cli_args(parser)
dest = {opt: parser._option_string_actions[opt].dest for opt in OPTIONS}
out = []
for args in COMMANDS:
    ns = parser.parse_args(args)
    out.append({"version": __version__, **{opt: getattr(ns, d) for opt, d in dest.items()}})
emit(out)
"""


def parse_commands(
    run_snippet, python: Path, commands: Sequence[Sequence[str]], options: Sequence[str], pythonpath=()
) -> list[dict[str, Any]]:
    """For each command (SGLang's arguments), the release's reading of `options` (and its version)."""
    code = f"COMMANDS = {[list(c) for c in commands]!r}\nOPTIONS = {list(options)!r}\n" + PARSE
    return run_snippet(python, code, pythonpath=pythonpath, stubs=False)
