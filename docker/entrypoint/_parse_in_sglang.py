"""Run by parser_check in SGLang's own interpreter: parse an argument list with SGLang's real CLI parser.

Reads the list as JSON on stdin, builds the parser the way `sglang.launch_server` does
(`ServerArgs.add_cli_args(argparse.ArgumentParser())`, YAML `--config` merged first) and parses. Only the
parse: `ServerArgs.from_cli_args` would need a GPU. Prints one line `MARK {json}` last, since importing
SGLang may print on its own: {"status": "accepted" | "rejected" | "unavailable", "version", "error"}.
"""

from __future__ import annotations

import argparse
import json
import sys

MARK = "SM120-PARSE-RESULT "
# What the entrypoint's checks rely on: SGLang's reading of these options is sent back and compared.
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


class Rejected(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise Rejected(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise Rejected((message or "").strip() or f"the parser exited with status {status}")


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


def parse(argv: list[str]) -> dict[str, object]:
    try:
        from sglang.srt.server_args import ServerArgs
    except BaseException as exc:
        return {"status": "unavailable", "version": _version(), "error": f"{type(exc).__name__}: {exc}"}
    version = _version()
    parser = Parser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    try:
        if "--config" in argv:
            argv = _merge_config(parser, argv)
        namespace = parser.parse_args(argv)
    except Rejected as exc:
        return {"status": "rejected", "version": version, "error": str(exc)}
    except ImportError as exc:  # the --config merger (or its yaml) is not there: cannot check
        return {"status": "unavailable", "version": version, "error": f"--config: {type(exc).__name__}: {exc}"}
    except Exception as exc:  # the --config merge: a missing file, bad YAML
        return {"status": "rejected", "version": version, "error": f"--config: {type(exc).__name__}: {exc}"}
    actions = parser._option_string_actions
    values = {opt: getattr(namespace, actions[opt].dest, None) for opt in OPTIONS if opt in actions}
    return {"status": "accepted", "version": version, "values": values}


if __name__ == "__main__":
    result = parse(json.load(sys.stdin))
    sys.stdout.write("\n" + MARK + json.dumps(result) + "\n")
