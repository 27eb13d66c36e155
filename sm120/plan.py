"""The resolved build plan: build.toml + a profile + an SGLang track + this machine, in one object.

Everything downstream (the Docker build args and labels, the patch series, the entrypoint's presets, the
image checks, the workflows) reads this plan, never its own copy of a version or an arch.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from packaging.version import Version

from . import resources as res
from .config import Config, FlashAttnKernels, Profile, Track
from .errors import UsageError

ALL_HEAD_DIMS = [32, 64, 96, 128, 192, 256]


@dataclass(frozen=True)
class PatchRef:
    name: str
    component: str
    path: str
    sha256: str
    summary: str
    upstream: str


@dataclass(frozen=True)
class SkippedPatch:
    name: str
    reason: str


@dataclass(frozen=True)
class FixupPin:
    requirement: str
    reason: str


@dataclass(frozen=True)
class Plan:
    profile: str
    sglang_version: str
    cuda_version: str
    cuda_archs: list[str]  # "12.0"
    python_version: str
    torch_version: str
    torch_cuda: str  # the CUDA version torch was built with
    torch_index: str | None
    flashinfer_version: str
    flash_attn_version: str
    flash_attn: dict[str, Any]
    sgl_kernel: dict[str, Any]
    base_image: str
    runtime_base_image: str
    bases: str
    patches: list[PatchRef]
    patches_skipped: list[SkippedPatch]
    fixups: list[FixupPin]
    max_jobs: int
    nvcc_threads: int
    parallelism_reason: str
    # The job budget split between the kernel stages that compile at the same time; reaches the build as the
    # BuildKit secret `build_jobs`, never as a build arg (it must not change a compiled layer's cache key).
    build_jobs: dict[str, str]
    tags: list[str]
    labels: dict[str, str]
    build_args: dict[str, str]
    stand_ins: list[str]
    differences: list[str]
    image: dict[str, Any]
    entrypoint: dict[str, Any]
    tracks: list[str]  # every SGLang track build.toml has (the publish matrix)
    profiles: list[str]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sm(capability: str, suffix: str = "") -> str:
    """'12.0' -> 'sm_120' (+ suffix, e.g. 'a')."""
    return "sm_" + capability.replace(".", "") + suffix


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _image_ref(name: str, digest: str | None) -> str:
    return f"{name}@{digest}" if digest else name


def _git_revision(config: Config) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(config.root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _cuda_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _torch(config: Config, track: Track, profile: Profile) -> tuple[str, str | None, list[str]]:
    """(CUDA version torch is built with, index URL or None for PyPI, stand-in notes)."""
    want = _cuda_minor(config.cuda.version)
    if track.torch.pypi_cuda == want:
        return want, None, []
    if profile.torch_index:
        return want, profile.torch_index, []
    note = (
        f"torch {track.torch.version} is PyPI's CUDA {track.torch.pypi_cuda} build (its CUDA {want} build is "
        f"on an index this profile does not use): a stand-in on the CUDA {config.cuda.version} base"
    )
    return track.torch.pypi_cuda, None, [note]


def _sgl_kernel(config: Config, track: Track, profile_name: str) -> tuple[dict[str, Any], list[str], list[str]]:
    want = [sm(a, "a") for a in config.cuda.archs]
    sgl = track.sgl_kernel
    install = sgl.install[profile_name]
    info: dict[str, Any] = {
        "package": sgl.package,
        "version": sgl.version,
        "source": install,
        "wheel_url": "",
        "wheel_sha256": "",
    }
    notes: list[str] = []
    warnings: list[str] = []
    if install == "source":
        info.update(archs=want, cuda=_cuda_minor(config.cuda.version))
    elif install == "wheel":
        assert sgl.wheel is not None  # config checks it
        # What the wheel carries is verify's to judge (SASS check); the plan asks for sm_120a.
        info.update(archs=want, cuda=sgl.wheel.cuda, wheel_url=sgl.wheel.url, wheel_sha256=sgl.wheel.sha256)
    else:
        have = ["sm_" + a for a in sgl.pypi_archs]
        info.update(archs=have, cuda=sgl.pypi_cuda)
        missing = [a for a in want if a not in have]
        if missing:
            warnings.append(f"{sgl.package} {sgl.version} from PyPI has no {', '.join(missing)} code")
    if info["cuda"] != _cuda_minor(config.cuda.version):
        notes.append(
            f"{sgl.package} {sgl.version} is PyPI's CUDA {info['cuda']} build: a stand-in on the "
            f"CUDA {config.cuda.version} base"
        )
    return info, notes, warnings


def _build_jobs(max_jobs: int, nvcc_threads: int, compiling: list[str]) -> dict[str, str]:
    """One job budget for the kernel stages that compile at the same time (BuildKit runs them in parallel)."""
    share = max(1, max_jobs // len(compiling))
    jobs = {
        "FLASH_ATTN_MAX_JOBS": str(share if "flash-attn" in compiling else 1),
        "SGL_KERNEL_MAX_JOBS": str(share if "sgl-kernel" in compiling else 1),
        "NVCC_THREADS": str(nvcc_threads),
    }
    return jobs


def _flash_attn(config: Config, track: Track, kernels: FlashAttnKernels) -> dict[str, Any]:
    head_dims = ALL_HEAD_DIMS if kernels.head_dims == "all" else sorted(kernels.head_dims)
    return {
        "version": track.flash_attn,
        "archs": [a.replace(".", "") for a in config.cuda.archs],
        "head_dims": head_dims,
        "dtypes": list(kernels.dtypes),
        "backward": kernels.backward,
        "cxx_std": track.cxx_std,
        "all_kernels": head_dims == ALL_HEAD_DIMS and set(kernels.dtypes) == {"fp16", "bf16"},
    }


def _patches(config: Config, track: Track, version: str) -> tuple[list[PatchRef], list[SkippedPatch]]:
    """The track's patches whose variant matches the version of the component they patch."""
    component_version = {"sglang": version, "flash-attn": track.flash_attn}
    refs: list[PatchRef] = []
    skipped: list[SkippedPatch] = []
    for name in track.patches:
        patch = config.patch(name)
        of = component_version[patch.component]
        variant = patch.variant_for(of)
        if variant is None:
            skipped.append(SkippedPatch(name, f"no variant for {patch.component} {of}; upstream: {patch.upstream}"))
            continue
        path = config.root / variant.file
        refs.append(PatchRef(name, patch.component, variant.file, _sha256(path), patch.summary, patch.upstream))
    return refs, skipped


def _differences(config: Config, name: str, track: Track) -> list[str]:
    """How this profile differs from the default one, field by field (derived, never written by hand)."""
    default = config.defaults.profile
    if name == default:
        return []
    install = track.sgl_kernel.install
    mine = config.profile(name).model_dump() | {"sgl_kernel": install[name]}
    theirs = config.profile(default).model_dump() | {"sgl_kernel": install[default]}
    out = []
    for key in mine:
        if key != "summary" and mine[key] != theirs[key]:
            out.append(f"{key}: {mine[key]!r} ({default}: {theirs[key]!r})")
    return out


def _entrypoint(config: Config, track: Track, version: str, cuda_archs: list[str]) -> dict[str, Any]:
    """What docker/entrypoint.py reads from /etc/sglang-sm120/plan.json (its `entrypoint` key).

    A rule's `requires_patch` becomes `requires`: that patch's upstream_check (files and patterns), which the
    entrypoint matches against the installed SGLang, so the rule applies whether this image applied the patch
    or upstream already has the change.
    """
    runtime: list[dict[str, Any]] = []
    seen: set[str] = set()
    for rule in track.runtime:
        if rule.name in seen:
            raise UsageError(f"{config.path.name}: two runtime rules of track {version} are named {rule.name!r}")
        seen.add(rule.name)
        requires = None
        if rule.requires_patch:
            patch = config.patch(rule.requires_patch)
            if not patch.upstream_checks:
                raise UsageError(
                    f"{config.path.name}: runtime rule {rule.name!r} requires patch {rule.requires_patch!r}, "
                    "which has no upstream_check to find its change in an installed SGLang"
                )
            requires = {
                "patch": rule.requires_patch,
                "checks": [check.model_dump() for check in patch.upstream_checks],
            }
        runtime.append(
            {
                "name": rule.name,
                "when": rule.conditions,
                "env": dict(rule.env),
                "args": list(rule.args),
                "requires": requires,
                "reason": rule.reason,
            }
        )
    return {
        "sglang_version": version,
        "cuda_archs": cuda_archs,
        "port": config.image.port,
        "cache_dir": config.image.cache_dir,
        "modes": {name: mode.model_dump() for name, mode in config.modes.items()},
        "runtime": runtime,
        "left_out": [rule.model_dump() for rule in track.left_out],
    }


def resolve(
    config: Config,
    *,
    profile: str | None = None,
    sglang: str | None = None,
    max_jobs: int | None = None,
    machine: res.Resources | None = None,
) -> Plan:
    profile_name = profile or config.defaults.profile
    version = sglang or config.defaults.sglang
    prof = config.profile(profile_name)
    track = config.track(version)

    torch_cuda, torch_index, stand_ins = _torch(config, track, prof)
    if torch_cuda.split(".")[0] != config.cuda.version.split(".")[0]:
        stand_ins.append(
            f"flash-attn is compiled with CUDA {config.cuda.version}'s nvcc against torch's CUDA {torch_cuda} "
            "headers (no CUDA 12 compiler is on PyPI): torch's version guard is lifted for this build only"
        )
    sgl_kernel, sgl_kernel_notes, warnings = _sgl_kernel(config, track, profile_name)
    stand_ins += sgl_kernel_notes
    fixups = [FixupPin(f.requirement, f.reason) for f in track.fixups if f.torch_cuda == torch_cuda.split(".")[0]]
    flash_attn = _flash_attn(config, track, prof.flash_attn)
    patches, skipped = _patches(config, track, version)

    machine = machine or res.detect()
    par = res.parallelism(
        machine,
        job_memory_gib=(
            config.parallelism.compile_job_memory_gib_backward
            if flash_attn["backward"]
            else config.parallelism.compile_job_memory_gib
        ),
        memory_fraction=config.parallelism.memory_fraction,
        nvcc_threads_max=config.parallelism.nvcc_threads_max,
        gencode_targets=len(config.cuda.archs),
        max_jobs_override=max_jobs,
    )
    if par.warning:
        warnings.append(par.warning)

    base_image = _image_ref(prof.base_image, prof.base_image_digest)
    runtime_base_image = _image_ref(prof.runtime_base_image, prof.runtime_base_image_digest)
    cuda_archs = list(config.cuda.archs)
    sms = ",".join(sm(a) for a in cuda_archs)
    suffix = "" if profile_name == config.defaults.profile else f"-{profile_name}"
    image_version = f"{version}-cu{config.cuda.version}{suffix}"
    tags = [f"{config.project.image}:{image_version}"]

    ns = config.project.name
    labels = {
        "org.opencontainers.image.title": config.project.title,
        "org.opencontainers.image.description": config.project.description,
        "org.opencontainers.image.version": image_version,
        "org.opencontainers.image.licenses": config.project.licenses,
        "org.opencontainers.image.base.name": runtime_base_image,
        f"{ns}.profile": profile_name,
        f"{ns}.sglang.version": version,
        f"{ns}.cuda.version": config.cuda.version,
        f"{ns}.cuda.archs": sms,
        f"{ns}.python.version": prof.python,
        f"{ns}.torch.version": track.torch.version,
        f"{ns}.torch.cuda": torch_cuda,
        f"{ns}.flashinfer.version": track.flashinfer,
        f"{ns}.flash-attn.version": track.flash_attn,
        f"{ns}.flash-attn.archs": sms,
        f"{ns}.flash-attn.kernels": (
            f"head_dims={','.join(map(str, flash_attn['head_dims']))};dtypes={','.join(flash_attn['dtypes'])};"
            f"backward={'on' if flash_attn['backward'] else 'off'}"
        ),
        f"{ns}.sgl-kernel.package": sgl_kernel["package"],
        f"{ns}.sgl-kernel.version": sgl_kernel["version"],
        f"{ns}.sgl-kernel.cuda": sgl_kernel["cuda"],
        f"{ns}.sgl-kernel.archs": ",".join(sgl_kernel["archs"]),
        f"{ns}.sgl-kernel.install": sgl_kernel["source"],
        f"{ns}.fixups": " ".join(f.requirement for f in fixups) or "none",
        f"{ns}.patches": ",".join(f"{p.name}@sha256:{p.sha256}" for p in patches),
        f"{ns}.stand-ins": " | ".join(stand_ins) if stand_ins else "none",
        f"{ns}.user": config.image.user,
        f"{ns}.cache-dir": config.image.cache_dir,
        f"{ns}.port": str(config.image.port),
    }
    revision = _git_revision(config)
    if revision:
        labels["org.opencontainers.image.revision"] = revision

    build_args = {
        "BASE_IMAGE": base_image,
        "RUNTIME_BASE_IMAGE": runtime_base_image,
        "PROFILE": profile_name,
        "PYTHON_VERSION": prof.python,
        "SGLANG_VERSION": version,
        "TORCH_VERSION": track.torch.version,
        "TORCH_INDEX_URL": torch_index or "",
        "FLASHINFER_VERSION": track.flashinfer,
        "FLASH_ATTN_VERSION": track.flash_attn,
        "FLASH_ATTN_CUDA_ARCHS": ";".join(flash_attn["archs"]),
        "FLASH_ATTN_HEAD_DIMS": ",".join(map(str, flash_attn["head_dims"])),
        "FLASH_ATTN_DTYPES": ",".join(flash_attn["dtypes"]),
        "FLASH_ATTN_BACKWARD": "1" if flash_attn["backward"] else "0",
        "FLASH_ATTN_PATCHES": " ".join(p.path for p in patches if p.component == "flash-attn"),
        "FLASH_ATTN_ALLOW_CUDA_MISMATCH": "1" if torch_cuda.split(".")[0] != config.cuda.version.split(".")[0] else "0",
        "CXX_STD": str(track.cxx_std),
        "SGL_KERNEL_PACKAGE": sgl_kernel["package"],
        "SGL_KERNEL_VERSION": sgl_kernel["version"],
        "SGL_KERNEL_SOURCE": sgl_kernel["source"],
        "SGL_KERNEL_WHEEL_URL": sgl_kernel["wheel_url"],
        "SGL_KERNEL_WHEEL_SHA256": sgl_kernel["wheel_sha256"],
        "FIXUP_PINS": " ".join(f.requirement for f in fixups),
        "IMAGE_USER": config.image.user,
        "IMAGE_UID": str(config.image.uid),
        "CACHE_DIR": config.image.cache_dir,
        "PORT": str(config.image.port),
    }
    compiling = ["flash-attn"] + (["sgl-kernel"] if sgl_kernel["source"] == "source" else [])
    build_jobs = _build_jobs(par.max_jobs, par.nvcc_threads, compiling)

    entrypoint = _entrypoint(config, track, version, cuda_archs)

    return Plan(
        profile=profile_name,
        sglang_version=version,
        cuda_version=config.cuda.version,
        cuda_archs=cuda_archs,
        python_version=prof.python,
        torch_version=track.torch.version,
        torch_cuda=torch_cuda,
        torch_index=torch_index,
        flashinfer_version=track.flashinfer,
        flash_attn_version=track.flash_attn,
        flash_attn=flash_attn,
        sgl_kernel=sgl_kernel,
        base_image=base_image,
        runtime_base_image=runtime_base_image,
        bases=prof.bases,
        patches=patches,
        patches_skipped=skipped,
        fixups=fixups,
        max_jobs=par.max_jobs,
        nvcc_threads=par.nvcc_threads,
        parallelism_reason=par.reason,
        build_jobs=build_jobs,
        tags=tags,
        labels=labels,
        build_args=build_args,
        stand_ins=stand_ins,
        differences=_differences(config, profile_name, track),
        image=config.image.model_dump(),
        entrypoint=entrypoint,
        tracks=sorted(config.tracks, key=Version),
        profiles=sorted(config.profiles),
        warnings=warnings,
    )


_INSTALL_WORDS = {
    "source": "compiled from source",
    "pypi": "PyPI wheel",
    "wheel": "upstream's prebuilt wheel, pinned by sha256",
}


def render(plan: Plan) -> str:
    """The human-readable plan."""
    fa = plan.flash_attn
    sk = plan.sgl_kernel
    lines = [
        f"profile          {plan.profile}",
        f"SGLang           {plan.sglang_version}",
        f"CUDA             {plan.cuda_version}  archs: {', '.join(sm(a) for a in plan.cuda_archs)}",
        f"python           {plan.python_version}",
        f"torch            {plan.torch_version} (CUDA {plan.torch_cuda}, from {plan.torch_index or 'PyPI'})",
        f"flashinfer       {plan.flashinfer_version}",
        f"flash-attn       {fa['version']} compiled for {', '.join('sm_' + a for a in fa['archs'])}; "
        f"head dims {', '.join(map(str, fa['head_dims']))}; {', '.join(fa['dtypes'])}; "
        f"backward {'on' if fa['backward'] else 'off'}; C++{fa['cxx_std']}",
        f"sgl-kernel       {sk['package']} {sk['version']} "
        f"({_INSTALL_WORDS[sk['source']]}, CUDA {sk['cuda']}, {', '.join(sk['archs'])})"
        + (f"\n                 {sk['wheel_url']}  sha256:{sk['wheel_sha256'][:16]}" if sk["wheel_url"] else ""),
        f"base image       {plan.base_image} ({plan.bases})",
        f"runtime base     {plan.runtime_base_image}",
        f"max_jobs         {plan.max_jobs}  nvcc_threads {plan.nvcc_threads}",
        f"                 {plan.parallelism_reason}",
        "                 split (build_jobs secret): " + ", ".join(f"{k}={v}" for k, v in plan.build_jobs.items()),
        "fix-ups          " + (", ".join(f.requirement for f in plan.fixups) or "none"),
        "patches",
    ]
    for p in plan.patches:
        lines.append(f"  {p.name:<32} {p.path}  sha256:{p.sha256[:16]}")
    for s in plan.patches_skipped:
        lines.append(f"  {s.name:<32} skipped: {s.reason}")
    if not plan.patches and not plan.patches_skipped:
        lines.append("  (none)")
    lines.append("tags")
    lines += [f"  {t}" for t in plan.tags]
    if plan.differences:
        lines.append("differs from the default profile")
        lines += [f"  {d}" for d in plan.differences]
    if plan.stand_ins:
        lines.append("stand-ins")
        lines += [f"  {s}" for s in plan.stand_ins]
    if plan.warnings:
        lines.append("warnings")
        lines += [f"  {w}" for w in plan.warnings]
    lines.append("labels")
    lines += [f"  {k}={v}" for k, v in plan.labels.items()]
    return "\n".join(lines)
