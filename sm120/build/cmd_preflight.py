"""`build.py preflight [--profile P]`: in seconds, whether this Docker Engine can hold the build of a profile.

Compares the engine's free disk (where it keeps its data: `docker info` DockerRootDir; BuildKit's store and the
images live there) and its memory (`docker info` MemTotal) with build.toml's `[builder.P]`. Exit 0 when both
suffice, 1 naming what was found and what the build needs, 2 for bad input (no engine, no `[builder.P]`).

The disk needed is summed over the tracks to build (`--sglang V`, repeatable, or `--every-track`; default: the
default track): `min_disk_gib` for a track whose image is not in the engine, `min_disk_gib_rebuild` for one whose
image is (its stages cached), so a warm machine is not refused for a build it mostly holds already, and
`min_disk_gib_bases` once while the profile's base image is not in the engine.
`--cache-gib N` adds what the same run writes under this tool's cache directory (SGLANG_SM120_CACHE; `./dev test`
passes what T1's SGLang environments not built yet take), to the engine's need where both share a file system.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from sm120.arguments import add_config_args, positive_float
from sm120.build import docker_client
from sm120.errors import CheckFailed, UsageError
from sm120.patches.pypi import cache_home
from sm120.plan import config as cfg
from sm120.plan.resolve import load_plan

GIB = 1024**3


def free_bytes(path: str) -> int | None:
    """Free space of the file system holding `path`; None when `path` is not on this machine (a remote engine)."""
    return shutil.disk_usage(path).free if Path(path).exists() else None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("preflight", help="check that the Docker Engine can hold a build", description=__doc__)
    add_config_args(p, sglang=False)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--sglang", action="append", metavar="VERSION", help="a track to build (repeatable)")
    which.add_argument("--every-track", action="store_true", help="every track in build.toml (./dev test builds all)")
    p.add_argument(
        "--cache-gib",
        type=positive_float,
        metavar="GIB",
        help="disk the same run writes under this tool's cache directory (SGLANG_SM120_CACHE) besides the builds",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = cfg.load(args.config)
    profile = args.profile or config.defaults.profile
    config.profile(profile)  # an unknown profile: the usual one-line error
    if (needs := config.builder.get(profile)) is None:
        raise UsageError(
            f"{config.path.name} has no [builder.{profile}]: add min_disk_gib and min_memory_gib for it "
            f"(builder entries: {', '.join(sorted(config.builder)) or 'none'})"
        )
    versions = sorted(config.tracks) if args.every_track else (args.sglang or [config.defaults.sglang])
    tags = {v: load_plan(config, profile=profile, sglang=v).tags[0] for v in versions}  # an unknown track: one line
    import docker.errors

    client = docker_client.connect()

    def held(tag: str) -> bool:
        try:
            return client.images.get(tag) is not None
        except docker.errors.ImageNotFound:
            return False

    try:  # `docker info`, and which images (the tracks', the base) the engine holds already
        info, built = client.info(), {version: held(tag) for version, tag in tags.items()}
        bases_held = held(config.profile(profile).base_image)
    finally:
        client.close()
    free = free_bytes(info["DockerRootDir"])
    # Every shortfall is one clause naming found and needed; a track whose image the engine holds is a rebuild.
    rebuild = needs.min_disk_gib if needs.min_disk_gib_rebuild is None else needs.min_disk_gib_rebuild
    bases_gib = 0 if bases_held or needs.min_disk_gib_bases is None else needs.min_disk_gib_bases
    disk_gib = bases_gib + sum(rebuild if present else needs.min_disk_gib for present in built.values())
    what = ("the bases, " if bases_gib else "") + ", ".join(
        f"{v} ({'a rebuild' if present else 'from nothing'})" for v, present in built.items()
    )
    root, memory = info["DockerRootDir"], int(info["MemTotal"]) / GIB
    problems, disk_text = [], "disk not checked"
    cache, cache_gib = cache_home(), args.cache_gib or 0
    while not cache.exists() and cache != cache.parent:  # its nearest existing parent: it may not be made yet
        cache = cache.parent
    shared = free is not None and cache_gib > 0 and cache.stat().st_dev == Path(root).stat().st_dev
    if free is None:
        print(
            f"warning: the engine's root directory {root} is not on this machine (a remote engine?): "
            "free disk not checked"
        )
    else:
        total = disk_gib + (cache_gib if shared else 0)
        disk_text = f"{free / GIB:.1f} GiB free on {root} (needs {total:g})"
        if free / GIB < total:
            besides = f" and {cache_gib:g} GiB more under {cache_home()} (--cache-gib)" if shared else ""
            problems.append(
                f"found {free / GIB:.1f} GiB free on {root}, the {profile} build of {what} needs {disk_gib:g} GiB"
                + besides
            )
    cache_free = free_bytes(str(cache)) if cache_gib and not shared else None
    if cache_free is not None and cache_free / GIB < cache_gib:
        problems.append(f"found {cache_free / GIB:.1f} GiB free on {cache}, the run writes {cache_gib:g} GiB under it")
    if memory < needs.min_memory_gib:
        problems.append(
            f"found {memory:.1f} GiB of memory in the Docker Engine, "
            f"the {profile} build needs {needs.min_memory_gib:g} GiB"
        )
    if problems:
        raise CheckFailed("; ".join(problems))
    print(
        f"preflight: the {profile} build of {what} fits: {disk_text}, {memory:.1f} GiB of memory (needs "
        f"{needs.min_memory_gib:g}), {info['NCPU']} CPUs"
    )
    return 0
