"""The SGLang command from a mode's presets, the environment variables and the arguments after `--`, each value
validated where SGLang will read it (the last occurrence), an error naming where it came from (TP_SIZE='x', ...)."""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import Log, UsageError, show
from .key_file import SECRET_PATH
from .options import EXTRA, USER, Command, Item, group
from .spec import EntrypointSpec, draft_tree_most

DEFAULT_HOST = "0.0.0.0"  # SGLang's own default (127.0.0.1) cannot be reached from outside the container
SPEC_ALGORITHMS_WITH_TREE = ("EAGLE", "EAGLE3")


@dataclass(frozen=True)
class Variable:
    name: str
    option: str | None  # the SGLang option it sets
    help: str


VARIABLES = [
    Variable("MODEL_PATH", "--model-path", "target model directory (holds config.json); required"),
    Variable("DRAFT_MODEL_PATH", "--speculative-draft-model-path", "EAGLE-3 drafter directory; required by eagle3"),
    Variable("TP_SIZE", "--tp-size", "tensor-parallel size: the number of GPUs (default: SGLang's, 1)"),
    Variable("HOST", "--host", f"address to listen on (default {DEFAULT_HOST})"),
    Variable("PORT", "--port", "port to listen on (default: the image's, {port})"),
    Variable("SPEC_NUM_STEPS", "--speculative-num-steps", "eagle3: draft steps (default: {spec_num_steps})"),
    Variable("SPEC_EAGLE_TOPK", "--speculative-eagle-topk", "eagle3: branches per step (default: {spec_eagle_topk})"),
    Variable(
        "SPEC_NUM_DRAFT_TOKENS",
        "--speculative-num-draft-tokens",
        "eagle3: tokens verified per step (default: {spec_num_draft_tokens})",
    ),
    Variable("NNODES", "--nnodes", "several machines: the number of nodes (default 1)"),
    Variable("NODE_RANK", "--node-rank", "several machines: this node's rank, 0 .. NNODES-1"),
    Variable("DIST_INIT_ADDR", "--dist-init-addr", "several machines: host:port of node 0"),
    Variable("EXTRA_ARGS", None, "more SGLang options, split like a shell line"),
    Variable("SKIP_RUNTIME_RULES", None, "runtime rules to leave out: names, comma-separated, or 'all'"),
    # Not option items: api_key.py reads the files and adds --admin-api-key and --api-key, masked, last (no key on a
    # command line).
    Variable(
        "API_KEY_FILE",
        None,
        f"file (a secret, e.g. {SECRET_PATH}) whose one line is SGLang's --api-key (A-Z a-z 0-9 . _ ~ + / = -); "
        "shown as ********, on no command line (--api-key, --admin-api-key and their prefixes are refused)",
    ),
    Variable(
        "ADMIN_API_KEY_FILE",
        None,
        "file whose one line is SGLang's --admin-api-key, for its admin routes (read like API_KEY_FILE); without it, "
        "an API key closes the admin routes (SGLang gets an admin key nobody knows)",
    ),
]
# The EAGLE-3 draft tree's options and their variables; the mode's key that presets one is the variable's lower case.
TREE_OPTIONS = {
    "--speculative-num-steps": "SPEC_NUM_STEPS",
    "--speculative-eagle-topk": "SPEC_EAGLE_TOPK",
    "--speculative-num-draft-tokens": "SPEC_NUM_DRAFT_TOKENS",
}

# The generated options come first in this order, then the mode's, then the runtime rules'.
ORDER = [
    "--model-path",
    "--speculative-draft-model-path",
    "--tp-size",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--host",
    "--port",
]

# Integer options: (lowest, highest or None).
INTEGERS: dict[str, tuple[int, int | None]] = {
    "--tp-size": (1, None),
    "--pp-size": (1, None),
    "--port": (1, 65535),
    "--nnodes": (1, None),
    "--node-rank": (0, None),
    "--speculative-num-steps": (1, None),
    "--speculative-eagle-topk": (1, None),
    "--speculative-num-draft-tokens": (2, None),
}
_HOST = re.compile(r"^[A-Za-z0-9._:%\[\]-]+$")
# What SGLang's int() and the HEALTHCHECK's URL both read the same way: ASCII digits (int() also takes '+5',
# ' 5', '5_0' and other scripts' digits, which the HEALTHCHECK's URL and a person reading the log do not).
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")
# No option here takes a number of more digits: a longer one is out of range before it is converted (CPython's
# int() refuses more than 4300 digits, and a 4000-digit TP would make a 4000-character error line).
MAX_DIGITS = 9


def _env(environ: Mapping[str, str], name: str) -> str | None:
    """A variable's value; empty counts as unset (compose files write VAR= for 'not set')."""
    return environ.get(name, "").strip() or None


def build(
    spec: EntrypointSpec, mode_name: str, environ: Mapping[str, str], sglang_args: list[str], log: Log
) -> Command:
    """The mode's presets, then the environment over them, then EXTRA_ARGS and `--` over both."""
    mode = spec.modes[mode_name]
    cmd = Command()
    for item in group(list(mode.args), f"preset {mode_name}"):
        cmd.put(item)
    cmd.put(Item(["--host", DEFAULT_HOST], "default"))
    cmd.put(Item(["--port", str(spec.port)], "default"))
    if mode.draft:
        for option, var in TREE_OPTIONS.items():
            if getattr(mode, var.lower()) is not None:
                cmd.put(Item([option, str(getattr(mode, var.lower()))], f"preset {mode_name}"))

    port_text = environ.get("PORT")
    if port_text is not None and not port_text.strip():  # the HEALTHCHECK would probe http://127.0.0.1:/health
        raise UsageError(
            f"PORT={show(port_text)} is empty: the image's HEALTHCHECK reads PORT and would probe port 80",
            f"unset PORT (the image's default is {spec.port}) or give the port, e.g. PORT={spec.port}",
        )
    for var in VARIABLES:
        value = _env(environ, var.name)
        if value is None or var.option is None:
            continue
        if var.option in INTEGERS:  # checked as given: the HEALTHCHECK reads PORT without stripping it
            value = environ[var.name]
        if not mode.draft and (var.name == "DRAFT_MODEL_PATH" or var.option in TREE_OPTIONS):
            log.note(f"{var.name} is ignored in {mode_name} mode")
            continue
        cmd.put(Item([var.option, value], var.name))

    if (extra := _env(environ, "EXTRA_ARGS")) is not None:
        try:
            tokens = shlex.split(extra)
        except ValueError as exc:
            raise UsageError(  # not shown: an unclosed quote may be around a key (errors.SECRETS cannot tell)
                f"EXTRA_ARGS cannot be split like a shell line ({exc}); its {len(extra)} characters are not shown",
                "quote values with spaces, e.g. EXTRA_ARGS=\"--chat-template 'my template.jinja'\"",
            ) from None
        cmd.extra = group(tokens, EXTRA)
    cmd.user = group(list(sglang_args), USER)
    rank = {option: i for i, option in enumerate(ORDER)}
    cmd.base.sort(key=lambda item: rank.get(item.option, len(ORDER)))  # stable: the mode's args keep their order
    return cmd


def _host_ok(value: str) -> bool:
    """A name or an address SGLang (uvicorn) can bind: dotted digits must be an IPv4 address, ':' an IPv6 one.

    No brackets: uvicorn hands the host to getaddrinfo(), which takes `::1` but not `[::1]` (SGLang itself
    brackets an IPv6 host where it builds a URL)."""
    if not _HOST.match(value) or "[" in value or "]" in value:
        return False
    if re.fullmatch(r"[0-9.]+", value) or ":" in value:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return False
    return not value.startswith(("-", ".")) and ".." not in value


def dist_addr_problem(value: str) -> str | None:
    """Why a --dist-init-addr value cannot work, or None. SGLang reads `host:port` (split at ':') or
    `[ipv6]:port` (server_args.py and its configure_ipv6): the host is a name (a Kubernetes leader such as
    sglang-0.sglang.default), an IPv4 address or a bracketed IPv6 one; the port as PORT is read."""
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep or ":" not in host:
            return "an IPv6 node 0 is written [address]:port"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{show(host)} is not an IPv6 address"
    else:
        host, sep, port = value.rpartition(":")
        if not sep or not host:
            return "no host before a ':port'"
        if ":" in host:
            return "an IPv6 node 0 is written in brackets, [address]:port"
        if not _host_ok(host):
            return f"{show(host)} is not a host name or an IPv4 address (each of 4 parts 0-255, no leading zeros)"
    if not _DECIMAL.fullmatch(port) or port.startswith("-") or len(port) > 5 or not 1 <= int(port) <= 65535:
        return f"the port {show(port)} is not a port (1 to 65535 in ASCII digits, no leading zeros)"
    return None


def _integer(item: Item) -> int:
    low, high = INTEGERS[item.option]
    allowed = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    if (value := item.value) is None:
        raise UsageError(f"{item.label()}: {item.option} needs a value", f"allowed: {allowed}")
    if not _DECIMAL.fullmatch(value):
        raise UsageError(
            f"{item.label()} is not an integer written in plain ASCII digits",
            f"allowed: {allowed} (0-9 only: no sign, spaces, leading zeros or other digits)",
        )
    if len(value.lstrip("-")) > MAX_DIGITS:
        raise UsageError(f"{item.label()} is out of range", f"allowed: {allowed} (at most {MAX_DIGITS} digits)")
    number = int(value)
    if number < low or (high is not None and number > high):
        raise UsageError(f"{item.label()} is out of range", f"allowed: {allowed}")
    return number


@dataclass(frozen=True)
class Effective:
    """The values SGLang will use for what the entrypoint checks."""

    tp: int
    pp: int
    nnodes: int
    speculative: str | None
    model: Item | None
    draft: Item | None

    @property
    def gpus_per_node(self) -> int:
        return max(self.tp * self.pp // self.nnodes, 1)


def effective(cmd: Command, spec: EntrypointSpec, mode_name: str, log: Log) -> Effective:
    """Validate the values SGLang will take; raise UsageError naming the source of a bad one."""
    mode = spec.modes[mode_name]
    ints = {option: _integer(item) for option in INTEGERS if (item := cmd.last(option)) is not None}

    host = cmd.last("--host")
    if host is not None and not _host_ok(value := host.value or ""):
        if value.startswith("[") and value.endswith("]") and _host_ok(inner := value[1:-1]) and ":" in inner:
            raise UsageError(
                f"{host.label()}: an IPv6 address in brackets cannot be bound (uvicorn takes it without them)",
                f"allowed: e.g. {inner}, ::, 0.0.0.0 (brackets belong in URLs and DIST_INIT_ADDR=[addr]:port only)",
            )
        raise UsageError(f"{host.label()} is not a host name or address", "allowed: e.g. 0.0.0.0, ::, 10.0.0.5")

    tp, pp = ints.get("--tp-size", 1), ints.get("--pp-size", 1)
    nnodes, node_rank = ints.get("--nnodes", 1), ints.get("--node-rank", 0)
    if node_rank >= nnodes:
        raise UsageError(f"{cmd.last('--node-rank').label()} is out of range", f"allowed: 0 to {nnodes - 1} (NNODES)")
    if (addr := cmd.last("--dist-init-addr")) is not None:
        if (problem := dist_addr_problem(addr.value or "")) is not None:
            raise UsageError(
                f"{addr.label()} is not host:port ({problem})",
                "allowed: host:port of node 0, e.g. 10.0.0.1:5000, sglang-0.sglang.default:5000, [fd00::1]:5000",
            )
    elif nnodes > 1:
        raise UsageError(f"NNODES={nnodes} needs DIST_INIT_ADDR", "the host:port of node 0, the same on every node")
    if (tp * pp) % nnodes:
        raise UsageError(
            f"{cmd.last('--tp-size').label() if cmd.has('--tp-size') else 'TP_SIZE 1'} does not divide over "
            f"{nnodes} nodes",
            "allowed: a multiple of NNODES (each node runs TP_SIZE / NNODES GPUs)",
        )

    if (model := cmd.last("--model-path")) is None or not model.value:
        raise UsageError("MODEL_PATH is not set", "the target model directory, e.g. -e MODEL_PATH=/models/Kimi-K2.5")

    speculative = cmd.value("--speculative-algorithm")
    draft = cmd.last("--speculative-draft-model-path")
    if mode.draft and (draft is None or not draft.value):
        raise UsageError(
            f"{mode_name} needs DRAFT_MODEL_PATH",
            "the EAGLE-3 drafter's directory, e.g. -e DRAFT_MODEL_PATH=/models/Kimi-K2.5-eagle3",
        )
    if speculative in SPEC_ALGORITHMS_WITH_TREE:
        _check_tree(cmd, ints, log)
    return Effective(tp, pp, nnodes, speculative, model, draft)


def _check_tree(cmd: Command, ints: dict[str, int], log: Log) -> None:
    """The draft tree is given whole or not at all (SGLang chooses it only when --speculative-num-steps is unset, and
    then asserts that top-k and draft tokens are unset too; a tree with steps and no top-k fails later). EAGLE's tree
    holds top-k + (steps - 1) * top-k^2 candidates; SGLang picks draft tokens - 1 of them."""
    given = [item for option in TREE_OPTIONS if (item := cmd.last(option)) is not None]
    if given and len(given) < len(TREE_OPTIONS):
        missing = [var for option, var in TREE_OPTIONS.items() if cmd.last(option) is None]
        raise UsageError(
            f"{given[0].label()} sets part of the EAGLE-3 draft tree; {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set",
            "set all three (SPEC_NUM_STEPS, SPEC_EAGLE_TOPK, SPEC_NUM_DRAFT_TOKENS), or none to leave the tree to "
            "SGLang (it takes all three or none)",
        )
    if not given:
        return
    steps, topk, tokens = (ints[option] for option in TREE_OPTIONS)
    if topk == 1:
        if tokens != steps + 1:
            log.note(f"top-k 1: SGLang sets the draft tokens to steps + 1 = {steps + 1} (not {tokens})")
        return
    most = draft_tree_most(steps, topk)
    if tokens > most:
        raise UsageError(
            f"{given[2].label()} is out of range for steps {steps} and top-k {topk}",
            f"allowed: 2 to {most} (1 + top-k + (steps - 1) * top-k^2: the candidates of the draft tree)",
        )
