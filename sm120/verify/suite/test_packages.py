"""Packages: torch, sglang, sgl_kernel, flashinfer, flash_attn import in the image's Python at their labels'
versions, and the SGLang patches of the label `sglang-sm120.patches` are in force, shown by behaviour."""

from __future__ import annotations

import re

import pytest
from packaging.version import Version

from sm120.plan import labels
from sm120.verify import docker_env
from sm120.verify.behaviour import (
    INKLING_OFF,
    KIMI_SNIPPET,
    SGL_KERNEL_STANDIN,
    SNIPPET_PRELUDE,
    SYMM_SNIPPET,
    assert_kimi_delegates,
    assert_symm_sm120,
)
from sm120.verify.suite.conftest import IMAGE, REPORT

# Import name -> distribution name whose metadata must agree (sgl_kernel's comes from the label).
DISTRIBUTIONS = {"torch": "torch", "sglang": "sglang", "flashinfer": "flashinfer-python", "flash_attn": "flash-attn"}

# Runs in the image: each distribution's installed version and the interpreter, from metadata alone (nothing is
# imported: a check that needs only these, like a `-k` run on a relabelled image, pays no import of torch).
METADATA = """
import importlib.metadata as md, platform, sys
def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
report({"python": platform.python_version(), "executable": sys.executable,
        "dists": {name: version(dist) for name, dist in DISTS}})
"""

# Runs in the image: import each package in one interpreter (torch first: the others import it) and report
# its version and where it was imported from. Nothing is imported before.
PROBE = """
import importlib
out = {"packages": {}}
for name in NAMES:
    try:
        mod = importlib.import_module(name)
        rec = dict(imported=True, version=getattr(mod, "__version__", None), file=mod.__file__)
    except BaseException as exc:
        rec = dict(imported=False, error=type(exc).__name__ + ": " + " ".join(str(exc).split())[-1500:])
    out["packages"][name] = rec
import torch
out["torch_cuda"] = torch.version.cuda
out["cuda_available"] = torch.cuda.is_available()
report(out)
"""

# What `import sgl_kernel` needs that an image run without GPUs cannot have: the driver's libcuda.so.1, which the
# NVIDIA container runtime mounts from the host (`--gpus`). Any other import error is a broken image.
DRIVER_ONLY = ("libcuda.so.1",)


@pytest.fixture(scope="session")
def installed(py, expect) -> dict:
    """{"python", "executable", "dists": {import name: its distribution's version or None}}, read from metadata."""
    dists = [("torch", "torch"), *((n, d) for n, d in DISTRIBUTIONS.items() if n != "torch")]
    dists.insert(2, ("sgl_kernel", expect.sgl_kernel_package))
    out = py(f"DISTS = {dists!r}\n{METADATA}")
    REPORT.python = out["python"]
    for name, version in out["dists"].items():
        REPORT.found[name] = version or "not installed"
    return out


@pytest.fixture(scope="session")
def probe(py, installed) -> dict:
    """The packages imported: {"packages": {name: {imported, version, file | error, dist_version}}, "torch_cuda",
    "cuda_available"}."""
    out = py(f"NAMES = {list(installed['dists'])!r}\n{PROBE}", env={"CUDA_VISIBLE_DEVICES": ""})
    for name, rec in out["packages"].items():
        rec["dist_version"] = installed["dists"][name]
        REPORT.found[name] = rec.get("version") or REPORT.found[name]
    return out


def test_the_images_python_is_the_labelled_one(installed, expect, image):
    assert installed["executable"].startswith("/opt/venv/"), f"{image.python} runs {installed['executable']}"
    assert Version(installed["python"]).release[:2] == Version(expect.python).release[:2], (
        f"the image's Python is {installed['python']}, the label sglang-sm120.python.version says {expect.python}"
    )


@pytest.mark.parametrize("name", ["torch", "sglang", "flashinfer", "flash_attn"])
def test_package_imports_at_the_labelled_version(probe, expect, name: str):
    rec = probe["packages"][name]
    assert rec["imported"], f"import {name} fails in {IMAGE}: {rec.get('error')}"
    want, got = expect.versions[name], rec["version"]
    assert got is not None, f"{name} has no __version__"
    assert Version(got).public == Version(want).public, f"{name} {got} in the image, the label says {want}"
    assert rec["dist_version"] is not None and Version(rec["dist_version"]).public == Version(want).public, (
        f"{DISTRIBUTIONS[name]}'s metadata says {rec['dist_version']}, the label says {want}"
    )


def test_torch_is_the_labelled_cuda_build(probe, expect):
    assert probe["torch_cuda"] == expect.torch_cuda, (
        f"torch in the image is built for CUDA {probe['torch_cuda']}, the label sglang-sm120.torch.cuda says "
        f"{expect.torch_cuda}"
    )


def test_sgl_kernel_is_the_labelled_distribution(installed, expect):
    """The public version, and the local part (upstream's `+cu130` build) where the label pins one
    (sm120.plan.labels.is_labelled_version)."""
    found = installed["dists"]["sgl_kernel"]
    assert found is not None, f"{expect.sgl_kernel_package} is not installed"
    assert labels.is_labelled_version(found, expect.sgl_kernel), (
        f"{expect.sgl_kernel_package} {found} in the image, the label says {expect.sgl_kernel}"
    )


def test_sgl_kernel_imports(probe, expect):
    """Needs the NVIDIA driver when the build links libcuda: then a GPU check (skipped here with the reason)."""
    rec = probe["packages"]["sgl_kernel"]
    if not rec["imported"]:
        error = rec.get("error", "")
        needs = [lib for lib in DRIVER_ONLY if f"{lib}: cannot open shared object file" in error]
        others = [
            m for m in re.findall(r"([\w.+-]+\.so[.\d]*): cannot open shared object file", error) if m not in needs
        ]
        if needs and not others:
            pytest.skip(
                f"import sgl_kernel needs the NVIDIA driver ({', '.join(needs)}, mounted by the container runtime with "
                "--gpus): a GPU check (build.py verify --gpus all); ldd shows its other libraries resolve"
            )
        pytest.fail(f"import sgl_kernel fails for a reason other than the missing driver: {error}", pytrace=False)
    got = rec["version"]
    if got is not None:  # a module's __version__ carries no build label (+cu130): the public versions must agree
        assert Version(got).public == Version(expect.sgl_kernel).public, (
            f"sgl_kernel.__version__ {got}, label {expect.sgl_kernel}"
        )


# The SGLang patches, by behaviour: the snippets the T1 tests run on the releases (sm120/verify/behaviour.py) run in
# the image's own interpreter on its installed SGLang, with the same stand-in for sgl_kernel
# (sm120/verify/sgl_kernel_standin.py; the kernels cannot load without a GPU driver, and the patched code never
# calls one).

STUBS_PATH = "/tmp/sm120-verify/upstream_stubs.py"

# One interpreter runs every snippet (the imports of torch and SGLang are paid once); each gets its own `emit`.
RUN_SNIPPETS = """
import json, traceback
results = {}
for _name, _code in SNIPPETS.items():
    def emit(obj, _n=_name):
        results[_n] = obj
    try:
        exec(compile(_code, "<" + _name + ">", "exec"), {"__name__": "__snippet__", "emit": emit,
             "sm120_upstream_stubs": sm120_upstream_stubs})
    except BaseException as exc:
        results[_name] = {"crashed": type(exc).__name__ + ": " + str(exc), "tb": traceback.format_exc()[-800:]}
emit_all = results
"""


BEHAVIOUR = {
    "kimi-k25-eagle3-delegation": (KIMI_SNIPPET, assert_kimi_delegates),
    "torch-symm-mem-sm120": (SYMM_SNIPPET, assert_symm_sm120),
}
# Patches of other components, checked by their effect elsewhere.
NOT_SGLANG = {"flash-attn-kernel-subset": "test_kernels.py::test_flash_attn_kernels_are_the_labelled_subset"}


@pytest.fixture(scope="session")
def snippets(box, py, image_uid) -> dict:
    docker_env.copy_in(box, {"sm120-verify/upstream_stubs.py": SGL_KERNEL_STANDIN.read_text()}, "/tmp", uid=image_uid)
    prelude = SNIPPET_PRELUDE.format(pythonpath=[], stubs=True, stubs_file=STUBS_PATH)
    snippets = {name: snippet for name, (snippet, _) in BEHAVIOUR.items()}
    code = f"{prelude}\nSNIPPETS = {snippets!r}\n{RUN_SNIPPETS}\nreport(emit_all)\n"
    env = {"CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false", **INKLING_OFF}
    return py(code, env=env)


def test_every_labelled_patch_has_a_behaviour_check(expect):
    unknown = [p.name for p in expect.patches if p.name not in BEHAVIOUR and p.name not in NOT_SGLANG]
    assert not unknown, f"no behaviour check in sm120/verify/suite for the labelled patch(es) {unknown}: add one"


@pytest.mark.parametrize("patch", sorted(BEHAVIOUR))
def test_patch_is_in_force(patch: str, expect, snippets):
    if patch not in {p.name for p in expect.patches}:
        pytest.skip(f"{patch} is not in this image's label sglang-sm120.patches")
    out = snippets.get(patch)
    assert out is not None, f"the {patch} snippet reported nothing"
    assert "crashed" not in out, f"the {patch} snippet crashed: {out['crashed']}\n{out.get('tb', '')}"
    assert out["version"] == expect.sglang, f"the snippet imported SGLang {out['version']}"
    assert out["file"].startswith("/opt/venv/"), f"the snippet imported {out['file']}, not the image's SGLang"
    BEHAVIOUR[patch][1](out)
