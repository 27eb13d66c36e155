"""API_KEY_FILE in the entrypoint: the key file checked, `--api-key` in the command shown masked, the exec
through _with_api_key.py (which hands the key to SGLang in-process), and the refusals (key_file.py says why).

The command the entrypoint prints (the --dry-run line, the log) and checks with SGLang's parser carries
`--api-key MASK`, last; the process it execs carries no key at all:
`python3 .../_with_api_key.py -m sglang.launch_server ARGS`, and the launcher reads API_KEY_FILE again.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import key_file
from .errors import Log, UsageError, show
from .key_file import MASK, OPTION, VARIABLE
from .options import EXTRA, USER, Command, Item

HINT = f"put the key in a file and set {VARIABLE} to it (a Docker, Compose or Kubernetes secret: /run/secrets/...)"
SHORTEST_PREFIX = "--api"  # what argparse would also take for --api-key
SOURCE = f"from {VARIABLE}"  # the item's source: its label reads `--api-key '********' (from API_KEY_FILE)`


def _where(item: Item) -> str:
    return {USER: "after --", EXTRA: "in EXTRA_ARGS"}.get(item.source, f"in {item.source}")


def refuse_on_command_line(cmd: Command) -> None:
    """--api-key (or a prefix argparse would take for it) in any layer: exit 2 without showing the value."""
    for item in [*cmd.base, *cmd.extra, *cmd.user]:
        name = item.tokens[0].split("=", 1)[0]
        if name == OPTION or (len(name) >= len(SHORTEST_PREFIX) and OPTION.startswith(name)):
            raise UsageError(
                f"{name} ({_where(item)}): a key on a command line ends up in shell histories, CI logs and `ps`",
                HINT,
            )


def _check_compatible(cmd: Command) -> None:
    """What SGLang refuses with an API key, found now rather than after the model load."""
    workers = cmd.last("--tokenizer-worker-num")
    if workers is not None and (workers.value or "").isdigit() and int(workers.value or "0") > 1:
        raise UsageError(
            f"{VARIABLE} with {workers.label()}: SGLang serves no API key with several tokenizer workers",
            "(it stops with 'API key is not supported in multi-tokenizer mode'); drop one of the two",
        )
    grpc = cmd.last("--grpc-port")
    if grpc is not None:
        raise UsageError(
            f"{VARIABLE} with {grpc.label()}: SGLang refuses --grpc-port with --api-key",
            "its gRPC listener bypasses the HTTP key check; drop one of the two",
        )


def apply(cmd: Command, environ: Mapping[str, str], log: Log) -> key_file.ApiKey | None:
    """Refuse a key on a command line; read API_KEY_FILE into `--api-key MASK` (last), or warn when SGLang
    would listen beyond loopback without a key (on node 0: only it serves HTTP; a --config may hold a key).
    Returns the key, or None."""
    refuse_on_command_line(cmd)
    path = (environ.get(VARIABLE) or "").strip()  # empty counts as unset
    if not path:
        host = cmd.last("--host")
        rank = cmd.value("--node-rank") or "0"
        # SGLang's other nodes run no HTTP server (a rank of any length: the number checks come later)
        serves = not (rank.isascii() and rank.isdigit() and rank.lstrip("0") != "")
        if host is not None and serves and not key_file.is_loopback(host.value) and not cmd.has("--config"):
            log.warn(
                f"SGLang listens on {host.label()} with no API key: whoever reaches port {cmd.value('--port')} "
                f"can use it; set {VARIABLE} (see --help)"
            )
        return None
    try:
        key = key_file.read(path)
    except key_file.KeyFileError as exc:
        raise UsageError(f"{VARIABLE}={show(path)}: {exc.problem}", *([exc.hint] if exc.hint else [])) from None
    _check_compatible(cmd)
    cmd.user.append(Item([OPTION, MASK], SOURCE))
    log.note(
        f"API key from {VARIABLE}={show(path)}: SGLang gets it in-process ({key_file.LAUNCHER.name}), on no "
        f"command line; shown as {MASK}"
    )
    return key


def exec_argv(python: str, cmd: Command) -> list[str]:
    """What to exec with a key: the launcher, then SGLang's module and its options without `--api-key MASK`."""
    args = [token for item in cmd.items() if item.source != SOURCE for token in item.tokens]
    return [python, str(key_file.LAUNCHER), "-m", "sglang.launch_server", *args]
