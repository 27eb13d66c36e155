"""`build.py plan`: print the resolved build plan."""

from __future__ import annotations

import argparse
import json

from .. import config as cfg
from .. import plan as planmod
from .. import resources as res
from ..cli import add_config_args, positive_float, positive_int, shown

MAX_MEMORY_GIB = 1 << 20  # 1 PiB: far above any builder, far below where GiB -> bytes overflows a float


def memory_gib(text: str) -> float:
    value = positive_float(text)
    if value > MAX_MEMORY_GIB:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_MEMORY_GIB} (GiB: 1 PiB), got {shown(text)}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="print the resolved build plan", description=__doc__)
    add_config_args(p)
    p.add_argument("--max-jobs", type=positive_int, metavar="N", help="override the derived compile parallelism")
    p.add_argument("--cpus", type=positive_int, metavar="N", help="plan for a machine with N CPUs (default: this one)")
    p.add_argument(
        "--memory-gib", type=memory_gib, metavar="G", help="plan for a machine with G GiB (default: this one)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def load_plan(args: argparse.Namespace) -> planmod.Plan:
    """Config + plan from the shared options; every subcommand that needs a plan calls this."""
    config = cfg.load(args.config)
    machine = None
    cpus, memory = getattr(args, "cpus", None), getattr(args, "memory_gib", None)
    if cpus is not None or memory is not None:
        here = res.detect()
        machine = res.Resources(
            cpus=cpus or here.cpus,
            memory_bytes=int(memory * res.GIB) if memory else here.memory_bytes,
            source="given by --cpus/--memory-gib",
        )
    return planmod.resolve(
        config,
        profile=getattr(args, "profile", None),
        sglang=getattr(args, "sglang", None),
        max_jobs=getattr(args, "max_jobs", None),
        machine=machine,
    )


def run(args: argparse.Namespace) -> int:
    plan = load_plan(args)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
    else:
        print(planmod.render(plan))
    return 0
