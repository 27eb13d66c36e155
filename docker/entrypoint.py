#!/usr/bin/env python3
"""The image's entrypoint: `docker run --gpus all IMAGE [baseline|eagle3] [--dry-run] [-- SGLANG-OPTIONS]`.

tini (PID 1) runs this script with the venv's python3; it checks the request in seconds, then replaces itself
with `python3 -m sglang.launch_server ...` (exec), so `docker stop` reaches SGLang through tini. The logic is
the package `sm120.image.entrypoint` (standard library only; `--help` explains modes and variables). The image holds
that package beside this script (/opt/sglang-sm120/sm120/image/entrypoint); a checkout holds it one level up from
docker/, where the tests run this script.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = next((d for d in (HERE, HERE.parent) if (d / "sm120" / "image" / "entrypoint" / "main.py").is_file()), HERE)
sys.path.insert(0, str(ROOT))

try:
    from sm120.image.entrypoint.main import main
except ImportError as exc:  # the package was not copied next to this script
    sys.stderr.write(f"entrypoint: error: the package sm120.image under {ROOT} cannot be imported ({exc})\n")
    sys.exit(1)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
