"""API_KEY_FILE and ADMIN_API_KEY_FILE in the entrypoint (docs/security.md): the refusals, the key files checked, the
command shown and checked with the keys masked, and the exec through _with_api_key.py (no key on its command line)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping

from . import key_file
from .environment import secret_file_for
from .errors import Log, UsageError, show
from .key_file import ADMIN_OPTION, ADMIN_VARIABLE, FILES, MASK, OPTION, VARIABLE
from .options import WHERE, Command, Item
from .sglang_source import InstalledSGLang

HINT = "put the key in a file and set {variable} to it (a Docker, Compose or Kubernetes secret: /run/secrets/...)"
SHORTEST_PREFIX = 3  # `--a`: argparse takes any unambiguous prefix of an option (allow_abbrev, SGLang's default)
SOURCE = "from {variable}"  # the item's source: its label reads `--api-key '********' (from API_KEY_FILE)`
CLOSED = "an admin key nobody knows"  # the source of the admin item when the admin routes are closed
WHAT = {VARIABLE: "API key", ADMIN_VARIABLE: "admin API key"}
_MASKED_SOURCES = {SOURCE.format(variable=v) for v in FILES} | {CLOSED}  # what exec_argv leaves out


def read_as(name: str) -> list[str]:
    """The key options an option name could be read as by argparse: itself, or one it is a prefix of."""
    if not name.startswith("--") or len(name) < SHORTEST_PREFIX:
        return []
    return [option for option in FILES.values() if option.startswith(name)]


def secrets(environ: Mapping[str, str], sglang_args: Iterable[str]) -> list[str]:
    """Every key this process may come to see, before any check: the key files' contents (whatever their checks
    will say of them), a key file variable's value that names no file, a key in a plain variable (API_KEY=...), and
    each value after an option argparse would read as a key option, after `--` or in EXTRA_ARGS (split like a shell
    line, or, where it cannot be split, at whitespace)."""
    found = [value for name, value in environ.items() if secret_file_for(name) is not None]
    for variable in FILES:
        path = (environ.get(variable) or "").strip()
        if path and not os.path.lexists(path):
            found.append(path)  # names no file: perhaps the key itself, pasted where its path goes
        elif path:
            found += key_file.candidates(path)
    extra = environ.get("EXTRA_ARGS") or ""
    try:
        extra_tokens = shlex.split(extra)
    except ValueError:
        extra_tokens = [token.strip("'\"") for token in extra.split()]
    for tokens in (list(sglang_args), extra_tokens):
        for i, token in enumerate(tokens):
            name, eq, inline = token.partition("=")
            if read_as(name):  # the inline value and the next token, whichever are there
                found += ([inline] if eq else []) + tokens[i + 1 : i + 2]
    return found


def refuse_on_command_line(cmd: Command) -> None:
    """--api-key, --admin-api-key, or a prefix argparse could take for one, in any layer: exit 2 without the value."""
    for item in [*cmd.base, *cmd.extra, *cmd.user]:
        name = item.tokens[0].split("=", 1)[0]
        if not (options := read_as(name)):
            continue
        if name in options:
            read = ""
        elif len(options) == 1:
            read = f" (argparse reads it as {options[0]})"
        else:
            read = f" (argparse may read it as {' or '.join(options)})"
        where = WHERE.get(item.source, f"in {item.source}")
        raise UsageError(
            f"{name} ({where}): a key on a command line ends up in shell histories, CI logs and `ps`{read}",
            HINT.format(variable=" or ".join(v for v, option in FILES.items() if option in options)),
        )


# What SGLang refuses with an API key, or leaves unprotected, found now rather than after the model load:
# the option -> (what is wrong, the hint).
INCOMPATIBLE = {
    "--tokenizer-worker-num": (
        "SGLang serves no API key with several tokenizer workers",
        "(it stops with 'API key is not supported in multi-tokenizer mode'); drop one of the two",
    ),
    "--grpc-port": (
        "SGLang refuses --grpc-port with --api-key",
        "its gRPC listener bypasses the HTTP key check; drop one of the two",
    ),
    "--grpc-mode": (
        "SGLang's gRPC server does not check the key",
        "whoever reaches its port could use the model without one; drop --grpc-mode or the key",
    ),
}


def apply(
    cmd: Command, environ: Mapping[str, str], log: Log, installed: InstalledSGLang | None = None
) -> dict[str, str] | None:
    """The key files into `--admin-api-key MASK` and `--api-key MASK` (last; docs/security.md), or a warning: no API key
    beyond loopback (not where a --config may hold one). None without a key file, else the launcher's environment."""
    refuse_on_command_line(cmd)
    files: dict[str, key_file.ApiKey] = {}  # variable -> key
    for variable in FILES:
        path = (environ.get(variable) or "").strip()  # empty counts as unset
        try:
            if path:
                files[variable] = key_file.read(path)
        except key_file.KeyFileError as exc:
            raise UsageError(*key_file.describe(variable, path, exc)) from None
    # 0.5.9 and 0.5.23 take --admin-api-key; without SGLang here it is assumed
    admin_supported = installed is None or installed.knows_option(ADMIN_OPTION)
    if ADMIN_VARIABLE in files and not admin_supported:
        who = f"SGLang {installed.version}" if installed is not None and installed.version else "the installed SGLang"
        raise UsageError(f"{ADMIN_VARIABLE}: {who} has no {ADMIN_OPTION}", f"unset {ADMIN_VARIABLE}")
    if VARIABLE not in files:
        host = cmd.last("--host")
        rank = cmd.value("--node-rank") or "0"
        # SGLang's other nodes run no HTTP server (a rank of any length: the number checks come later)
        serves = not (rank.isascii() and rank.isdigit() and rank.lstrip("0") != "")
        if host is not None and serves and not key_file.is_loopback(host.value) and not cmd.has("--config"):
            log.warn(
                f"SGLang listens on {host.label()} with no API key: whoever reaches port {cmd.value('--port')} "
                f"can use it; set {VARIABLE} (see --help)"
            )
    if not files:
        return None
    workers = cmd.value("--tokenizer-worker-num") or ""
    for option, (problem, hint) in INCOMPATIBLE.items():
        item = cmd.last(option)
        if item is not None and (option != "--tokenizer-worker-num" or (workers.isdigit() and int(workers) > 1)):
            raise UsageError(f"{' and '.join(files)} with {item.label()}: {problem}", hint)
    api, admin = files.get(VARIABLE), files.get(ADMIN_VARIABLE)
    closed = admin is None and admin_supported  # an admin key nobody knows: the launcher makes it
    if api is not None and admin is not None and api.value == admin.value:
        log.warn(f"{ADMIN_VARIABLE} holds the same key as {VARIABLE}: every key holder can use the admin routes")
    if admin is not None or closed:
        cmd.user.append(Item([ADMIN_OPTION, MASK], CLOSED if closed else SOURCE.format(variable=ADMIN_VARIABLE)))
    if api is not None:
        cmd.user.append(Item([OPTION, MASK], SOURCE.format(variable=VARIABLE)))
    for variable, key in files.items():
        log.note(
            f"{WHAT[variable]} from {variable}={show(key.path)}: SGLang gets it in-process "
            f"({key_file.LAUNCHER.name}), on no command line; shown as {MASK}"
        )
    if closed:
        log.note(
            f"admin routes closed: SGLang gets {CLOSED} ({ADMIN_OPTION}, made at start, never shown); "
            f"set {ADMIN_VARIABLE} to open them to whoever holds that key"
        )
    return {key_file.ADMIN_ROUTES: "closed"} if closed else {}


def exec_argv(python: str, cmd: Command) -> list[str]:
    """What to exec with a key: the launcher, then SGLang's module and its options without the masked keys."""
    args = [token for item in cmd.items() if item.source not in _MASKED_SOURCES for token in item.tokens]
    return [python, str(key_file.LAUNCHER), "-m", "sglang.launch_server", *args]
