"""`python3 -m sm120.image.allreduce [OPTIONS]` (in the image: `IMAGE allreduce-sweep [OPTIONS]`). Errors are one line
on stderr (at most three), never a traceback."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from . import cli, errors, launch, machine, report
from .errors import SweepError
from .report import ENV, Row


def _header(options: argparse.Namespace, plan: machine.Plan, log: list[str], path: str) -> list[str]:
    cap = f"{plan.capability[0]}.{plan.capability[1]}"
    answered = plan.answered_capability
    told = f"; the communicator was told {answered}" if answered != plan.capability[0] else ""
    where = f"capability {answered}, world size {plan.world_size}"
    kernels = {  # which kernel SGLang's communicator ran (worker.symm_mem_path), and why
        report.MULTIMEM: f"multimem (multimem_all_reduce_ over NVLink multicast: SGLang selects it at {where}), not "
        "two-shot; sm_120 takes two-shot, which --capability 12 measures",
        report.TWO_SHOT: f"two-shot (two_shot_all_reduce_: SGLang's kernel at {where})",
    }
    gpus = f"{plan.world_size} x {plan.gpus[0]}" if len(set(plan.gpus)) == 1 else ", ".join(plan.gpus)
    lines = [
        f"all-reduce sweep: SGLang {plan.sglang}'s TorchSymmMemCommunicator against NCCL, bf16, TP {plan.world_size}, "
        + ("inside CUDA graphs" if options.cuda_graph else "eager"),
        f"GPUs: {gpus} (capability {cap}{told})",
        *(f"communicator: {re.sub(r'^[A-Z]+: (TorchSymmMemCommunicator: )?', '', m)}" for m in log if ENV not in m),
        f"path: {kernels.get(path, path)}",
        f"(the sweep sets {ENV} for its own communicator, so that every size it measures takes {path})",
        f"timings: median of {options.repeats} repeats after {options.warmup} warm-up, the slowest rank's; "
        "a repeat runs several all-reduces back to back (1 to 64, fewer for larger messages)",
    ]
    if plan.capability[0] != 12:
        lines.append(
            f"note: these GPUs are capability {cap}, not sm_120 (12.x): the figures are theirs, not an sm_120 "
            "card's over PCIe"
        )
    return lines


def run(
    argv: list[str],
    *,
    make_machine: Callable[[], machine.TorchMachine] = machine.TorchMachine,
    launcher: Callable[[dict[str, Any], float], list[dict[str, Any]]] = launch.run,
) -> int:
    options = cli.parse(argv)
    plan = machine.plan(options, make_machine())
    sys.stderr.write(
        f"[allreduce-sweep] TP {plan.world_size}: {len(options.sizes)} sizes from "
        f"{report.human(options.sizes[0])} to {report.human(options.sizes[-1])}, starting {plan.world_size} ranks\n"
    )
    sys.stderr.flush()
    fields = ("sizes", "repeats", "warmup", "cuda_graph", "capability")
    job = {"world_size": plan.world_size, **{name: getattr(options, name) for name in fields}}
    results = launcher(job, options.timeout)
    rows, log = [Row(**r) for r in results[0]["rows"]], results[0].get("log", [])
    path = report.path_of(rows)
    advice = report.advise(rows, plan.world_size, plan.builtin_limit)
    out = [*_header(options, plan, log, path), "", report.table(rows), ""]
    bad = [r for r in rows if not r.sums_ok]
    if bad:
        out.append(f"SUMS DIFFER at {', '.join(report.human(r.size) for r in bad)}: {path}'s sum is not NCCL's")
    else:
        out += advice.lines
    print("\n".join(out), flush=True)
    if options.json is not None:
        meta = {**asdict(plan), **{name: job[name] for name in ("cuda_graph", "repeats", "warmup")}, "log": log}
        try:
            options.json.write_text(json.dumps(report.as_json(meta, rows, advice), indent=2) + "\n")
        except OSError as exc:
            raise errors.machine(f"--json {str(options.json)!r}: cannot write it ({exc.strerror or exc})") from None
    if bad:
        raise errors.machine(f"{path}'s sum differs from NCCL's (the table says where): do not turn it on here")
    return 0


def main(argv: list[str] | None = None, **kw: Any) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv, **kw)
    except SweepError as exc:
        sys.stderr.write(exc.render())
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"{errors.PROG}: interrupted\n")
        return 130
    except Exception as exc:  # a bug here must not hide behind a traceback: one line, exit 1
        text = errors.one_line(f"{type(exc).__name__}: {exc}")[:300]
        sys.stderr.write(f"{errors.PROG}: internal error: {text} (please report it)\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
