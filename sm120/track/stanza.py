"""The [tracks."X"] stanza `build.py track add` writes into build.toml: the derived facts (each with its source in a
comment) and every other key of the --from track, marked for review. It goes in as text after the newest track's
block, so the rest of the file (comments, layout) is left byte for byte."""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import tomlkit

from sm120.errors import UsageError
from sm120.plan import tomllib
from sm120.plan.config import RULES, Config
from sm120.track.facts import DERIVED, NOT_COPIED, Derived

WIDTH = 118  # comment lines wrap here (ruff's 120 for the code; build.toml follows it)


def track_data(derived: Derived, source: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, ...]]]:
    """(the new track as TOML data, the key paths copied from `source`, the --from track's raw table): the derived
    facts in `source`'s key order, every other key of `source` copied but NOT_COPIED's."""
    copied: list[tuple[str, ...]] = []

    def merge(prefix: tuple[str, ...], raw: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        # The --from track's keys, then the derived ones it lacks (its own keys first, then its tables').
        lacking = [d[len(prefix)] for d in sorted(derived.facts, key=len) if d[: len(prefix)] == prefix]
        for key in dict.fromkeys([*raw, *lacking]):
            path, value = (*prefix, key), raw.get(key, {})
            if path in NOT_COPIED:
                continue
            if path in derived.facts:
                out[key] = derived.facts[path].value
            elif isinstance(value, dict) and any(d[: len(path)] == path for d in DERIVED):
                out[key] = merge(path, value)
            else:
                out[key] = copy.deepcopy(value)
                copied.append(path)
        return out

    return merge((), source), copied


def ranged_rules(config: Config, version: str, source: str) -> list[str]:
    """What the stanza's notes and the command say of the rules written once: those whose range holds `version`, and
    those that held for the --from track `source` but not for `version` (for review)."""
    takes, ends = [], []
    for key in RULES:
        for i, entry in enumerate(getattr(config, key)):
            label = f"{key}.{i} {entry.what} ({entry.sglang or 'every release'})"
            if entry.holds_for(version):
                takes.append(label)
            elif entry.holds_for(source):
                ends.append(label)
    said = [f"{version} takes these rules of build.toml by their sglang range: {', '.join(takes) or 'none'}"]
    if ends:
        said.append(
            f"review: these held for {source}, not for {version}: {', '.join(ends)}; widen a range where the rule "
            f"still holds, or write an entry for {version}"
        )
    return said


def _comment(text: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(text, WIDTH - 2, break_on_hyphens=False, break_long_words=False)]


def _key(name: str) -> str:
    return tomlkit.key(name).as_string()


def value_text(value: Any) -> str:
    """A value as TOML, tables inline (tomlkit writes the keys and the plain values)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(key)} = {value_text(inner)}" for key, inner in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(value_text, value)) + "]"
    return tomlkit.item(value).as_string()


def _inline(value: Any) -> bool:
    """A small table of plain values is written inline (`install = { release = "pypi", offline = "pypi" }`)."""
    flat = isinstance(value, dict) and all(not isinstance(v, (dict, list)) for v in value.values())
    return flat and len(value) <= 4 and len(value_text(value)) <= 80


def render(version: str, data: dict[str, Any], derived: Derived, copied: list[tuple[str, ...]], source: str) -> str:
    """The stanza's text: a header comment, the track's tables, each key with its source or a review mark."""
    review = _comment(f'review: copied from [tracks."{source}"] (its comments there say why); check it for {version}')
    head = (
        f"SGLang {version}: written by `build.py track add {version}` from PyPI. Each derived fact names its source "
        f'above it; what is marked "review" was copied from [tracks."{source}"] and holds for {version} only once '
        "checked (`build.py track check` runs the T1 checks; the image's verify the rest)."
    )
    lines = [*_comment(head), *(line for note in derived.notes for line in _comment(f"Note: {note}"))]

    def notes(path: tuple[str, ...]) -> list[str]:
        if path in derived.facts:
            return _comment(derived.facts[path].source)
        return review if path in copied else []

    def table(path: tuple[str, ...], data: dict[str, Any], *, aot: bool = False, above=()) -> None:
        """`above`: comment lines a super-table without keys of its own hands to its first table."""
        header = ".".join(["tracks", _key(version), *(_key(p) for p in path)])
        above = [*above, *notes(path)]
        plain, nested = [], []
        for key, value in data.items():
            sub = (*path, key)
            facts_under = any(len(d) > len(sub) and d[: len(sub)] == sub for d in derived.facts)
            tables = isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
            if (isinstance(value, dict) and not aot and (facts_under or not _inline(value))) or tables:
                nested.append((key, value))
            else:
                plain.append((key, value))
        if plain or not nested or aot or not path or not isinstance(nested[0][1], dict):
            # (otherwise it has no keys of its own, as [tracks."X".presets]: its tables' headers define it)
            lines.extend([*above, f"[[{header}]]" if aot else f"[{header}]"])
            above = []
        for key, value in plain:
            lines.extend([] if aot else notes((*path, key)))
            lines.append(f"{_key(key)} = {value_text(value)}")
        for n, (key, value) in enumerate(nested):
            if n or lines[-1:] != [""]:
                lines.append("")
            if isinstance(value, dict):
                table((*path, key), value, above=above)
                above = []
            else:  # an array of tables: each entry marked (a runtime rule, a fix-up, ... is reviewed one by one)
                for i, entry in enumerate(value):
                    lines.extend([""] if i else [])
                    table((*path, key), entry, aot=True)

    table((), data)
    return "\n".join(lines) + "\n"


def _headers(lines: list[str]) -> list[tuple[int, str | None]]:
    """(line index, the track it belongs to or None) of every table header: a line that is a TOML document alone
    (`[tracks."X".y]  # comment`), after the text before it, which is a whole document too (else the line is inside a
    multi-line value)."""
    out = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("["):
            continue
        try:
            header = tomllib.loads(line)
            tomllib.loads("".join(lines[:i]))
        except tomllib.TOMLDecodeError:
            continue
        tracks = header.get("tracks")
        out.append((i, next(iter(tracks), None) if isinstance(tracks, dict) else None))
    return out


def track_span(text: str, version: str) -> tuple[int, int]:
    """(first, end) line indices of the last contiguous run of `version`'s tables: from its header to its last key
    line (comments and blank lines before the next table belong to that table)."""
    lines = text.splitlines(keepends=True)
    headers = _headers(lines)
    ours = [n for n, (_, track) in enumerate(headers) if track == version]
    if not ours:
        raise UsageError(f'build.toml has no [tracks."{version}"] table')
    first = last = ours[-1]
    while first and headers[first - 1][1] == version:
        first -= 1
    end = headers[last + 1][0] if last + 1 < len(headers) else len(lines)
    while end > headers[last][0] + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return headers[first][0], end


def insert(text: str, after: str, stanza: str) -> str:
    """`text` with `stanza` after the block of track `after`, separated by one blank line."""
    lines = text.splitlines(keepends=True)
    _, end = track_span(text, after)
    if end and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    return "".join([*lines[:end], "\n", stanza, *lines[end:]])
