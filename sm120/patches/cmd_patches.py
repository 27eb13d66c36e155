"""`build.py patches`: check, apply and survey the SGLang patch series against real releases.

build.py patches check  --sglang 0.5.9                 # one line per patch; exit 1 on a conflict
build.py patches apply  --sglang 0.5.9 --dest DIR      # the patched source tree (site-packages layout)
build.py patches apply  --sglang V --source SITE --dest SITE   # in place, offline (an installed venv)
build.py patches matrix [--json | --markdown]          # every final release on PyPI, from --since on
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sm120.arguments import add_config_args
from sm120.errors import CheckFailed, UsageError, say
from sm120.image import patch_engine
from sm120.patches import patching, pypi
from sm120.plan import config as cfg
from sm120.plan.config import Config, Patch

# The oldest SGLang release `patches matrix` checks (the first this project served); the one place it is written.
MATRIX_FLOOR = "0.5.9"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("patches", help="check, apply or survey the SGLang patches", description=__doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    check = actions.add_parser("check", help="check each patch against a release's source (no changes)")
    add_config_args(check, profile=False)
    check.add_argument("--source", metavar="DIR", help="check this tree (site-packages layout), not PyPI's wheel")
    check.set_defaults(func=run_check)

    apply = actions.add_parser("apply", help="write the patched source tree of a release")
    add_config_args(apply, profile=False)
    apply.add_argument("--dest", metavar="DIR", required=True, help="where the patched tree goes (empty or absent)")
    apply.add_argument(
        "--source",
        metavar="DIR",
        help="the release's installed tree (site-packages); no network. Same as --dest: patch in place",
    )
    apply.set_defaults(func=run_apply)

    matrix = actions.add_parser("matrix", help=f"every final SGLang release >= {MATRIX_FLOOR} on PyPI, each patch")
    matrix.add_argument("--config", metavar="FILE", help="build.toml to read (default: the checkout's)")
    fmt = matrix.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help='print {"releases": {VERSION: {PATCH: STATUS}}}')
    fmt.add_argument("--markdown", action="store_true", help="print docs/patch-matrix.md (dated)")
    matrix.add_argument("--since", metavar="VERSION", default=MATRIX_FLOOR, help="oldest release to include")
    matrix.set_defaults(func=run_matrix)


def _version(given: str | None, config: Config) -> str:
    version = config.defaults.sglang if given is None else given
    pypi.parse_version(version)
    return version


def _sglang(config: Config) -> list[tuple[str, Patch]]:
    return [(name, patch) for name, patch in config.patches.items() if patch.component == "sglang"]


def _patches_for(config: Config, version: str) -> list[tuple[str, Patch]]:
    """The track's patch series, or (no track) every SGLang patch in build.toml, with a note saying so."""
    if version in config.tracks:
        return [(n, config.patch(n)) for n in config.tracks[version].patches if config.patch(n).component == "sglang"]
    every = _sglang(config)
    names = ", ".join(name for name, _ in every)
    say(f"no track for sglang {version} in {config.path.name}: checking every sglang patch ({names})")
    return every


def run_check(args: argparse.Namespace) -> int:
    return check(cfg.load(args.config), args.sglang, Path(args.source) if args.source else None)


def check(config: Config, sglang: str | None = None, source: Path | None = None) -> int:
    """`patches check`: each SGLang patch of the track `sglang` (default: the default track) against the release's
    wheel from PyPI, or the tree `source`; one line per patch, CheckFailed on a conflict."""
    version = _version(sglang, config)
    tree = source or pypi.source_tree(version, progress=say)
    patches = _patches_for(config, version)
    patch_engine.report(version, patching.check(tree, version, patches, root=config.root), "checked")
    return 0


def run_apply(args: argparse.Namespace) -> int:
    config = cfg.load(args.config)
    version = _version(args.sglang, config)
    source, dest = Path(args.source) if args.source else None, Path(args.dest)
    if source is None:
        pypi.wheel_for(version)  # a release missing from PyPI is the first thing to hear about
    patches = _patches_for(config, version)
    if source is not None:
        if not source.is_dir():
            raise UsageError(f"--source {source}: no such directory")
        patching.verify_tree(source, version)
    in_place = source is not None and dest.exists() and dest.resolve() == source.resolve()
    if not in_place:
        _fresh_dest(dest)
    try:  # the tree is written (or patched in place) only after the checks: a read-only --dest is found first
        with tempfile.TemporaryFile(dir=dest):
            pass
    except OSError as exc:
        raise UsageError(
            f"--dest {dest}: cannot write into it ({exc.strerror or exc}); give a writable folder"
        ) from None
    if not in_place:
        # Checked before anything is written: a conflict leaves no half-made tree behind.
        tree = source or pypi.source_tree(version, progress=say)
        patch_engine.report(version, patching.check(tree, version, patches, root=config.root), "wrote", quiet=True)
        if source is not None:
            shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
        else:
            pypi.extract(pypi.download(version, progress=say), dest, python_only=False)
    patch_engine.report(version, patching.apply(dest, version, patches, root=config.root), "wrote")
    say(f"sglang {version}: patched tree in {dest}")
    return 0


def _fresh_dest(dest: Path) -> None:
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"--dest {dest}: a file, not a folder; give an empty or new folder")
    try:
        if dest.exists() and any(dest.iterdir()):
            raise UsageError(
                f"--dest {dest}: exists and is not empty; give an empty or new folder (or --source = --dest)"
            )
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--dest {dest}: cannot be created ({exc.strerror or exc}); give a writable folder") from None


def matrix(config: Config, since: str = MATRIX_FLOOR) -> dict[str, dict[str, patching.Result]]:
    """{version: {patch: Result}} for every final release >= since, every sglang patch in build.toml."""
    pypi.parse_version(since, "--since")
    patches = _sglang(config)
    releases = pypi.final_releases(since)
    if not releases:
        newest = pypi.final_releases(MATRIX_FLOOR)
        raise UsageError(
            f"--since {since}: no final SGLang release on PyPI is that new"
            + (f" (the newest is {newest[-1]}; give --since {newest[-1]} or older)" if newest else "")
        )
    out: dict[str, dict[str, patching.Result]] = {}
    for i, version in enumerate(releases, 1):
        started = time.monotonic()
        tree = pypi.source_tree(version, progress=lambda msg, v=version: say(f"  sglang {v}: {msg}"))
        results = patching.check(tree, version, patches, root=config.root)
        out[version] = {r.patch: r for r in results}
        summary = ", ".join(f"{r.patch}: {r.status}" for r in results)
        say(f"[{i}/{len(releases)}] sglang {version}: {summary} ({time.monotonic() - started:.1f} s)")
    return out


def to_json(table: dict[str, dict[str, patching.Result]]) -> dict[str, dict[str, dict[str, str]]]:
    return {"releases": {v: {name: str(r.status) for name, r in row.items()} for v, row in table.items()}}


def render_text(table: dict[str, dict[str, patching.Result]], names: Sequence[str]) -> str:
    from tabulate import tabulate  # here, not at the top: only this output needs it

    rows = [[version, *(str(row[n].status) for n in names)] for version, row in table.items()]
    return tabulate(rows, ["release", *names], tablefmt="plain", disable_numparse=True)


def _cell(r: patching.Result) -> str:
    if r.status is patching.Status.APPLIED and r.variant:
        return f"{r.status!s} ({Path(r.variant).name})"
    return f"{r.status!s}: {r.detail}" if r.status is patching.Status.CONFLICT else str(r.status)


def render_markdown(table: dict[str, dict[str, patching.Result]], config: Config, names: Sequence[str]) -> str:
    today = time.strftime("%Y-%m-%d", time.gmtime())
    out = [
        "# SGLang patch matrix",
        "",
        f"Made {today} with `python3 build.py patches matrix --markdown > docs/patch-matrix.md`: every final",
        f"SGLang release >= {MATRIX_FLOOR} on PyPI, its wheel's source checked with `git apply --check` against",
        "each patch in build.toml (the variant for that release) after the patch's upstream check.",
        "Re-run it when SGLang publishes a release; CI checks only the pinned tracks.",
        "",
        "`applied` means git applies the variant cleanly (T1). What the patched code does is tested on the",
        "pinned tracks only (tests/upstream/test_patches_upstream.py, in each track's own interpreter).",
        "",
        "Statuses: `applied` (the variant applies cleanly), `already upstream` (the release has the change;",
        "skipped), `not applicable` (no variant covers the release and upstream does not have it),",
        "`conflict` (the variant does not apply: a new variant is needed).",
        "",
        "| release | " + " | ".join(f"`{n}`" for n in names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    out += [f"| {version} | " + " | ".join(_cell(row[n]) for n in names) + " |" for version, row in table.items()]
    out += ["", "Patches:", ""]
    for n in names:
        patch = config.patches[n]
        ranges = ", ".join(f"`{v.versions}` -> `{v.file}`" for v in patch.variants)
        out.append(f"- `{n}`: {patch.summary}. Upstream: {patch.upstream}. Variants: {ranges}.")
    return "\n".join(out) + "\n"


def run_matrix(args: argparse.Namespace) -> int:
    config = cfg.load(args.config)
    names = [name for name, _ in _sglang(config)]
    table = matrix(config, args.since)
    if args.json:
        print(json.dumps(to_json(table), indent=2))
    elif args.markdown:
        print(render_markdown(table, config, names), end="")
    else:
        print(render_text(table, names))
    bad = [(v, r) for v, row in table.items() for r in row.values() if r.status is patching.Status.CONFLICT]
    if bad:
        v, r = bad[0]
        raise CheckFailed(f"{len(bad)} conflict(s); first: sglang {v}: patch {r.patch}: {r.detail} [{r.variant}]")
    return 0
