"""Checks of the machine before SGLang starts (skipped by --dry-run, which touches no GPU and checks only
CUDA_VISIBLE_DEVICES as a string): the GPUs through NVML (libnvidia-ml.so.1, which `--gpus` mounts) or else
nvidia-smi, /dev/shm (Docker's 64 MB is too little for NCCL), the JIT caches, the port."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import Log, UsageError, show
from .models import first_blocked

NVML_LIBRARY = "libnvidia-ml.so.1"
NVML_VARIABLE = "SM120_NVML_LIBRARY"  # another NVML library (tests: none, so a stand-in nvidia-smi decides)
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
SHM_WARN_BYTES = 1 << 30  # 1 GiB
NO_GPU_HINT = "run the container with --gpus all (the NVIDIA Container Toolkit must be set up on the host)"


@dataclass(frozen=True)
class CacheVariable:
    """A variable the Dockerfile's runtime ENV sets to ${CACHE_DIR}/`under` (tests/unit/test_dockerfile.py checks)."""

    name: str
    under: str  # the path below the cache directory; "" is the directory itself
    jit: bool  # a cache something compiles into at run time: must be writable before SGLang starts


CACHE_VARIABLES = (
    CacheVariable("SM120_CACHE_DIR", "", jit=True),  # the entrypoint's own name for the cache directory
    CacheVariable("XDG_CACHE_HOME", "", jit=True),
    CacheVariable("TRITON_CACHE_DIR", "triton", jit=True),
    CacheVariable("TORCHINDUCTOR_CACHE_DIR", "torchinductor", jit=True),
    CacheVariable("TVM_FFI_CACHE_DIR", "tvm-ffi", jit=True),
    CacheVariable("SGLANG_CACHE_DIR", "sglang", jit=True),
    CacheVariable("SGLANG_JIT_CACHE_DIR", "sglang/jit", jit=True),
    CacheVariable("FLASHINFER_WORKSPACE_BASE", "", jit=True),
    CacheVariable("CUDA_CACHE_PATH", "nv", jit=True),
    CacheVariable("HF_HOME", "huggingface", jit=False),  # downloads; may be a read-only mount of its own
)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int] | None  # None: the probe could not tell


class ProbeFailed(Exception):
    pass


def _nvml(library: str) -> list[Gpu] | None:
    """The GPUs NVML sees; None when the library is not there."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    nvml.nvmlErrorString.restype = ctypes.c_char_p

    def call(fn: str, *args: object) -> None:
        rc = getattr(nvml, fn)(*args)
        if rc != 0:
            raise ProbeFailed(f"NVML {fn}: {nvml.nvmlErrorString(rc).decode(errors='replace')} ({rc})")

    call("nvmlInit_v2")
    try:
        count = ctypes.c_uint()
        call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        gpus = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            call("nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(handle))
            name = ctypes.create_string_buffer(96)
            call("nvmlDeviceGetName", handle, name, ctypes.c_uint(96))
            major, minor = ctypes.c_int(), ctypes.c_int()
            call("nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor))
            gpus.append(Gpu(index, name.value.decode(errors="replace"), (major.value, minor.value)))
        return gpus
    finally:
        nvml.nvmlShutdown()


def _nvidia_smi(environ: Mapping[str, str]) -> list[Gpu] | None:
    """The GPUs nvidia-smi lists; None when there is no nvidia-smi."""
    if (exe := shutil.which("nvidia-smi", path=environ.get("PATH"))) is None:
        return None
    query = [exe, "--query-gpu=index,name,compute_cap", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=60, check=False, env=dict(environ))
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProbeFailed(f"nvidia-smi: {exc}") from None
    if out.returncode != 0:
        first = (out.stdout + out.stderr).strip().splitlines()
        raise ProbeFailed(f"nvidia-smi: {first[0] if first else f'exit status {out.returncode}'}")
    gpus = []
    for line in out.stdout.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 2 or not fields[0].isdigit():
            continue
        cap = re.fullmatch(r"(\d+)\.(\d+)", fields[2]) if len(fields) >= 3 else None
        gpus.append(Gpu(int(fields[0]), fields[1], (int(cap[1]), int(cap[2])) if cap else None))
    return gpus


def visible_gpus(environ: Mapping[str, str]) -> list[Gpu]:
    """The GPUs SGLang will see, through NVML, else nvidia-smi; narrowed by CUDA_VISIBLE_DEVICES."""
    try:
        if (gpus := _nvml(environ.get(NVML_VARIABLE) or NVML_LIBRARY)) is None:
            gpus = _nvidia_smi(environ)
    except ProbeFailed as exc:
        raise UsageError(f"no NVIDIA GPU is usable here: {exc}", NO_GPU_HINT) from None
    if gpus is None:
        raise UsageError("no NVIDIA GPU is visible (no NVML library, no nvidia-smi)", NO_GPU_HINT)
    if (wanted := visible_devices(environ)) is not None:
        if not wanted:
            visible = environ.get(VISIBLE_DEVICES, "")
            raise UsageError(f"{VISIBLE_DEVICES}={show(visible)} hides every GPU", "unset it, or list GPU indices")
        if all(w.isdigit() for w in wanted):
            by_index = {g.index: g for g in gpus}
            gpus = [by_index[int(w)] for w in wanted if int(w) in by_index]
        else:  # UUIDs or MIG names: count them
            gpus = gpus[: len(wanted)]
    return gpus


def visible_devices(environ: Mapping[str, str]) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES's entries, checked as a string only (no GPU is probed, so --dry-run checks it too):
    None when unset; [] when it hides every GPU (refused by visible_gpus, when starting: a dry run needs none)."""
    if (visible := environ.get(VISIBLE_DEVICES)) is None:
        return None
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    if not wanted or wanted[0] in ("-1", "NoDevFiles"):
        return []
    if not all(w.isascii() and w.isprintable() for w in wanted):
        raise UsageError(
            f"CUDA_VISIBLE_DEVICES={show(visible)}: not GPU indices or UUIDs",
            "allowed: ASCII GPU indices or UUIDs, comma-separated, e.g. 0,1",
        )
    seen: set[str] = set()
    for entry in wanted:  # the first GPU named twice (index 1 and 01 are the same GPU)
        key = (entry.lstrip("0") or "0") if entry.isdigit() else entry.lower()
        if len(key) > 9 and entry.isdigit():
            raise UsageError(f"CUDA_VISIBLE_DEVICES: {show(entry)} is not a GPU index", "allowed: e.g. 0,1")
        if key in seen:
            raise UsageError(
                f"CUDA_VISIBLE_DEVICES={show(visible)} names GPU {entry} twice",
                "list each GPU once, e.g. 0,1 (TP_SIZE counts GPUs: the same card twice is not two)",
            )
        seen.add(key)
    return wanted


def check_gpus(gpus: list[Gpu], needed: int, what: str, cuda_archs: list[str], log: Log) -> None:
    if not gpus:
        raise UsageError("no NVIDIA GPU is visible in the container", NO_GPU_HINT)
    if len(gpus) < needed:
        listing = ", ".join(f"{g.index}: {g.name}" for g in gpus[:4]) + (" ..." if len(gpus) > 4 else "")
        raise UsageError(
            f"{what} needs {needed} GPUs on this node, {len(gpus)} visible ({listing})",
            "lower TP_SIZE, or give the container more GPUs (--gpus all)",
        )
    majors = {a.split(".")[0] for a in cuda_archs}
    compiled = ", ".join("sm_" + a.replace(".", "") for a in cuda_archs)
    for gpu in gpus[: max(needed, 1)]:
        if gpu.capability is None:
            log.warn(f"GPU {gpu.index} ({gpu.name}): compute capability unknown; this image is compiled for {compiled}")
        elif str(gpu.capability[0]) not in majors:
            cap = f"{gpu.capability[0]}.{gpu.capability[1]}"
            log.warn(
                f"GPU {gpu.index} ({gpu.name}) is compute capability {cap}; this image's kernels are compiled for "
                f"{compiled}: others may fail or be compiled on first use"
            )
    names = sorted({g.name for g in gpus[:needed]})
    log.note(f"GPUs: {len(gpus)} visible ({', '.join(names)}); {needed} used on this node")


def check_shm(gpus_per_node: int, log: Log, path: str = "/dev/shm") -> None:
    if gpus_per_node < 2:
        return
    try:
        st = os.statvfs(path)
    except OSError:
        log.warn(f"{path} is missing: NCCL needs shared memory between GPUs (run with --ipc=host)")
        return
    size = st.f_blocks * st.f_frsize
    if size < SHM_WARN_BYTES:
        log.warn(
            f"{path} is {size // (1 << 20)} MiB (Docker's default is 64 MiB); NCCL needs more across "
            f"{gpus_per_node} GPUs and may hang or fail: run with --ipc=host or --shm-size=16g"
        )


def _writable(directory: Path) -> str | None:
    """Why the directory (or, if missing, its nearest existing parent) cannot take files; None if it can."""
    probe = directory
    while True:
        try:
            st = os.stat(probe)
            break
        except PermissionError:
            return f"cannot enter {first_blocked(probe)}"
        except OSError:  # missing (or a broken link): SGLang's libraries create it under the nearest parent
            if probe == probe.parent:
                return f"{probe}: no such directory"
            probe = probe.parent
    if not stat.S_ISDIR(st.st_mode):
        return f"{probe} is not a directory"
    try:
        with tempfile.NamedTemporaryFile(prefix=".sm120-probe-", dir=probe):
            return None
    except OSError as exc:
        return f"{probe}: {exc.strerror or exc}"


def check_caches(cache_dir: str, environ: Mapping[str, str], log: Log) -> None:
    dirs = {Path(cache_dir): f"the JIT cache directory {cache_dir}"}
    for var in CACHE_VARIABLES:
        if var.jit and environ.get(var.name, "").strip():
            dirs.setdefault(Path(environ[var.name]), f"{var.name}={environ[var.name]}")
    for path, label in dirs.items():
        if (why := _writable(path)) is not None:
            uid = os.getuid()
            raise UsageError(
                f"{label} is not writable by uid {uid} ({why})",
                f"JIT caches go there: mount a named volume (-v sglang-cache:{cache_dir}), chmod/chown the host "
                f"directory for uid {uid}, or run the container with --user of the directory's owner",
            )
    log.note(f"JIT caches: {cache_dir} is writable")


def check_port(host: str, port: int, what: str) -> None:
    """SGLang's HTTP server can bind host:port here; uvicorn binds it only after the model load, so a port that
    is taken, or a host that is no address of this container, costs the whole load. `what` names the source."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(
            f"{what}: the host {host!r} does not resolve here ({getattr(exc, 'strerror', None) or exc})",
            "give an address of this container, e.g. HOST=0.0.0.0 (every interface)",
        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        try:
            sock.bind(address)
        except OSError as exc:
            message, *hint = {
                errno.EADDRINUSE: (
                    f"port {port} on {host} is already in use (another server in this container or, with --network "
                    "host, on the host)",
                    "stop it, or set PORT to a free port",
                ),
                errno.EADDRNOTAVAIL: (
                    f"{host} is not an address of this container, so SGLang cannot listen on it",
                    "allowed: 0.0.0.0 or :: (every interface), or one of the container's own addresses",
                ),
                errno.EACCES: (
                    f"uid {os.getuid()} may not listen on port {port} (a port below 1024 needs privileges)",
                    "set PORT to 1024 or above (the image's default is fine), or run with --user 0:0",
                ),
            }.get(exc.errno, (f"cannot listen on {host}:{port} ({exc.strerror or exc})",))
            raise UsageError(f"{what}: {message}", *hint) from None
