"""The sweep's command line (`allreduce-sweep --help`): every mistake is one line and exit status 2."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import NoReturn

from . import errors, sizes

DESCRIPTION = """\
Measures, on this machine's GPUs, the installed SGLang's symmetric-memory all-reduce (TorchSymmMemCommunicator,
built as SGLang builds it: the two-shot kernel over P2P on sm_120) against NCCL, for bf16 messages of each size:
one process per GPU, both sums compared, both timed (CUDA events, warm-up, repeats, median). Prints the table, the
crossover and the limit to set: SM120_SYMM_MEM_MAX_SIZES=TP:SIZE for the server (docker run -e ...), read at start
by the image's patched SGLang, no rebuild. Exit status: 0 done; 1 the machine cannot run it (no GPU, one GPU, no
P2P, the communicator off, a sum that differs, a rank that failed); 2 a mistake in the request."""

EPILOG = """\
examples:
  docker run --rm --gpus all --ipc=host IMAGE allreduce-sweep
  docker run --rm --gpus all --ipc=host IMAGE allreduce-sweep --tp 4 --sizes 4K..16M --cuda-graph
  docker run --rm --gpus '"device=0,1"' --ipc=host IMAGE allreduce-sweep --sizes 16K,64K,1M,8M"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own: usage + message; ours: one line, exit 2
        raise errors.usage(f"{message} (see allreduce-sweep --help)")


def _number(low: int, high: int, what: str = "a whole number", form: str = r"[0-9]{1,7}", cast: type = int):
    def parse(text: str) -> int | float:
        if not re.fullmatch(form, text) or not low <= cast(text) <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} from {low} to {high}")
        return cast(text)

    return parse


_seconds = _number(10, 86400, "a number of seconds", r"[0-9]{1,6}(\.[0-9]{1,3})?", float)


def parse(argv: list[str]) -> argparse.Namespace:
    """The options; --tp None: every visible GPU, down to a world size the communicator supports."""
    p = _Parser(
        prog="allreduce-sweep",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--tp", type=_number(2, 64), help="ranks (GPUs) to sweep with (default: every visible GPU)")
    p.add_argument(
        "--sizes",
        type=sizes.parse_sizes,
        default=sizes.parse_sizes(sizes.DEFAULT_RANGE),
        metavar="LIST",
        help=f"message sizes: comma-separated, each {sizes.FORM}, or a range A..B of doublings "
        f"(default {sizes.DEFAULT_RANGE}; {sizes.human(sizes.SIZE_MIN)} to {sizes.human(sizes.SIZE_MAX)})",
    )
    p.add_argument("--repeats", type=_number(3, 1000), default=20, help="timed repeats per size (median; default 20)")
    p.add_argument("--warmup", type=_number(0, 1000), default=5, help="untimed repeats before them (default 5)")
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="time both inside CUDA graphs, as SGLang's decode runs them (default: eager, as prefill runs)",
    )
    p.add_argument(
        "--capability",
        type=_number(1, 99),
        metavar="MAJOR",
        help="answer the communicator's capability question with MAJOR (12: SGLang's sm_120 size table and "
        "two-shot path on other GPUs; the timings are then those GPUs', not sm_120's)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write every figure to FILE (JSON)")
    p.add_argument("--timeout", type=_seconds, default=900.0, metavar="S", help="stop the ranks after S seconds")
    ns = p.parse_args(argv)
    if ns.json is not None and (ns.json.is_dir() or not ns.json.parent.is_dir()):
        raise errors.usage(f"--json {str(ns.json)!r}: not a file in an existing directory")
    if ns.json is not None and not os.access(ns.json if ns.json.exists() else ns.json.parent, os.W_OK):
        raise errors.usage(f"--json {str(ns.json)!r}: cannot be written (no permission, or a read-only mount)")
    return ns
