"""SGLang options as items that remember where they came from, and the precedence between them (docs/configuration.md).
Items are found as argparse reads them: an option starts at a token that begins with '-' (not a negative number)."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

from .errors import UsageError, show

# SGLang's aliases for the options this entrypoint sets (identical in 0.5.9 and 0.5.23).
ALIASES = {
    "--model": "--model-path",
    "--speculative-draft-model": "--speculative-draft-model-path",
    "--tensor-parallel-size": "--tp-size",
    "--pipeline-parallel-size": "--pp-size",
    "--nccl-init-addr": "--dist-init-addr",
}

# The SGLang options the entrypoint sets, reads or checks (used when the installed SGLang's list is unknown).
RELIED_ON = frozenset(
    {
        *ALIASES,
        *ALIASES.values(),
        "--host",
        "--port",
        "--nnodes",
        "--node-rank",
        "--speculative-algorithm",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--quantization",
        "--config",
        "--moe-runner-backend",
        "--enable-torch-symm-mem",
        "--enable-flashinfer-allreduce-fusion",
    }
)

_NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d*)?([eE][-+]?\d+)?$")

USER = "argument after --"
EXTRA = "EXTRA_ARGS"
WHERE = {USER: "after --", EXTRA: "in EXTRA_ARGS"}  # the user's layers, as a message names them


def is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


def canonical(token: str) -> str:
    name = token.split("=", 1)[0]
    return ALIASES.get(name, name)


@dataclass
class Item:
    """One option with its values, e.g. ['--tp-size', '8'] or ['--port=30000'], and its source."""

    tokens: list[str]
    source: str  # an environment variable, EXTRA_ARGS, USER, "preset <mode>", "rule <name>", "default"

    @property
    def option(self) -> str:
        return canonical(self.tokens[0])

    @property
    def values(self) -> list[str]:
        head = self.tokens[0]
        inline = [head.split("=", 1)[1]] if head.startswith("--") and "=" in head else []
        return inline + self.tokens[1:]

    @property
    def value(self) -> str | None:
        return next(iter(self.values), None)

    def label(self) -> str:
        """Where the value came from, as an error message names it."""
        value = self.value
        spelled = self.tokens[0].split("=", 1)[0] + (f" {show(value)}" if value is not None else "")
        if self.source != EXTRA and self.source.isupper():  # an environment variable
            return f"{self.source}={show(value)}"
        return f"{spelled} ({WHERE.get(self.source, self.source)})"


def group(tokens: list[str], source: str) -> list[Item]:
    """Tokens -> items; a value before any option is a mistake (SGLang takes no positional arguments)."""
    items: list[Item] = []
    where = "after --" if source == USER else source
    for token in tokens:
        if token == "--":
            raise UsageError(
                f"{where}: a second '--' (argparse would end SGLang's options there)",
                "give SGLang's options after the first -- only, e.g. `eagle3 -- --mem-fraction-static 0.85`",
            )
        if is_option(token):
            items.append(Item([token], source))
        elif items:
            items[-1].tokens.append(token)
        else:
            raise UsageError(
                f"{where}: {show(token)} is not an option",
                "SGLang takes options only, e.g. --mem-fraction-static 0.85",
            )
    return items


@dataclass
class Command:
    """The SGLang command being assembled: generated items (presets, then environment), EXTRA_ARGS, `--`."""

    base: list[Item] = field(default_factory=list)
    extra: list[Item] = field(default_factory=list)
    user: list[Item] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # what runtime rules add to the environment

    def put(self, item: Item) -> None:
        """Add a generated item; one for the same option is replaced in place (the environment over a preset)."""
        for i, old in enumerate(self.base):
            if old.option == item.option:
                self.base[i] = item
                return
        self.base.append(item)

    def overriding(self, option: str) -> Item | None:
        """The user's item (after `--`, else EXTRA_ARGS) that names this option, if any."""
        return next((i for layer in (self.user, self.extra) for i in reversed(layer) if i.option == option), None)

    def items(self) -> list[Item]:
        named = {i.option for i in self.user}
        extra = [i for i in self.extra if i.option not in named]
        named |= {i.option for i in extra}
        return [i for i in self.base if i.option not in named] + extra + self.user

    def argv(self) -> list[str]:
        return [token for item in self.items() for token in item.tokens]

    def last(self, option: str) -> Item | None:
        """The item whose value SGLang will use for this option (argparse keeps the last one)."""
        return next((i for i in reversed(self.items()) if i.option == option), None)

    def value(self, option: str) -> str | None:
        item = self.last(option)
        return item.value if item else None

    def has(self, option: str) -> bool:
        return self.last(option) is not None


def check_spelling(cmd: Command, known: Collection[str], version: str | None) -> None:
    """Refuse an option spelled as a prefix of SGLang options: argparse would take it as an abbreviation, which
    the checks here would not see (`--tp 4` is `--tp-size 4`). Against the installed SGLang's options, else
    RELIED_ON."""
    options = frozenset(known) or RELIED_ON
    whose = f"SGLang {version}" if version and known else "SGLang"
    for item in [*cmd.base, *cmd.extra, *cmd.user]:
        name = item.tokens[0].split("=", 1)[0]
        if not name.startswith("--") or name in options:
            continue
        if not (longer := sorted(o for o in options if o.startswith(name))):
            continue  # not an abbreviation; SGLang's parser says whether it is an option at all
        if len(longer) == 1:
            what = f"an abbreviation of {longer[0]}"
        else:
            more = ", ..." if len(longer) > 3 else ""
            what = f"an abbreviation of {len(longer)} options ({', '.join(longer[:3])}{more})"
        raise UsageError(
            f"{item.label()}: {name} is {what}; the checks here would not see it",
            f"spell {whose}'s options in full, e.g. {longer[0]}" + (f" {item.value}" if item.value else ""),
        )


def check_preset(args: list[str], source: str) -> None:
    """What the entrypoint refuses in a preset at every start, checked on its args alone for `build.py plan` (no
    image is built that cannot start): a word where an option goes, a second '--', an abbreviation."""
    check_spelling(Command(base=group(list(args), source)), (), None)
