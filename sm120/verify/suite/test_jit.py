"""JIT toolchain, as the image's non-root user: what SGLang, FlashInfer and Triton compile at run time builds
(nvcc for sm_120 against their own headers, a Python C extension with the C compiler) into the JIT cache volume;
and nothing of the devel image that serving does not use is in the image."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

import pytest

from sm120.image.entrypoint import prebuilt as prebuilt_module
from sm120.image.entrypoint.preflight import CACHE_VARIABLES
from sm120.verify import docker_env, elf


def _cc(arch: str) -> str:
    """sm_120 -> 12.0 (what TVM_FFI_CUDA_ARCH_LIST and torch's capability tuples use)."""
    digits = arch.removeprefix("sm_").rstrip("af")
    return f"{digits[:-1]}.{digits[-1]}"


def test_cache_directory_is_a_volume_owned_by_the_user(image, expect, host):
    assert expect.cache_dir in image.volumes, f"{expect.cache_dir} is not a VOLUME of the image ({image.volumes})"
    d = host.file(expect.cache_dir)
    assert d.is_directory, f"{expect.cache_dir} does not exist"
    assert d.user == expect.user, f"{expect.cache_dir} belongs to {d.user}, not {expect.user}"
    assert not d.mode & 0o002, f"{expect.cache_dir} is world-writable ({oct(d.mode)})"


@pytest.mark.parametrize("cache", CACHE_VARIABLES, ids=[var.name for var in CACHE_VARIABLES])
def test_jit_cache_variable_points_into_the_cache_volume_and_is_writable(cache, image, expect, host):
    variable, value = cache.name, image.env.get(cache.name)
    assert value, f"the image does not set {variable}"
    want = str(PurePosixPath(expect.cache_dir, cache.under))
    assert value == want, f"{variable}={value}, not {want} (sm120/image/entrypoint/preflight.py CACHE_VARIABLES)"
    probe = f"{value}/.sm120-verify-write-test"
    result = host.run(f"mkdir -p {shlex.quote(value)} && echo ok > {shlex.quote(probe)} && rm {shlex.quote(probe)}")
    assert result.rc == 0, f"{variable}={value} is not writable by {expect.user}: {result.stderr.strip()}"


# SGLang's own JIT path (tvm-ffi's load_inline through SGLang's load_jit, the way its rope kernel is built on first
# use), on its smallest kernel. The GPU's compute capability is the one thing given: there is no GPU, so
# torch.cuda's device queries answer the labelled arch; the compile and the load are real.
SGLANG_JIT = """
import importlib, os, sys, time
from unittest import mock
import torch
KERNELS = ["sglang.jit_kernel.add_constant", "sglang.kernels.ops.elementwise.add_constant"]  # 0.5.9, 0.5.16+
for name in KERNELS:
    try:
        mod = importlib.import_module(name)
        break
    except ModuleNotFoundError:
        mod = None
if mod is None:
    report({"error": "no add_constant JIT kernel in this SGLang (looked for " + ", ".join(KERNELS) + ")"})
    sys.exit(0)
os.environ.setdefault("TVM_FFI_CUDA_ARCH_LIST", CC)
major, minor = (int(x) for x in CC.split("."))
started = time.time()
with mock.patch.object(torch.cuda, "current_device", lambda: 0), \\
     mock.patch.object(torch.cuda, "get_device_capability", lambda *a, **k: (major, minor)):
    module = mod._jit_add_constant_module(7)
built = []
for root in ROOTS:
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            if n.endswith(".so") and os.path.getmtime(p) >= started - 1:
                built.append(p)
report({"module": name, "loaded": type(module).__name__, "built": built, "seconds": round(time.time() - started, 1)})
"""


def test_sglang_jit_builds_and_loads_a_kernel_for_sm_120(py, image, expect, box, tmp_path):
    arch = expect.cuda_archs[0]
    roots = sorted({image.env.get("TVM_FFI_CACHE_DIR", ""), expect.cache_dir} - {""})
    out = py(f"CC = {_cc(arch)!r}\nROOTS = {roots!r}\n{SGLANG_JIT}")
    assert "error" not in out, out.get("error")
    assert out["built"], f"SGLang's JIT built nothing under {roots} (module {out['module']})"
    local = docker_env.copy_out(box, out["built"][0], tmp_path)
    archs = elf.sass_archs(local).archs
    assert any(a.rstrip("af") == arch for a in archs), f"the JIT-built {local.name} holds {archs}, not {arch}"


# FlashInfer's own JIT path (gen_jit_spec -> its ninja file -> nvcc, c++ linking -lcudart -lcuda from lib64 and
# lib64/stubs -> tvm_ffi.load_module) on a small module that includes what its kernels include: its own headers
# and csrc utilities, cuRAND, cuBLAS, NVRTC, the bf16/fp8 types. The arch list is the one FlashInfer derives on
# an sm_120 GPU (capability 12.0, major >= 9: "12.0a"); it is the only thing given, there being no GPU.
FLASHINFER_SOURCE = r"""
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <curand_kernel.h>
#include <cublas_v2.h>
#include <nvrtc.h>
#include <flashinfer/vec_dtypes.cuh>
#include "tvm_ffi_utils.h"

__global__ void sm120_verify_scale(__nv_bfloat16* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    curandStatePhilox4_32_10_t state;
    curand_init(0, i, 0, &state);
    flashinfer::vec_t<float, 4> v;
    v.fill(s + 0.0f * curand_uniform(&state));
    x[i] = __float2bfloat16(__bfloat162float(x[i]) * v[0]);
  }
}

int64_t AddOne(int64_t x) { return x + 1; }

TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, AddOne);
"""

FLASHINFER_JIT = """
import os, pathlib
os.environ["FLASHINFER_CUDA_ARCH_LIST"] = ARCH_LIST
from flashinfer.jit import env as jit_env
from flashinfer.jit.core import gen_jit_spec
src = pathlib.Path(os.environ["TMPDIR"]) / "sm120_verify_probe.cu"
src.write_text(SOURCE)
spec = gen_jit_spec("sm120_verify_probe", [src])
module = spec.build_and_load()
report({"answer": module.add_one(41), "so": str(spec.jit_library_path), "jit_dir": str(jit_env.FLASHINFER_JIT_DIR)})
"""


def test_flashinfer_jit_builds_and_loads_a_module_for_sm_120(py, image, expect, box, tmp_path):
    arch = expect.cuda_archs[0]
    arch_list = f"{_cc(arch)}a"  # what FlashInfer picks on the GPU: "a" for every capability >= 9.0
    code = f"ARCH_LIST = {arch_list!r}\nSOURCE = {FLASHINFER_SOURCE!r}\n{FLASHINFER_JIT}"
    out = py(code, env={"CUDA_VISIBLE_DEVICES": "", "TMPDIR": "/tmp"})
    assert out["answer"] == 42
    base = image.env.get("FLASHINFER_WORKSPACE_BASE", "")
    assert base and out["so"].startswith(base.rstrip("/") + "/"), f"FlashInfer built {out['so']}, not under {base}"
    archs = elf.sass_archs(docker_env.copy_out(box, out["so"], tmp_path)).archs
    assert f"{arch}a" in archs, f"FlashInfer's JIT built {archs}, not {arch}a"


# FlashInfer's prebuilt modules (build.toml profiles.*.flashinfer_prebuilt; docker/stages/flashinfer_prebuilt.py): as
# the image's user, with nvcc off PATH and FlashInfer's JIT disabled, FlashInfer's own generator makes the module's
# spec, finds it prebuilt (JitSpec.is_aot) and loads it without compiling. The arch list is what FlashInfer derives
# on an sm_120 GPU (the census's); there being no GPU, it is the one thing given.
FLASHINFER_PREBUILT = """
import importlib, json, shutil
import flashinfer
from flashinfer.jit import env as jit_env
manifest = json.loads((jit_env.FLASHINFER_AOT_DIR / MANIFEST).read_text())
out = {"nvcc": shutil.which("nvcc"), "installed": flashinfer.__version__, "manifest": manifest, "modules": {}}
for name, entry in manifest["modules"].items():
    module, _, function = entry["gen"].partition(":")
    spec = getattr(importlib.import_module(module), function)()
    loaded = spec.build_and_load()
    out["modules"][name] = {"is_aot": spec.is_aot, "path": str(spec.get_library_path()), "loaded": loaded is not None,
                            "compiled": spec.build_dir.exists()}
report(out)
"""


def test_flashinfer_loads_its_prebuilt_modules_without_compiling(py, image, plan, box, tmp_path):
    prebuilt = plan.flashinfer_prebuilt
    if not prebuilt["modules"]:
        pytest.skip(f"the plan prebuilds no FlashInfer module: {prebuilt['note'] or 'none chosen in build.toml'}")
    env = {
        "PATH": "/opt/venv/bin:/usr/bin:/bin",
        "FLASHINFER_DISABLE_JIT": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "FLASHINFER_CUDA_ARCH_LIST": prebuilt["arch_list"],
    }
    out = py(f"MANIFEST = {prebuilt_module.MANIFEST!r}\n{FLASHINFER_PREBUILT}", env=env)
    assert out["nvcc"] is None, f"nvcc is still on PATH ({out['nvcc']}): the check would not prove a load"
    assert out["manifest"]["flashinfer"] == out["installed"] == prebuilt["flashinfer"], (
        f"prebuilt for FlashInfer {out['manifest']['flashinfer']}, {out['installed']} installed, the plan pins "
        f"{prebuilt['flashinfer']}"
    )
    wanted = sorted(m["name"] for m in prebuilt["modules"])
    assert sorted(out["modules"]) == wanted, f"the image prebuilt {sorted(out['modules'])}, the plan says {wanted}"
    site = f"{image.env.get('VIRTUAL_ENV', '/opt/venv')}/lib/"
    for name, module in out["modules"].items():
        assert module["is_aot"] and module["loaded"], f"{name}: FlashInfer did not find it prebuilt ({module})"
        assert module["path"].startswith(site), f"{name}: loaded from {module['path']}, not from site-packages"
        assert not module["compiled"], f"{name}: FlashInfer wrote a JIT build directory for it"
        archs = elf.sass_archs(docker_env.copy_out(box, module["path"], tmp_path)).archs
        assert any(a.rstrip("af") == "sm_120" for a in archs), f"{name} holds {archs}, no sm_120 code"


# Triton's first use builds a small Python C extension (its CUDA launcher) with the system C compiler and the
# Python headers, into TRITON_CACHE_DIR: the same function, on a module that needs no driver.
TRITON_C_EXTENSION = r"""
import os
from triton.runtime import build
src = '''
#include <Python.h>
static PyObject* answer(PyObject* self, PyObject* args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "sm120_verify_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_sm120_verify_ext(void) { return PyModule_Create(&mod); }
'''
if not hasattr(build, "compile_module_from_src"):
    report({"error": "this Triton has no triton.runtime.build.compile_module_from_src: update the check"})
else:
    mod = build.compile_module_from_src(src, "sm120_verify_ext")
    report({"answer": mod.answer(), "file": mod.__file__})
"""


def test_triton_builds_its_c_extension(py, image, expect):
    out = py(TRITON_C_EXTENSION)
    assert "error" not in out, out["error"]
    assert out["answer"] == 42
    cache = image.env.get("TRITON_CACHE_DIR", "")
    assert cache and out["file"].startswith(cache.rstrip("/") + "/"), f"Triton cached it in {out['file']}, not {cache}"


# Triton compiles SGLang's and torch.compile's kernels on first use: its own ptxas (the one it picks for the GPU's
# arch) turns the PTX into SASS. The same compile, for the labelled arch, of a small kernel (the target is given:
# there is no GPU to ask), and the cubin's SASS read back: the image keeps the ptxas that sm_120 takes even where
# it leaves other parts of Triton out (build.toml not_shipped).
TRITON_KERNEL = r"""
import importlib.util, os, tempfile
SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def sm120_verify_add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
'''
work = tempfile.mkdtemp()
path = os.path.join(work, "sm120_verify_kernel.py")
with open(path, "w") as f:
    f.write(SOURCE)
spec = importlib.util.spec_from_file_location("sm120_verify_kernel", path)
kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)  # triton.jit reads the function's source from its file
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import compiler as nvidia
from triton.compiler import ASTSource
signature = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
source = ASTSource(fn=kernel.sm120_verify_add_one, signature=signature, constexprs={"BLOCK": 128})
compiled = triton.compile(source, target=GPUTarget("cuda", CAPABILITY, 32))
cubin = os.path.join(work, "sm120_verify_add_one.cubin")
with open(cubin, "wb") as f:
    f.write(compiled.asm["cubin"])
try:
    ptxas = nvidia.get_ptxas(CAPABILITY).path
except TypeError:  # a Triton whose get_ptxas takes no arch
    ptxas = nvidia.get_ptxas().path
report({"cubin": cubin, "ptxas": ptxas, "triton": triton.__version__})
"""


def test_triton_compiles_a_kernel_for_sm_120(py, image, expect, box, tmp_path):
    arch = expect.cuda_archs[0]
    capability = int(arch.removeprefix("sm_").rstrip("af"))
    out = py(f"CAPABILITY = {capability}\n{TRITON_KERNEL}", env={"CUDA_VISIBLE_DEVICES": ""})
    archs = elf.sass_archs(docker_env.copy_out(box, out["cubin"], tmp_path)).archs
    assert any(a.rstrip("af") == arch for a in archs), (
        f"Triton {out['triton']} (ptxas {out['ptxas']}) compiled {archs}, not {arch}"
    )


# Parts of NVIDIA's devel image serving never uses: static libraries, profilers and debuggers, samples, docs. In
# /usr/local/cuda, and CUDA's static libraries anywhere outside the Python environment (pip wheels' own files are
# their packages' business: Triton bundles CUPTI for its profiler, cutlass-dsl links a static runtime at JIT time).
DEVEL_ONLY = r"""
find -L /usr/local/cuda/ \( -name '*.a' -o -name 'nsys' -o -name 'ncu' -o -name 'nvprof' -o -name 'cuda-gdb*' \
  -o -name 'compute-sanitizer' -o -name 'nsight*' -o -name 'libnvperf*' -o -name 'libcupti*' -o -name 'nvvp' \
  -o -name 'libnvvm-samples' -o -name 'samples' -o -name 'extras' -o -name 'doc' -o -name 'libnvvp' \) -print \
  2>/dev/null
find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /opt/venv \) -prune -o \
  \( -name 'lib*_static.a' -o -name 'libcudadevrt.a' -o -name 'libculibos.a' -o -name 'libcudart_static.a' \) -print \
  2>/dev/null
true
"""


def test_no_devel_only_parts(root_host):
    found = sorted(set(root_host.check_output(DEVEL_ONLY).split()))
    assert not found, f"{len(found)} part(s) of the devel image that serving does not use: {', '.join(found[:20])}"
