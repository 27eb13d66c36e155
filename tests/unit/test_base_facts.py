"""The release facts file loads with its placeholders filled, and each kind of fact is judged as it says (T0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120.build import base_facts
from sm120.plan import config as cfg

ROOT = Path(__file__).resolve().parents[2]
FACTS = base_facts.load(cfg.load(ROOT / "build.toml"))


def test_every_fact_is_filled_sourced_and_probed():
    assert FACTS, "no facts"
    for fact in FACTS:
        assert "{" not in "".join(map(str, fact.fields.values())), f"{fact.id}: a placeholder was not filled"
        assert fact.source and fact.why
        if fact.offline is None and fact.kind not in ("env", "entrypoint"):
            assert base_facts.shell_probe(fact), f"{fact.id}: no probe"


def fact(kind: str, **fields) -> base_facts.Fact:
    return base_facts.Fact("t", ("devel",), kind, fields, "why", "src", None)


@pytest.mark.parametrize(
    ("the_fact", "found", "config", "held"),
    [
        (fact("symlink", path="/a", target="t/lib"), "t/lib\n", {}, True),
        (fact("symlink", path="/a", target="t/lib"), "(not a link)", {}, False),
        (fact("resolves", path="/a", to="/b"), "/b\n", {}, True),
        (fact("resolves", path="/a", to="/b"), "/c", {}, False),
        (fact("dir", path="/a"), "link", {}, False),
        (fact("file", path="/a"), "file", {}, True),
        (fact("absent", path="/a"), "present", {}, False),
        (fact("no_command", command="python3"), "/usr/bin/python3", {}, False),
        (
            fact("user", name="ubuntu", uid=1000, gid=1000, home="/home/ubuntu"),
            "ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash",
            {},
            True,
        ),
        (fact("user", name="ubuntu", uid=1000, gid=1000, home="/home/ubuntu"), "missing", {}, False),
        (fact("env", name="A", value="1"), "", {"Env": ["A=1", "B=2"]}, True),
        (fact("env", name="A", value="1"), "", {"Env": ["A=2"]}, False),
        (fact("entrypoint", value=["/e.sh"]), "", {"Entrypoint": ["/e.sh"]}, True),
        (fact("entrypoint", value=["/e.sh"]), "", {"Entrypoint": None}, False),
        (fact("library", soname="libcudart.so.13"), "found", {}, True),
        (fact("python", version="3.12"), "3.11", {}, False),
    ],
)
def test_judge(the_fact, found, config, held):
    assert base_facts.judge(the_fact, found, config)[0] is held
