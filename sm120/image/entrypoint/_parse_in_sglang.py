"""Run by parser_check in SGLang's own interpreter: parse the argument list on stdin (JSON) with SGLang's real CLI
parser, built as `sglang.launch_server` builds it (YAML `--config` merged first); only the parse, which needs no GPU.
Prints `MARK {json}` last (importing SGLang may print on its own): status accepted, rejected or unavailable."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

MARK = "SM120-PARSE-RESULT "
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


def parse(argv: list[str], wanted: list[str]) -> dict[str, object]:
    """SGLang's reading of `argv`, and of each option in `wanted` (what the entrypoint's checks rely on) its value
    and default, to be compared with what the entrypoint checked."""
    try:
        from sglang.srt.server_args import ServerArgs
    except BaseException as exc:
        return {"status": "unavailable", "error": f"{type(exc).__name__}: {exc}"}
    parser = Parser(prog="sglang.launch_server", allow_abbrev=False)  # an abbreviation: an unrecognized argument
    ServerArgs.add_cli_args(parser)
    for action in parser._actions:
        if action.type in (int, float):
            action.type = _strict(action.type)
    actions = parser._option_string_actions
    try:
        if "--config" in argv:
            try:
                from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger  # 0.5.23
            except ImportError:
                from sglang.srt.server_args_config_parser import ConfigArgumentMerger  # 0.5.9
            argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        namespace = parser.parse_args(argv)
    except Rejected as exc:
        return {"status": "rejected", "error": str(exc), "options": sorted(actions)}
    except ImportError as exc:  # the --config merger (or its yaml) is not there: cannot check
        return {"status": "unavailable", "error": f"--config: {type(exc).__name__}: {exc}"}
    except Exception as exc:  # the --config merge: a missing file, bad YAML
        return {"status": "rejected", "error": f"--config: {type(exc).__name__}: {exc}", "options": sorted(actions)}
    readings = {
        opt: {
            "value": getattr(namespace, action.dest, None),
            "default": action.default,
            "flag": action.nargs == 0,
        }
        for opt in sorted(set(wanted))
        if (action := actions.get(opt)) is not None
    }
    return {"status": "accepted", "readings": readings}


if __name__ == "__main__":
    request = json.load(sys.stdin)
    result = parse(list(request.get("argv", [])), list(request.get("options", [])))
    sys.stdout.write("\n" + MARK + json.dumps(result, default=str) + "\n")  # str: a value JSON has no type for
