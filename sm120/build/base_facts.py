"""The release bases' facts (docker/base/release-facts.toml), with build.toml's values filled in, and their check on
an image: held, broken (with what was found), or not reproduced offline (with the file's reason). `build.py base`
checks the offline bases after making them; tests/image_meta/test_base_facts.py checks each fact.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sm120.errors import UsageError
from sm120.plan import ROOT, image_plan, tomllib
from sm120.plan.plan_types import cuda_minor

if TYPE_CHECKING:
    from sm120.plan.config import Config

FACTS_FILE = ROOT / "docker" / "base" / "release-facts.toml"
Flavour = Literal["devel", "runtime"]
KINDS = {"symlink", "resolves", "dir", "file", "absent", "no_command", "user", "env", "entrypoint", "library", "python"}


@dataclass(frozen=True)
class Fact:
    id: str
    images: tuple[str, ...]
    kind: str
    fields: dict[str, Any]
    why: str
    source: str
    offline: str | None  # why the offline bases cannot reproduce it; None = they must

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]


@dataclass(frozen=True)
class Outcome:
    fact: Fact
    status: Literal["held", "broken", "not reproduced"]
    detail: str = ""


def load(config: Config, path: Path = FACTS_FILE) -> list[Fact]:
    try:
        text = path.read_text(encoding="utf-8")  # the placeholders filled in before it is parsed (the file's header)
        text = text.replace("{cuda}", cuda_minor(config.cuda.version)).replace("{cuda_version}", config.cuda.version)
        raw = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path.name}: cannot read the facts ({exc})") from None
    facts = []
    for i, entry in enumerate(raw.get("facts", [])):
        entry = dict(entry)
        try:
            fact_id, kind, images, why, source = [entry.pop(key) for key in ("id", "kind", "images", "why", "source")]
        except KeyError as exc:
            raise UsageError(f"{path.name}: facts.{i} has no {exc.args[0]!r}") from None
        if kind not in KINDS:
            raise UsageError(
                f"{path.name}: facts.{i} ({fact_id}): kind {kind!r} is not one of {', '.join(sorted(KINDS))}"
            )
        if not set(images) <= {"devel", "runtime"}:
            raise UsageError(f"{path.name}: facts.{i} ({fact_id}): images must be 'devel' and/or 'runtime'")
        offline = entry.pop("offline", None)
        facts.append(Fact(fact_id, tuple(images), kind, entry, why, source, offline))
    return facts


# A /bin/sh line per kind that prints what the base has for a fact (env and entrypoint: read from the image's
# config), its fields shell-quoted; what the line prints when the fact holds, for the kinds judged by that alone.
PROBES = {
    "symlink": "if [ -L {path} ]; then readlink {path}; else echo '(not a link)'; fi",
    "resolves": "readlink -f {path} || echo '(does not resolve)'",
    "dir": "if [ -d {path} ] && [ ! -L {path} ]; then echo dir; elif [ -L {path} ]; then echo link; "
    "else echo missing; fi",
    "file": "if [ -f {path} ]; then echo file; else echo missing; fi",
    "absent": "if [ -e {path} ] || [ -L {path} ]; then echo present; else echo absent; fi",
    "no_command": "command -v {command} || echo absent",
    "user": "getent passwd {name} || echo missing",
    "library": "ldconfig -p | grep -F -q {soname_} && echo found || echo missing",
    "python": "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null || echo none",
}
HOLDS = {"dir": "dir", "file": "file", "absent": "absent", "library": "found"}


def shell_probe(fact: Fact) -> str | None:
    """A /bin/sh line that prints what the base has for this fact (None: read from the image's config)."""
    fields = {k: shlex.quote(str(v)) for k, v in fact.fields.items()}
    if "soname" in fact.fields:  # matched with the space after it in ldconfig's list
        fields["soname_"] = shlex.quote(fact["soname"] + " ")
    return PROBES[fact.kind].format(**fields) if fact.kind in PROBES else None


def judge(fact: Fact, found: str, image_config: dict[str, Any]) -> tuple[bool, str]:
    """(held?, what was found) for a fact, given the probe's output and the image's configuration."""
    found = found.strip()
    kind = fact.kind
    if kind in HOLDS:
        return found == HOLDS[kind], found
    if kind == "symlink":
        return found == fact["target"], f"link to {found!r}" if found != "(not a link)" else found
    if kind == "resolves":
        return found == fact["to"], f"resolves to {found!r}"
    if kind == "no_command":
        return found == "absent", f"on PATH: {found}" if found != "absent" else found
    if kind == "user":
        parts = found.split(":")
        if len(parts) < 6:
            return False, "no such account"
        want = (fact["name"], str(fact["uid"]), str(fact["gid"]), fact["home"])
        have = (parts[0], parts[2], parts[3], parts[5])
        return have == want, f"{parts[0]} uid {parts[2]} gid {parts[3]} home {parts[5]}"
    if kind == "python":
        return found == fact["version"], f"python3 {found}"
    if kind == "env":
        have = dict(item.split("=", 1) for item in image_config.get("Env") or [] if "=" in item).get(fact["name"])
        return have == fact["value"], f"{fact['name']}={have!r}"
    if kind == "entrypoint":
        have = image_config.get("Entrypoint") or []
        return list(have) == list(fact["value"]), f"ENTRYPOINT {have!r}"
    raise AssertionError(kind)


def check(client: Any, image: str, flavour: Flavour, facts: list[Fact]) -> list[Outcome]:
    """Every fact for this flavour of base, checked on `image` (one short-lived container, no network)."""
    mine = [f for f in facts if flavour in f.images]
    image_config = client.images.get(image).attrs.get("Config") or {}
    probes = {f.id: shell_probe(f) for f in mine if f.offline is None}
    script = "; ".join(f"echo {shlex.quote('@@fact ' + fid)}; {probe}" for fid, probe in probes.items() if probe)
    out = ""
    if script:
        out = image_plan.output(
            client, image, "base", command=["-c", script], entrypoint=["/bin/sh"], user="root", network_disabled=True
        ).decode(errors="replace")
    parts = re.split(r"^@@fact (.*)$", out, flags=re.M)  # [before, id, its output, id, its output, ...]
    found = dict(zip(parts[1::2], parts[2::2], strict=True))
    outcomes = []
    for fact in mine:
        if fact.offline is not None:
            outcomes.append(Outcome(fact, "not reproduced", fact.offline))
            continue
        held, detail = judge(fact, found.get(fact.id, ""), image_config)
        outcomes.append(Outcome(fact, "held" if held else "broken", detail))
    return outcomes
