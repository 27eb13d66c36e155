"""Kernels: the SASS each compiled extension of flash-attn and sgl-kernel carries (cuobjdump on the host, on files
copied out of the container), and every shared library of the image resolves (ldd).

One line per library goes to the report, e.g. `flash_attn_2_cuda: sm_120`. Required: every arch of the label
sglang-sm120.flash-attn.archs in flash-attn's extensions, the arch-specific variant (sm_120a) of every arch of
sglang-sm120.cuda.archs in sgl-kernel's. In flash-attn, archs the plan did not ask for are warnings (they cost size
and build time). A prebuilt sgl-kernel (PyPI's, upstream's pinned wheel) carries many, which its label
sgl-kernel.archs lists: only archs outside that label are warnings (the label would be wrong about the wheel).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120.verify import docker_env, elf
from sm120.verify.suite.conftest import REPORT

LIST_EXTENSIONS = """
import importlib.metadata as md, os
out = {}
for family, dist in FAMILIES:
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        out[family] = None
        continue
    found = []
    for f in d.files or []:
        name = f.name
        if (name.endswith(".so") or ".so." in name) and not str(f).startswith(".."):
            path = str(d.locate_file(f))
            if os.path.isfile(path):
                found.append([str(f), os.path.realpath(path)])
    out[family] = sorted(found)
report(out)
"""


@pytest.fixture(scope="session")
def extensions(py, expect) -> dict[str, list[list[str]]]:
    families = [("flash-attn", "flash-attn"), ("sgl-kernel", expect.sgl_kernel_package)]
    out = py(f"FAMILIES = {families!r}\n{LIST_EXTENSIONS}")
    for family, dist in families:
        assert out[family] is not None, f"{dist} is not installed in the image"
    return out


@pytest.fixture(scope="session")
def sass(box, extensions, expect, tmp_path_factory) -> dict[str, list[dict]]:
    """{family: [{library, archs, ptx, device_code}]}: each extension copied out, read by cuobjdump, deleted."""
    try:
        tool = elf.cuobjdump()
    except elf.CuobjdumpMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    scratch = tmp_path_factory.mktemp("so")
    result: dict[str, list[dict]] = {family: [] for family in extensions}
    for family, files in extensions.items():
        for rel, path in files:
            local = docker_env.copy_out(box, path, scratch)
            try:
                found = elf.sass_archs(local, tool)
                functions = elf.kernel_functions(local, tool) if family == "flash-attn" else []
            finally:
                local.unlink()
            entry = {"library": elf.library_name(rel), **vars(found)}  # archs, device_code, ptx
            if family == "flash-attn":
                entry["subset"] = elf.flash_attn_subset(functions)
            result[family].append(entry)
            REPORT.kernels.append(dict(entry, family=family))
    return result


def _warn(message: str) -> None:
    if message not in REPORT.warnings:
        REPORT.warnings.append(message)


def _warn_grouped(groups: dict[str, list[str]], template: str) -> None:
    """One warning per reason: template.format(libs=..., why=...)."""
    for why, libs in groups.items():
        _warn(template.format(libs=", ".join(libs), why=why))


def test_flash_attn_extensions_carry_sm_120_sass(sass, expect):
    libs = sass["flash-attn"]
    assert libs, "flash-attn has no compiled extension in the image"
    problems = []
    for lib in libs:
        missing = [a for a in expect.flash_attn_archs if a not in lib["archs"]]
        if missing:
            problems.append(f"{lib['library']}: {', '.join(lib['archs']) or 'no device code'} (needs {missing})")
        extra = [a for a in lib["archs"] if a not in expect.flash_attn_archs]
        if extra:
            _warn(
                f"{lib['library']} carries SASS the plan did not ask for ({', '.join(extra)}; label "
                f"flash-attn.archs: {','.join(expect.flash_attn_archs)}): it costs size and build time"
            )
    assert not problems, "flash-attn without the labelled archs: " + "; ".join(problems)


def test_flash_attn_kernels_are_the_labelled_subset(sass, expect):
    """The flash-attn-kernel-subset patch by its effect: the head dims, dtypes and directions compiled are the ones
    the label sglang-sm120.flash-attn.kernels names (read from the kernels' template arguments and names)."""
    want = expect.flash_attn_kernels
    for lib in sass["flash-attn"]:
        head_dims, dtypes, backward, split_kv = lib["subset"]
        assert head_dims == want.head_dims, f"{lib['library']}: head dims {head_dims}, label {want.head_dims}"
        assert dtypes == want.dtypes, f"{lib['library']}: dtypes {dtypes}, label {want.dtypes}"
        assert backward == want.backward, f"{lib['library']}: backward kernels {'present' if backward else 'absent'}"
        assert split_kv == want.split_kv, f"{lib['library']}: split-KV kernels {'present' if split_kv else 'absent'}"


def test_sgl_kernel_extensions_carry_sm_120a_sass(sass, expect):
    libs = sass["sgl-kernel"]
    assert libs, f"{expect.sgl_kernel_package} has no compiled extension in the image"
    required = expect.sgl_kernel_required
    asked = set(required) | set(expect.cuda_archs)
    problems, with_sm120 = [], 0
    exempt: dict[str, list[str]] = {}
    extras: dict[str, list[str]] = {}
    for lib in libs:
        missing = [a for a in required if a not in lib["archs"]]
        why = elf.not_for_sm120(lib["library"])  # the list: elf.SGL_KERNEL_NOT_FOR_SM120
        if not missing:
            with_sm120 += 1
        elif why and not any(elf.covers(lib["archs"], a) for a in asked):
            exempt.setdefault(why, []).append(lib["library"])
            continue
        else:
            problems.append(f"{lib['library']}: {', '.join(lib['archs']) or 'no device code'} (needs {missing})")
        unlabelled = [a for a in lib["archs"] if a not in asked and a not in expect.sgl_kernel_archs]
        if unlabelled:
            note = f"{', '.join(unlabelled)}; the label sgl-kernel.archs says {','.join(expect.sgl_kernel_archs)}"
            extras.setdefault(note, []).append(lib["library"])
    _warn_grouped(exempt, "no sm_120 SASS, by design, in {libs}: {why}")
    _warn_grouped(extras, "SASS the label does not name in {libs} ({why})")
    assert not problems, f"{expect.sgl_kernel_package} without {required}: " + "; ".join(problems)
    assert with_sm120, f"no {expect.sgl_kernel_package} extension carries {required}"


# ldd: every ELF shared object and program of the image's Python environment and CUDA toolchain resolves.

ROOTS = ["/opt/venv", "/usr/local/cuda/"]

# Runs in the image as root. Python extension modules find torch's CUDA libraries (site-packages/nvidia/*/lib,
# torch/lib) because `import torch` has loaded them first, not through their own RUNPATH: ldd sees what such a
# process sees when those directories are on LD_LIBRARY_PATH. Each file once (lib64 -> lib links), two ldd at once.
LDD = r"""
import glob, os, subprocess, sysconfig
from concurrent.futures import ThreadPoolExecutor
site = os.path.realpath(sysconfig.get_paths()["purelib"])
preload = sorted(set(glob.glob(site + "/nvidia/*/lib") + glob.glob(site + "/nvidia/cu*/lib") + [site + "/torch/lib"]))
env = dict(os.environ, LD_LIBRARY_PATH=":".join(p for p in preload if os.path.isdir(p)))
files, seen = [], set()
for root in ROOTS:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if not (name.endswith(".so") or ".so." in name or os.access(path, os.X_OK)):
                continue
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            try:
                with open(real, "rb") as f:
                    head = f.read(18)
            except OSError:
                continue
            if len(head) == 18 and head[:4] == b"\x7fELF" and head[16] in (2, 3):  # ET_EXEC or ET_DYN
                files.append(real)

def ldd(batch):
    out = subprocess.run(["ldd", *batch], capture_output=True, text=True, env=env).stdout
    return (batch[0] + ":\n" + out) if len(batch) == 1 else out

batches = [files[i:i + 100] for i in range(0, len(files), 100)]
with ThreadPoolExecutor(max_workers=2) as pool:
    text = list(pool.map(ldd, batches))
report({"files": files, "ldd": "\n".join(text), "preload": preload, "site": site})
"""


@pytest.fixture(scope="session")
def ldd(py) -> dict:
    return py(f"ROOTS = {ROOTS!r}\n{LDD}", root=True)


def test_every_shared_library_resolves(ldd):
    assert ldd["files"], f"no ELF files under {ROOTS}"
    found = elf.classify(elf.unresolved(ldd["ldd"]), ldd["files"], ldd["site"])
    if found.driver:
        _warn(
            f"ldd: the driver's {', '.join(sorted(found.driver))} is not in the image (as it must not be): the NVIDIA "
            "container runtime mounts it from the host with --gpus"
        )
    for reason, files in found.optional.items():
        names = sorted({n for ns in files.values() for n in ns})
        _warn(
            f"ldd: {len(files)} optional librar{'y' if len(files) == 1 else 'ies'} miss {', '.join(names[:6])}"
            f"{' ...' if len(names) > 6 else ''}: {reason}"
        )
    listing = "; ".join(f"{Path(p).name}: {', '.join(sorted(set(n)))}" for p, n in sorted(found.broken.items())[:15])
    assert not found.broken, (
        f"{len(found.broken)} of {len(ldd['files'])} ELF files have unresolved libraries: {listing}"
    )
