#!/usr/bin/env python3
"""The image's entrypoint: `docker run --gpus all IMAGE [baseline|eagle3] [--dry-run] [-- SGLANG-OPTIONS]`.

tini (PID 1) runs it; it checks the request in seconds, then execs SGLang, so `docker stop` reaches SGLang through
tini. Its package, sm120.image.entrypoint, lies beside this script in the image and one level up in a checkout.
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
