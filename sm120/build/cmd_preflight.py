"""`build.py preflight [--profile P]`: in seconds, whether this Docker Engine can hold the build of a profile.

Compares the engine's free disk (where it keeps its data: `docker info` DockerRootDir; BuildKit's store and the
images live there) and its memory (`docker info` MemTotal) with build.toml's `[builder.P]`. Exit 0 when both
suffice, 1 naming what was found and what the build needs, 2 for bad input (no engine, no `[builder.P]`).

The disk needed is summed over the tracks to build (`--sglang V`, repeatable, or `--every-track`; default: the
default track): `min_disk_gib` for a track whose image is not in the engine, `min_disk_gib_rebuild` for one whose
image is (its stages cached), so a warm machine is not refused for a build it mostly holds already.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120.arguments import add_config_args
from sm120.build import docker_client
from sm120.errors import CheckFailed, UsageError
from sm120.plan import config as cfg
from sm120.plan.resolve import load_plan

GIB = 1024**3


@dataclass(frozen=True)
class Engine:
    """What the Docker Engine says about the machine it builds on."""

    root_dir: str
    memory_bytes: int
    cpus: int


def engine_facts(info: dict[str, Any]) -> Engine:
    """The facts preflight needs from `docker info` (the SDK's `client.info()`)."""
    return Engine(root_dir=str(info["DockerRootDir"]), memory_bytes=int(info["MemTotal"]), cpus=int(info["NCPU"]))


def free_bytes(path: str) -> int | None:
    """Free space of the file system holding `path`; None when `path` is not on this machine (a remote engine)."""
    if not Path(path).exists():
        return None
    return shutil.disk_usage(path).free


@dataclass(frozen=True)
class Verdict:
    problems: list[str]
    summary: str
    warning: str | None = None


def judge(
    profile: str, needs: cfg.BuilderNeeds, facts: Engine, free: int | None, built: dict[str, bool] | None = None
) -> Verdict:
    """Compare the measurements with the needs; every shortfall is one clause naming found and needed.
    `built`: track -> whether its image is already in the engine (a rebuild), None: one build from nothing."""
    rebuild = needs.min_disk_gib if needs.min_disk_gib_rebuild is None else needs.min_disk_gib_rebuild
    disk_gib = (
        sum(rebuild if present else needs.min_disk_gib for present in built.values()) if built else needs.min_disk_gib
    )
    what = ", ".join(f"{v} ({'a rebuild' if present else 'from nothing'})" for v, present in (built or {}).items())
    tracks = f" of {what}" if what else ""
    problems, warning = [], None
    memory = facts.memory_bytes / GIB
    if free is None:
        warning = (
            f"the engine's root directory {facts.root_dir} is not on this machine (a remote engine?): "
            "free disk not checked"
        )
        disk_text = "disk not checked"
    else:
        disk = free / GIB
        disk_text = f"{disk:.1f} GiB free on {facts.root_dir} (needs {disk_gib:g})"
        if disk < disk_gib:
            problems.append(
                f"found {disk:.1f} GiB free on {facts.root_dir}, the {profile} build{tracks} needs {disk_gib:g} GiB"
            )
    if memory < needs.min_memory_gib:
        problems.append(
            f"found {memory:.1f} GiB of memory in the Docker Engine, "
            f"the {profile} build needs {needs.min_memory_gib:g} GiB"
        )
    summary = (
        f"the {profile} build{tracks} fits: {disk_text}, {memory:.1f} GiB of memory (needs {needs.min_memory_gib:g}), "
        f"{facts.cpus} CPUs"
    )
    return Verdict(problems, summary, warning)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("preflight", help="check that the Docker Engine can hold a build", description=__doc__)
    add_config_args(p, sglang=False)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--sglang", action="append", metavar="VERSION", help="a track to build (repeatable)")
    which.add_argument("--every-track", action="store_true", help="every track in build.toml (./dev test builds all)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = cfg.load(args.config)
    profile = args.profile or config.defaults.profile
    config.profile(profile)  # an unknown profile: the usual one-line error
    needs = config.builder.get(profile)
    if needs is None:
        raise UsageError(
            f"{config.path.name} has no [builder.{profile}]: add min_disk_gib and min_memory_gib for it "
            f"(builder entries: {', '.join(sorted(config.builder)) or 'none'})"
        )
    versions = sorted(config.tracks) if args.every_track else (args.sglang or [config.defaults.sglang])
    for version in versions:
        config.track(version)  # an unknown track: the usual one-line error
    facts, free, present = measure({v: load_plan(config, profile=profile, sglang=v).tags[0] for v in versions})
    verdict = judge(profile, needs, facts, free, present)
    if verdict.warning:
        print(f"warning: {verdict.warning}")
    if verdict.problems:
        raise CheckFailed("; ".join(verdict.problems))
    print(f"preflight: {verdict.summary}")
    return 0


def measure(tags: dict[str, str]) -> tuple[Engine, int | None, dict[str, bool]]:
    """The engine's facts (docker SDK), the free space under its root directory, and which tracks' images
    (track -> its tag) the engine already holds."""
    import docker.errors

    client = docker_client.connect()
    try:
        facts = engine_facts(client.info())
        present = {}
        for version, tag in tags.items():
            try:
                client.images.get(tag)
                present[version] = True
            except docker.errors.ImageNotFound:
                present[version] = False
    finally:
        client.close()
    return facts, free_bytes(facts.root_dir), present
