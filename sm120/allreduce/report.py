"""From the measured rows to what the user reads: the table, the crossover and the limit to set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from .sizes import LIMIT_MAX, LIMIT_MIN, format_size, human

ENV = "SM120_SYMM_MEM_MAX_SIZES"  # read by the torch-symm-mem-sm120 patch when the communicator is built
RULE = "torch-symm-mem"  # build.toml's runtime rule that turns the communicator on (SKIP_RUNTIME_RULES names it)


@dataclass(frozen=True)
class Row:
    """One message size: the median time of each path (the slowest rank's), and the two sum checks."""

    size: int  # bytes
    two_shot_us: float
    nccl_us: float
    exact: bool  # integer-valued data (every partial sum exact in bf16): two-shot == NCCL == the expected sum
    random_diff: float  # random data: the largest |two-shot - NCCL|
    random_ok: bool  # within the bound of bf16 rounding in a different order
    ops: int = 1  # all-reduces per timed repeat (the median is per all-reduce)

    @property
    def faster(self) -> str:
        return "two-shot" if self.two_shot_us < self.nccl_us else "NCCL"

    @property
    def sums_ok(self) -> bool:
        return self.exact and self.random_ok


@dataclass(frozen=True)
class Advice:
    crossover: int | None  # the smallest size from which NCCL is faster at every larger measured size
    limit: int | None  # the value to set (messages strictly below it take two-shot); None: leave it off
    lines: list[str] = field(default_factory=list)


def crossover(rows: Sequence[Row]) -> int | None:
    """The start of the tail where NCCL is faster at every measured size; None when two-shot wins the largest."""
    start = None
    for row in reversed(sorted(rows, key=lambda r: r.size)):
        if row.faster != "NCCL":
            break
        start = row.size
    return start


def advise(rows: Sequence[Row], world_size: int, builtin: int | None) -> Advice:
    """The limit to set for `world_size`. SGLang takes two-shot for messages strictly below the limit, so the
    limit is the crossover: every measured size below it, where two-shot was faster, goes to two-shot."""
    ordered = sorted(rows, key=lambda r: r.size)
    if not ordered:
        return Advice(None, None, ["no sizes measured"])
    cross = crossover(ordered)
    built = f"built-in limit at world size {world_size}: {human(builtin)}" if builtin else ""
    if cross == ordered[0].size:
        return Advice(
            cross,
            None,
            [
                f"crossover: NCCL is faster at every size measured ({human(ordered[0].size)} to "
                f"{human(ordered[-1].size)})",
                f"limit to set: none; leave symmetric memory off: SKIP_RUNTIME_RULES={RULE}",
                *([built] if built else []),
            ],
        )
    if cross is None:
        limit = ordered[-1].size
        first = (
            f"crossover: none up to {human(limit)}: two-shot is faster at the largest size measured; "
            f"sweep larger sizes (--sizes) to find it"
        )
    else:
        below = max(r.size for r in ordered if r.size < cross)
        limit = cross
        first = f"crossover: NCCL is faster from {human(cross)} on (two-shot up to {human(below)})"
    limit = min(max(limit, LIMIT_MIN), LIMIT_MAX)
    lines = [
        first,
        f"limit to set: {ENV}={world_size}:{format_size(limit)}   (messages below {human(limit)} take two-shot)",
    ]
    if built:
        lines.append(built + (" (the same)" if builtin == limit else ""))
    return Advice(cross, limit, lines)


def table(rows: Sequence[Row]) -> str:
    """A Markdown table (it goes into notes as it is)."""
    head = [
        "| size | two-shot (us) | NCCL (us) | NCCL / two-shot | faster | integer sum | random: max diff |",
        "| ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    body = [
        f"| {human(r.size)} | {r.two_shot_us:.1f} | {r.nccl_us:.1f} | {r.nccl_us / r.two_shot_us:.2f} | "
        f"{r.faster} | {'equal' if r.exact else 'DIFFERS'} | {r.random_diff:.3g}{'' if r.random_ok else ' (too big)'} |"
        for r in sorted(rows, key=lambda r: r.size)
    ]
    return "\n".join(head + body)


def as_json(meta: dict, rows: Sequence[Row], advice: Advice) -> dict:
    return {
        **meta,
        "rows": [asdict(r) for r in sorted(rows, key=lambda r: r.size)],
        "crossover": advice.crossover,
        "limit": advice.limit,
        "limit_env": f"{ENV}={meta['world_size']}:{format_size(advice.limit)}" if advice.limit else None,
    }
