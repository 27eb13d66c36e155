"""The ELF side of `verify`: which GPU architectures a library carries SASS for (`cuobjdump --list-elf`, run on the
host on files copied out of the container), and which libraries ldd misses."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sm120.plan import tomllib

# `ELF file    1: common_ops.abi3.3.sm_120a.cubin` (one line per embedded cubin), `PTX file    1: x.1.sm_90.ptx`.
_CUBIN = re.compile(r"\.(sm_\d+[a-z]?)\.cubin\s*$")
_PTX = re.compile(r"\.(sm_\d+[a-z]?)\.ptx\s*$")

# Libraries the NVIDIA container runtime mounts into the container from the host's driver when it runs with
# GPUs (`--gpus`, libnvidia-container's list: libcuda, libnvidia-ml, libnvidia-ptxjitcompiler, libnvidia-nvvm,
# libcudadebugger, libnvcuvid, libnvidia-encode, ...). An image must NOT carry them (they must match the host's
# kernel driver), so ldd cannot find them in an image run without GPUs: they are allowed to be missing.
DRIVER_LIBRARY = re.compile(r"^lib(cuda|cudadebugger|nvcuvid|nvidia-[a-z0-9-]+|nvoptix)\.so(\.\d+)*$")


class CuobjdumpMissing(RuntimeError):
    pass


def cuobjdump() -> str:
    """The cuobjdump to use: $CUOBJDUMP, the pinned wheel's (`nvidia-cuda-cuobjdump`, requirements.txt), or one on
    PATH (a CUDA toolkit's)."""
    if explicit := os.environ.get("CUOBJDUMP"):
        return explicit
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution("nvidia-cuda-cuobjdump")
        for f in dist.files or []:
            path = Path(str(dist.locate_file(f)))
            if f.name == "cuobjdump" and path.is_file():
                if not os.access(path, os.X_OK):
                    path.chmod(path.stat().st_mode | 0o111)
                return str(path)
    if found := shutil.which("cuobjdump"):
        return found
    raise CuobjdumpMissing(
        "no cuobjdump: install requirements.txt (nvidia-cuda-cuobjdump), set CUOBJDUMP, or put a CUDA toolkit on PATH"
    )


def _run(tool: str | None, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool or cuobjdump(), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def parse_list_elf(text: str, pattern: re.Pattern[str] = _CUBIN) -> list[str]:
    """The SASS archs (or with _PTX, the PTX's virtual archs) in `cuobjdump --list-elf --list-ptx` output, sorted by
    number (sm_80 < sm_90 < sm_90a < sm_120a)."""
    return sorted({m.group(1) for line in text.splitlines() if (m := pattern.search(line.strip()))}, key=arch_key)


def arch_key(arch: str) -> tuple[int, str]:
    m = re.match(r"^sm_(\d+)([a-z]?)$", arch)
    return (int(m.group(1)), m.group(2)) if m else (10**6, arch)


@dataclass(frozen=True)
class Sass:
    archs: list[str]  # SASS (cubins)
    device_code: bool  # False: cuobjdump says the file has no device code at all
    ptx: list[str] = field(default_factory=list)  # PTX, by the arch it was generated for


def sass_archs(path: Path, tool: str | None = None) -> Sass:
    proc = _run(tool, "--list-elf", "--list-ptx", str(path))
    text = proc.stdout + proc.stderr
    if "does not contain device code" in text:
        return Sass([], False)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump --list-elf {path.name} exited {proc.returncode}: {text.strip()[-300:]}")
    return Sass(parse_list_elf(proc.stdout), True, parse_list_elf(proc.stdout, _PTX))


def kernel_functions(path: Path, tool: str | None = None) -> list[str]:
    """The (mangled) names of the GPU functions in a library (`cuobjdump --dump-resource-usage`)."""
    proc = _run(tool, "--dump-resource-usage", str(path))
    if proc.returncode != 0 and "does not contain device code" not in proc.stdout + proc.stderr:
        raise RuntimeError(f"cuobjdump --dump-resource-usage {path.name} exited {proc.returncode}")
    return sorted({m.group(1) for m in re.finditer(r"^\s*Function (\S+?):", proc.stdout, re.MULTILINE)})


# flash-attn's kernels by their template arguments: Flash_fwd_kernel_traits<HEADDIM, ..., cutlass::bfloat16_t>.
_FLASH_HEADDIM = re.compile(r"Flash_(?:fwd|bwd)_kernel_traitsILi(\d+)E")
_FLASH_DTYPE = {"cutlass10bfloat16_t": "bf16", "cutlass6half_t": "fp16"}


def flash_attn_subset(functions: Iterable[str]) -> tuple[list[int], list[str], bool, bool]:
    """(head dims, dtypes, has backward kernels, has split-KV kernels) of flash-attn's compiled kernels, read from
    their names."""
    names = list(functions)
    head_dims = {int(d) for name in names for d in _FLASH_HEADDIM.findall(name)}
    dtypes = {dt for name in names for token, dt in _FLASH_DTYPE.items() if token in name}
    backward = any("flash_bwd" in n or "Flash_bwd_kernel_traits" in n for n in names)
    return sorted(head_dims), sorted(dtypes), backward, any("flash_fwd_splitkv" in n for n in names)


def covers(archs: list[str], arch: str) -> bool:
    """SASS for `arch` (sm_120) is there, as is or arch-specific (sm_120a) or family-specific (sm_120f)."""
    return any(a == arch or a.rstrip("af") == arch.rstrip("af") for a in archs)


def library_name(site_relative: str) -> str:
    """`sgl_kernel/sm100/common_ops.abi3.so` -> `sgl_kernel/sm100/common_ops`; `flash_attn_2_cuda.cpython-...so`
    -> `flash_attn_2_cuda`; a plain shared library keeps its name (`lib/mscclpp.so.0`)."""
    p = Path(site_relative)
    m = re.match(r"^(?P<stem>[^.]+)\.(cpython-[^.]+|abi3)\.so$", p.name)
    return str(p.with_name(m.group("stem"))) if m else str(p)


def unresolved(ldd_output: str) -> dict[str, list[str]]:
    """`ldd A B ...` output -> {file: [sonames ldd did not find]} (files with none are left out)."""
    result: dict[str, list[str]] = {}
    current = None
    for line in ldd_output.splitlines():
        if not line.startswith(("\t", " ")) and line.rstrip().endswith(":"):
            current = line.rstrip()[:-1]
        elif "=> not found" in line and current is not None:
            result.setdefault(current, []).append(line.split("=>", 1)[0].strip())
    return result


# elf_rules.toml: the libraries that may miss a dependency by design, and the sgl-kernel libraries that hold no
# sm_120 SASS by design, each with its reason.
_RULES = tomllib.loads(Path(__file__).with_name("elf_rules.toml").read_text(encoding="utf-8"))
OPTIONAL_DEPENDENCIES = [(r["library"], r["missing"], r["reason"]) for r in _RULES["optional_dependency"]]
SGL_KERNEL_NOT_FOR_SM120 = [(r["library"], r["reason"]) for r in _RULES["not_for_sm120"]]


@dataclass
class Resolution:
    """ldd's unresolved dependencies, sorted into what is allowed (with the reason) and what is broken."""

    broken: dict[str, list[str]] = field(default_factory=dict)  # file -> sonames
    driver: set[str] = field(default_factory=set)
    in_package: dict[str, list[str]] = field(default_factory=dict)  # file -> sonames its own package provides
    optional: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # reason -> file -> sonames


def _package_root(path: str, site: str) -> str | None:
    """The top-level directory under site-packages a file belongs to (`scipy.libs`, `torchaudio`), else None."""
    prefix = site.rstrip("/") + "/"
    return path[len(prefix) :].split("/", 1)[0] if path.startswith(prefix) else None


def classify(unresolved_by_file: dict[str, list[str]], elf_files: Iterable[str], site: str) -> Resolution:
    """Sort unresolved sonames: the driver's (the container runtime mounts them); provided by a file of the same
    top-level package (loaded by that package before, as torchaudio and auditwheel's `.libs` do); optional by
    design (OPTIONAL_DEPENDENCIES); anything else is broken."""
    by_package: dict[str, set[str]] = {}
    for path in elf_files:
        if (root := _package_root(path, site)) is not None:
            by_package.setdefault(root, set()).add(Path(path).name)
    result = Resolution()
    for path, names in unresolved_by_file.items():
        root = _package_root(path, site)
        for name in names:
            why = [w for f, so, w in OPTIONAL_DEPENDENCIES if re.fullmatch(f, path) and re.fullmatch(so, name)]
            if DRIVER_LIBRARY.match(name):
                result.driver.add(name)
            elif root is not None and name in by_package.get(root, set()):
                result.in_package.setdefault(path, []).append(name)
            elif why:
                result.optional.setdefault(why[0], {}).setdefault(path, []).append(name)
            else:
                result.broken.setdefault(path, []).append(name)
    return result


# A prebuilt kernel wheel's facts (`build.py track add`): the CUDA libraries it links, the toolkit its cubins
# were compiled with, which libraries verify holds to sm_120.


def not_for_sm120(library: str) -> str | None:
    """Why `library` (as `library_name` gives it) holds no sm_120 SASS by design, or None."""
    return next((why for pattern, why in SGL_KERNEL_NOT_FOR_SM120 if re.fullmatch(pattern, library)), None)


def needed(path: Path) -> list[str]:
    """The shared libraries an ELF file links (its DT_NEEDED entries, in order), read with pyelftools."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as handle:
            dyn = ELFFile(handle).get_section_by_name(".dynamic")
            return [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"] if dyn is not None else []
    except ELFError as exc:
        raise RuntimeError(f"{path.name} is not an ELF file ({exc})") from None


# The toolkit note nvcc's ptxas writes into every cubin (.note.nv.tkinfo), as `cuobjdump --dump-elf` shows it:
# "Cuda compilation tools, release 13.0, V13.0.88".
TOOLKIT = re.compile(rb"Cuda compilation tools, release (\d+)\.(\d+), V[0-9.]+")


def toolkit_notes(path: Path, scratch: Path, tool: str | None = None) -> list[str]:
    """The toolkit notes of the cubins in a library: its first cubin of each SASS arch is extracted into `scratch`
    (`cuobjdump -xelf`; all cubins of a large library are gigabytes) and its .note.nv.tkinfo read (pyelftools)."""
    from elftools.elf.elffile import ELFFile

    tool = tool or cuobjdump()
    first: dict[str, str] = {}
    for line in _run(tool, "--list-elf", str(path)).stdout.splitlines():
        if (m := _CUBIN.search(line.strip())) and ":" in line:
            first.setdefault(m.group(1), line.split(":", 1)[1].strip())
    notes: set[str] = set()
    for cubin in first.values():
        scratch.mkdir(parents=True, exist_ok=True)
        proc = _run(tool, "-xelf", cubin, str(path), cwd=scratch)
        out = scratch / cubin
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(f"cuobjdump -xelf {cubin} {path.name} exited {proc.returncode}: {proc.stderr[-300:]}")
        try:
            with open(out, "rb") as handle:
                section = ELFFile(handle).get_section_by_name(".note.nv.tkinfo")
                data = section.data() if section is not None else b""
        finally:
            for extracted in scratch.iterdir():
                extracted.unlink()
        notes.update(m.group(0).decode() for m in TOOLKIT.finditer(data))
    return sorted(notes)
