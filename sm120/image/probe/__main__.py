"""`health`: exit 0 when the plan's probe route answers 2xx on 127.0.0.1:$PORT within the plan's timeout, else 1
with one line on stderr. Standard library only: the HEALTHCHECK runs it every interval."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from sm120.image.entrypoint import presets, spec


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        sys.stderr.write("health: error: takes no arguments (the route and timeout are the image plan's probe)\n")
        return 2
    path = Path(os.environ.get(presets.VARIABLE) or spec.PLAN_JSON_PATH)
    try:
        probe = json.loads(path.read_text(encoding="utf-8"))["probe"]
        route, timeout = str(probe["route"]), float(probe["timeout_s"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"health: error: cannot read the probe from {path}: {type(exc).__name__}\n")
        return 1
    url = f"http://127.0.0.1:{os.environ.get('PORT', '30000')}{route}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return 0 if 200 <= response.status < 300 else 1
    except OSError as exc:  # urllib's URLError and HTTPError too
        sys.stderr.write(f"health: {url}: {getattr(exc, 'reason', exc)}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
