"""API_KEY_FILE and ADMIN_API_KEY_FILE in the entrypoint: the key files checked, `--admin-api-key` and `--api-key`
in the command shown masked, the exec through _with_api_key.py (which hands the keys to SGLang in-process), and the
refusals (key_file.py says why).

The command the entrypoint prints (the --dry-run line, the log) and checks with SGLang's parser carries
`--admin-api-key MASK` (where one is passed) and `--api-key MASK`, last; the process it execs carries no key at all:
`python3 .../_with_api_key.py -m sglang.launch_server ARGS`, and the launcher reads the key files again.

Admin routes: SGLang's auth (srt/utils/auth.py, 0.5.9 and 0.5.23) lets every API-key holder use the admin-optional
routes when no admin key is set. With an API key and no ADMIN_API_KEY_FILE the entrypoint has the launcher pass an
admin key nobody knows (made in the launcher's process, never written), which closes them; ADMIN_API_KEY_FILE opens
them to whoever holds that key.

Secrets: `secrets()` gives every value this process may see that is a key (the key files' contents, the value after
an option argparse would read as --api-key or --admin-api-key), for errors.SECRETS, before any check runs.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from . import key_file
from .errors import Log, UsageError, show
from .key_file import ADMIN_OPTION, ADMIN_VARIABLE, MASK, OPTION, VARIABLE
from .options import EXTRA, USER, Command, Item
from .sglang_source import InstalledSGLang

KEY_OPTIONS = {OPTION: VARIABLE, ADMIN_OPTION: ADMIN_VARIABLE}  # the option -> the variable that feeds it
HINT = "put the key in a file and set {variable} to it (a Docker, Compose or Kubernetes secret: /run/secrets/...)"
SHORTEST_PREFIX = 3  # `--a`: argparse takes any unambiguous prefix of an option (allow_abbrev, SGLang's default)
SOURCE = "from {variable}"  # the item's source: its label reads `--api-key '********' (from API_KEY_FILE)`
CLOSED = "an admin key nobody knows"  # the source of the admin item when the admin routes are closed
OPEN_ADMIN = f"set {ADMIN_VARIABLE} to open them to whoever holds that key"
WHAT = {VARIABLE: "API key", ADMIN_VARIABLE: "admin API key"}
_MASKED_SOURCES = {SOURCE.format(variable=v) for v in KEY_OPTIONS.values()} | {CLOSED}  # what exec_argv leaves out


def read_as(name: str) -> list[str]:
    """The key options an option name could be read as by argparse: itself, or one it is a prefix of."""
    if not name.startswith("--") or len(name) < SHORTEST_PREFIX:
        return []
    return [option for option in KEY_OPTIONS if option.startswith(name)]


def secrets(environ: Mapping[str, str], sglang_args: Iterable[str]) -> list[str]:
    """Every key this process may come to see, before any check: the key files' contents (whatever their checks
    will say of them), a key file variable's value that names no file, and each value after an option argparse
    would read as a key option, after `--` or in EXTRA_ARGS (split like a shell line, or, where it cannot be split,
    at whitespace)."""
    found: list[str] = []
    for variable in KEY_OPTIONS.values():
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
            if not read_as(name):
                continue
            if eq:
                found.append(inline)
            if i + 1 < len(tokens):
                found.append(tokens[i + 1])
    return found


def _where(item: Item) -> str:
    return {USER: "after --", EXTRA: "in EXTRA_ARGS"}.get(item.source, f"in {item.source}")


def refuse_on_command_line(cmd: Command) -> None:
    """--api-key, --admin-api-key, or a prefix argparse could take for one, in any layer: exit 2 without the value."""
    for item in [*cmd.base, *cmd.extra, *cmd.user]:
        name = item.tokens[0].split("=", 1)[0]
        options = read_as(name)
        if not options:
            continue
        if name in options:
            read = ""
        elif len(options) == 1:
            read = f" (argparse reads it as {options[0]})"
        else:
            read = f" (argparse may read it as {' or '.join(options)})"
        variables = " or ".join(KEY_OPTIONS[option] for option in options)
        raise UsageError(
            f"{name} ({_where(item)}): a key on a command line ends up in shell histories, CI logs and `ps`{read}",
            HINT.format(variable=variables),
        )


def _check_compatible(cmd: Command, variables: str) -> None:
    """What SGLang refuses with an API key, or leaves unprotected, found now rather than after the model load."""
    workers = cmd.last("--tokenizer-worker-num")
    if workers is not None and (workers.value or "").isdigit() and int(workers.value or "0") > 1:
        raise UsageError(
            f"{variables} with {workers.label()}: SGLang serves no API key with several tokenizer workers",
            "(it stops with 'API key is not supported in multi-tokenizer mode'); drop one of the two",
        )
    grpc = cmd.last("--grpc-port")
    if grpc is not None:
        raise UsageError(
            f"{variables} with {grpc.label()}: SGLang refuses --grpc-port with --api-key",
            "its gRPC listener bypasses the HTTP key check; drop one of the two",
        )
    mode = cmd.last("--grpc-mode")
    if mode is not None:
        raise UsageError(
            f"{variables} with {mode.label()}: SGLang's gRPC server does not check the key",
            "whoever reaches its port could use the model without one; drop --grpc-mode or the key",
        )


def admin_key_supported(installed: InstalledSGLang | None) -> bool:
    """Whether the installed SGLang takes --admin-api-key (0.5.9 and 0.5.23 do; without SGLang here: assumed)."""
    return installed is None or installed.knows_option(ADMIN_OPTION)


@dataclass
class Keys:
    """The keys SGLang will serve with (never their values: the launcher reads the files again)."""

    files: dict[str, key_file.ApiKey] = field(default_factory=dict)  # variable -> key
    admin_closed: bool = False  # an admin key nobody knows: the launcher makes it

    def __bool__(self) -> bool:
        return bool(self.files)

    def launcher_env(self) -> dict[str, str]:
        return {key_file.ADMIN_ROUTES: "closed"} if self.admin_closed else {}


def _read(variable: str, path: str) -> key_file.ApiKey:
    try:
        return key_file.read(path)
    except key_file.KeyFileError as exc:
        raise UsageError(*key_file.describe(variable, path, exc)) from None


def apply(cmd: Command, environ: Mapping[str, str], log: Log, installed: InstalledSGLang | None = None) -> Keys:
    """Refuse a key on a command line; read API_KEY_FILE and ADMIN_API_KEY_FILE into `--admin-api-key MASK` and
    `--api-key MASK` (last); close the admin routes where there is an API key and no admin key; or warn when SGLang
    would listen beyond loopback without an API key (on node 0: only it serves HTTP; a --config may hold a key)."""
    refuse_on_command_line(cmd)
    keys = Keys()
    for variable in KEY_OPTIONS.values():
        path = (environ.get(variable) or "").strip()  # empty counts as unset
        if path:
            keys.files[variable] = _read(variable, path)
    if ADMIN_VARIABLE in keys.files and not admin_key_supported(installed):
        who = f"SGLang {installed.version}" if installed is not None and installed.version else "the installed SGLang"
        raise UsageError(f"{ADMIN_VARIABLE}: {who} has no {ADMIN_OPTION}", f"unset {ADMIN_VARIABLE}")
    if VARIABLE not in keys.files:
        host = cmd.last("--host")
        rank = cmd.value("--node-rank") or "0"
        # SGLang's other nodes run no HTTP server (a rank of any length: the number checks come later)
        serves = not (rank.isascii() and rank.isdigit() and rank.lstrip("0") != "")
        if host is not None and serves and not key_file.is_loopback(host.value) and not cmd.has("--config"):
            log.warn(
                f"SGLang listens on {host.label()} with no API key: whoever reaches port {cmd.value('--port')} "
                f"can use it; set {VARIABLE} (see --help)"
            )
    if not keys:
        return keys
    _check_compatible(cmd, " and ".join(keys.files))
    api, admin = keys.files.get(VARIABLE), keys.files.get(ADMIN_VARIABLE)
    if admin is not None:
        cmd.user.append(Item([ADMIN_OPTION, MASK], SOURCE.format(variable=ADMIN_VARIABLE)))
        if api is not None and api.value == admin.value:
            log.warn(f"{ADMIN_VARIABLE} holds the same key as {VARIABLE}: every key holder can use the admin routes")
    elif api is not None and admin_key_supported(installed):
        keys.admin_closed = True
        cmd.user.append(Item([ADMIN_OPTION, MASK], CLOSED))
    if api is not None:
        cmd.user.append(Item([OPTION, MASK], SOURCE.format(variable=VARIABLE)))
    for variable, key in keys.files.items():
        log.note(
            f"{WHAT[variable]} from {variable}={show(key.path)}: SGLang gets it in-process "
            f"({key_file.LAUNCHER.name}), on no command line; shown as {MASK}"
        )
    if keys.admin_closed:
        log.note(
            f"admin routes closed: SGLang gets {CLOSED} ({ADMIN_OPTION}, made at start, never shown); " + OPEN_ADMIN
        )
    return keys


def exec_argv(python: str, cmd: Command) -> list[str]:
    """What to exec with a key: the launcher, then SGLang's module and its options without the masked keys."""
    args = [token for item in cmd.items() if item.source not in _MASKED_SOURCES for token in item.tokens]
    return [python, str(key_file.LAUNCHER), "-m", "sglang.launch_server", *args]
