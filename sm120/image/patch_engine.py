"""The patch engine: apply a resolved patch series to a source tree with `git apply`, standard library only; the one
engine of the host (`build.py patches`, through sm120.patches.patching) and of the image build's `patched` stage
(`main`), see docs/architecture.md. Each patch, in order, is ALREADY_APPLIED (reverse-applicable, not forward: never
applied twice), ALREADY_UPSTREAM (its upstream regexes all match), NOT_APPLICABLE (no file for this release), APPLIED,
or a CONFLICT naming the file and the hunk from git's own message."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .entrypoint.sglang_source import InstalledSGLang
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


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip(path: str) -> str:
    path = path.split("\t", 1)[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def read_patch(path: Path, shown: str) -> dict[str, dict[int, str]]:
    """{file in the tree: {a hunk's old start: "#N (@@ -a,b +c,d @@)"}} of a unified diff (text before the first
    `--- `/`+++ ` pair is a header, as for git), then git's own parse of it (no tree): a corrupt patch is a
    PatchFileError naming it as `shown`, not a conflict."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise PatchFileError(f"{shown}: no such patch file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchFileError(f"{shown}: cannot read it ({exc})") from None
    files: dict[str, dict[int, str]] = {}
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        old, new = _strip(lines[i][4:]), _strip(lines[i + 1][4:])
        target = new if old == "/dev/null" else old
        if target.startswith("/") or ".." in Path(target).parts:
            raise PatchFileError(f"{shown}: line {i + 1}: path {target!r} leaves the tree")
        i += 2
        hunks: list[tuple[int, str]] = []
        while i < len(lines) and lines[i].startswith("@@"):
            if not (m := _HUNK_RE.match(lines[i])):
                raise PatchFileError(f"{shown}: line {i + 1}: malformed hunk header {lines[i]!r}")
            old_len, new_len = (int(n) if n is not None else 1 for n in m.group(2, 4))
            hunks.append((int(m.group(1)), lines[i].split(" @@")[0] + " @@"))
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_len or seen_new < new_len):
                tag = lines[i][:1] or " "
                if tag not in " -+\\":
                    raise PatchFileError(
                        f"{shown}: line {i + 1}: hunk #{len(hunks)} of {target} ends early "
                        f"(expected {old_len} old / {new_len} new lines)"
                    )
                seen_old += tag in " -"
                seen_new += tag in " +"
                i += 1
            if seen_old != old_len or seen_new != new_len:
                raise PatchFileError(f"{shown}: hunk #{len(hunks)} of {target} is truncated")
            while i < len(lines) and lines[i].startswith("\\"):
                i += 1
        if not hunks:
            raise PatchFileError(f"{shown}: {target} has a file header but no hunk")
        files.setdefault(target, {start: f"#{n} ({header})" for n, (start, header) in enumerate(hunks, 1)})
    if not files:
        raise PatchFileError(f"{shown}: no unified diff in it (an empty or corrupt patch file)")
    proc = _git(path.parent, "--numstat", str(path.resolve()))  # parses only: touches no file
    if proc.returncode != 0:
        raise PatchFileError(f"{shown}: {_first_error(proc.stderr) or 'git cannot read it'}")
    return files


def tree_version(tree: Path) -> str | None:
    """The SGLang version a site-packages-style tree holds (sglang/_version.py, else its sglang-*.dist-info)."""
    versions = sorted({info.name[len("sglang-") : -len(".dist-info")] for info in tree.glob("sglang-*.dist-info")})
    if len(versions) > 1:
        raise TreeError(f"{tree}: holds several sglang dist-info folders ({', '.join(versions)}); which is it?")
    return InstalledSGLang(tree / "sglang").version


def _git(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Never discover a repository above the tree: inside one, git apply would resolve the patch's paths against
    # that repository's top level and silently skip them.
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    env.update(GIT_CEILING_DIRECTORIES=str(tree.resolve().parent), LC_ALL="C")
    try:
        return subprocess.run(["git", "apply", *args], cwd=tree, env=env, capture_output=True, text=True)
    except FileNotFoundError:
        raise CheckFailed("git is not installed; the patch engine runs `git apply`") from None


def _first_error(stderr: str) -> str:
    m = re.search(r"^(?:error|fatal):(.*)$", stderr, re.M)
    return m[1].strip() if m else (stderr.strip().splitlines() or [""])[0]


_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_MISSING = re.compile(r"^error: (.+?): (?:does not exist in index|No such file or directory)$", re.M)


def _conflict(name: str, file_rel: str, hunks: dict[str, dict[int, str]], stderr: str) -> Result:
    hunk = None
    if failed := _FAILED_AT.search(stderr):  # git then says "FILE: patch does not apply"
        file, at = failed[1], failed[2]
        hunk = hunks.get(file, {}).get(int(at)) or f"at line {at}"  # git names the hunk's old start
        detail = f"{file}: hunk {hunk}: context does not match"
    elif missing := _MISSING.search(stderr):
        file = missing[1]
        detail = f"{file}: file missing (moved or removed in this release)"
    else:
        file = next(iter(hunks), "?")
        detail = f"{file}: hunk ?: {_first_error(stderr) or 'git apply failed'}"
    return Result(name, Status.CONFLICT, file_rel, detail, file, hunk)


@dataclass(frozen=True)
class Resolved:
    """A patch as resolved for one release: its file for that release (None: no variant covers it), the
    regexes that say upstream has the change, and what to say when it does or when nothing applies."""

    name: str
    file: str | None  # relative to the root the engine is given
    upstream: str = ""  # upstream's status in words
    checks: Sequence[tuple[str, Sequence[str]]] = ()  # (path under the tree, regexes that must all match)
    ranges: str = ""  # the releases the variants cover, for NOT_APPLICABLE


def upstream_has(checks: Sequence[tuple[str, Sequence[str]]], tree: Path) -> bool:
    """True when every check holds on the tree (a check on the source, not on the version); no checks: False."""
    return bool(checks) and InstalledSGLang(tree / "sglang").has_change(checks)[0]


def run(tree: Path, version: str, series: Sequence[Resolved], *, root: Path, write: bool) -> list[Result]:
    """Statuses in order, found on a scratch copy of the touched files of `tree` (a release's source, site-packages
    layout), where APPLIED patches are applied so that later ones see their effect. Without `write` (check) `tree` is
    not modified; with it (apply) the patched files are copied into `tree`, all or nothing: only if no CONFLICT."""
    loaded = [(p, read_patch(root / p.file, p.file) if p.file is not None else None) for p in series]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="sm120-check-") as scratch:
        work = Path(scratch)
        for rel in {rel for _, hunks in loaded if hunks for rel in hunks}:
            if (tree / rel).is_file():
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(tree / rel, work / rel)
        for patch, hunks in loaded:
            name, file = patch.name, patch.file
            diff = str((root / file).resolve()) if file else ""
            forward = _git(work, "--check", diff) if hunks else None
            if forward and forward.returncode and _git(work, "--check", "--reverse", diff).returncode == 0:
                results.append(Result(name, Status.ALREADY_APPLIED, file, "the tree has this patch"))
            elif upstream_has(patch.checks, tree):
                results.append(Result(name, Status.ALREADY_UPSTREAM, file, patch.upstream))
            elif hunks is None or file is None:
                results.append(Result(name, Status.NOT_APPLICABLE, None, f"no variant for {version} ({patch.ranges})"))
            elif (done := _git(work, diff)).returncode:  # git apply is atomic: the copy stays as it was
                results.append(_conflict(name, file, hunks, done.stderr))
            else:
                results.append(Result(name, Status.APPLIED, file))
        if write and Status.CONFLICT not in {r.status for r in results}:
            for (_, hunks), r in zip(loaded, results, strict=True):
                for rel in hunks if hunks and r.status is Status.APPLIED else ():
                    (tree / rel).unlink(missing_ok=True)  # as git does: a link is replaced, never written through
                    if (work / rel).exists():  # else the patch deleted it
                        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(work / rel, tree / rel)
    return results


def report(version: str, results: Sequence[Result], verb: str, *, quiet: bool = False) -> None:
    """Print one line per patch (with `quiet`, only when something conflicts); CheckFailed with the one line for the
    first conflict (the release, the patch, file and hunk, and what to do)."""
    bad = [r for r in results if r.status is Status.CONFLICT]
    for r in results if bad or not quiet else ():
        text = f"{r.patch}: {r.status}"
        if r.status is Status.CONFLICT:
            print(f"sglang {version}: {text}: {r.detail} [{r.variant}]")
        else:
            note = r.variant if r.status is Status.APPLIED else r.detail
            print(f"{text} ({note})" if note else text)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise CheckFailed(
            f"sglang {version}: patch {bad[0].patch} conflicts: {bad[0].detail} [{bad[0].variant}]{more}; "
            f"{verb} nothing. Write a variant for this release range (patches/sglang/{bad[0].patch}/)"
        )


# The series file (what `build.py build` hands the image build) and the in-build command.
PROGRAM = "patch_engine"  # how its error lines start (sm120.buildx names the patch from them)


def write_series(directory: Path, version: str, series: Sequence[Resolved]) -> None:
    data = {"sglang": version, "patches": [dataclasses.asdict(patch) for patch in series]}
    (directory / "series.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def read_series(path: Path) -> tuple[str, list[Resolved]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return str(data["sglang"]), [Resolved(**patch) for patch in data["patches"]]
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
        if (found := tree_version(tree)) != version:
            raise TreeError(f"{tree}: holds SGLang {found}, the series is for {version}")
        results = run(tree, version, series, root=series_path.parent, write=True)
    except (UsageError, CheckFailed) as exc:
        sys.stderr.write(f"{PROGRAM}: error: {exc}\n")
        return exc.exit_code
    try:
        report(version, results, "wrote")
    except CheckFailed as exc:
        sys.stderr.write(f"{PROGRAM}: failed: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
