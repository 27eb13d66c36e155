"""Run by parser_check in SGLang's own interpreter: parse an argument list with SGLang's real CLI parser.

Reads the list as JSON on stdin, builds the parser the way `sglang.launch_server` does
(`ServerArgs.add_cli_args(argparse.ArgumentParser())`, YAML `--config` merged first) and parses. Only the
parse: `ServerArgs.from_cli_args` would need a GPU. Prints one line `MARK {json}` last, since importing
SGLang may print on its own: {"status": "accepted" | "rejected" | "unavailable", "version", "error"}.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

MARK = "SM120-PARSE-RESULT "
# What the entrypoint's checks rely on (it sends its own list, these are the least): SGLang's reading of each
# is sent back with the option's default and aliases, and compared with what the entrypoint checked.
OPTIONS = (
    "--model-path",
    "--speculative-draft-model-path",
    "--speculative-algorithm",
    "--tp-size",
    "--pp-size",
    "--nnodes",
    "--node-rank",
    "--port",
)
_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")


class Rejected(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise Rejected(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise Rejected((message or "").strip() or f"the parser exited with status {status}")


def _strict(kind: type) -> object:
    """int/float as a person writes them: ASCII digits, no spaces, no '+', no '_', finite (int() takes more)."""
    pattern, name = (_INT, "int (ASCII digits)") if kind is int else (_FLOAT, "float (finite, ASCII digits)")

    def convert(text: str) -> object:
        if not isinstance(text, str):  # a default, or a value from a --config file, already typed
            return kind(text)
        if not pattern.fullmatch(text):
            raise ValueError(text)
        value = kind(text)
        if kind is float and not math.isfinite(value):
            raise ValueError(text)
        return value

    convert.__name__ = name
    return convert


def _version() -> str | None:
    try:
        from sglang.version import __version__

        return str(__version__)
    except Exception:
        return None


def _merge_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger  # 0.5.23
    except ImportError:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger  # 0.5.9
    return ConfigArgumentMerger(parser).merge_config_with_args(argv)


def _abbreviation(argv: list[str], known: set[str]) -> str | None:
    for token in argv:
        name = token.split("=", 1)[0]
        if name.startswith("--") and name not in known:
            longer = sorted(o for o in known if o.startswith(name))
            if longer:
                return f"{name} is an abbreviation of {', '.join(longer[:3])}{', ...' if len(longer) > 3 else ''}"
    return None


def _plain(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def parse(argv: list[str], wanted: list[str] | None = None) -> dict[str, object]:
    try:
        from sglang.srt.server_args import ServerArgs
    except BaseException as exc:
        return {"status": "unavailable", "version": _version(), "error": f"{type(exc).__name__}: {exc}"}
    version = _version()
    parser = Parser(prog="sglang.launch_server", allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    for action in parser._actions:
        if action.type in (int, float):
            action.type = _strict(action.type)
    actions = parser._option_string_actions
    known = set(actions)
    abbreviation = _abbreviation(argv, known)
    if abbreviation:
        return {"status": "rejected", "version": version, "error": abbreviation, "options": sorted(known)}
    try:
        if "--config" in argv:
            argv = _merge_config(parser, argv)
        namespace = parser.parse_args(argv)
    except Rejected as exc:
        return {"status": "rejected", "version": version, "error": str(exc), "options": sorted(known)}
    except ImportError as exc:  # the --config merger (or its yaml) is not there: cannot check
        return {"status": "unavailable", "version": version, "error": f"--config: {type(exc).__name__}: {exc}"}
    except Exception as exc:  # the --config merge: a missing file, bad YAML
        return {"status": "rejected", "version": version, "error": f"--config: {type(exc).__name__}: {exc}"}
    values = {}
    readings = {}
    for opt in sorted({*OPTIONS, *(wanted or [])}):
        action = actions.get(opt)
        if action is None:
            continue
        value = _plain(getattr(namespace, action.dest, None))
        values[opt] = value
        readings[opt] = {
            "value": value,
            "default": _plain(action.default),
            "flag": action.nargs == 0,
            "names": list(action.option_strings),
        }
    return {"status": "accepted", "version": version, "values": values, "readings": readings}


if __name__ == "__main__":
    request = json.load(sys.stdin)
    if isinstance(request, dict):
        result = parse(list(request.get("argv", [])), list(request.get("options", [])))
    else:
        result = parse(request)
    sys.stdout.write("\n" + MARK + json.dumps(result) + "\n")
