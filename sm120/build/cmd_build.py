"""`build.py build`: the image, with BuildKit, from the plan resolved here, once: its image-facing outputs are staged
in the build context (this checkout, whichever build.toml `--config` names) and the Dockerfile copies them. The
staged `build_jobs` secret stays after build.py exits, so the command `--print` shows runs as printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from sm120.arguments import add_config_args, add_machine_args
from sm120.build import bases, build_context, buildx, digests, image_ref
from sm120.errors import UsageError, suggest
from sm120.plan import build_args
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod

ROOT = cfg.ROOT
WHEELHOUSE = ROOT / ".wheelhouse"
# buildx's options that are build.py build's, as given.
_GIVEN = ("target", "cache_from", "cache_to", "push", "push_by_digest", "sbom", "provenance", "metadata_file")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build the image (BuildKit)", description=__doc__)
    add_config_args(p)
    add_machine_args(p)
    p.add_argument("--tag", action="append", default=[], metavar="TAG", help="an extra tag (repeatable)")
    p.add_argument("--registry", metavar="PREFIX", help="prefix the plan's tags, e.g. ghcr.io/OWNER")
    pushing = p.add_mutually_exclusive_group()
    pushing.add_argument("--push", action="store_true", help="push instead of loading into the local engine")
    pushing.add_argument(
        "--push-by-digest",
        action="store_true",
        help="push the image under its digest only, no tag (needs --registry); prints REPOSITORY@DIGEST",
    )
    for option, what in (("--base-image-digest", "build"), ("--runtime-base-image-digest", "runtime")):
        p.add_argument(option, type=digests.digest, metavar="SHA256", help=f"build FROM the {what} base at this digest")
    p.add_argument("--cache-from", action="append", default=[], metavar="SPEC", help="buildx --cache-from")
    p.add_argument("--cache-to", action="append", default=[], metavar="SPEC", help="buildx --cache-to")
    p.add_argument("--wheelhouse", type=Path, metavar="DIR", help="prebuilt wheels to reuse (skips compiles)")
    p.add_argument("--target", metavar="STAGE", help="stop at this Dockerfile stage")
    p.add_argument("--sbom", action="store_true", help="attach an SBOM attestation (needs a container builder)")
    p.add_argument("--provenance", action="store_true", help="attach a provenance attestation")
    p.add_argument("--metadata-file", type=Path, metavar="FILE", help="write buildx's metadata (image digest)")
    p.add_argument("--progress", default="plain", choices=["plain", "auto", "tty"], help="BuildKit's progress")
    p.add_argument("--print", dest="print_only", action="store_true", help="print the buildx command, build nothing")
    p.set_defaults(func=run)


def _stage_wheelhouse(source: Path | None, wheels: list[Path]) -> None:
    """The Dockerfile bind-mounts .wheelhouse/ from the context: fill it with the user's wheels (or empty it)."""
    WHEELHOUSE.mkdir(exist_ok=True)
    for old in WHEELHOUSE.glob("*.whl"):
        old.unlink()
    for wheel in wheels:
        try:
            (WHEELHOUSE / wheel.name).hardlink_to(wheel)
        except OSError:
            shutil.copy2(wheel, WHEELHOUSE / wheel.name)
    if wheels:
        print(f"wheelhouse: {len(wheels)} wheels from {source}")


def check_arguments(args: argparse.Namespace, dockerfile: Path) -> None:
    """build's own arguments, before anything runs (the bases, buildx): one line naming the bad value."""
    for tag in args.tag:
        image_ref.check_reference(tag, "--tag")
    if args.registry is not None:
        image_ref.check_registry(args.registry)
    if args.target is not None:
        try:
            text = dockerfile.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{dockerfile}: cannot read it ({exc.strerror or exc})") from None
        if args.target not in (stages := list(build_args.stages(text))):
            raise UsageError(
                f"--target {args.target!r}: no such stage in the Dockerfile (stages: {', '.join(stages)}"
                f"{suggest(args.target, stages)})"
            )
    for flag, specs in (("--cache-from", args.cache_from), ("--cache-to", args.cache_to)):
        for spec in specs:
            image_ref.check_cache(spec, flag)
    path = args.metadata_file
    if path is not None:  # buildx writes it only after the build and the push: a bad path is found now
        if path.is_dir():
            raise UsageError(f"--metadata-file {path}: a folder; give a file name, e.g. {path / 'metadata.json'}")
        if not path.parent.is_dir():
            raise UsageError(f"--metadata-file {path}: no folder {path.parent} (buildx writes it after the push)")
        if not os.access(path if path.exists() else path.parent, os.W_OK):
            raise UsageError(f"--metadata-file {path}: cannot be written (no permission, or a read-only mount)")


def run(args: argparse.Namespace) -> int:
    if args.push_by_digest and not args.registry:
        raise UsageError("--push-by-digest needs --registry (the repository to push to, e.g. ghcr.io/OWNER)")
    if args.push_by_digest and args.tag:
        raise UsageError("--push-by-digest pushes no tag: tag the verified digest with docker buildx imagetools create")
    config = cfg.load(args.config)
    check_arguments(args, ROOT / "Dockerfile")
    given = {key: getattr(args, key) for key in digests.OPTIONS}  # --base-image-digest, --runtime-base-image-digest
    config = digests.pin(config, args.profile or config.defaults.profile, **given)
    plan = planmod.plan_from_args(config, args)
    staged = build_context.stage(config, plan, ROOT)  # plan.json, the series and the build_jobs secret
    request = buildx.BuildRequest(
        context=ROOT,
        dockerfile=ROOT / "Dockerfile",
        tags=image_ref.tags_for(plan, args.registry, args.tag),
        build_args=plan.build_args,
        labels=plan.labels,
        extra_secrets={"build_jobs": staged / build_context.BUILD_JOBS},
        progress=args.progress,
        **{option: getattr(args, option) for option in _GIVEN},
    )
    if args.print_only:
        print(f"# the plan for the build: {staged / 'plan.json'}", file=sys.stderr)
        print(shlex.join(buildx.command(request)))
        return 0
    if args.wheelhouse is not None and not args.wheelhouse.is_dir():
        raise UsageError(f"--wheelhouse {args.wheelhouse}: not a directory")
    wheels = sorted(args.wheelhouse.glob("*.whl")) if args.wheelhouse is not None else []
    if args.wheelhouse is not None and not wheels:
        raise UsageError(f"--wheelhouse {args.wheelhouse}: holds no .whl files")
    if plan.bases == "local":
        bases.make(config, config.profile(plan.profile))
    _stage_wheelhouse(args.wheelhouse, wheels)
    for warning in plan.warnings:
        print(f"warning: {warning}")
    print(
        f"building {', '.join(request.tags)}{' (to push by digest, untagged)' if args.push_by_digest else ''} "
        f"({plan.profile}, SGLang {plan.sglang_version}, "
        f"max_jobs {plan.max_jobs} split as {', '.join(f'{k}={v}' for k, v in plan.build_jobs.items())})",
        flush=True,
    )
    if not args.push_by_digest:
        buildx.run(request)
        print(f"built {', '.join(request.tags)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        metadata = args.metadata_file or Path(tmp) / "metadata.json"
        buildx.run(dataclasses.replace(request, metadata_file=metadata))
        digest = buildx.pushed_digest(metadata)
    for name in sorted({buildx.repository(tag) for tag in request.tags}):
        print(f"pushed {name}@{digest} (no tag moved)")
    return 0
