"""FlashInfer modules prebuilt in the image (issue #36): a profile's `flashinfer_prebuilt` resolved against the census
of what a first start on sm_120 builds (flashinfer_census.toml), into the plan's `flashinfer_prebuilt` (as JSON, the
build arg FLASHINFER_PREBUILT). The census is of one FlashInfer version: a track that pins another prebuilds nothing."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from sm120.errors import UsageError, suggest
from sm120.plan import tomllib

CENSUS = Path(__file__).with_name("flashinfer_census.toml")
ALL = "census"  # build.toml's word for every module of the census


@cache
def census() -> dict[str, Any]:
    return tomllib.loads(CENSUS.read_text())


def job_memory_gib(plan: dict[str, Any]) -> float:
    """The peak memory of one compile job of the plan's modules (the census's measured `job_memory_gib`), 0 for none."""
    memory = {m["name"]: m["job_memory_gib"] for m in census()["modules"]}
    return max((memory[m["name"]] for m in plan["modules"]), default=0.0)


def resolve(choice: str | list[str], flashinfer: str, key: str) -> dict[str, Any]:
    """`choice`: "census" or module names of the census; `flashinfer`: the track's pin. `modules` are built (census
    order), `first_start_builds` are the census's others, which a first start compiles where the model takes them."""
    data = census()
    entries = {m["name"]: m for m in data["modules"]}
    wanted = set(entries) if choice == ALL else set(choice)
    for name in sorted(wanted - set(entries)):
        raise UsageError(
            f"build.toml: {key} names {name!r}, not a module of the FlashInfer census "
            f"(sm120/plan/flashinfer_census.toml: {ALL!r} or some of {', '.join(entries)}){suggest(name, entries)}"
        )
    plan: dict[str, Any] = {"flashinfer": flashinfer, "arch_list": data["census"]["flashinfer_cuda_arch_list"]}
    if flashinfer != data["census"]["flashinfer"]:
        note = f"the census is of FlashInfer {data['census']['flashinfer']}, this track pins {flashinfer}"
        return {**plan, "modules": [], "first_start_builds": [], "note": f"{note}: nothing prebuilt"}
    modules = [{"name": n, "gen": e["gen"], "kwargs": e.get("kwargs", {})} for n, e in entries.items() if n in wanted]
    return {**plan, "modules": modules, "first_start_builds": [n for n in entries if n not in wanted], "note": ""}
