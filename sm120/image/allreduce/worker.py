"""One rank of the sweep (started by `launch`): the groups and the communicator as SGLang makes them (as
docs/allreduce-sweep.md says), then for each size the two sum checks and the timings of both paths."""

from __future__ import annotations

import json
import logging.handlers
import os
import pkgutil
import statistics
import sys
import time
from collections.abc import MutableMapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from .errors import PROG, one_line
from .report import ENV, MULTIMEM, TWO_SHOT
from .sizes import KiB, MiB, format_size, human

COMMUNICATOR = "sglang.srt.distributed.device_communicators.torch_symm_mem:TorchSymmMemCommunicator"
LOGGER = COMMUNICATOR.partition(":")[0]  # the communicator's log lines (what it decided) go into the report
BF16_UNIT = 2.0**-8  # bf16's unit roundoff (8 significant bits)


@dataclass(frozen=True)
class Job:
    world_size: int
    port: int
    sizes: list[int]
    repeats: int
    warmup: int
    cuda_graph: bool
    capability: int | None  # answered to the communicator's capability question; None: the GPU's own
    results: str  # a directory: each rank writes rank<N>.json there
    device: str = "cuda"  # "cpu": the orchestration tests (gloo for both groups, wall-clock timing)
    communicator: str = COMMUNICATOR  # module:callable(group=, device=) that returns the communicator
    progress: bool = True

    @property
    def buffer_size(self) -> str:
        """The limit the sweep's own communicator gets: room for the largest size (SGLang takes sizes below it)."""
        return f"{self.world_size}:{format_size(max(self.sizes) + 4 * KiB)}"


def rule_environment(environ: MutableMapping[str, str]) -> dict[str, str]:
    """Give `environ` what the entrypoint gives the sweep (the image plan's runtime rules' environment) where it lacks
    it (docs/allreduce-sweep.md); returns what it set: nothing where there is no plan (outside the image)."""
    from sm120.image.entrypoint import presets, tools
    from sm120.image.entrypoint.errors import UsageError

    try:
        spec = presets.load(environ).spec
    except UsageError:  # ImageError too: no plan (outside the image), or one that cannot be read
        return {}
    _, rules = tools.command(PROG, [], spec, {})
    added = {name: value for name, value in rules.items() if name not in environ}
    environ.update(added)
    return added


def symm_mem_path(comm: Any) -> str:
    """The kernel `comm.all_reduce` runs, as both variants of the patch decide it (docs/allreduce-sweep.md, "Two-shot
    or multimem"): multimem_all_reduce_ where the patch recorded `use_multimem`, two_shot_all_reduce_ otherwise."""
    multimem = getattr(comm, "use_multimem", None)
    if multimem is None:  # an SGLang without the patch (or a stand-in): all_reduce's own test
        table = getattr(comm, "_WORLD_SIZES_MULTIMEM", None) or {}
        multimem = getattr(comm, "world_size", None) in table.get(getattr(comm, "device_capability", None), ())
    return MULTIMEM if multimem else TWO_SHOT


def ops_per_repeat(size: int) -> int:
    """All-reduces timed back to back in one repeat (enough for the timer), the same on every rank."""
    return max(1, min(64, 8 * MiB // size))


def main(rank: int, job: Job) -> None:
    """torch.multiprocessing's entry: run the rank and write its result file; never raise (the parent reads the
    file, and a traceback would hide the one line it prints)."""
    out_file = Path(job.results) / f"rank{rank}.json"
    try:
        result = _run(rank, job)
    except Exception as exc:
        result = {"error": one_line(f"{type(exc).__name__}: {exc}")[:500]}
    except KeyboardInterrupt:
        result = {"error": "interrupted"}
    if "error" in result:
        result["at"] = time.time()  # the first failure is the cause; the others' peers went away
    tmp = out_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out_file)


def _build(job: Job, torch: Any, group: Any, device: Any) -> tuple[Any, list[str]]:
    make = pkgutil.resolve_name(job.communicator)
    collect = logging.handlers.BufferingHandler(capacity=1 << 20)
    collect.setLevel(logging.INFO)
    log = logging.getLogger(LOGGER)
    log.addHandler(collect)
    previous = log.level
    log.setLevel(logging.INFO)
    told = mock.patch.object(torch.cuda, "get_device_capability", lambda *a, **k: (job.capability, 0))
    try:
        with told if job.capability is not None else nullcontext():
            comm = make(group=group, device=device)
    finally:
        log.removeHandler(collect)
        log.setLevel(previous)
    return comm, [f"{record.levelname}: {record.getMessage()}" for record in collect.buffer]


def _seconds(torch: Any, dist: Any, group: Any, device: Any, run: Any) -> float:
    """Seconds that `run()` took once the ranks of `group` lined up: CUDA events on a GPU (launch gaps included), the
    wall clock on the CPU."""
    dist.barrier(group=group)
    if device.type != "cuda":
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def _run(rank: int, job: Job) -> dict[str, Any]:
    rule_environment(os.environ)  # `python -m sm120.image.allreduce` outside the entrypoint gets its environment too
    import torch
    import torch.distributed as dist

    os.environ[ENV] = job.buffer_size  # the sweep's own communicator holds every size it measures
    cuda = job.device == "cuda"
    device, backend = (torch.device(f"cuda:{rank}"), "nccl") if cuda else (torch.device("cpu"), "gloo")
    if cuda:
        torch.cuda.set_device(rank)
    ranks = list(range(job.world_size))
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{job.port}", world_size=job.world_size, rank=rank)
    try:
        device_group = dist.new_group(ranks, backend=backend)
        cpu_group = dist.new_group(ranks, backend="gloo")
        try:
            comm, messages = _build(job, torch, cpu_group, device)
        except Exception as exc:
            return {
                "error": one_line(f"SGLang's TorchSymmMemCommunicator cannot be built: {type(exc).__name__}: {exc}")
            }
        if getattr(comm, "disabled", True):
            said = [m for m in messages if m.startswith("WARNING")] or messages or ["(it logged nothing)"]
            return {"error": f"SGLang's communicator is off on these GPUs: {said[-1]}", "log": messages}
        if comm.max_size <= max(job.sizes):
            return {
                "error": f"SGLang's communicator takes messages below {human(comm.max_size)} only, not "
                f"{human(max(job.sizes))}: the installed SGLang does not read {ENV} (the torch-symm-mem-sm120 "
                "patch's override)",
                "log": messages,
            }
        path = symm_mem_path(comm)
        rows = []
        for index, size in enumerate(job.sizes, 1):
            row = {**_measure(job, torch, dist, comm, device_group, cpu_group, device, size), "path": path}
            rows.append(row)
            if rank == 0 and job.progress:
                sys.stderr.write(
                    f"[allreduce-sweep] {index}/{len(job.sizes)} {human(size)}: {path} {row['two_shot_us']:.1f} us, "
                    f"NCCL {row['nccl_us']:.1f} us{'' if row['exact'] and row['random_ok'] else ', SUMS DIFFER'}\n"
                )
                sys.stderr.flush()
        return {"rows": rows, "log": messages, "max_size": comm.max_size}
    finally:
        dist.destroy_process_group()


def _measure(
    job: Job, torch: Any, dist: Any, comm: Any, device_group: Any, cpu_group: Any, device: Any, size: int
) -> dict[str, Any]:
    n = size // 2  # bf16 elements
    ws, rank = job.world_size, dist.get_rank()
    index = torch.arange(n, device=device, dtype=torch.int32) % 17

    # 1. Integer values in -8..8, another pattern on each rank: every partial sum of up to 32 ranks is exact in
    #    bf16 (integers up to 256 are), so any order of adding gives the same bits, and both paths must equal
    #    the sum computed here.
    def values(r: int) -> Any:
        return (index * (r + 1) + r) % 17 - 8

    x = values(rank).to(torch.bfloat16)
    expected = sum(values(r) for r in range(ws)).to(torch.bfloat16)
    two_shot = comm.all_reduce(x)  # two-shot's or multimem's (symm_mem_path); the row's key says two_shot for both
    if two_shot is None:  # live: 0.5.23's all_reduce returns None where should_torch_symm_mem_allreduce declines
        raise RuntimeError(f"the communicator declined a {human(size)} message (should_torch_symm_mem_allreduce)")
    nccl = x.clone()
    dist.all_reduce(nccl, group=device_group)
    exact = bool(torch.equal(two_shot, nccl) and torch.equal(two_shot, expected))

    # 2. Random values: the orders of adding differ, so the sums may differ by bf16 rounding, within a bound.
    generator = torch.Generator(device=device).manual_seed(1234 + rank)
    y = torch.randn(n, generator=generator, device=device).to(torch.bfloat16)
    two_shot_r = comm.all_reduce(y)
    nccl_r = y.clone()
    dist.all_reduce(nccl_r, group=device_group)
    largest = y.abs().max().float()
    dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=device_group)
    diff = float((two_shot_r.float() - nccl_r.float()).abs().max())
    random_ok = diff <= 2 * (ws - 1) * BF16_UNIT * ws * float(largest)  # the bound; NaN fails

    # 3. Timings: the same number of all-reduces on every rank, the ranks lined up before each repeat.
    ops = ops_per_repeat(size)
    zeros = torch.zeros(n, device=device, dtype=torch.bfloat16)  # NCCL works in place: values would grow
    paths = {"two_shot_us": lambda: comm.all_reduce(x), "nccl_us": lambda: dist.all_reduce(zeros, group=device_group)}
    mine = {"exact": exact, "random_ok": random_ok, "random_diff": diff}
    for name, op in paths.items():
        run = _graphed(torch, op, ops) if job.cuda_graph else lambda op=op: [op() for _ in range(ops)]
        for _ in range(job.warmup):
            run()
        times = [_seconds(torch, dist, cpu_group, device, run) / ops * 1e6 for _ in range(job.repeats)]
        mine[name] = statistics.median(times)
    gathered: list[Any] = [None] * ws
    dist.all_gather_object(gathered, mine, group=cpu_group)
    # The slowest rank's times and largest difference; a check holds only where it holds on every rank.
    worst = {k: (all if isinstance(v, bool) else max)(g[k] for g in gathered) for k, v in mine.items()}
    return {"size": size, **worst, "ops": ops}


def _graphed(torch: Any, op: Any, ops: int) -> Any:
    """`ops` calls captured in one CUDA graph (as SGLang's decode graphs capture their all-reduces); replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op()  # outside the capture first, as SGLang warms up before it captures
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # NCCL's watchdog thread runs meanwhile
        for _ in range(ops):
            op()
    torch.cuda.synchronize()
    return graph.replay
