"""`build.py track`: make a new SGLang release a track of build.toml, and check one track alone.

build.py track add VERSION [--from TRACK] [--dry-run]   # write [tracks."VERSION"] from what PyPI says
build.py track check VERSION [-k EXPR]                # patches check, then the T1 tests of that track
build.py track next                                   # the newest final release newer than the newest track

`add` reads every fact it can (with its source in a comment), copies every other key of --from (default: the newest
track) for review, refuses what it cannot establish (exit 2, naming the fact), and writes build.toml only once the
result loads and plans. docs/tracks-and-patches.md says what each reads and checks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from sm120.errors import CheckFailed, UsageError, say
from sm120.patches import cmd_patches, pypi
from sm120.plan import config as cfg
from sm120.plan import resolve, tomllib
from sm120.plan import resources as res
from sm120.track import facts as track_facts
from sm120.track import stanza as track_stanza

T1_TESTS = cfg.ROOT / "tests" / "upstream"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("track", help="add a track for a new SGLang release, or check one", description=__doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    add = actions.add_parser("add", help='write [tracks."VERSION"] into build.toml from the facts on PyPI')
    add.add_argument("version", metavar="VERSION", help="the SGLang release (a final release on PyPI)")
    add.add_argument("--config", metavar="FILE", help="build.toml to edit (default: the checkout's)")
    add.add_argument(
        "--from", dest="source", metavar="TRACK", help="copy what is not derived from this track (default: the newest)"
    )
    add.add_argument("--dry-run", action="store_true", help="print the stanza; write nothing")
    add.set_defaults(func=run_add)

    check = actions.add_parser("check", help="the T1 checks of one track: patches check, tests/upstream for it")
    check.add_argument("version", metavar="VERSION", help="a track of the checkout's build.toml")
    check.add_argument("-k", dest="select", metavar="EXPR", help="run only the T1 tests matching EXPR (pytest -k)")
    check.set_defaults(func=run_check)

    nxt = actions.add_parser("next", help="print the newest final SGLang release newer than the newest track")
    nxt.add_argument("--config", metavar="FILE", help="build.toml to read (default: the checkout's)")
    nxt.set_defaults(func=run_next)


def _version(text: str) -> str:
    try:
        Version(text)
    except InvalidVersion:
        raise UsageError(f"VERSION {text!r} is not a version (like 0.5.23)") from None
    return text


def newest(config: cfg.Config) -> str:
    return max(config.tracks, key=Version)


def run_add(args: argparse.Namespace) -> int:
    config = cfg.load(args.config)
    version = _version(args.version)
    if version in config.tracks:
        raise UsageError(
            f'{config.path.name} already has [tracks."{version}"]; remove it first to write it again, or edit it'
        )
    if Version(version).is_prerelease or Version(version).is_devrelease:
        raise UsageError(f"VERSION {version!r} is a pre-release: a track is a final release")
    source = args.source or newest(config)
    config.track(source)  # an unknown --from lists the tracks
    text = config.path.read_text(encoding="utf-8")
    say(f"track add {version}: reading the facts from PyPI (copying the rest from [tracks.{source!r}])")
    derived = track_facts.derive(config, version, track_facts.PyPISources(progress=say))
    data, copied = track_stanza.track_data(derived, tomllib.loads(text)["tracks"][source])
    rules = track_stanza.ranged_rules(config, version, source)
    derived.notes += rules
    stanza = track_stanza.render(version, data, derived, copied, source)
    new_text = track_stanza.insert(text, newest(config), stanza)
    check_and_write(config.path, new_text, version, data, write=not args.dry_run)
    for line in rules:
        say(f"track add {version}: {line}")
    if args.dry_run:
        print(stanza, end="")
        return 0
    tops = sorted({path[0] for path in copied})
    say(
        f'track add {version}: wrote [tracks."{version}"] into {config.path} ({len(derived.facts)} facts read; '
        f"copied from {source} for review: {', '.join(tops) or 'nothing'}); next: build.py track check {version}"
    )
    return 0


def run_check(args: argparse.Namespace) -> int:
    config = cfg.load()
    version = _version(args.version)
    config.track(version)
    if not (T1_TESTS / "conftest.py").is_file():
        raise UsageError(f"track check runs the T1 tests in {T1_TESTS}, which this copy lacks: run it in a checkout")
    say(f"track check {version}: patches check")
    cmd_patches.check(config, version)
    say(f"track check {version}: the T1 tests of tests/upstream for this track (pytest --sglang-track {version})")
    from sm120.verify.runner import _run_pytest

    cmd = [sys.executable, "-m", "pytest", str(T1_TESTS), "-q", "-p", "no:cacheprovider", f"--sglang-track={version}"]
    if args.select:
        cmd += ["-k", args.select]
    status = _run_pytest(cmd, env=None)
    if status == 5:
        raise CheckFailed(f"no T1 test was selected for track {version}")
    if status != 0:
        raise CheckFailed(f"the T1 checks of track {version} failed (pytest exit status {status}; see above)")
    say(f"track check {version}: passed")
    return 0


def run_next(args: argparse.Namespace) -> int:
    config = cfg.load(args.config)
    top = newest(config)
    newer = [v for v in pypi.final_releases(top) if Version(v) > Version(top)]
    if newer:
        print(newer[-1])
    else:
        say(f"track next: no final SGLang release on PyPI is newer than {top}, the newest track")
    return 0


# The machine the plans are resolved for while checking (the plan's parallelism is not what is checked).
_CHECK_MACHINE = res.Resources(cpus=2, memory_bytes=8 * res.GIB, source="track add's check")


def check_and_write(path: Path, new_text: str, version: str, data: dict[str, Any], *, write: bool) -> None:
    """Refuse `new_text` unless it is the old file plus exactly `data` as tracks.`version`, loads, and resolves a plan
    for every profile; then (with `write`) replace `path` with it in one step."""
    expected = tomllib.loads(path.read_text(encoding="utf-8"))
    expected.setdefault("tracks", {})[version] = data
    try:
        found = tomllib.loads(new_text)
    except tomllib.TOMLDecodeError as exc:
        raise CheckFailed(f"the stanza does not parse in {path.name} ({exc}); nothing written") from None
    if found != expected:
        raise CheckFailed(f"inserting the stanza changed more of {path.name} than tracks.{version}; nothing written")
    try:
        config = cfg.load(path, text=new_text)  # in memory: a dry run writes nothing, not even a temporary file
        for profile in config.profiles:
            resolve.resolve(config, profile=profile, sglang=version, machine=_CHECK_MACHINE)
    except UsageError as exc:
        raise UsageError(f'the new [tracks."{version}"] does not check out: {exc}; nothing written') from None
    if not write:
        return
    try:
        pypi.write(path, new_text.encode())
    except OSError as exc:
        raise UsageError(f"{path}: cannot write it ({exc.strerror or exc}); nothing written") from None
