"""`build.py verify --image TAG`: check an image against its own labels, without a GPU (sm120/verify/suite/, testinfra).

Exit 0 when every check passes (a check that needs a GPU is skipped with its reason), 1 when one fails (named on
the last line), 2 for bad input (no such image, no Docker Engine, an image without this project's labels); 130 on
Ctrl-C and 143 on SIGTERM, within seconds, with every container it started removed.
"""

from __future__ import annotations

import argparse
import errno
import os
import tempfile
from pathlib import Path

from sm120.build import image_ref
from sm120.errors import UsageError
from sm120.verify import gpu_ids


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify", help="check an image with the testinfra suite (sm120/verify/suite/)", description=__doc__
    )
    p.add_argument(
        "--image",
        required=True,
        metavar="TAG",
        type=image_ref.image_argument,
        help="the image to check (a tag or an id)",
    )
    p.add_argument("--junit", metavar="FILE", type=Path, help="also write pytest's JUnit XML report to FILE")
    p.add_argument("-k", dest="select", metavar="EXPR", help="run only the checks matching EXPR (pytest -k)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per check")
    p.add_argument(
        "--gpus",
        metavar="all|IDS",
        help="also run the GPU checks in a container with these GPUs (needs the NVIDIA container runtime)",
    )
    p.set_defaults(func=run)


def check_junit(path: Path) -> None:
    """--junit must be a file this user can write: found before the suite runs, not after it."""
    if path.is_dir():
        raise UsageError(f"--junit {path}: a directory; give a file name, e.g. {path / 'verify.xml'}")
    if path.parent.exists() and not path.parent.is_dir():
        raise UsageError(f"--junit {path}: {path.parent} is a file, not a folder; give a writable path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".verify-probe-"):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, "Permission denied")
    except OSError as exc:
        raise UsageError(f"--junit {path}: cannot be written ({exc.strerror or exc}); give a writable path") from None


def run(args: argparse.Namespace) -> int:
    gpus = None if args.gpus is None else gpu_ids.check_gpus(args.gpus, "--gpus")  # before Docker is asked
    if args.junit is not None:
        check_junit(args.junit)
    extra_env = {"SM120_VERIFY_GPUS": gpus} if gpus else {}
    from sm120.verify import runner  # here, not at the top: the docker SDK; build.py's other commands run without it

    return runner.run(args.image, junit=args.junit, select=args.select, verbose=args.verbose, extra_env=extra_env)
