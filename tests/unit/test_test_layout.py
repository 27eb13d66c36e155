"""The test files' names: unique, and after their subject.

pytest imports a test module of a folder without __init__.py by its base name alone (rootdir-based `prepend`
import mode): two such modules with one name stop the whole run at collection ("import file mismatch"). A file is
named after what it tests (docs/architecture.md, "Where to add a test"), never after a review round or an issue: a
new case goes beside the other tests of its command or module."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
BY_ROUND = re.compile(r"(round|issue|review)_?[0-9]", re.IGNORECASE)


def test_no_two_top_level_test_modules_share_a_name():
    by_name: dict[str, list[str]] = defaultdict(list)
    for module in TESTS.rglob("test_*.py"):
        if not (module.parent / "__init__.py").exists():
            by_name[module.name].append(str(module.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"test modules that pytest cannot import side by side (rename one): {clashes}"


def test_test_modules_are_named_after_their_subject():
    named = sorted(str(m.relative_to(TESTS)) for m in TESTS.rglob("test_*.py") if BY_ROUND.search(m.stem))
    assert not named, f"test modules named after a round or an issue (name each after what it tests): {named}"
