"""The plan as a tree of frozen, typed objects. Field order is the order of `plan --json`'s keys: do not reorder
fields."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# The entrypoint's part of the plan is defined by the module the image's entrypoint reads it with.
from sm120.image.entrypoint.spec import EntrypointSpec
from sm120.plan.config import Image, Probe  # the image's settings and the track's probe, as build.toml has them


def cuda_major(version: str) -> str:
    """13.0.1 -> 13"""
    return version.split(".")[0]


def cuda_minor(version: str) -> str:
    """13.0.1 -> 13.0"""
    return ".".join(version.split(".")[:2])


def sm(capability: str, suffix: str = "") -> str:
    """'12.0' -> 'sm_120' (+ suffix, e.g. 'a')."""
    return "sm_" + capability.replace(".", "") + suffix


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
    install: str  # "no-deps" (pip install --force-reinstall --no-deps) or "deps" (a plain pip install)
    reason: str


@dataclass(frozen=True)
class NotShippedPaths:
    paths: list[str]
    reason: str
    source: str


@dataclass(frozen=True)
class FlashAttn:
    version: str
    archs: list[str]  # "120" (TORCH_CUDA_ARCH_LIST style, no dot)
    head_dims: list[int]
    dtypes: list[str]  # "fp16", "bf16"
    backward: bool
    split_kv: bool
    cxx_std: int


@dataclass(frozen=True)
class SglKernel:
    package: str  # the distribution: sgl-kernel or sglang-kernel
    version: str  # with the wheel's local label where a pinned wheel has one (0.3.21+cu130)
    source: str  # "source" (compiled), "wheel" (upstream's prebuilt, pinned by sha256) or "pypi"
    wheel_url: str  # "" unless source == "wheel"
    wheel_sha256: str
    archs: list[str]  # "sm_120a"
    cuda: str  # the CUDA minor version it is built with, "13.0"


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
    flash_attn: FlashAttn
    sgl_kernel: SglKernel
    base_image: str
    runtime_base_image: str
    bases: str
    patches: list[PatchRef]
    patches_skipped: list[SkippedPatch]
    fixups: list[FixupPin]
    not_shipped: list[NotShippedPaths]
    max_jobs: int
    nvcc_threads: int
    parallelism_reason: str
    # The job budget split between the kernel stages that compile at the same time; reaches the build as the
    # BuildKit secret `build_jobs`, never as a build arg (it must not change a compiled layer's cache key).
    build_jobs: dict[str, str]
    tags: list[str]
    labels: dict[str, str]  # written by sm120.plan.labels
    build_args: dict[str, str]  # written by sm120.plan.build_args
    stand_ins: list[str]
    differences: list[str]
    image: Image
    probe: Probe
    entrypoint: EntrypointSpec
    tracks: list[str]  # every SGLang track build.toml has (the publish matrix)
    # build.toml's [[sm120_traps]], as data (sm120.plan.config.Sm120Trap reads each back): the start-up check of
    # `build.py verify` judges an image by the traps it carries (sm120/plan/image_plan.py).
    sm120_traps: list[dict[str, Any]]
    # FlashInfer's modules built into the image and what a first start still compiles (sm120/plan/prebuilt.py).
    flashinfer_prebuilt: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"image": self.image.model_dump(), "probe": self.probe.model_dump()}

    def to_json(self) -> str:
        """The plan as `build.py plan --json` prints it and the image holds it (/etc/sglang-sm120/plan.json)."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @property
    def torch_cuda_differs(self) -> bool:
        """torch is built for another CUDA major than the base's nvcc (a stand-in; flash-attn lifts torch's guard)."""
        return cuda_major(self.torch_cuda) != cuda_major(self.cuda_version)
