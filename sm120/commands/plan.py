"""`build.py plan`: print the resolved build plan."""

from __future__ import annotations

import argparse
import sys

from .. import plan as planmod
from ..cli import add_config_args, add_machine_args
from ..plan_types import Plan


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="print the resolved build plan", description=__doc__)
    add_config_args(p)
    add_machine_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def plan_from_args(args: argparse.Namespace) -> Plan:
    """sm120.plan.load_plan with the shared options (add_config_args, add_machine_args) of a subcommand."""
    return planmod.load_plan(
        args.config,
        profile=getattr(args, "profile", None),
        sglang=getattr(args, "sglang", None),
        max_jobs=getattr(args, "max_jobs", None),
        cpus=getattr(args, "cpus", None),
        memory_gib=getattr(args, "memory_gib", None),
    )


def run(args: argparse.Namespace) -> int:
    plan = plan_from_args(args)
    if args.json:
        sys.stdout.write(plan.to_json())
    else:
        print(planmod.render(plan))
    return 0
