"""T0: the checks before SGLang starts, with the GPUs faked: NVML (a stand-in libnvidia-ml.so.1 compiled here)
and nvidia-smi (a script); /dev/shm's size; the JIT cache directories; and, through the entrypoint, the port and
host SGLang would listen on (only when starting) and CUDA_VISIBLE_DEVICES naming a GPU twice (--dry-run too)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from sm120.image.entrypoint import errors, preflight
from tests.entrypoint_helpers import RTX_PRO, fake_nvidia_smi, run_entrypoint, standin_run
from tests.unit.test_entrypoint_bad_input import BIG, HEAD, assert_refused, dry_run_line

UsageError = errors.UsageError

NO_NVML = {"SM120_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1"}


def smi_env(tmp_path: Path, gpus=None, fail=None, **extra) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, gpus, fail=fail)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", **NO_NVML, **extra}


# --------------------------------------------------------------------------------------------------
# nvidia-smi
# --------------------------------------------------------------------------------------------------


def test_nvidia_smi_lists_the_gpus(tmp_path):
    gpus = preflight.visible_gpus(smi_env(tmp_path, [(RTX_PRO, "12.0")] * 8))
    assert len(gpus) == 8 and gpus[3] == preflight.Gpu(3, RTX_PRO, (12, 0))


def test_enough_gpus_and_capability_12(tmp_path):
    log = errors.Log()
    gpus = preflight.visible_gpus(smi_env(tmp_path, [(RTX_PRO, "12.0")] * 8))
    preflight.check_gpus(gpus, 8, "TP_SIZE='8'", ["12.0"], log)
    assert log.warnings() == []
    assert f"GPUs: 8 visible ({RTX_PRO}); 8 used on this node" in log.lines()


def test_too_few_gpus(tmp_path):
    gpus = preflight.visible_gpus(smi_env(tmp_path, [(RTX_PRO, "12.0")] * 2))
    with pytest.raises(UsageError) as info:
        preflight.check_gpus(gpus, 8, "TP_SIZE='8'", ["12.0"], errors.Log())
    assert info.value.lines[0] == f"TP_SIZE='8' needs 8 GPUs on this node, 2 visible (0: {RTX_PRO}, 1: {RTX_PRO})"
    assert "lower TP_SIZE" in info.value.lines[1]


def test_other_capability_is_a_warning_naming_the_compiled_archs(tmp_path):
    log = errors.Log()
    gpus = preflight.visible_gpus(smi_env(tmp_path, [("NVIDIA H100 80GB HBM3", "9.0")]))
    preflight.check_gpus(gpus, 1, "TP 1", ["12.0"], log)
    (warning,) = log.warnings()
    assert "GPU 0 (NVIDIA H100 80GB HBM3) is compute capability 9.0" in warning and "compiled for sm_120" in warning


def test_old_nvidia_smi_without_compute_cap(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho '0, NVIDIA RTX 5090, [N/A]'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    log = errors.Log()
    gpus = preflight.visible_gpus({"PATH": f"{bin_dir}:/usr/bin:/bin", **NO_NVML})
    preflight.check_gpus(gpus, 1, "TP 1", ["12.0"], log)
    assert gpus[0].capability is None and "compute capability unknown" in log.warnings()[0]


def test_no_gpu_visible_says_gpus_all(tmp_path):
    with pytest.raises(UsageError) as info:
        preflight.visible_gpus({"PATH": str(tmp_path), **NO_NVML})  # no NVML, no nvidia-smi
    assert "no NVIDIA GPU is visible" in info.value.lines[0] and "--gpus all" in info.value.lines[1]


def test_nvidia_smi_failing(tmp_path):
    env = smi_env(tmp_path, fail="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(UsageError) as info:
        preflight.visible_gpus(env)
    assert "couldn't communicate with the NVIDIA driver" in info.value.lines[0] and "--gpus all" in info.value.lines[1]


def test_nvidia_smi_with_no_gpu(tmp_path):
    gpus = preflight.visible_gpus(smi_env(tmp_path, []))
    with pytest.raises(UsageError, match="no NVIDIA GPU is visible in the container"):
        preflight.check_gpus(gpus, 1, "TP 1", ["12.0"], errors.Log())


@pytest.mark.parametrize(("visible", "count"), [("0,1", 2), ("3", 1), ("GPU-aaa,GPU-bbb,GPU-ccc", 3), ("7,9", 1)])
def test_cuda_visible_devices_narrows(tmp_path, visible, count):
    gpus = preflight.visible_gpus(smi_env(tmp_path, [(RTX_PRO, "12.0")] * 8, CUDA_VISIBLE_DEVICES=visible))
    assert len(gpus) == count


def test_cuda_visible_devices_hiding_all(tmp_path):
    with pytest.raises(UsageError, match="hides every GPU"):
        preflight.visible_gpus(smi_env(tmp_path, [(RTX_PRO, "12.0")], CUDA_VISIBLE_DEVICES=""))


# --------------------------------------------------------------------------------------------------
# NVML, through a stand-in libnvidia-ml.so.1 with the functions and signatures the entrypoint calls
# --------------------------------------------------------------------------------------------------

FAKE_NVML = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int count(void) { const char *c = getenv("FAKE_NVML_COUNT"); return c ? atoi(c) : 0; }
int nvmlInit_v2(void) { const char *f = getenv("FAKE_NVML_INIT_RC"); return f ? atoi(f) : 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int rc) { return rc == 9 ? "Driver Not Loaded" : "Unknown Error"; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = (unsigned int)count(); return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) { *h = (void *)(size_t)(i + 1); return 0; }
int nvmlDeviceGetName(void *h, char *name, unsigned int len) {
    snprintf(name, len, "Fake GPU %d", (int)(size_t)h - 1); return 0;
}
int nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {
    const char *m = getenv("FAKE_NVML_MAJOR"); *major = m ? atoi(m) : 12; *minor = 0; return 0;
}
"""


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here to build the stand-in libnvidia-ml.so.1")
    build = tmp_path_factory.mktemp("nvml")
    (build / "nvml.c").write_text(FAKE_NVML)
    lib = build / "libnvidia-ml.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(build / "nvml.c")], check=True)
    return lib


@pytest.fixture
def nvml_env(fake_nvml, monkeypatch):
    def make(**values: str) -> dict[str, str]:
        for key in ("FAKE_NVML_COUNT", "FAKE_NVML_INIT_RC", "FAKE_NVML_MAJOR"):
            monkeypatch.delenv(key, raising=False)
        for key, value in values.items():
            monkeypatch.setenv(key, value)  # read by the library, from this process's environment
        return {"SM120_NVML_LIBRARY": str(fake_nvml), "PATH": "/nonexistent"}

    return make


def test_nvml_lists_the_gpus(nvml_env):
    gpus = preflight.visible_gpus(nvml_env(FAKE_NVML_COUNT="4"))
    assert gpus == [preflight.Gpu(i, f"Fake GPU {i}", (12, 0)) for i in range(4)]


def test_nvml_capability(nvml_env):
    log = errors.Log()
    gpus = preflight.visible_gpus(nvml_env(FAKE_NVML_COUNT="1", FAKE_NVML_MAJOR="10"))
    preflight.check_gpus(gpus, 1, "TP 1", ["12.0"], log)
    assert "compute capability 10.0" in log.warnings()[0]


def test_nvml_driver_not_loaded(nvml_env):
    with pytest.raises(UsageError) as info:
        preflight.visible_gpus(nvml_env(FAKE_NVML_INIT_RC="9"))
    assert "NVML nvmlInit_v2: Driver Not Loaded (9)" in info.value.lines[0] and "--gpus all" in info.value.lines[1]


def test_nvml_wins_over_nvidia_smi(nvml_env, tmp_path):
    env = nvml_env(FAKE_NVML_COUNT="2")
    fake_nvidia_smi(tmp_path / "bin", [(RTX_PRO, "12.0")] * 8)
    gpus = preflight.visible_gpus({**env, "PATH": str(tmp_path / "bin")})
    assert len(gpus) == 2 and gpus[0].name == "Fake GPU 0"


# --------------------------------------------------------------------------------------------------
# /dev/shm
# --------------------------------------------------------------------------------------------------


def fake_statvfs(size: int):
    return lambda path: SimpleNamespace(f_blocks=size // 4096, f_frsize=4096)


def test_dockers_default_shm_is_a_warning(monkeypatch):
    monkeypatch.setattr(preflight.os, "statvfs", fake_statvfs(64 << 20))
    log = errors.Log()
    preflight.check_shm(8, log)
    (warning,) = log.warnings()
    assert "/dev/shm is 64 MiB" in warning and "--ipc=host" in warning and "--shm-size" in warning


def test_large_shm_or_one_gpu_is_quiet(monkeypatch):
    monkeypatch.setattr(preflight.os, "statvfs", fake_statvfs(16 << 30))
    log = errors.Log()
    preflight.check_shm(8, log)
    monkeypatch.setattr(preflight.os, "statvfs", fake_statvfs(64 << 20))
    preflight.check_shm(1, log)  # NCCL does not run between GPUs with one GPU
    assert log.warnings() == []


# --------------------------------------------------------------------------------------------------
# JIT cache directories
# --------------------------------------------------------------------------------------------------


def test_writable_cache_dirs(tmp_path):
    log = errors.Log()
    cache = tmp_path / "cache"
    cache.mkdir()
    preflight.check_caches(str(cache), {"TRITON_CACHE_DIR": str(cache / "triton")}, log)  # missing: parent counts
    assert f"JIT caches: {cache} is writable" in log.lines()


def test_cache_dir_that_is_a_file(tmp_path):
    (tmp_path / "cache").write_text("not a directory")
    with pytest.raises(UsageError) as info:
        preflight.check_caches(str(tmp_path / "cache"), {}, errors.Log())
    assert f"the JIT cache directory {tmp_path / 'cache'} is not writable" in info.value.lines[0]
    assert "named volume" in info.value.lines[1]


def test_cache_variable_that_points_into_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "ok").mkdir()
    with pytest.raises(UsageError, match=r"TRITON_CACHE_DIR=.*file/triton is not writable"):
        preflight.check_caches(
            str(tmp_path / "ok"), {"TRITON_CACHE_DIR": str(tmp_path / "file" / "triton")}, errors.Log()
        )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories: needs a non-root user")
def test_read_only_cache_dir(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o555)
    try:
        with pytest.raises(UsageError, match="is not writable by uid"):
            preflight.check_caches(str(cache), {}, errors.Log())
    finally:
        cache.chmod(0o755)


# --------------------------------------------------------------------------------------------------
# Through the entrypoint: the port and host SGLang would listen on; the same GPU twice
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def setup(tmp_path: Path) -> dict:
    """The entrypoint run as a process: the stand-in SGLang, 8 fake GPUs, a synthetic plan, two models."""
    return standin_run(tmp_path)


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_the_port_already_taken_is_found_when_starting(setup, taken_port):
    env = {**setup["env"], "HOST": "127.0.0.1", "PORT": str(taken_port)}
    proc = run_entrypoint(["baseline"], env)
    assert_refused(proc, f"PORT='{taken_port}'", f"port {taken_port} on 127.0.0.1 is already in use")
    assert not Path(env["FAKE_SGLANG_RECORD"]).exists(), "SGLang must not be started"
    # --dry-run touches no socket: the same request is a command there.
    assert run_entrypoint(["baseline", "--dry-run"], env).returncode == 0


LISTEN = [
    ("not-an-address-here", {"HOST": "192.0.2.123"}, ["192.0.2.123 is not an address of this container"]),
    ("name-that-does-not-resolve", {"HOST": "no-such-host.invalid"}, ["'no-such-host.invalid' does not resolve"]),
]


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in LISTEN], ids=[c[0] for c in LISTEN])
def test_a_host_sglang_cannot_listen_on_is_found_when_starting(setup, changes, expected):
    proc = run_entrypoint(["baseline"], {**setup["env"], **changes})
    assert_refused(proc, *expected)


def test_a_free_port_still_starts(setup):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**setup["env"], "HOST": "127.0.0.1", "PORT": str(port)}
    proc = run_entrypoint(["baseline"], env)
    assert proc.returncode == 0, proc.stderr
    assert Path(env["FAKE_SGLANG_RECORD"]).exists()


GPUS_TWICE = [
    ("same-index", "0,0", "GPU 0 twice"),
    ("leading-zero", "1,01", "GPU 01 twice"),
    ("uuid", "GPU-a,gpu-A", "twice"),
]


@pytest.mark.parametrize(("visible", "expected"), [c[1:] for c in GPUS_TWICE], ids=[c[0] for c in GPUS_TWICE])
def test_the_same_gpu_twice_in_cuda_visible_devices(setup, visible, expected):
    proc = run_entrypoint(["baseline"], {**setup["env"], "CUDA_VISIBLE_DEVICES": visible, "TP_SIZE": "2"})
    assert_refused(proc, f"CUDA_VISIBLE_DEVICES={visible!r}", expected)


# Compose's `check` service runs --dry-run: what CUDA_VISIBLE_DEVICES says as a string is checked there too (the
# GPUs themselves only when starting).
GPUS_TWICE_DRY_RUN = [
    ("same-index", "0,0", ["GPU 0 twice"]),
    ("same-uuid", "GPU-abc,GPU-abc", ["GPU GPU-abc twice"]),
    ("uuid-case", "GPU-abc,gpu-ABC", ["twice"]),
    ("leading-zero", "1,01", ["GPU 01 twice"]),
    ("spaces", "0, 1,0", ["GPU 0 twice"]),
    ("not-ascii", "0,١", ["not GPU indices or UUIDs"]),
    ("control-character", "0,\x1b1", ["not GPU indices or UUIDs"]),
    ("index-past-9-digits", "0," + BIG, ["not a GPU index", HEAD]),
]


@pytest.mark.parametrize(
    ("visible", "expected"), [c[1:] for c in GPUS_TWICE_DRY_RUN], ids=[c[0] for c in GPUS_TWICE_DRY_RUN]
)
def test_cuda_visible_devices_is_checked_by_dry_run(setup, visible, expected):
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "CUDA_VISIBLE_DEVICES": visible})
    assert_refused(proc, "CUDA_VISIBLE_DEVICES", *expected)
    assert proc.stdout == ""


@pytest.mark.parametrize("visible", ["0,1", "GPU-abc,GPU-def", "", "-1", "NoDevFiles"])
def test_dry_run_needs_no_gpu_from_cuda_visible_devices(setup, visible):
    """A dry run checks the string, not the GPUs: none visible (-1, empty) is for the start to say."""
    line = dry_run_line(run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "CUDA_VISIBLE_DEVICES": visible}))
    assert "sglang.launch_server" in line


def test_a_gpu_index_past_the_digit_limit(setup):
    proc = run_entrypoint(["baseline"], {**setup["env"], "CUDA_VISIBLE_DEVICES": BIG})
    assert_refused(proc, "CUDA_VISIBLE_DEVICES", "not a GPU index")
