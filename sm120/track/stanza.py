"""The [tracks."X"] stanza `build.py track add` writes into build.toml.

The stanza is the derived facts (sm120/track/facts.py, each with its source in a comment) and every other key of
the --from track, copied as it is and marked for review; the rules written once ([[runtime]], [[left_out]],
[[not_shipped]]) are not copied: a note names those whose range holds the new version, and marks for review those
that held for the --from track and not for it. It goes into build.toml as text, after the newest track's
block: the rest of the file (comments, layout) is left byte for byte. Before the file is replaced, the result must
parse to the old file plus exactly this track, load (sm120.plan.config.load) and resolve a plan for every profile; it
is written to a temporary file beside build.toml and moved over it in one step, so a refusal leaves no half
stanza behind.
"""

from __future__ import annotations

import copy
import re
import sys
import textwrap
from collections.abc import Iterable
from typing import Any

import tomlkit

from sm120.errors import UsageError
from sm120.plan.config import RULES, Config
from sm120.track.facts import DERIVED, NOT_COPIED, Derived

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

WIDTH = 118  # comment lines wrap here (ruff's 120 for the code; build.toml follows it)


# ---------------------------------------------------------------------------------------------------
# The track's data: derived facts in the --from track's key order, the rest copied
# ---------------------------------------------------------------------------------------------------


def track_data(derived: Derived, source: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, ...]]]:
    """(the new track as TOML data, the key paths copied from `source`, the --from track's raw table): the derived
    facts in `source`'s key order, every other key of `source` copied but NOT_COPIED's."""
    copied: list[tuple[str, ...]] = []

    def merge(prefix: tuple[str, ...], raw: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in raw.items():
            path = (*prefix, key)
            if path in NOT_COPIED:
                continue
            if path in derived.facts:
                out[key] = derived.facts[path].value
            elif isinstance(value, dict) and any(d[: len(path)] == path for d in DERIVED):
                out[key] = merge(path, value)
            else:
                out[key] = copy.deepcopy(value)
                copied.append(path)
        for path, fact in derived.facts.items():  # derived keys the --from track lacks
            if path[:-1] == prefix and path[-1] not in out:
                out[path[-1]] = fact.value
        for sub in {d[len(prefix)] for d in DERIVED if len(d) > len(prefix) + 1 and d[: len(prefix)] == prefix}:
            if sub not in out:
                out[sub] = merge((*prefix, sub), {})
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


# ---------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------


def _comment(text: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(text, WIDTH - 2, break_on_hyphens=False, break_long_words=False)]


def _key(name: str) -> str:
    return tomlkit.key(name).as_string()


def _item(value: Any) -> Any:
    if isinstance(value, dict):
        table = tomlkit.inline_table()
        for key, inner in value.items():
            table.append(key, _item(inner))
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        for inner in value:
            array.append(_item(inner))
        return array
    return tomlkit.item(value)


def value_text(value: Any) -> str:
    """A value as TOML (tables inline), written by tomlkit."""
    return _item(value).as_string()


def _inline(value: Any) -> bool:
    """A small table of plain values is written inline (`install = { release = "pypi", offline = "pypi" }`)."""
    flat = isinstance(value, dict) and all(not isinstance(v, (dict, list)) for v in value.values())
    return flat and len(value) <= 4 and len(value_text(value)) <= 80


def _is_aot(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


class _Writer:
    def __init__(self, version: str, derived: Derived, copied: Iterable[tuple[str, ...]], source_track: str) -> None:
        self.version = version
        self.derived = derived
        self.copied = set(copied)
        self.review = (
            f'review: copied from [tracks."{source_track}"] (its comments there say why); check it for {version}'
        )
        self.lines: list[str] = []

    def notes(self, path: tuple[str, ...]) -> list[str]:
        if path in self.derived.facts:
            return _comment(self.derived.facts[path].source)
        if path in self.copied:
            return _comment(self.review)
        return []

    def table(
        self, path: tuple[str, ...], data: dict[str, Any], *, aot: bool = False, notes: bool = True, above=()
    ) -> None:
        """`above`: comment lines a super-table without keys of its own hands to its first table."""
        header = ".".join(["tracks", _key(self.version), *(_key(p) for p in path)])
        above = [*above, *(self.notes(path) if notes else [])]
        plain, nested = [], []
        for key, value in data.items():
            sub = (*path, key)
            facts_under = any(len(d) > len(sub) and d[: len(sub)] == sub for d in self.derived.facts)
            if (isinstance(value, dict) and not aot and (facts_under or not _inline(value))) or _is_aot(value):
                nested.append((key, value))
            else:
                plain.append((key, value))
        if not plain and nested and not aot and path and isinstance(nested[0][1], dict):
            pass  # no keys of its own ([tracks."X".presets] holds only tables): its tables' headers define it
        else:
            self.lines += above
            above = []
            self.lines.append(f"[[{header}]]" if aot else f"[{header}]")
        for key, value in plain:
            if not aot:
                self.lines += self.notes((*path, key))
            self.lines.append(f"{_key(key)} = {value_text(value)}")
        for n, (key, value) in enumerate(nested):
            if n or self.lines[-1:] != [""]:
                self.lines.append("")
            if isinstance(value, dict):
                self.table((*path, key), value, above=above)
                above = []
            else:  # an array of tables: each entry marked (a runtime rule, a fix-up, ... is reviewed one by one)
                for i, entry in enumerate(value):
                    if i:
                        self.lines.append("")
                    self.lines += self.notes((*path, key))
                    self.table((*path, key), entry, aot=True, notes=False)


def render(version: str, data: dict[str, Any], derived: Derived, copied: list[tuple[str, ...]], source: str) -> str:
    """The stanza's text: a header comment, the track's tables, each key with its source or a review mark."""
    writer = _Writer(version, derived, copied, source)
    head = (
        f"SGLang {version}: written by `build.py track add {version}` from PyPI. Each derived fact names its source "
        f'above it; what is marked "review" was copied from [tracks."{source}"] and holds for {version} only once '
        "checked (`build.py track check` runs the T1 checks; the image's verify the rest)."
    )
    writer.lines += _comment(head)
    for note in derived.notes:
        writer.lines += _comment(f"Note: {note}")
    writer.table((), data, notes=False)
    return "\n".join(writer.lines) + "\n"


# ---------------------------------------------------------------------------------------------------
# Where the stanza goes: after the newest track's block, as text
# ---------------------------------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[\[?\s*(?P<key>[^\[\]]+?)\s*\]\]?\s*(#.*)?$")
_TRACK = re.compile(r"""^tracks\s*\.\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[A-Za-z0-9_-]+))\s*(\.|$)""")


def _headers(lines: list[str]) -> list[tuple[int, str | None]]:
    """(line index, the track it belongs to or None) of every table header. A line that looks like one inside a
    multi-line value is not one: the text before a real header is a whole TOML document."""
    out = []
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if not m:
            continue
        try:
            tomllib.loads("".join(lines[:i]))
        except tomllib.TOMLDecodeError:
            continue
        t = _TRACK.match(m.group("key"))
        out.append((i, None if t is None else (t.group("dq") or t.group("sq") or t.group("bare"))))
    return out


def track_span(text: str, version: str) -> tuple[int, int]:
    """(first, end) line indices of the last contiguous run of `version`'s tables: from its header to its last key
    line (comments and blank lines before the next table belong to that table)."""
    lines = text.splitlines(keepends=True)
    headers = _headers(lines)
    span = None
    for n, (i, track) in enumerate(headers):
        if track != version:
            continue
        if span is None or n == 0 or headers[n - 1][1] != version:
            span = [i, i]
        stop = headers[n + 1][0] if n + 1 < len(headers) else len(lines)
        end = stop
        while end > i + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
            end -= 1
        span[1] = end
    if span is None:
        raise UsageError(f'build.toml has no [tracks."{version}"] table')
    return span[0], span[1]


def insert(text: str, after: str, stanza: str) -> str:
    """`text` with `stanza` after the block of track `after`, separated by one blank line."""
    lines = text.splitlines(keepends=True)
    _, end = track_span(text, after)
    if end and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    return "".join([*lines[:end], "\n", stanza, *lines[end:]])
