#!/usr/bin/env python3
"""The image's entrypoint: `docker run --gpus all IMAGE [baseline|eagle3] [--dry-run] [-- SGLANG-OPTIONS]`.

tini (PID 1) runs this script with the venv's python3; it checks the request in seconds, then replaces itself
with `python3 -m sglang.launch_server ...` (exec), so `docker stop` reaches SGLang through tini. The logic is
the `entrypoint` package beside this file (standard library only): `--help` explains modes and variables.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    from entrypoint.main import main
except ImportError as exc:  # the package was not copied next to this script
    sys.stderr.write(f"entrypoint: error: the 'entrypoint' package beside {__file__} cannot be imported ({exc})\n")
    sys.exit(1)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
