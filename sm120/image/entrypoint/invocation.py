"""The entrypoint's own command line: `[MODE] [--dry-run] [--help] [-- SGLANG-OPTIONS]`, or `PROGRAM [ARGS...]`.

No argument means the default mode (build.toml [defaults] mode, the image's CMD). A first argument that is neither
a mode nor an option but a program on PATH (`bash`, `python3`) is run as it is, as users of official images expect.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from .errors import UsageError, show, suggest
from .tools import TOOLS

OPTIONS = ("--dry-run", "--help", "-h")


@dataclass
class Invocation:
    mode: str
    dry_run: bool = False
    help: bool = False
    sglang_args: list[str] = field(default_factory=list)  # everything after `--`, passed as it is
    program: list[str] | None = None  # a program on PATH to run instead of SGLang
    tool: str | None = None  # a tool mode (tools.TOOLS) to run instead of SGLang
    tool_args: list[str] = field(default_factory=list)  # everything after the tool's word, passed as it is


def program_on_path(name: str, environ: Mapping[str, str]) -> str | None:
    return shutil.which(name, path=environ.get("PATH"))


def parse(argv: list[str], modes: Collection[str], environ: Mapping[str, str], default_mode: str) -> Invocation:
    request = Invocation(default_mode)
    if argv and argv[0] in TOOLS:
        request.tool, request.tool_args = argv[0], list(argv[1:])
        return request
    if argv and not argv[0].startswith("-") and argv[0] not in modes:
        if program_on_path(argv[0], environ):
            request.program = list(argv)
            return request
        raise UsageError(
            f"unknown mode {show(argv[0])}{suggest(argv[0], [*modes, *TOOLS])}",
            f"modes: {', '.join(sorted(modes))}; or a program on PATH (e.g. bash); see --help",
        )

    ours, sglang = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    request.sglang_args = sglang
    mode_given = False
    for token in ours:
        if token == "--dry-run":
            request.dry_run = True
        elif token in ("--help", "-h"):
            request.help = True
        elif token.startswith("-"):
            raise UsageError(
                f"unknown entrypoint option {show(token)} (options: --dry-run, --help)"
                f"{suggest(token, ('--dry-run', '--help'))}",
                f"SGLang options go after --, e.g. `{request.mode} -- {token} ...`",
            )
        elif not mode_given and token in modes:
            request.mode, mode_given = token, True
        elif token in modes:
            raise UsageError(f"two modes given ({request.mode}, {token}): pick one of {', '.join(sorted(modes))}")
        else:
            raise UsageError(
                f"unexpected argument {show(token)}",
                f"usage: [{'|'.join(sorted(modes))}] [--dry-run] [--help] [-- SGLANG-OPTIONS]",
            )
    return request
