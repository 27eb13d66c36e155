"""T0: the patch engine on small fake trees and fake patches (real `git apply`, no network)."""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import pytest

from sm120.patches import patching
from sm120.patches.patching import Status
from sm120.plan.config import Patch

ORIGINAL = "".join(f"line {i}\n" for i in range(1, 41))


def make_tree(root: Path, version: str = "1.0", files: dict[str, str] | None = None) -> Path:
    """A site-packages-style tree holding a fake 'sglang' release."""
    info = root / f"sglang-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    for rel, text in (files or {"sglang/mod.py": ORIGINAL}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def diff(rel: str, before: str, after: str, header: str = "fake: a test patch\n\nWhat: edits.\n\n") -> str:
    body = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{rel}", f"b/{rel}", n=3
    )
    return header + "".join(body)


def write_patch(root: Path, name: str, text: str) -> str:
    path = root / "patches" / f"{name}.patch"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path.relative_to(root))


def make_patch(file: str, versions: str = ">=1.0", upstream_check: dict | None = None) -> Patch:
    data = {
        "component": "sglang",
        "summary": "a test patch",
        "upstream": "not upstream",
        "variants": [{"versions": versions, "file": file}],
    }
    if upstream_check is not None:
        data["upstream_check"] = upstream_check
    return Patch.model_validate(data)


def edited(text: str, **replacements: str) -> str:
    for old, new in replacements.items():
        text = text.replace(old.replace("_", " ") + "\n", new + "\n")
    return text


@pytest.fixture
def env(tmp_path: Path):
    """(config root with patches/, tree) for one fake release 1.0."""
    root = tmp_path / "cfg"
    root.mkdir()
    tree = make_tree(tmp_path / "tree")
    return root, tree


def test_applied_check_leaves_tree_alone_and_apply_changes_it(env):
    root, tree = env
    after = edited(ORIGINAL, line_5="line 5 patched", line_30="line 30 patched")
    patch = make_patch(write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, after)))

    results = patching.check(tree, "1.0", [("a", patch)], root=root)
    assert [(r.patch, r.status) for r in results] == [("a", Status.APPLIED)]
    assert (tree / "sglang/mod.py").read_text() == ORIGINAL

    results = patching.apply(tree, "1.0", [("a", patch)], root=root)
    assert [r.status for r in results] == [Status.APPLIED]
    assert (tree / "sglang/mod.py").read_text() == after


def test_conflict_names_file_and_hunk(env):
    root, tree = env
    after = edited(ORIGINAL, line_5="line 5 patched", line_30="line 30 patched")
    patch = make_patch(write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, after)))
    # The release changed the code around the second hunk only.
    (tree / "sglang/mod.py").write_text(edited(ORIGINAL, line_29="line 29 changed upstream"))

    (result,) = patching.check(tree, "1.0", [("a", patch)], root=root)
    assert result.status is Status.CONFLICT
    assert result.file == "sglang/mod.py"
    assert result.hunk is not None and result.hunk.startswith("#2 (@@ -27,7 +27,7 @@)")
    assert "sglang/mod.py: hunk #2 (@@ -27,7 +27,7 @@)" in result.detail


def test_conflict_when_the_file_moved(env):
    root, tree = env
    patch = make_patch(write_patch(root, "a", diff("sglang/gone.py", ORIGINAL, edited(ORIGINAL, line_5="x"))))
    (result,) = patching.check(tree, "1.0", [("a", patch)], root=root)
    assert result.status is Status.CONFLICT
    assert result.file == "sglang/gone.py"
    assert "file missing" in result.detail


def test_already_upstream_is_skipped_not_applied(env):
    root, tree = env
    after = edited(ORIGINAL, line_5="def hook(): pass")
    check = {"path": "sglang/mod.py", "patterns": [r"^def hook\(", r"^line 1$"]}
    patch = make_patch(write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, after)), upstream_check=check)
    # Upstream wrote the same change its own way: the patch would not even apply.
    upstream = edited(ORIGINAL, line_4="def hook(): pass  # upstream", line_5="line 5 upstream")
    (tree / "sglang/mod.py").write_text(upstream)

    (result,) = patching.apply(tree, "1.0", [("a", patch)], root=root)
    assert result.status is Status.ALREADY_UPSTREAM
    assert (tree / "sglang/mod.py").read_text() == upstream


def test_upstream_check_needs_every_pattern_in_every_file(env):
    root, tree = env
    (tree / "sglang/other.py").write_text("has_one = 1\n")
    patch = make_patch(
        write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, edited(ORIGINAL, line_5="x"))),
        upstream_check=[
            {"path": "sglang/mod.py", "patterns": ["^line 1$"]},
            {"path": "sglang/other.py", "patterns": ["has_one", "has_two"]},
        ],
    )
    assert not patching.upstream_has(patch, tree)
    (tree / "sglang/other.py").write_text("has_one = 1\nhas_two = 2\n")
    assert patching.upstream_has(patch, tree)


def test_not_applicable_outside_every_variant(env):
    root, tree = env
    patch = make_patch(write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, edited(ORIGINAL, line_5="x"))), "<1.0")
    (result,) = patching.check(tree, "1.0", [("a", patch)], root=root)
    assert result.status is Status.NOT_APPLICABLE
    assert "<1.0" in result.detail


def test_variant_is_picked_by_version_range(tmp_path: Path):
    root = tmp_path / "cfg"
    old_file = write_patch(root, "old", diff("sglang/mod.py", ORIGINAL, edited(ORIGINAL, line_5="old variant")))
    new_file = write_patch(root, "new", diff("sglang/mod.py", ORIGINAL, edited(ORIGINAL, line_5="new variant")))
    patch = Patch.model_validate(
        {
            "component": "sglang",
            "summary": "s",
            "upstream": "u",
            "variants": [{"versions": "<2.0", "file": old_file}, {"versions": ">=2.0", "file": new_file}],
        }
    )
    for version, expected in (("1.5", "old variant"), ("2.0", "new variant")):
        tree = make_tree(tmp_path / version, version)
        (result,) = patching.apply(tree, version, [("p", patch)], root=root)
        assert (result.status, result.variant) == (Status.APPLIED, old_file if version == "1.5" else new_file)
        assert expected in (tree / "sglang/mod.py").read_text()


def test_never_applied_twice(env):
    root, tree = env
    after = edited(ORIGINAL, line_5="line 5 patched")
    patch = make_patch(write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, after)))
    patching.apply(tree, "1.0", [("a", patch)], root=root)
    (again,) = patching.apply(tree, "1.0", [("a", patch)], root=root)
    assert again.status is Status.ALREADY_APPLIED
    assert (tree / "sglang/mod.py").read_text() == after


def test_patches_see_the_earlier_ones_in_order(env):
    root, tree = env
    first = edited(ORIGINAL, line_5="line 5 first")
    second = edited(first, line_5_first="line 5 second")
    a = make_patch(write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, first)))
    b = make_patch(write_patch(root, "b", diff("sglang/mod.py", first, second)))

    assert [r.status for r in patching.check(tree, "1.0", [("a", a), ("b", b)], root=root)] == [Status.APPLIED] * 2
    # In the other order, b finds the release's text, not a's: a conflict, not a silent pass.
    results = patching.check(tree, "1.0", [("b", b), ("a", a)], root=root)
    assert [r.status for r in results] == [Status.CONFLICT, Status.APPLIED]


def test_apply_is_all_or_nothing(env):
    root, tree = env
    good = make_patch(write_patch(root, "good", diff("sglang/mod.py", ORIGINAL, edited(ORIGINAL, line_5="x"))))
    bad = make_patch(write_patch(root, "bad", diff("sglang/mod.py", "other\n" * 10, "changed\n" * 10)))
    results = patching.apply(tree, "1.0", [("good", good), ("bad", bad)], root=root)
    assert [r.status for r in results] == [Status.APPLIED, Status.CONFLICT]
    assert (tree / "sglang/mod.py").read_text() == ORIGINAL


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no unified diff"),
        ("just a header, no diff\n", "no unified diff"),
        ("--- a/sglang/mod.py\n+++ b/sglang/mod.py\n@@ -1,3 +1,3 @@\n line 1\n-line 2\n", "truncated"),
        ("--- a/sglang/mod.py\n+++ b/sglang/mod.py\n@@ -1,2 +1,2 @@\n line 1\n*line 2\n+x\n", "ends early"),
        ("--- a/sglang/mod.py\n+++ b/sglang/mod.py\n@@ bogus @@\n", "malformed hunk header"),
    ],
)
def test_corrupt_patch_is_a_usage_error_naming_the_file(env, text: str, message: str):
    root, tree = env
    patch = make_patch(write_patch(root, "broken", text))
    with pytest.raises(patching.PatchFileError, match=message) as info:
        patching.check(tree, "1.0", [("broken", patch)], root=root)
    assert "patches/broken.patch" in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("path", ["a/../../etc/passwd", "/etc/passwd"])
def test_a_patch_reaching_outside_the_tree_is_refused(env, path: str):
    root, tree = env
    text = f"--- {path}\n+++ {path}\n@@ -1 +1 @@\n-a\n+b\n"
    patch = make_patch(write_patch(root, "evil", text))
    with pytest.raises(patching.PatchFileError, match="leaves the tree"):
        patching.check(tree, "1.0", [("evil", patch)], root=root)


def test_wrong_release_tree_is_refused(env):
    root, tree = env
    patch = make_patch(write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, edited(ORIGINAL, line_5="x"))))
    with pytest.raises(patching.TreeError, match=r"holds SGLang 1\.0, not 2\.0"):
        patching.check(tree, "2.0", [("a", patch)], root=root)
    with pytest.raises(patching.TreeError, match="no sglang/ package"):
        patching.check(tree.parent, "1.0", [("a", patch)], root=root)


def test_version_from_version_py_when_no_dist_info(tmp_path: Path):
    tree = tmp_path / "t"
    (tree / "sglang").mkdir(parents=True)
    (tree / "sglang" / "_version.py").write_text("__version__ = version = '0.5.10.post1'\n")
    assert patching.tree_version(tree) == "0.5.10.post1"
    patching.verify_tree(tree, "0.5.10-post1")  # the same version, spelled differently


def test_a_tree_inside_a_git_repository_is_still_patched(tmp_path: Path):
    # git apply run inside a repository resolves paths against its top level and would skip the files.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    root = tmp_path / "cfg"
    tree = make_tree(tmp_path / "deep" / "site-packages")
    after = edited(ORIGINAL, line_5="patched")
    patch = make_patch(write_patch(root, "a", diff("sglang/mod.py", ORIGINAL, after)))
    (result,) = patching.apply(tree, "1.0", [("a", patch)], root=root)
    assert result.status is Status.APPLIED
    assert (tree / "sglang/mod.py").read_text() == after
