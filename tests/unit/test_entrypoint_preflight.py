"""T0: the checks before SGLang starts, with the GPUs faked: NVML (a stand-in libnvidia-ml.so.1 compiled here)
and nvidia-smi (a script); /dev/shm's size; the JIT cache directories."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from sm120.image.entrypoint import errors, preflight
from tests.entrypoint_helpers import RTX_PRO, fake_nvidia_smi

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
