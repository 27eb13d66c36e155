"""The facts of a new SGLang track, read from PyPI (`build.py track add`; docs/tracks-and-patches.md says which
fact is read where). Each fact is a value and one line saying where it was read; a fact that cannot be established
is a UsageError naming it (exit 2): nothing is guessed. The kernel wheel's libraries read are the ones verify holds to
sm_120 (not those `elf.SGL_KERNEL_NOT_FOR_SM120` exempts, which spares the largest members). Every read goes through
the `sources` object (PyPISources), so the derivation runs on recorded metadata in the unit tests.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.markers import default_environment
from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from sm120.errors import CheckFailed, UsageError, say
from sm120.patches import patching, pypi
from sm120.plan.plan_types import cuda_major, sm
from sm120.track import wheel_members
from sm120.verify import elf

if TYPE_CHECKING:
    from sm120.plan.config import Config, Patch

# Every key `track add` derives (a path in [tracks."X"]); every other key of the --from track is copied for review.
DERIVED: tuple[tuple[str, ...], ...] = (
    ("flashinfer",),
    ("cxx_std",),
    ("torch", "version"),
    ("torch", "pypi_cuda"),
    ("sgl_kernel", "package"),
    ("sgl_kernel", "version"),
    ("sgl_kernel", "pypi_cuda"),
    ("sgl_kernel", "pypi_archs"),
    ("sgl_kernel", "install"),
)
# Keys of the --from track that are facts of its own pins, neither derived nor copied, with the reason.
NOT_COPIED: dict[tuple[str, ...], str] = {
    ("sgl_kernel", "wheel"): "upstream's wheel (url, sha256) of the --from track's kernel version"
}

KERNEL_PACKAGES = ("sgl-kernel", "sglang-kernel")  # renamed at 0.4.0; the import name stays sgl_kernel
ATEN_HEADER = "torch/include/ATen/ATen.h"
# __cplusplus of each standard cxx_std may name (flash-attn's kernel-subset patch builds with these).
CXX_STANDARDS = {201703: 17, 202002: 20}
_CXX_GUARD = re.compile(r"__cplusplus\s*<\s*(\d{6})L?\s*\n\s*#\s*error\s+(?P<error>[^\n]*)")


@dataclass(frozen=True)
class Fact:
    value: Any
    source: str  # where it was read, one line


@dataclass(frozen=True)
class Library:
    """What the tools say about one compiled library of the kernel wheel (raw, as recorded)."""

    needed: list[str]  # DT_NEEDED
    sass: list[str]  # SASS archs, `cuobjdump --list-elf` (elf.parse_list_elf)
    toolkit: list[str]  # the cubins' toolkit notes ("Cuda compilation tools, release 13.0, V13.0.88")


@dataclass
class Derived:
    facts: dict[tuple[str, ...], Fact]
    notes: list[str] = field(default_factory=list)  # for the reviewer: what the facts imply but no key holds


def environments(config: Config) -> list[dict[str, str]]:
    """Marker environments of the image: Linux x86_64 with each profile's Python."""
    linux = {
        **default_environment(),
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    pythons = sorted({p.python for p in config.profiles.values()})
    return [{**linux, "python_version": py, "python_full_version": f"{py}.0"} for py in pythons]


def requirements(metadata: str, envs: list[dict[str, str]], where: str) -> dict[str, tuple[Requirement, str]]:
    """{canonical name: (requirement, its Requires-Dist line)} of what applies on the image (every environment)."""
    raw, _unparsed = parse_email(metadata)
    found: dict[str, tuple[Requirement, str]] = {}
    for line in raw.get("requires_dist", []):
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            name = canonicalize_name(re.split(r"[\s\[<>=!~;@(]", line.strip(), maxsplit=1)[0])
            if name in _WANTED:
                reason = str(exc).splitlines()[0]
                raise UsageError(f"{_WANTED[name]}: {where}: cannot parse Requires-Dist {line!r} ({reason})") from None
            continue
        if req.marker is not None and not all(req.marker.evaluate(env) for env in envs):
            continue
        found[canonicalize_name(req.name)] = (req, line)
    return found


# The pins read (by their canonical names), and the fact each one is.
_WANTED = {"torch": "torch.version", "flashinfer-python": "flashinfer", "cuda-python": "cuda-python"}
_WANTED |= dict.fromkeys(KERNEL_PACKAGES, "sgl_kernel.version")


def exact_pin(req: Requirement, line: str, fact: str, where: str) -> str:
    """The one version `name==X` pins, or a UsageError naming the fact."""
    specs = list(req.specifier)
    if req.url or len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise UsageError(
            f"{fact}: {where} requires {line.split(';')[0].strip()!r}, not one version (==X.Y.Z): "
            "cannot pin the track; write it by hand"
        )
    return specs[0].version


def _release_wheel(sources: PyPISources, project: str, version: str, fact: str, *, x86_64: bool) -> pypi.WheelFile:
    files = sources.release_files(project, version)
    if not files:
        raise UsageError(f"{fact}: {project} {version} is not on PyPI")
    live = [f for f in files if not f.get("yanked")]
    if not live:
        reason = next((f.get("yanked_reason") for f in files if f.get("yanked_reason")), None)
        raise UsageError(
            f"{fact}: {project} {version} is yanked on PyPI" + (f" ({reason})" if reason else "") + "; pick another"
        )
    wheels = [f for f in live if f["filename"].endswith(".whl")]
    if not wheels:
        raise UsageError(
            f"{fact}: {project} {version} has no wheel on PyPI (only {', '.join(f['filename'] for f in live)}); "
            "track add reads the wheel"
        )
    if x86_64:
        wheels = [f for f in wheels if f["filename"].endswith("x86_64.whl") and "linux" in f["filename"]]
        if not wheels:
            raise UsageError(f"{fact}: {project} {version} has no Linux x86_64 wheel on PyPI")
    return pypi.pick_wheel(project, version, wheels)


def _sglang_pins(config: Config, version: str, sources: PyPISources, out: Derived) -> tuple[str, str, str]:
    _release_wheel(sources, "sglang", version, "sglang", x86_64=False)
    metadata, filename = sources.sglang_metadata(version)
    where = f"sglang {version} ({filename} METADATA)"
    reqs = requirements(metadata, environments(config), where)

    def pin(name: str, fact: str) -> Fact:
        if name not in reqs:
            raise UsageError(f"{fact}: {where} has no Requires-Dist for {name}")
        return Fact(exact_pin(*reqs[name], fact, where), f"{filename} METADATA: {reqs[name][1]}")

    torch = out.facts[("torch", "version")] = pin("torch", "torch.version")
    out.facts[("flashinfer",)] = pin("flashinfer-python", "flashinfer")
    kernels = [name for name in KERNEL_PACKAGES if name in reqs]
    if len(kernels) != 1:
        raise UsageError(
            f"sgl_kernel.package: {where} requires {' and '.join(kernels) or 'none'} of {', '.join(KERNEL_PACKAGES)}; "
            "expected exactly one"
        )
    kernel = pin(kernels[0], "sgl_kernel.version")
    out.facts[("sgl_kernel", "package")] = Fact(kernels[0], kernel.source)
    out.facts[("sgl_kernel", "version")] = kernel
    if "cuda-python" in reqs:
        req, line = reqs["cuda-python"]
        majors = {Version(s.version).major for s in req.specifier if s.operator in ("==", ">=", "~=")}
        cuda = int(cuda_major(config.cuda.version))
        said = f"sglang {version} requires {line.split(';')[0].strip()}"
        out.notes.append(
            f"{said}: bindings for CUDA {cuda}, no cuda-python fix-up needed"
            if majors and max(majors) >= cuda
            else f"{said}, bindings for another CUDA than {config.cuda.version}: a [[fixups]] entry may be needed "
            "(as 0.5.9 pins cuda-python 13.1.1)"
        )
    return torch.value, kernels[0], kernel.value


# torch's CUDA runtime requirement: `cuda-toolkit[...]==13.0.3` (CUDA 13 wheels), `nvidia-cuda-runtime-cu12==12.8.90`.
_CUDA_RUNTIME = re.compile(r"^(cuda-toolkit|nvidia-cuda-runtime(-cu\d+)?)$")


def _torch(config: Config, torch: str, sources: PyPISources, out: Derived) -> None:
    wheel = _release_wheel(sources, "torch", torch, "torch.pypi_cuda", x86_64=True)
    where = f"torch {torch} ({wheel.filename} METADATA)"
    metadata = sources.wheel_text(wheel, f"{wheel_members.dist_info(wheel)}/METADATA")
    reqs = requirements(metadata, environments(config), where)
    found = {}
    for key, (req, line) in reqs.items():
        if _CUDA_RUNTIME.match(key):
            release = Version(exact_pin(req, line, "torch.pypi_cuda", where)).release
            found[f"{release[0]}.{release[1] if len(release) > 1 else 0}"] = line
    if len(found) != 1:
        raise UsageError(
            f"torch.pypi_cuda: {where} requires "
            + (f"CUDA runtimes of {', '.join(sorted(found))}" if found else "no CUDA runtime (a CPU build?)")
            + " (cuda-toolkit or nvidia-cuda-runtime-cu*); expected one"
        )
    ((cuda, line),) = found.items()
    out.facts[("torch", "pypi_cuda")] = Fact(cuda, f"{wheel.filename} METADATA: {line}")

    header = sources.wheel_text(wheel, ATEN_HEADER)
    guards = [(int(m.group(1)), m.group("error").strip()) for m in _CXX_GUARD.finditer(header)]
    if not guards:
        raise UsageError(
            f"cxx_std: {wheel.filename} {ATEN_HEADER} has no C++ standard check (__cplusplus < N, #error): "
            "write cxx_std by hand"
        )
    need, error = max(guards)
    if need not in CXX_STANDARDS:
        raise UsageError(
            f"cxx_std: {wheel.filename} {ATEN_HEADER} needs __cplusplus >= {need}L ({error}); cxx_std takes "
            f"{', '.join(str(s) for s in CXX_STANDARDS.values())} (flash-attn's kernel-subset patch builds with those)"
        )
    out.facts[("cxx_std",)] = Fact(
        CXX_STANDARDS[need], f"{wheel.filename} {ATEN_HEADER}: __cplusplus < {need}L -> #error {error}"
    )


_CUDART = re.compile(r"^libcudart\.so\.(\d+)$")
_RELEASE = re.compile(r"release (\d+)\.(\d+)")


def _kernel(config: Config, package: str, version: str, sources: PyPISources, out: Derived) -> None:
    wheel = _release_wheel(sources, package, version, "sgl_kernel.pypi_archs", x86_64=True)
    shared = [name for name in sources.wheel_names(wheel) if name.endswith(".so") or ".so." in Path(name).name]
    skipped = [elf.library_name(name) for name in shared if elf.not_for_sm120(elf.library_name(name))]
    libraries = [name for name in shared if not elf.not_for_sm120(elf.library_name(name))]
    if not libraries:
        raise UsageError(f"sgl_kernel.pypi_archs: {wheel.filename} has no compiled library to read")
    archs: set[str] = set()
    majors: set[str] = set()
    toolkits: dict[tuple[int, int], str] = {}
    read = []
    for name in libraries:
        lib = sources.library(wheel, name)
        if not lib.sass:
            continue
        read.append(elf.library_name(name))
        archs.update(lib.sass)
        majors.update(m.group(1) for so in lib.needed if (m := _CUDART.match(so)))
        for note in lib.toolkit:
            if m := _RELEASE.search(note):
                toolkits.setdefault((int(m.group(1)), int(m.group(2))), note)
    if not archs:
        raise UsageError(f"sgl_kernel.pypi_archs: no library of {wheel.filename} carries SASS (cuobjdump --list-elf)")
    ordered = sorted(archs, key=elf.arch_key)
    shown = ", ".join(read)
    not_read = f"; not read (no sm_120 by design, verify exempts them): {', '.join(skipped)}" if skipped else ""
    out.facts[("sgl_kernel", "pypi_archs")] = Fact(
        [a.removeprefix("sm_") for a in ordered], f"{wheel.filename}: cuobjdump --list-elf (SASS) of {shown}{not_read}"
    )
    if len(majors) != 1:
        raise UsageError(
            f"sgl_kernel.pypi_cuda: {wheel.filename}'s libraries link "
            + (", ".join(f"libcudart.so.{m}" for m in sorted(majors)) or "no libcudart.so.N")
            + " (DT_NEEDED); expected one CUDA major"
        )
    if len(toolkits) != 1:
        raise UsageError(
            f"sgl_kernel.pypi_cuda: the cubins of {wheel.filename} carry "
            + (f"toolkit notes of {len(toolkits)} releases" if toolkits else "no toolkit note (.note.nv.tkinfo)")
            + "; expected one CUDA release"
        )
    (((major, minor), note),) = toolkits.items()
    (linked,) = majors
    if str(major) != linked:
        raise UsageError(
            f"sgl_kernel.pypi_cuda: {wheel.filename} links libcudart.so.{linked} but its cubins say {note!r}"
        )
    cuda = f"{major}.{minor}"
    out.facts[("sgl_kernel", "pypi_cuda")] = Fact(
        cuda, f"{wheel.filename}: DT_NEEDED libcudart.so.{linked}; its cubins' toolkit note: {note}"
    )
    want = [sm(a, "a") for a in config.cuda.archs]
    missing = [a for a in want if a not in ordered]
    why = f"without {', '.join(missing)} SASS" if missing else ""
    if linked != cuda_major(config.cuda.version):
        why = f"a CUDA {cuda} build (cuda.version is {config.cuda.version})"
    if why:
        raise UsageError(
            f"sgl_kernel.install: PyPI's {package} {version} is {why}: no profile can install it as is; write the "
            "track by hand (install = wheel with a [sgl_kernel.wheel], or source)"
        )
    out.facts[("sgl_kernel", "install")] = Fact(
        dict.fromkeys(config.profiles, "pypi"),
        f"PyPI's wheel is a CUDA {cuda} build with {', '.join(want)} (cuda.version {config.cuda.version}, "
        f"cuda.archs {', '.join(config.cuda.archs)}): every profile installs it",
    )


def _patches(config: Config, version: str, sources: PyPISources, out: Derived) -> None:
    sglang = [(name, patch) for name, patch in config.patches.items() if patch.component == "sglang"]
    results = sources.patch_results(config, version, sglang)
    if bad := next((r for r in results if r.status is patching.Status.CONFLICT), None):
        raise UsageError(
            f"patches: sglang {version}: patch {bad.patch} conflicts ({bad.detail} [{bad.variant}]); "
            f"write a variant for this release (patches/sglang/{bad.patch}/) and run again"
        )
    said = [f"{r.patch} {r.status}" + (f" ({r.variant})" if r.variant else "") for r in results]
    out.notes.append(f"patches: the patch engine on sglang {version}'s wheel: {'; '.join(said)}")
    for result in results:
        if result.status not in (patching.Status.APPLIED, patching.Status.ALREADY_UPSTREAM):
            out.notes.append(
                f"patch {result.patch} is {result.status} on sglang {version} (no variant, and upstream lacks its "
                "change): check that the release does not need it"
            )


def derive(config: Config, version: str, sources: PyPISources) -> Derived:
    """Every fact in DERIVED for sglang `version`, read through `sources`; UsageError naming what is not known."""
    out = Derived(facts={})
    torch, package, kernel_version = _sglang_pins(config, version, sources, out)
    _torch(config, torch, sources, out)
    _kernel(config, package, kernel_version, sources, out)
    _patches(config, version, sources, out)
    assert set(out.facts) == set(DERIVED), sorted(set(DERIVED) ^ set(out.facts))
    return out


class PyPISources:
    """The facts as PyPI has them: JSON API, wheels by range requests (sm120/track/wheel_members.py), the release's
    source tree (as `patches check` reads it), the tools."""

    release_files = staticmethod(pypi.release_files)
    wheel_names = staticmethod(wheel_members.names)

    def __init__(self, progress: Callable[[str], None] = say) -> None:
        self.progress = progress

    def sglang_metadata(self, version: str) -> tuple[str, str]:
        tree = pypi.source_tree(version, progress=self.progress)
        wheel = pypi.wheel_for(version)
        found = sorted(tree.glob("sglang-*.dist-info/METADATA"))
        if not found:
            raise UsageError(f"{wheel.filename} has no sglang-*.dist-info/METADATA")
        return found[0].read_text(encoding="utf-8"), wheel.filename

    def wheel_text(self, wheel: pypi.WheelFile, member: str) -> str:
        return wheel_members.member(wheel, member, progress=self.progress).read_text(encoding="utf-8", errors="replace")

    def library(self, wheel: pypi.WheelFile, member: str) -> Library:
        path = wheel_members.member(wheel, member, progress=self.progress)
        try:
            tool = elf.cuobjdump()
            sass = elf.sass_archs(path, tool)
            with tempfile.TemporaryDirectory(prefix="sm120-cubin-") as scratch:
                notes = elf.toolkit_notes(path, Path(scratch), tool) if sass.archs else []
            needed = elf.needed(path)
        except elf.CuobjdumpMissing as exc:
            raise UsageError(str(exc)) from None
        except RuntimeError as exc:
            raise CheckFailed(f"{wheel.filename} {member}: {exc}") from None
        return Library(needed=needed, sass=sass.archs, toolkit=notes)

    def patch_results(self, config: Config, version: str, patches: list[tuple[str, Patch]]) -> list[patching.Result]:
        return patching.check(pypi.source_tree(version, progress=self.progress), version, patches, root=config.root)
