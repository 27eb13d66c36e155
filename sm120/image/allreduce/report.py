"""From the measured rows to the table, the crossover and the limit to set, each naming the symmetric-memory path
SGLang's communicator took (`Row.path`; docs/allreduce-sweep.md, "Two-shot or multimem")."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from .sizes import LIMIT_MAX, LIMIT_MIN, format_size, human

ENV = "SM120_SYMM_MEM_MAX_SIZES"  # read by the torch-symm-mem-sm120 patch when the communicator is built
RULE = "torch-symm-mem"  # build.toml's runtime rule that turns the communicator on (SKIP_RUNTIME_RULES names it)
TWO_SHOT, MULTIMEM = "two-shot", "multimem"  # the kernels comm.all_reduce runs: two_shot_ / multimem_all_reduce_


@dataclass(frozen=True)
class Row:
    """One message size: the median time of each path (the slowest rank's), and the two sum checks."""

    size: int  # bytes
    two_shot_us: float  # the symmetric-memory path's time, whichever `path` is (the name is kept for the JSON)
    nccl_us: float
    exact: bool  # integer-valued data (every partial sum exact in bf16): symm-mem == NCCL == the expected sum
    random_diff: float  # random data: the largest |symm-mem - NCCL|
    random_ok: bool  # within the bound of bf16 rounding in a different order
    ops: int = 1  # all-reduces per timed repeat (the median is per all-reduce)
    path: str = TWO_SHOT  # the kernel SGLang's communicator ran: TWO_SHOT or MULTIMEM (worker.symm_mem_path)

    @property
    def faster(self) -> str:
        return self.path if self.two_shot_us < self.nccl_us else "NCCL"

    @property
    def sums_ok(self) -> bool:
        return self.exact and self.random_ok


@dataclass(frozen=True)
class Advice:
    crossover: int | None  # the smallest size from which NCCL is faster at every larger measured size
    limit: int | None  # the value to set (messages strictly below it take the symm-mem path); None: leave it off
    lines: list[str] = field(default_factory=list)


def path_of(rows: Sequence[Row]) -> str:
    """The symmetric-memory path of the rows (one communicator measured them all: one path)."""
    return " / ".join(sorted({r.path for r in rows})) or TWO_SHOT


def advise(rows: Sequence[Row], world_size: int, builtin: int) -> Advice:
    """The limit to set for `world_size`: the crossover (SGLang takes its symmetric-memory path strictly below it)."""
    if not (ordered := sorted(rows, key=lambda r: r.size)):
        return Advice(None, None, ["no sizes measured"])
    path = path_of(ordered)
    tail = list(itertools.takewhile(lambda r: r.faster == "NCCL", reversed(ordered)))  # NCCL wins from here on
    cross = tail[-1].size if tail else None
    built = f"built-in limit at world size {world_size}: {human(builtin)}"
    if len(tail) == len(ordered):
        span = f"{human(ordered[0].size)} to {human(ordered[-1].size)}"
        off = f"limit to set: none; leave symmetric memory off: SKIP_RUNTIME_RULES={RULE}"
        return Advice(cross, None, [f"crossover: NCCL is faster at every size measured ({span})", off, built])
    if cross is None:
        first = (
            f"crossover: none up to {human(ordered[-1].size)}: {path} is faster at the largest size measured; "
            f"sweep larger sizes (--sizes) to find it"
        )
    else:
        first = f"crossover: NCCL is faster from {human(cross)} on ({path} up to {human(ordered[-len(tail) - 1].size)})"
    limit = min(max(ordered[-1].size if cross is None else cross, LIMIT_MIN), LIMIT_MAX)
    setting = f"{ENV}={world_size}:{format_size(limit)}"
    lines = [first, f"limit to set: {setting}   (messages below {human(limit)} take {path})"]
    if path != TWO_SHOT:
        lines.append(
            f"the limit is {path}'s: SGLang takes {path}, not two-shot, on these GPUs at world size {world_size}; "
            "on sm_120 (two-shot over PCIe) measure there"
        )
    return Advice(cross, limit, [*lines, built + (" (the same)" if builtin == limit else "")])


def table(rows: Sequence[Row]) -> str:
    """A Markdown table (it goes into notes as it is); the symmetric-memory column is named after its path."""
    path = path_of(rows)
    head = [
        f"| size | {path} (us) | NCCL (us) | NCCL / {path} | faster | integer sum | random: max diff |",
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
        "path": path_of(rows),
        "rows": [asdict(r) for r in sorted(rows, key=lambda r: r.size)],
        "crossover": advice.crossover,
        "limit": advice.limit,
        "limit_env": f"{ENV}={meta['world_size']}:{format_size(advice.limit)}" if advice.limit else None,
    }
