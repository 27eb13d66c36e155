"""The resolved build plan: build.toml + a profile + an SGLang track + this machine, in one object. Everything
downstream reads it, never its own copy of a version or an arch (docs/architecture.md has the whole flow)."""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sm120.errors import UsageError
from sm120.image.entrypoint.spec import (
    DrafterElsewhere,
    EntrypointSpec,
    LeftOutSpec,
    ModeSpec,
    RequiredPatch,
    RuntimeRuleSpec,
    UpstreamCheckSpec,
)
from sm120.plan import build_args as build_args_format
from sm120.plan import labels as labels_format
from sm120.plan import prebuilt
from sm120.plan import resources as res
from sm120.plan.config import HEAD_DIMS, Config, FlashAttnKernels, ModePresets, Profile, Track
from sm120.plan.config import load as load_config
from sm120.plan.plan_types import (
    FixupPin,
    FlashAttn,
    NotShippedPaths,
    PatchRef,
    Plan,
    SglKernel,
    SkippedPatch,
    cuda_major,
    cuda_minor,
    sm,
)


def _image_ref(name: str, digest: str | None) -> str:
    return f"{name}@{digest}" if digest else name


def _git_revision(config: Config) -> str | None:
    git = ["git", "-C", str(config.root), "rev-parse", "HEAD"]
    try:
        return subprocess.run(git, capture_output=True, text=True, timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _torch(config: Config, track: Track, profile: Profile) -> tuple[str, str | None, list[str]]:
    """(CUDA version torch is built with, index URL or None for PyPI, stand-in notes)."""
    want = cuda_minor(config.cuda.version)
    if track.torch.pypi_cuda == want:
        return want, None, []
    if profile.torch_index:
        return want, profile.torch_index, []
    note = (
        f"torch {track.torch.version} is PyPI's CUDA {track.torch.pypi_cuda} build (its CUDA {want} build is "
        f"on an index this profile does not use): a stand-in on the CUDA {config.cuda.version} base"
    )
    return track.torch.pypi_cuda, None, [note]


def _sgl_kernel(config: Config, track: Track, profile_name: str) -> tuple[SglKernel, list[str], list[str]]:
    """Where sgl-kernel comes from in this profile, with the stand-in notes and warnings that follow from it."""
    want = [sm(a, "a") for a in config.cuda.archs]
    base_cuda = cuda_minor(config.cuda.version)
    spec = track.sgl_kernel
    install = spec.install[profile_name]
    if install == "source":
        kernel = SglKernel(spec.package, spec.version, install, "", "", archs=want, cuda=base_cuda)
    elif install == "wheel":
        assert spec.wheel is not None  # config checks it
        # The label says what the wheel is: its own version (with its local label, e.g. +cu130) and the archs
        # build.toml says it carries; verify's SASS check judges the file itself.
        wheel = spec.wheel
        version = _wheel_version(config, spec.package, spec.version, wheel.url)
        archs = ["sm_" + a for a in wheel.archs]
        kernel = SglKernel(spec.package, version, install, wheel.url, wheel.sha256, archs=archs, cuda=wheel.cuda)
    else:
        archs = ["sm_" + a for a in spec.pypi_archs]
        kernel = SglKernel(spec.package, spec.version, install, "", "", archs=archs, cuda=spec.pypi_cuda)
    missing = [a for a in want if a not in kernel.archs]
    whose = "(the pinned wheel)" if install == "wheel" else "from PyPI"
    warnings = [f"{spec.package} {kernel.version} {whose} has no {', '.join(missing)} code"] if missing else []
    stand_in = f"{spec.package} {spec.version} is PyPI's CUDA {kernel.cuda} build: a stand-in on the CUDA "
    stand_in += f"{config.cuda.version} base"
    return kernel, [stand_in] if kernel.cuda != base_cuda else [], warnings


def _wheel_version(config: Config, package: str, version: str, url: str) -> str:
    """The version in the pinned wheel's file name (0.3.21+cu130), which must be `package` at `version`."""
    name = posixpath.basename(unquote(urlsplit(url).path))
    where = f"{config.path.name}: the sgl_kernel.wheel.url of {package} {version}"
    try:
        dist, found, _build, _tags = parse_wheel_filename(name)
    except InvalidWheelFilename:
        raise UsageError(f"{where}: {name!r} is not a wheel file name") from None
    if dist != canonicalize_name(package) or found.public != Version(version).public:
        raise UsageError(f"{where} is a wheel of {dist} {found} ({name}): fix the URL or the version")
    return str(found)


def _build_jobs(max_jobs: int, nvcc_threads: int, compiling: list[str]) -> dict[str, str]:
    """One job budget for the kernel stages that compile at the same time (BuildKit runs them in parallel)."""
    share = max(1, max_jobs // len(compiling))
    return {
        "FLASH_ATTN_MAX_JOBS": str(share if "flash-attn" in compiling else 1),
        "SGL_KERNEL_MAX_JOBS": str(share if "sgl-kernel" in compiling else 1),
        "NVCC_THREADS": str(nvcc_threads),
    }


def _flashinfer_jobs(
    machine: res.Resources, fraction: float, fa_memory: float, fi_prebuilt: dict[str, Any]
) -> res.Parallelism:
    """FlashInfer's prebuilt modules compile beside flash-attn, one nvcc thread a job: the rule for compile jobs
    (resources.parallelism) on the memory flash-attn's jobs leave, per the largest job of the modules chosen."""
    left = max(0.0, machine.memory_gib * fraction - fa_memory)
    return res.parallelism(
        dataclasses.replace(machine, memory_bytes=int(left * res.GIB)),
        job_memory_gib=prebuilt.job_memory_gib(fi_prebuilt) or 1e-9,  # no module: the CPUs decide
        memory_fraction=1.0,
        nvcc_threads_max=1,
        gencode_targets=1,
    )  # at least one job: the modules are small beside flash-attn's, and the stage is short


def _flash_attn(config: Config, track: Track, kernels: FlashAttnKernels) -> FlashAttn:
    head_dims = HEAD_DIMS if kernels.head_dims == "all" else sorted(kernels.head_dims)
    return FlashAttn(
        version=track.flash_attn,
        archs=[a.replace(".", "") for a in config.cuda.archs],
        head_dims=list(head_dims),
        dtypes=list(kernels.dtypes),
        backward=kernels.backward,
        split_kv=kernels.split_kv,
        cxx_std=track.cxx_std,
    )


def _patches(config: Config, track: Track, version: str) -> tuple[list[PatchRef], list[SkippedPatch]]:
    """The track's patches whose variant matches the version of the component they patch."""
    refs: list[PatchRef] = []
    skipped: list[SkippedPatch] = []
    for name in track.patches:
        patch = config.patch(name)
        of = version if patch.component == "sglang" else track.flash_attn
        variant = patch.variant_for(of)
        if variant is None:
            skipped.append(SkippedPatch(name, f"no variant for {patch.component} {of}; upstream: {patch.upstream}"))
            continue
        sha256 = hashlib.sha256((config.root / variant.file).read_bytes()).hexdigest()
        refs.append(PatchRef(name, patch.component, variant.file, sha256, patch.summary, patch.upstream))
    return refs, skipped


def differences(config: Config, name: str, track: Track) -> list[tuple[str, Any, Any]]:
    """How this profile differs from the published one, field by field (derived, never written by hand): (key, this
    profile's value, the published profile's)."""
    published = config.project.published_profile
    install = track.sgl_kernel.install
    mine = config.profile(name).model_dump() | {"sgl_kernel": install[name]}
    theirs = config.profile(published).model_dump() | {"sgl_kernel": install[published]}
    return [(key, mine[key], theirs[key]) for key in mine if key != "summary" and mine[key] != theirs[key]]


def image_version(config: Config, version: str, profile_name: str) -> str:
    """The tag of a track's image in a profile: 0.5.23-cu13.0.1, or 0.5.23-cu13.0.1-offline off the published one."""
    suffix = "" if profile_name == config.project.published_profile else f"-{profile_name}"
    return f"{version}-cu{config.cuda.version}{suffix}"


def _modes(config: Config, track: Track) -> dict[str, ModeSpec]:
    """build.toml's [modes] with this track's draft tree for each draft mode ([tracks."X".presets.NAME])."""
    modes = {}
    for name, mode in config.modes.items():
        presets = track.presets.get(name) if mode.draft else None
        tree = presets.model_dump() if presets else dict.fromkeys(ModePresets.model_fields)
        tree["draft_tree_reason"] = tree.pop("reason")
        modes[name] = ModeSpec(summary=mode.summary, args=list(mode.args), draft=mode.draft, **tree)
    return modes


def _drafters(config: Config, profile_name: str) -> dict[str, DrafterElsewhere]:
    """Each [eagle3_drafters.CLASS] with the tracks (and their image tags) whose SGLang has it."""
    out = {}
    for name, drafter in config.eagle3_drafters.items():
        tracks = sorted((v for v in config.tracks if Version(v) >= Version(drafter.since)), key=Version)
        images = [f"{config.project.image}:{image_version(config, v, profile_name)}" for v in tracks]
        out[name] = DrafterElsewhere(kind=drafter.kind, since=drafter.since, tracks=tracks, images=images)
    return out


def _entrypoint(config: Config, track: Track, version: str, cuda_archs: list[str], profile_name: str) -> EntrypointSpec:
    """What docker/entrypoint.py reads from the image's plan.json (its `entrypoint` key); a rule's `requires_patch`
    becomes that patch's upstream_check, found in the installed SGLang whoever applied the change."""
    runtime: list[RuntimeRuleSpec] = []
    for rule in track.runtime:  # one name per track: config checks it
        requires = None
        if rule.requires_patch:
            patch = config.patch(rule.requires_patch)
            if not patch.upstream_checks:
                raise UsageError(
                    f"{config.path.name}: runtime rule {rule.name!r} requires patch {rule.requires_patch!r}, "
                    "which has no upstream_check to find its change in an installed SGLang"
                )
            checks = [UpstreamCheckSpec(c.path, list(c.patterns)) for c in patch.upstream_checks]
            requires = RequiredPatch(rule.requires_patch, checks)
        spec = RuntimeRuleSpec(rule.name, rule.conditions, dict(rule.env), list(rule.args), requires, rule.reason)
        runtime.append(spec)
    return EntrypointSpec(
        sglang_version=version,
        cuda_archs=cuda_archs,
        port=config.image.port,
        cache_dir=config.image.cache_dir,
        default_mode=config.defaults.mode,
        modes=_modes(config, track),
        runtime=runtime,
        left_out=[LeftOutSpec(list(rule.args), rule.reason) for rule in track.left_out],
        drafters=_drafters(config, profile_name),
    )


def load_plan(config: Config | str | Path | None = None, **options: Any) -> Plan:
    """The plan of build.toml (a loaded Config, a path, or None for the checkout's), `resolve`d with `options`: what
    every command and benchmark resolves."""
    return resolve(config if isinstance(config, Config) else load_config(config), **options)


def plan_from_args(config: Config, args: Any) -> Plan:
    """load_plan with the machine and track options every plan-resolving command takes (arguments.py's group)."""
    return load_plan(
        config, **{key: getattr(args, key) for key in ("profile", "sglang", "max_jobs", "cpus", "memory_gib")}
    )


def resolve(
    config: Config,
    *,
    profile: str | None = None,
    sglang: str | None = None,
    max_jobs: int | None = None,
    machine: res.Resources | None = None,
    cpus: int | None = None,
    memory_gib: float | None = None,
) -> Plan:
    """The plan for a profile and a track, on `machine` or this one (`cpus` CPUs and `memory_gib` GiB where given)."""
    profile_name = profile or config.defaults.profile
    version = sglang or config.defaults.sglang
    profile_settings = config.profile(profile_name)
    track = config.track(version)

    torch_cuda, torch_index, stand_ins = _torch(config, track, profile_settings)
    torch_major = cuda_major(torch_cuda)
    if torch_major != cuda_major(config.cuda.version):
        stand_ins.append(
            f"flash-attn is compiled with CUDA {config.cuda.version}'s nvcc against torch's CUDA {torch_cuda} "
            "headers (no CUDA 12 compiler is on PyPI): torch's version guard is lifted for this build only"
        )
    sgl_kernel, sgl_kernel_notes, warnings = _sgl_kernel(config, track, profile_name)
    stand_ins += sgl_kernel_notes
    fixups = [FixupPin(f.requirement, f.install, f.reason) for f in track.fixups if f.torch_cuda == torch_major]
    flash_attn = _flash_attn(config, track, profile_settings.flash_attn)
    patches, skipped = _patches(config, track, version)

    figures = config.parallelism
    machine = machine or res.detect()
    if cpus is not None or memory_gib is not None:
        memory_bytes = int(memory_gib * res.GIB) if memory_gib else machine.memory_bytes
        machine = res.Resources(cpus or machine.cpus, memory_bytes, source="given by --cpus/--memory-gib")
    job_memory_gib = figures.compile_job_memory_gib_backward if flash_attn.backward else figures.compile_job_memory_gib
    parallelism = res.parallelism(
        machine,
        job_memory_gib=job_memory_gib,
        memory_fraction=figures.memory_fraction,
        nvcc_threads_max=figures.nvcc_threads_max,
        gencode_targets=len(config.cuda.archs),
        max_jobs_override=max_jobs,
    )
    if parallelism.warning:
        warnings.append(parallelism.warning)

    tag_version = image_version(config, version, profile_name)
    compiling = ["flash-attn"] + (["sgl-kernel"] if sgl_kernel.source == "source" else [])
    build_jobs = _build_jobs(parallelism.max_jobs, parallelism.nvcc_threads, compiling)
    fi_prebuilt = prebuilt.resolve(
        profile_settings.flashinfer_prebuilt, track.flashinfer, f"profiles.{profile_name}.flashinfer_prebuilt"
    )
    fa_memory = int(build_jobs["FLASH_ATTN_MAX_JOBS"]) * parallelism.nvcc_threads * job_memory_gib
    fi_jobs = _flashinfer_jobs(machine, figures.memory_fraction, fa_memory, fi_prebuilt)
    build_jobs["FLASHINFER_MAX_JOBS"] = str(min(fi_jobs.max_jobs, max_jobs or fi_jobs.max_jobs))

    plan = Plan(
        profile=profile_name,
        sglang_version=version,
        cuda_version=config.cuda.version,
        cuda_archs=list(config.cuda.archs),
        python_version=profile_settings.python,
        torch_version=track.torch.version,
        torch_cuda=torch_cuda,
        torch_index=torch_index,
        flashinfer_version=track.flashinfer,
        flash_attn_version=track.flash_attn,
        flash_attn=flash_attn,
        sgl_kernel=sgl_kernel,
        base_image=_image_ref(profile_settings.base_image, profile_settings.base_image_digest),
        runtime_base_image=_image_ref(profile_settings.runtime_base_image, profile_settings.runtime_base_image_digest),
        bases=profile_settings.bases,
        patches=patches,
        patches_skipped=skipped,
        fixups=fixups,
        not_shipped=[
            NotShippedPaths(list(n.paths), n.reason, n.source)
            for n in track.not_shipped
            if n.torch_cuda in (None, torch_major)
        ],
        max_jobs=parallelism.max_jobs,
        nvcc_threads=parallelism.nvcc_threads,
        parallelism_reason=parallelism.reason,
        build_jobs=build_jobs,
        tags=[f"{config.project.image}:{tag_version}"],
        labels={},
        build_args={},
        stand_ins=stand_ins,
        differences=[
            f"{key}: {mine!r} ({config.project.published_profile}: {theirs!r})"  # plan.json's form, as it always was
            for key, mine, theirs in differences(config, profile_name, track)
        ],
        image=config.image,
        probe=track.probe,
        entrypoint=_entrypoint(config, track, version, list(config.cuda.archs), profile_name),
        tracks=sorted(config.tracks, key=Version),
        sm120_traps=[trap.model_dump() for trap in config.sm120_traps],
        flashinfer_prebuilt=fi_prebuilt,
        warnings=warnings,
    )
    # The formats written from the plan itself, each by its own module.
    return dataclasses.replace(
        plan,
        labels=labels_format.write(plan, config.project, tag_version, _git_revision(config)),
        build_args=build_args_format.write(plan),
    )
