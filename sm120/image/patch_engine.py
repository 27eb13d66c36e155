"""The patch engine: apply a resolved patch series to a source tree with `git apply`, standard library only.

It runs on the host (`build.py patches`, through sm120.patching, which picks each patch's variant for a release) and
in the image build's `patched` stage, from the build context, on the series `build.py build` resolved on the host
(`python3 -m sm120.image.patch_engine apply SERIES.json SITE-PACKAGES`): one engine, one resolution.

For each patch of the series, in order:

1. its file is reverse-applicable and not forward-applicable -> ALREADY_APPLIED (never applied twice);
2. its upstream check (regexes that must ALL match files of the source) holds -> ALREADY_UPSTREAM;
3. it has no file for this release -> NOT_APPLICABLE;
4. `git apply --check` on the tree as the earlier patches left it -> APPLIED, or CONFLICT naming the file and the
   hunk from git's own message.

`check` works on a scratch copy of the files the patches touch, so the source is never modified; `apply` checks
everything first and writes nothing unless no patch conflicts. Statuses are data (`Result`).
"""

from __future__ import annotations

import enum
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .exit_errors import CheckFailed, UsageError


class Status(str, enum.Enum):
    APPLIED = "applied"
    ALREADY_UPSTREAM = "already upstream"
    ALREADY_APPLIED = "already applied"
    NOT_APPLICABLE = "not applicable"
    CONFLICT = "conflict"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Result:
    patch: str
    status: Status
    variant: str | None = None  # the patch file, relative to the config root
    detail: str = ""  # conflict: "FILE: hunk #N (@@ ... @@): git's reason"; otherwise a short note
    file: str | None = None  # conflict: the file in the source tree
    hunk: str | None = None  # conflict: "#N (@@ -a,b +c,d @@)"


class PatchFileError(UsageError):
    """A patch file that is not a valid unified diff (exit 2: fix the file)."""


class TreeError(UsageError):
    """The source tree is not the SGLang release it was said to be."""


# ---------------------------------------------------------------------------------------------------
# Patch files
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hunk:
    index: int  # 1-based within its file
    old_start: int
    old_len: int
    header: str  # "@@ -772,5 +772,16 @@"


@dataclass(frozen=True)
class FilePatch:
    path: str  # relative to the tree (prefix a/ stripped)
    hunks: tuple[Hunk, ...]


@dataclass(frozen=True)
class PatchFile:
    path: Path
    files: tuple[FilePatch, ...] = field(default_factory=tuple)

    def hunk_at(self, file: str, line: int) -> Hunk | None:
        for fp in self.files:
            if fp.path == file:
                exact = [h for h in fp.hunks if h.old_start == line]
                if exact:
                    return exact[0]
                inside = [h for h in fp.hunks if h.old_start <= line < h.old_start + max(h.old_len, 1)]
                return inside[0] if inside else None
        return None


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip(path: str) -> str:
    path = path.split("\t", 1)[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def read_patch(path: Path, *, root: Path | None = None) -> PatchFile:
    """Parse the file list and hunks of a unified diff; git validates the same file before it is used.

    Text before the first `--- ` / `+++ ` pair is the header (git apply ignores it too).
    """
    shown = _shown(path, root)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise PatchFileError(f"{shown}: no such patch file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchFileError(f"{shown}: cannot read it ({exc})") from None
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _strip(lines[i][4:]), _strip(lines[i + 1][4:])
            target = new if old == "/dev/null" else old
            if target.startswith("/") or ".." in Path(target).parts:
                raise PatchFileError(f"{shown}: line {i + 1}: path {target!r} leaves the tree")
            i += 2
            hunks: list[Hunk] = []
            while i < len(lines) and lines[i].startswith("@@"):
                m = _HUNK_RE.match(lines[i])
                if not m:
                    raise PatchFileError(f"{shown}: line {i + 1}: malformed hunk header {lines[i]!r}")
                old_len = int(m.group(2)) if m.group(2) is not None else 1
                new_len = int(m.group(4)) if m.group(4) is not None else 1
                hunks.append(Hunk(len(hunks) + 1, int(m.group(1)), old_len, lines[i].split(" @@")[0] + " @@"))
                i += 1
                seen_old = seen_new = 0
                while i < len(lines) and (seen_old < old_len or seen_new < new_len):
                    line = lines[i]
                    if line.startswith("\\"):
                        i += 1
                        continue
                    tag = line[:1] if line else " "
                    if tag == " ":
                        seen_old += 1
                        seen_new += 1
                    elif tag == "-":
                        seen_old += 1
                    elif tag == "+":
                        seen_new += 1
                    else:
                        raise PatchFileError(
                            f"{shown}: line {i + 1}: hunk #{len(hunks)} of {target} ends early "
                            f"(expected {old_len} old / {new_len} new lines)"
                        )
                    i += 1
                if seen_old != old_len or seen_new != new_len:
                    raise PatchFileError(f"{shown}: hunk #{len(hunks)} of {target} is truncated")
                while i < len(lines) and lines[i].startswith("\\"):
                    i += 1
            if not hunks:
                raise PatchFileError(f"{shown}: {target} has a file header but no hunk")
            files.append(FilePatch(target, tuple(hunks)))
            continue
        i += 1
    if not files:
        raise PatchFileError(f"{shown}: no unified diff in it (an empty or corrupt patch file)")
    return PatchFile(path, tuple(files))


def _shown(path: Path, root: Path | None) -> str:
    if root is not None:
        try:
            return str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    return str(path)


# ---------------------------------------------------------------------------------------------------
# Source trees
# ---------------------------------------------------------------------------------------------------


def tree_version(tree: Path) -> str | None:
    """The SGLang version a site-packages-style tree holds: its sglang-*.dist-info, else sglang/_version.py."""
    infos = sorted(tree.glob("sglang-*.dist-info"))
    versions = []
    for info in infos:
        metadata = info / "METADATA"
        text = metadata.read_text(encoding="utf-8", errors="replace") if metadata.exists() else ""
        m = re.search(r"^Version:\s*(\S+)", text, re.M)
        versions.append(m.group(1) if m else info.name[len("sglang-") : -len(".dist-info")])
    if len(set(versions)) > 1:
        raise TreeError(f"{tree}: holds several sglang dist-info folders ({', '.join(versions)}); which is it?")
    if versions:
        return versions[0]
    version_py = tree / "sglang" / "_version.py"
    if version_py.exists():
        m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", version_py.read_text())
        if m:
            return m.group(1)
    return None


# ---------------------------------------------------------------------------------------------------
# git apply
# ---------------------------------------------------------------------------------------------------


def _git(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        # Never discover a repository above the tree: inside one, git apply would resolve the patch's
        # paths against that repository's top level and silently skip them.
        "GIT_CEILING_DIRECTORIES": str(tree.resolve().parent),
        "LC_ALL": "C",
    }
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    try:
        return subprocess.run(["git", "apply", *args], cwd=tree, env=env, capture_output=True, text=True)
    except FileNotFoundError:
        raise CheckFailed("git is not installed; the patch engine runs `git apply`") from None


def validate(patch_file: PatchFile, *, root: Path | None = None) -> None:
    """Have git parse the patch on its own (no tree): a corrupt patch is a PatchFileError, not a conflict."""
    with tempfile.TemporaryDirectory(prefix="sm120-validate-") as scratch:
        proc = _git(Path(scratch), "--numstat", str(patch_file.path.resolve()))
    if proc.returncode != 0:
        reason = _first_error(proc.stderr) or "git cannot read it"
        raise PatchFileError(f"{_shown(patch_file.path, root)}: {reason}")


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if line.startswith(("error:", "fatal:")):
            return line.split(":", 1)[1].strip()
    return stderr.strip().splitlines()[0] if stderr.strip() else ""


_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$")
_FILE_ERROR = re.compile(r"^error: (.+?): (does not exist in index|No such file or directory|patch does not apply)$")


def _conflict(name: str, file_rel: str, patch_file: PatchFile, stderr: str) -> Result:
    file = hunk_text = None
    reason = ""
    for line in stderr.splitlines():
        m = _FAILED_AT.match(line)
        if m and file is None:
            file = m.group(1)
            hunk = patch_file.hunk_at(file, int(m.group(2)))
            hunk_text = f"#{hunk.index} ({hunk.header})" if hunk else f"at line {m.group(2)}"
            continue
        m = _FILE_ERROR.match(line)
        if m:
            file = file or m.group(1)
            reason = "file missing" if "patch does not apply" not in m.group(2) else "context does not match"
    if file is None:
        file = patch_file.files[0].path if patch_file.files else "?"
        reason = _first_error(stderr) or "git apply failed"
    if reason == "file missing":
        detail = f"{file}: file missing (moved or removed in this release)"
    else:
        detail = f"{file}: hunk {hunk_text or '?'}: {reason or 'does not apply'}"
    return Result(name, Status.CONFLICT, file_rel, detail, file, hunk_text)


# ---------------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """A patch as resolved for one release: its file for that release (None: no variant covers it), the
    regexes that say upstream has the change, and what to say when it does or when nothing applies."""

    name: str
    file: str | None  # relative to the root the engine is given
    upstream: str = ""  # upstream's status in words
    checks: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (path under the tree, regexes that must all match)
    ranges: str = ""  # the releases the variants cover, for NOT_APPLICABLE

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "file": self.file,
            "upstream": self.upstream,
            "checks": [{"path": path, "patterns": list(patterns)} for path, patterns in self.checks],
            "ranges": self.ranges,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Resolved:
        checks = tuple((str(c["path"]), tuple(str(p) for p in c["patterns"])) for c in data.get("checks", []))
        return cls(
            str(data["name"]), data.get("file"), str(data.get("upstream", "")), checks, str(data.get("ranges", ""))
        )


def upstream_has(checks: Sequence[tuple[str, Sequence[str]]], tree: Path) -> bool:
    """True when every check holds on the tree (a check on the source, not on the version); no checks: False."""
    if not checks:
        return False
    for rel, patterns in checks:
        try:
            text = (tree / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        if not all(re.search(pattern, text, re.M) for pattern in patterns):
            return False
    return True


def _load(series: Sequence[Resolved], root: Path) -> list[tuple[Resolved, PatchFile | None]]:
    """Read and validate each patch file (a corrupt file fails before anything runs)."""
    out = []
    for patch in series:
        patch_file = None
        if patch.file is not None:
            patch_file = read_patch(root / patch.file, root=root)
            validate(patch_file, root=root)
        out.append((patch, patch_file))
    return out


def _touched(loaded: Iterable[tuple[Resolved, PatchFile | None]]) -> set[str]:
    paths: set[str] = set()
    for _patch, patch_file in loaded:
        if patch_file is not None:
            paths.update(fp.path for fp in patch_file.files)
    return paths


def _scratch_copy(tree: Path, paths: Iterable[str], scratch: Path) -> None:
    for rel in paths:
        src = tree / rel
        if src.is_file():
            dst = scratch / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def _evaluate(
    loaded: Sequence[tuple[Resolved, PatchFile | None]], version: str, pristine: Path, work: Path
) -> list[Result]:
    """Statuses in order; APPLIED patches are applied to `work` so later patches see their effect."""
    results: list[Result] = []
    for patch, patch_file in loaded:
        name = patch.name
        if patch_file is not None:
            forward = _git(work, "--check", str(patch_file.path.resolve()))
            if forward.returncode != 0:
                reverse = _git(work, "--check", "--reverse", str(patch_file.path.resolve()))
                if reverse.returncode == 0:
                    results.append(Result(name, Status.ALREADY_APPLIED, patch.file, "the tree has this patch"))
                    continue
        if upstream_has(patch.checks, pristine):
            results.append(Result(name, Status.ALREADY_UPSTREAM, patch.file, patch.upstream))
            continue
        if patch_file is None or patch.file is None:
            results.append(Result(name, Status.NOT_APPLICABLE, None, f"no variant for {version} ({patch.ranges})"))
            continue
        if forward.returncode != 0:
            results.append(_conflict(name, patch.file, patch_file, forward.stderr))
            continue
        done = _git(work, str(patch_file.path.resolve()))
        if done.returncode != 0:  # checked a moment ago; only a race or a disk error lands here
            results.append(_conflict(name, patch.file, patch_file, done.stderr))
            continue
        results.append(Result(name, Status.APPLIED, patch.file))
    return results


def check(tree: Path, version: str, series: Sequence[Resolved], *, root: Path) -> list[Result]:
    """What `apply` would do to `tree` (a release's source, site-packages layout); `tree` is not modified."""
    loaded = _load(series, root)
    with tempfile.TemporaryDirectory(prefix="sm120-check-") as scratch:
        work = Path(scratch) / "tree"
        work.mkdir()
        _scratch_copy(tree, _touched(loaded), work)
        return _evaluate(loaded, version, tree, work)


def apply(tree: Path, version: str, series: Sequence[Resolved], *, root: Path) -> list[Result]:
    """Apply the series to `tree` in place, all or nothing: on any CONFLICT nothing is written."""
    results = check(tree, version, series, root=root)
    if any(r.status is Status.CONFLICT for r in results):
        return results
    for (patch, patch_file), result in zip(_load(series, root), results, strict=True):
        if result.status is not Status.APPLIED or patch_file is None:
            continue
        proc = _git(tree, str(patch_file.path.resolve()))
        if proc.returncode != 0:
            raise CheckFailed(
                f"sglang {version}: {patch.name}: git apply failed in {tree} after a clean check: "
                f"{_first_error(proc.stderr)}"
            )
    return results


def conflicts(results: Iterable[Result]) -> list[Result]:
    return [r for r in results if r.status is Status.CONFLICT]


def line(version: str, result: Result) -> str:
    """One report line per patch: `torch-symm-mem-sm120: applied (patches/...)`; a conflict names the release."""
    text = f"{result.patch}: {result.status}"
    if result.status is Status.CONFLICT:
        return f"sglang {version}: {text}: {result.detail} [{result.variant}]"
    if result.status is Status.APPLIED:
        return f"{text} ({result.variant})"
    if result.detail:
        return f"{text} ({result.detail})"
    return text


def conflict_message(version: str, results: Sequence[Result], verb: str) -> str | None:
    """The one line for the first conflict (the patch, file and hunk, and what to do), or None."""
    bad = conflicts(results)
    if not bad:
        return None
    first = bad[0]
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return (
        f"sglang {version}: patch {first.patch} conflicts: {first.detail} [{first.variant}]{more}; "
        f"{verb} nothing. Write a variant for this release range (patches/sglang/{first.patch}/)"
    )


# ---------------------------------------------------------------------------------------------------
# The series file (what `build.py build` hands the image build) and the in-build command
# ---------------------------------------------------------------------------------------------------

SERIES_FILE = "series.json"
PROGRAM = "patch_engine"  # how its error lines start (sm120.buildx names the patch from them)


def write_series(directory: Path, version: str, series: Sequence[Resolved]) -> Path:
    path = directory / SERIES_FILE
    data = {"sglang": version, "patches": [patch.to_dict() for patch in series]}
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def read_series(path: Path) -> tuple[str, list[Resolved]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return str(data["sglang"]), [Resolved.from_dict(p) for p in data["patches"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: not a patch series written by build.py build ({exc})") from None


def main(argv: Sequence[str]) -> int:
    """`python3 -m sm120.image.patch_engine apply SERIES.json TREE`: the image build's patch step (files relative to the
    series' directory). Prints one line per patch; a conflict names the patch, the file and the hunk, exit 1."""
    if len(argv) != 3 or argv[0] != "apply":
        sys.stderr.write("usage: python3 -m sm120.image.patch_engine apply SERIES.json TREE\n")
        return 2
    series_path, tree = Path(argv[1]), Path(argv[2])
    try:
        version, series = read_series(series_path)
        found = tree_version(tree)
        if found != version:
            raise TreeError(f"{tree}: holds SGLang {found}, the series is for {version}")
        results = apply(tree, version, series, root=series_path.parent)
    except (UsageError, CheckFailed) as exc:
        sys.stderr.write(f"{PROGRAM}: error: {exc}\n")
        return exc.exit_code
    for result in results:
        print(line(version, result))
    failed = conflict_message(version, results, "wrote")
    if failed:
        sys.stderr.write(f"{PROGRAM}: failed: {failed}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
