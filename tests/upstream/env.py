"""T1 environments: a cached, CPU-only venv per SGLang release, for tests that import the real SGLang.

`ensure("0.5.9")` returns the python executable of ~/.cache/sglang-sm120/upstream/0.5.9/venv, in which

    import sglang.srt.server_args                  # the real CLI parser of that release
    import sglang.srt.models.kimi_k25              # with the sgl_kernel stand-in installed first

work on a machine without a GPU. The venv holds `sglang==V` installed `--no-deps` plus the small set of
packages those two imports need (DEPENDENCIES), each at the version that release pins in its own
Requires-Dist where it pins one, and torch at the track's version from build.toml. PyPI's Linux torch
wheels are CUDA builds that import only with their nvidia-* dependencies, so torch comes with its deps.

The venv is reused while its recorded inputs (record.json: release, base Python, torch, the dependency
list, this module's schema) are unchanged, rebuilt when they change, and guarded by a file lock so two
test runs never build the same one at once. It lives outside the checkout; SGLANG_SM120_CACHE moves the
cache root and SGLANG_SM120_UPSTREAM_PYTHON picks the base interpreter (default: the running one; SGLang
0.5.23 has wheels for CPython 3.11 and 3.12 only).

`run_snippet(python, code)` runs code in such an interpreter (stand-in kernels first) and returns what the
code passed to `emit(obj)`, decoded from JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sm120.errors import CheckFailed, UsageError
from sm120.patches import pypi
from sm120.plan import config as cfg
from sm120.verify.behaviour import SGL_KERNEL_STANDIN, SNIPPET_PRELUDE

# Bump when the way a venv is built changes: every cached venv is then rebuilt once.
SCHEMA = 1

# What `import sglang.srt.server_args` and `import sglang.srt.models.kimi_k25` need beyond sglang itself,
# measured by importing both modules in 0.5.9 and 0.5.23 (msgspec and einops for both, apache-tvm-ffi for
# 0.5.23). torch is added separately, at the track's version.
DEPENDENCIES: tuple[str, ...] = (
    "aiohttp",
    "apache-tvm-ffi",
    "compressed-tensors",
    "dill",
    "einops",
    "gguf",
    "huggingface_hub",
    "IPython",
    "msgspec",
    "numpy",
    "openai",
    "orjson",
    "packaging",
    "partial_json_parser",
    "pillow",
    "pybase64",
    "pydantic",
    "pyzmq",
    "requests",
    "safetensors",
    "sentencepiece",
    "starlette",
    "torchvision",
    "tqdm",
    "transformers",
)


class UpstreamEnvError(CheckFailed):
    """The venv for a release could not be built or does not import (one line; exit 1)."""


def env_dir(version: str) -> Path:
    return pypi.cache_home() / "upstream" / version


def _base_python() -> str:
    return os.environ.get("SGLANG_SM120_UPSTREAM_PYTHON") or sys.executable


def _python_version(python: str) -> str:
    try:
        out = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise UsageError(
            f"base interpreter {python!r} does not run ({exc}); set SGLANG_SM120_UPSTREAM_PYTHON"
        ) from None
    return out.stdout.strip()


def _torch_for(version: str, config: cfg.Config) -> str | None:
    track = config.tracks.get(version)
    return track.torch.version if track else None


def inputs_for(version: str, config: cfg.Config | None = None) -> dict[str, Any]:
    """What a cached venv is built from; a change in any of it rebuilds the venv."""
    try:
        Version(version)
    except InvalidVersion:
        raise UsageError(f"{version!r} is not an SGLang version like 0.5.9") from None
    config = config or cfg.load()
    base = _base_python()
    return {
        "schema": SCHEMA,
        "sglang": version,
        "python": _python_version(base),
        "base_python": str(Path(base).resolve()),
        # None: not a track; the release's own torch pin is used (and recorded in requirements).
        "torch": _torch_for(version, config),
        "dependencies": list(DEPENDENCIES),
    }


def _read_record(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / "record.json").read_text())
    except (OSError, ValueError):
        return None


def python_of(directory: Path) -> Path:
    return directory / "venv" / "bin" / "python"


def ensure(version: str, *, config: cfg.Config | None = None, log: Any = None) -> Path:
    """Return the python executable of the T1 venv for SGLang `version`, building it if needed."""
    config = config or cfg.load()
    inputs = inputs_for(version, config)
    directory = env_dir(version)
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    with pypi.locked(directory.parent / f"{version}.lock"):
        record = _read_record(directory)
        if record and record.get("inputs") == inputs and python_of(directory).exists():
            return python_of(directory)
        if directory.exists():
            say(f"upstream env {version}: inputs changed or incomplete, rebuilding {directory}")
            shutil.rmtree(directory)
        _build(version, inputs, directory, say)
    return python_of(directory)


def _run_logged(cmd: Sequence[str], logfile: Path, what: str) -> None:
    with open(logfile, "a") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        lines = logfile.read_text(errors="replace").splitlines()
        errors = [ln.strip() for ln in lines if ln.strip().startswith("ERROR")]
        detail = errors[-1] if errors else (lines[-1].strip() if lines else "no output")
        raise UpstreamEnvError(f"{what} failed ({detail}); full log: {logfile}")


def _requirements(version: str, requires: list[str], torch: str | None, environment: dict[str, str]) -> list[str]:
    """The release's own Requires-Dist line for each dependency (its pin or range), else the bare name."""
    wanted = {canonicalize_name(n): n for n in (*DEPENDENCIES, "torch")}
    found: dict[str, str] = {}
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        key = canonicalize_name(req.name)
        if key not in wanted:
            continue
        env = {**environment, "extra": ""}
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        found[key] = f"{req.name}{req.specifier}" if req.specifier else req.name
    pinned_torch = found.get("torch")
    if torch is not None:
        if pinned_torch and pinned_torch != f"torch=={torch}":
            raise UsageError(
                f"build.toml: tracks.{version!r}.torch.version = {torch!r} but sglang {version} requires "
                f"{pinned_torch}; make the track pin what the release pins"
            )
        found["torch"] = f"torch=={torch}"
    elif not pinned_torch:
        raise UsageError(f"sglang {version} does not pin torch and has no track in build.toml: add one")
    return [found.get(key, name) for key, name in sorted(wanted.items())]


def _du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


IMPORT_CHECK = """
import importlib, time
timings = {}
for name in ("sglang.srt.server_args", "sglang.srt.models.kimi_k25"):
    t = time.monotonic()
    importlib.import_module(name)
    timings[name] = round(time.monotonic() - t, 1)
import sglang
emit({"version": getattr(sglang, "__version__", None), "import_s": timings})
"""


def _build(version: str, inputs: dict[str, Any], directory: Path, say: Any) -> None:
    started = time.monotonic()
    directory.mkdir(parents=True)
    logfile = directory / "install.log"
    venv = directory / "venv"
    python = python_of(directory)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]

    say(f"upstream env {version}: creating {venv}")
    _run_logged([inputs["base_python"], "-m", "venv", str(venv)], logfile, f"creating the venv for sglang {version}")
    say(f"upstream env {version}: pip install --no-deps sglang=={version}")
    _run_logged(
        [*pip, "install", "--progress-bar", "off", "--no-deps", f"sglang=={version}"],
        logfile,
        f"pip install sglang=={version}",
    )

    probe = (
        "import importlib.metadata as m, json, platform, sys;"
        "print(json.dumps({'requires': m.requires('sglang') or [],"
        " 'python_version': '.'.join(platform.python_version_tuple()[:2]),"
        " 'python_full_version': platform.python_version()}))"
    )
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True).stdout
    meta = json.loads(out)
    environment = {
        **default_environment(),
        "python_version": meta["python_version"],
        "python_full_version": meta["python_full_version"],
    }
    requirements = _requirements(version, meta["requires"], inputs["torch"], environment)
    say(f"upstream env {version}: pip install {' '.join(requirements)} (torch with its CUDA libraries: minutes)")
    t_deps = time.monotonic()
    _run_logged(
        [*pip, "install", "--progress-bar", "off", *requirements],
        logfile,
        f"installing the dependencies of sglang {version}",
    )
    deps_s = time.monotonic() - t_deps

    say(f"upstream env {version}: checking the imports")
    try:
        result = run_snippet(python, IMPORT_CHECK, timeout=900)
    except SnippetError as exc:
        raise UpstreamEnvError(f"sglang {version} venv built but does not import: {exc}") from None
    if result["version"] != version:
        raise UpstreamEnvError(f"{venv} imports sglang {result['version']}, not {version}")

    freeze = subprocess.run([*pip, "freeze"], check=True, capture_output=True, text=True).stdout.splitlines()
    record = {
        "inputs": inputs,
        "requirements": requirements,
        "freeze": freeze,
        "build_s": round(time.monotonic() - started, 1),
        "deps_install_s": round(deps_s, 1),
        "size_bytes": _du(venv),
        "import_s": result["import_s"],
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = directory / "record.json.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(directory / "record.json")  # written last: its presence marks the venv complete
    say(
        f"upstream env {version}: ready in {record['build_s']:.0f} s, "
        f"{record['size_bytes'] / 2**30:.2f} GiB, imports {result['import_s']}"
    )


def record(version: str) -> dict[str, Any] | None:
    """The record.json of a built venv (timings, size, resolved versions), or None."""
    return _read_record(env_dir(version))


# The disk one venv takes while it is built, rounded up from record.json's size_bytes (2026-12-04: 0.5.9 7.2 GiB,
# 0.5.23 6.0 GiB, torch and its CUDA libraries the most of it) with the wheels pip unpacks beside it.
ENV_GIB = 8


def missing_gib() -> int:
    """What the T1 venvs of build.toml's tracks that are not built yet will take (`./dev test` tells preflight)."""
    return ENV_GIB * sum(record(version) is None for version in cfg.load().tracks)


# ---------------------------------------------------------------------------------------------------
# Running code in an upstream interpreter
# ---------------------------------------------------------------------------------------------------


class SnippetError(CheckFailed):
    """A snippet run in an upstream interpreter exited non-zero; the message is its last stderr lines."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


def run_snippet(
    python: Path | str,
    code: str,
    *,
    pythonpath: Sequence[Path | str] = (),
    stubs: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> Any:
    """Run `code` in `python` (isolated mode, a scratch cwd) and return what it passed to `emit(obj)`.

    `pythonpath` entries go first on sys.path (e.g. a patched source tree that must shadow the venv's
    sglang). With `stubs`, the sgl_kernel stand-in (sm120/verify/sgl_kernel_standin.py) is installed first and
    available to the code as `sm120_upstream_stubs`. Raises SnippetError with the tail of stderr when the
    code fails; returns None when it never called emit.
    """
    prelude = SNIPPET_PRELUDE.format(
        pythonpath=[str(Path(p).resolve()) for p in pythonpath], stubs=stubs, stubs_file=str(SGL_KERNEL_STANDIN)
    )
    source = prelude + "\n" + textwrap.dedent(code)
    with tempfile.TemporaryDirectory(prefix="sm120-snippet-") as scratch:
        result_file = Path(scratch) / "result.json"
        child_env = {
            **os.environ,
            "SM120_RESULT": str(result_file),
            "CUDA_VISIBLE_DEVICES": "",
            "TOKENIZERS_PARALLELISM": "false",
            **(env or {}),
        }
        child_env.pop("PYTHONPATH", None)
        try:
            proc = subprocess.run(
                [str(python), "-I", "-c", source],
                cwd=scratch,
                env=child_env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise SnippetError(f"{python}: snippet ran past {timeout:.0f} s") from None
        if proc.returncode != 0:
            tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-3:]
            raise SnippetError(f"{python}: exit {proc.returncode}: {' | '.join(tail)}", proc.stderr)
        if not result_file.exists():
            return None
        return json.loads(result_file.read_text())
