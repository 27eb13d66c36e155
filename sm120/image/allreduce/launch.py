"""One process per GPU (torch.multiprocessing, spawn), a deadline, and the ranks' result files read back. Once a
rank has written an error, the others (left waiting in a collective) are stopped after a short grace. A rank killed
by a signal (a rendezvous between GPUs without P2P can die of SIGFPE) is one line too."""

from __future__ import annotations

import json
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from . import errors, worker

GRACE_S = 15.0  # how long the other ranks get to finish once one has failed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(job_fields: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
    """Start `world_size` ranks of worker.main with a Job made of `job_fields` (+ port and results), wait, and
    return every rank's result (rank 0's holds the rows); raise SweepError (exit 1) on any failure."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="allreduce-sweep-") as results:
        job = worker.Job(**job_fields, port=free_port(), results=results)
        context = mp.start_processes(worker.main, args=(job,), nprocs=job.world_size, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        failed_at: float | None = None
        try:
            while not _join(context):
                now = time.monotonic()
                if failed_at is None and any(r and "error" in r for r in _read(Path(results), job.world_size)):
                    failed_at = now
                if failed_at is not None and now - failed_at > GRACE_S:
                    break  # the others wait in a collective for the failed one: stop them
                if now > deadline:
                    raise errors.machine(
                        f"the ranks did not finish within {timeout:.0f} s (stopped; a hang in NCCL or in the "
                        "symmetric-memory rendezvous?); --timeout gives them longer"
                    )
        finally:  # the deadline, a failed rank, Ctrl-C
            _stop(context)
        return _collect(Path(results), job.world_size)


def _join(context: Any) -> bool:
    """True once every rank has ended; a rank that died (a signal, an exit status) is one line."""
    import torch.multiprocessing as mp

    try:
        return bool(context.join(timeout=0.5))
    except mp.ProcessExitedException as exc:
        code = exc.exit_code
        name = next((s.name for s in signal.Signals if s == -code), f"signal {-code}")
        how = f"was killed by {name}" if code < 0 else f"exited with status {code}"
        raise errors.machine(f"rank {exc.error_index} {how} (its output above says more)") from None
    except mp.ProcessRaisedException as exc:
        last = [line for line in str(exc).strip().splitlines() if line.strip()][-1:] or ["?"]
        raise errors.machine(f"a rank failed: {last[0]}") from None


def _read(results: Path, world_size: int) -> list[dict[str, Any] | None]:
    files = [results / f"rank{rank}.json" for rank in range(world_size)]
    return [json.loads(path.read_text()) if path.is_file() else None for path in files]


def _stop(context: Any) -> None:
    for process in context.processes:
        process.terminate()  # a no-op on one that has ended
    for process in context.processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()


def _collect(results: Path, world_size: int) -> list[dict[str, Any]]:
    missing = "ended without a result (stopped after another rank failed?)"
    out = [r if r is not None else {"error": f"rank {i} {missing}"} for i, r in enumerate(_read(results, world_size))]
    if failed := [(r.get("at", float("inf")), rank, r["error"]) for rank, r in enumerate(out) if "error" in r]:
        _, rank, message = min(failed)  # the first to fail: the others lost their peer
        raise errors.machine(f"rank {rank}: {message}")
    return out
