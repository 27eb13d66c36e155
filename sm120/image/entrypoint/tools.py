"""Tool modes: a word that runs one of the image's own programs instead of SGLang's server, with the arguments
after the word as they are, the container's environment, and that of the runtime rules that turn on what it measures
(a variable set in the container wins, as for the server): `docker run --gpus all --ipc=host IMAGE allreduce-sweep`."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from .spec import EntrypointSpec

ROOT = Path(__file__).resolve().parents[3]  # the directory holding the sm120 package (/opt/sglang-sm120)

# word -> (package whose __main__.main() runs it, the SGLang option whose runtime rules' environment it gets, summary)
TOOLS: dict[str, tuple[str, str, str]] = {
    "allreduce-sweep": (
        "sm120.image.allreduce",
        "--enable-torch-symm-mem",
        "measures SGLang's symmetric-memory (two-shot) all-reduce against NCCL on these GPUs, size by size, and "
        "prints the limit to set (SM120_SYMM_MEM_MAX_SIZES); its options: `allreduce-sweep --help`",
    ),
    "health": (
        "sm120.image.probe",
        "",
        "the HEALTHCHECK's probe: exit 0 when the plan's probe route (build.toml [tracks.X.probe]) answers on PORT",
    ),
}


def command(
    name: str, args: list[str], spec: EntrypointSpec | None, environ: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run tool `name` with `args` in this image's Python. The package is found
    on ROOT, put first on sys.path by the command itself (its processes inherit sys.path), so the environment
    stays the container's own, plus the rules' variables."""
    module, option, _ = TOOLS[name]
    env: dict[str, str] = {}
    for rule in spec.runtime if spec else ():
        if option in rule.args:
            env.update(rule.env)
    env.update(environ)
    boot = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from {module}.__main__ import main; sys.exit(main())"
    return [sys.executable, "-c", boot, *args], env
