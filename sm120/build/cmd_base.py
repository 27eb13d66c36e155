"""`build.py base`: make the offline CUDA 13.0.1 bases (debootstrap + NVIDIA's CUDA wheels), no registry."""

from __future__ import annotations

import argparse

from sm120.arguments import add_config_args
from sm120.build import bases
from sm120.plan import config as cfg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("base", help="make the offline profile's CUDA bases", description=__doc__)
    add_config_args(p, sglang=False)
    p.add_argument("--force", action="store_true", help="rebuild even when the bases are up to date")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = cfg.load(args.config)
    bases.make(config, config.profile(args.profile or config.defaults.profile), force=args.force)
    return 0
