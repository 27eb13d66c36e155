"""T0: `build.py patches check|apply|matrix` as a user runs it, on fake trees (no network): output lines, exit
status, one-line errors without a traceback; `apply --dest` that cannot be a tree (a file, under a file, read-only)
is found before any write."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sm120.errors import UsageError
from sm120.patches import pypi
from tests.helpers import ROOT, run_build_py, run_cli, unshare_or_skip
from tests.unit.test_cli import assert_usage, touch
from tests.unit.test_patching import ORIGINAL, diff, edited, make_tree

AFTER = edited(ORIGINAL, line_5="line 5 patched", line_30="line 30 patched")

FAKE_SECTION = """
[patches.fake-a]
component = "sglang"
summary = "a fake patch for the CLI tests"
upstream = "not upstream"
upstream_check = {{ path = "sglang/mod.py", patterns = ["^def upstream_hook"] }}

[[patches.fake-a.variants]]
versions = "{versions}"
file = "patches/fake/a.patch"
"""


def write_config(tmp_path: Path, patch_text: str, versions: str = ">=0.1,<0.2") -> Path:
    """The real build.toml plus one fake sglang patch, and the patch files it names, under tmp_path/cfg."""
    root = tmp_path / "cfg"
    shutil.copytree(ROOT / "patches", root / "patches")
    (root / "patches" / "fake").mkdir()
    (root / "patches" / "fake" / "a.patch").write_text(patch_text)
    config = root / "build.toml"
    config.write_text((ROOT / "build.toml").read_text() + FAKE_SECTION.format(versions=versions))
    return config


def lines_for(stdout: str, patch: str = "fake-a") -> list[str]:
    return [line for line in stdout.splitlines() if patch in line]


def assert_one_line_error(proc, *, code: int, contains: list[str]) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("build.py")]
    assert len(errors) == 1, proc.stderr
    for text in contains:
        assert text in errors[0], errors[0]


@pytest.fixture
def build_py(capsys):
    """build.py's main in this process, its answer as a process's (a process adds only the interpreter's start; a
    check, a conflict, an apply twice and the read-only mounts below run build.py as one)."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        rc, out, err = run_cli(capsys, *args)
        return subprocess.CompletedProcess(args, rc, out, err)

    return run


@pytest.fixture
def good(tmp_path: Path) -> tuple[Path, Path]:
    return write_config(tmp_path, diff("sglang/mod.py", ORIGINAL, AFTER)), make_tree(tmp_path / "tree", "0.1.0")


def test_check_prints_one_line_per_patch(good):
    config, tree = good
    proc = run_build_py("patches", "check", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree))
    assert proc.returncode == 0, proc.stderr
    assert lines_for(proc.stdout) == ["fake-a: applied (patches/fake/a.patch)"]
    # No variant of the real patches covers 0.1.0.
    assert "kimi-k25-eagle3-delegation: not applicable" in proc.stdout
    assert (tree / "sglang/mod.py").read_text() == ORIGINAL


def test_conflict_exits_1_with_one_line_naming_release_patch_file_and_hunk(good):
    config, tree = good
    (tree / "sglang/mod.py").write_text(edited(ORIGINAL, line_31="line 31 changed upstream"))
    proc = run_build_py("patches", "check", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree))
    assert_one_line_error(
        proc, code=1, contains=["sglang 0.1.0", "fake-a", "sglang/mod.py", "hunk #2 (@@ -27,7 +27,7 @@)"]
    )
    (line,) = lines_for(proc.stdout)
    assert line.startswith("sglang 0.1.0: fake-a: conflict: sglang/mod.py: hunk #2")


def test_apply_in_place_then_again_is_a_no_op(good):
    config, tree = good
    args = [
        "patches",
        "apply",
        "--config",
        str(config),
        "--sglang",
        "0.1.0",
        "--source",
        str(tree),
        "--dest",
        str(tree),
    ]
    first = run_build_py(*args)
    assert first.returncode == 0, first.stderr
    assert lines_for(first.stdout) == ["fake-a: applied (patches/fake/a.patch)"]
    assert (tree / "sglang/mod.py").read_text() == AFTER
    second = run_build_py(*args)
    assert second.returncode == 0, second.stderr
    assert lines_for(second.stdout) == ["fake-a: already applied (the tree has this patch)"]
    assert (tree / "sglang/mod.py").read_text() == AFTER


def test_apply_to_a_new_folder_leaves_the_source_alone(build_py, good, tmp_path: Path):
    config, tree = good
    dest = tmp_path / "out" / "site-packages"
    proc = build_py(
        "patches", "apply", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree), "--dest", str(dest)
    )
    assert proc.returncode == 0, proc.stderr
    assert (dest / "sglang/mod.py").read_text() == AFTER
    assert (dest / "sglang-0.1.0.dist-info" / "METADATA").exists()
    assert (tree / "sglang/mod.py").read_text() == ORIGINAL


def test_apply_with_a_conflict_writes_nothing(build_py, good, tmp_path: Path):
    config, tree = good
    (tree / "sglang/mod.py").write_text(edited(ORIGINAL, line_4="changed"))
    dest = tmp_path / "out"
    proc = build_py(
        "patches", "apply", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree), "--dest", str(dest)
    )
    assert_one_line_error(proc, code=1, contains=["sglang 0.1.0", "fake-a", "sglang/mod.py", "hunk #1"])
    assert not (dest / "sglang").exists()


def test_apply_refuses_a_tree_of_another_release(build_py, good):
    config, tree = good
    proc = build_py(
        "patches", "apply", "--config", str(config), "--sglang", "0.1.1", "--source", str(tree), "--dest", str(tree)
    )
    assert_one_line_error(proc, code=2, contains=["holds SGLang 0.1.0, not 0.1.1"])
    assert (tree / "sglang/mod.py").read_text() == ORIGINAL


def test_apply_refuses_a_non_empty_destination(build_py, good, tmp_path: Path):
    config, tree = good
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "something").write_text("x")
    proc = build_py(
        "patches", "apply", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree), "--dest", str(dest)
    )
    assert_one_line_error(proc, code=2, contains=["--dest", "not empty"])


def test_corrupt_patch_file_exits_2_naming_it(build_py, tmp_path: Path):
    config = write_config(tmp_path, "--- a/sglang/mod.py\n+++ b/sglang/mod.py\n@@ -1,3 +1,3 @@\n line 1\n")
    tree = make_tree(tmp_path / "tree", "0.1.0")
    proc = build_py("patches", "check", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree))
    assert_one_line_error(proc, code=2, contains=["patches/fake/a.patch", "truncated"])


def test_upstream_release_reports_already_upstream(build_py, good):
    config, tree = good
    (tree / "sglang/mod.py").write_text("def upstream_hook():\n    pass\n")
    proc = build_py("patches", "check", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree))
    assert proc.returncode == 0, proc.stderr
    assert lines_for(proc.stdout) == ["fake-a: already upstream (not upstream)"]


@pytest.mark.parametrize("version", ["banana", "0.5.9; rm -rf /", ""])
def test_a_version_that_is_not_a_version_is_a_usage_error(build_py, good, version: str):
    config, tree = good
    proc = build_py("patches", "check", "--config", str(config), "--sglang", version, "--source", str(tree))
    assert_one_line_error(proc, code=2, contains=["is not a version"])


def test_missing_source_folder(build_py, good, tmp_path: Path):
    config, _tree = good
    missing = tmp_path / "nope"
    proc = build_py(
        "patches",
        "apply",
        "--config",
        str(config),
        "--sglang",
        "0.1.0",
        "--source",
        str(missing),
        "--dest",
        str(missing),
    )
    assert_one_line_error(proc, code=2, contains=["no such directory"])


def apply_to(build_py, config: Path, tree: Path, dest: Path | str) -> subprocess.CompletedProcess[str]:
    args = ["patches", "apply", "--config", str(config), "--sglang", "0.1.0", "--source", str(tree)]
    return build_py(*args, "--dest", str(dest))


DESTS = [
    ("a-file", lambda tmp: touch(tmp / "f"), ["--dest", "a file, not a folder"]),
    ("under-a-file", lambda tmp: touch(tmp / "f") / "sub", ["--dest", "cannot be created", "Not a directory"]),
    ("in-proc", lambda tmp: Path("/proc/sm120-no-such/dest"), ["--dest /proc/sm120-no-such/dest", "cannot be created"]),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in DESTS], ids=[c[0] for c in DESTS])
def test_apply_to_a_dest_that_cannot_be_a_tree(build_py, good, tmp_path, make, expected):
    config, tree = good
    proc = apply_to(build_py, config, tree, make(tmp_path))
    assert_usage(proc.returncode, proc.stderr, *expected)


@pytest.mark.parametrize("in_place", [False, True], ids=["new-folder", "in-place"])
def test_apply_to_a_read_only_dest(good, tmp_path, in_place):
    """A read-only folder (a real read-only bind mount: root writes through chmod) is found before any write."""
    unshare = unshare_or_skip()
    config, tree = good
    dest = tree if in_place else tmp_path / "ro"
    dest.mkdir(exist_ok=True)
    before = (tree / "sglang" / "mod.py").read_text()
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    argv = [sys.executable, str(ROOT / "build.py"), "patches", "apply", "--config", str(config), "--sglang", "0.1.0"]
    argv += ["--source", str(tree), "--dest", str(dest)]
    proc = subprocess.run(
        [*unshare, "sh", "-c", script, "sh", str(dest), *argv], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert_usage(proc.returncode, proc.stderr, f"--dest {dest}: cannot write into it", "Read-only file system")
    assert (tree / "sglang" / "mod.py").read_text() == before


# --- PyPI side without the network -----------------------------------------------------------------

FAKE_RELEASES = {
    "0.5.8": [{"filename": "sglang-0.5.8-py3-none-any.whl"}],
    "0.5.9": [{"filename": "sglang-0.5.9-py3-none-any.whl"}],
    "0.5.10rc0": [{"filename": "sglang-0.5.10rc0-py3-none-any.whl"}],
    "0.5.10": [{"filename": "sglang-0.5.10-py3-none-any.whl"}],
    "0.5.10.post1": [{"filename": "sglang-0.5.10.post1-py3-none-any.whl"}],
    "0.5.11": [{"filename": "sglang-0.5.11-py3-none-any.whl", "yanked": True}],
    "0.5.12": [],
    "0.5.23": [
        {"filename": f"sglang-0.5.23-{tag}.whl", "url": f"../../p/{tag}.whl", "digests": {"sha256": tag}, "size": 1}
        for tag in (
            "cp312-cp312-manylinux_2_34_x86_64",
            "cp311-cp311-manylinux_2_34_aarch64",
            "cp311-cp311-manylinux_2_34_x86_64",
        )
    ],
}


@pytest.fixture
def offline_pypi(monkeypatch, tmp_path: Path):
    monkeypatch.setitem(pypi._RELEASES, pypi.PACKAGE, FAKE_RELEASES)
    monkeypatch.setenv("SGLANG_SM120_CACHE", str(tmp_path / "cache"))


def test_final_releases_skip_pre_yanked_and_empty_ones(offline_pypi):
    assert pypi.final_releases("0.5.9") == ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.23"]


def test_a_compiled_release_is_read_from_its_cp311_x86_64_wheel(offline_pypi):
    wheel = pypi.wheel_for("0.5.23")
    assert wheel.filename == "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert wheel.url == "https://pypi.org/p/cp311-cp311-manylinux_2_34_x86_64.whl"


def test_a_release_missing_from_pypi_is_a_usage_error(offline_pypi):
    with pytest.raises(UsageError, match=r"sglang 0\.6\.1 is not on PyPI \(newest final release: 0\.5\.23\)"):
        pypi.wheel_for("0.6.1")


def test_matrix_since_past_the_newest_release(offline_pypi, capsys):
    for since, expected in (
        ("99.0", "--since 99.0: no final SGLang release on PyPI is that new (the newest is 0.5.23"),
        ("0.5.24", "the newest is 0.5.23; give --since 0.5.23 or older"),
        ("latest", "--since 'latest' is not a version"),
    ):
        rc, _, err = run_cli(capsys, "patches", "matrix", "--since", since)
        assert_usage(rc, err, expected)


# --- matrix output ---------------------------------------------------------------------------------


def test_matrix_json_shape_and_markdown_table():
    from sm120.patches import cmd_patches as cmd
    from sm120.patches.patching import Result, Status
    from sm120.plan import config as cfg

    table = {
        "0.5.9": {"p": Result("p", Status.APPLIED, "patches/sglang/p/0.5.9.patch")},
        "0.5.10": {"p": Result("p", Status.CONFLICT, "x.patch", "sglang/a.py: hunk #1 (@@ -1,3 +1,4 @@): no")},
    }
    assert cmd.to_json(table) == {"releases": {"0.5.9": {"p": "applied"}, "0.5.10": {"p": "conflict"}}}
    text = cmd.render_text(table, ["p"]).splitlines()
    assert text[0].split() == ["release", "p"]
    assert text[2].split()[0] == "0.5.10" and "conflict" in text[2]
    config = cfg.load()
    config = config.model_copy(update={"patches": {"p": config.patches["kimi-k25-eagle3-delegation"]}})
    md = cmd.render_markdown(table, config, ["p"])
    assert "| 0.5.9 | applied (0.5.9.patch) |" in md
    assert "| 0.5.10 | conflict: sglang/a.py: hunk #1 (@@ -1,3 +1,4 @@): no |" in md
    assert "Made 20" in md  # dated
