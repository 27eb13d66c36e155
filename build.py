#!/usr/bin/env python3
"""build.py: plan, build, patch, verify and benchmark the SGLang sm_120 image (see README.md)."""

import sys

try:
    from sm120.cli import main
except ModuleNotFoundError as exc:  # a Python without requirements.txt: one line, not a traceback
    if str(exc.name).startswith("sm120"):
        raise
    from sm120.errors import missing_package

    print(f"build.py: error: {missing_package(exc)}", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main())
