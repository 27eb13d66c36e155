"""pytest imports a test module of a folder without __init__.py by its base name alone (rootdir-based `prepend`
import mode): two such modules with one name stop the whole run at collection ("import file mismatch")."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_top_level_test_modules_share_a_name():
    by_name: dict[str, list[str]] = defaultdict(list)
    for module in TESTS.rglob("test_*.py"):
        if not (module.parent / "__init__.py").exists():
            by_name[module.name].append(str(module.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"test modules that pytest cannot import side by side (rename one): {clashes}"
