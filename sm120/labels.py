"""The image's labels: written from the plan (`write`, used by `sm120.plan.resolve`), read back by verify (`parse`).

The labels are the contract between a build and its checks: `build.py verify` and the image suite never read
build.toml for what an image holds, only what the image says about itself, so the same checks hold for every
track and profile. Writer and reader sit side by side here; tests/unit/test_plan_outputs.py parses what the writer
writes for every profile and track.

Every project label is `<prefix>.<key>`; the prefix, the label namespace, is build.toml's [project] name
(`namespace()`: the readers' default; the writer takes it from the config the plan was resolved from).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from . import config as cfg
from .plan_types import Plan

# Labels the suite reads; an image without them was not built by `build.py build`.
REQUIRED = (
    "profile",
    "sglang.version",
    "cuda.version",
    "cuda.archs",
    "python.version",
    "torch.version",
    "torch.cuda",
    "flashinfer.version",
    "flash-attn.version",
    "flash-attn.archs",
    "flash-attn.kernels",
    "sgl-kernel.package",
    "sgl-kernel.version",
    "sgl-kernel.archs",
    "patches",
    "user",
    "cache-dir",
    "port",
)


@functools.cache
def namespace() -> str:
    """The label namespace of this checkout: build.toml's [project] name."""
    return cfg.load().project.name


def sm(capability: str, suffix: str = "") -> str:
    """'12.0' -> 'sm_120' (+ suffix, e.g. 'a')."""
    return "sm_" + capability.replace(".", "") + suffix


# ---------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------


def kernels_text(head_dims: list[int], dtypes: list[str], backward: bool) -> str:
    """flash-attn's kernel subset as one label value: `head_dims=128;dtypes=bf16;backward=off`."""
    return f"head_dims={','.join(map(str, head_dims))};dtypes={','.join(dtypes)};backward={'on' if backward else 'off'}"


def write(plan: Plan, project: cfg.Project, image_version: str, revision: str | None) -> dict[str, str]:
    """The labels of the image `plan` builds (OCI annotations first, then the project's own)."""
    prefix = project.name
    archs = ",".join(sm(a) for a in plan.cuda_archs)
    flash_attn, sgl_kernel = plan.flash_attn, plan.sgl_kernel
    labels = {
        "org.opencontainers.image.title": project.title,
        "org.opencontainers.image.description": project.description,
        "org.opencontainers.image.version": image_version,
        "org.opencontainers.image.licenses": project.licenses,
        "org.opencontainers.image.base.name": plan.runtime_base_image,
        f"{prefix}.profile": plan.profile,
        f"{prefix}.sglang.version": plan.sglang_version,
        f"{prefix}.cuda.version": plan.cuda_version,
        f"{prefix}.cuda.archs": archs,
        f"{prefix}.python.version": plan.python_version,
        f"{prefix}.torch.version": plan.torch_version,
        f"{prefix}.torch.cuda": plan.torch_cuda,
        f"{prefix}.flashinfer.version": plan.flashinfer_version,
        f"{prefix}.flash-attn.version": plan.flash_attn_version,
        f"{prefix}.flash-attn.archs": archs,
        f"{prefix}.flash-attn.kernels": kernels_text(flash_attn.head_dims, flash_attn.dtypes, flash_attn.backward),
        f"{prefix}.sgl-kernel.package": sgl_kernel.package,
        f"{prefix}.sgl-kernel.version": sgl_kernel.version,
        f"{prefix}.sgl-kernel.cuda": sgl_kernel.cuda,
        f"{prefix}.sgl-kernel.archs": ",".join(sgl_kernel.archs),
        f"{prefix}.sgl-kernel.install": sgl_kernel.source,
        f"{prefix}.fixups": " ".join(f.requirement for f in plan.fixups) or "none",
        f"{prefix}.patches": ",".join(f"{p.name}@sha256:{p.sha256}" for p in plan.patches),
        f"{prefix}.stand-ins": " | ".join(plan.stand_ins) if plan.stand_ins else "none",
        f"{prefix}.user": plan.image.user,
        f"{prefix}.cache-dir": plan.image.cache_dir,
        f"{prefix}.port": str(plan.image.port),
    }
    if revision:
        labels["org.opencontainers.image.revision"] = revision
    return labels


# ---------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------


class LabelError(ValueError):
    """The image lacks a label the checks need, or a label is malformed."""


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class Patch:
    name: str
    sha256: str


@dataclass(frozen=True)
class Kernels:
    """flash-attn's kernel subset: `head_dims=128;dtypes=bf16;backward=off`."""

    head_dims: list[int]
    dtypes: list[str]
    backward: bool


def parse_kernels(text: str, prefix: str | None = None) -> Kernels:
    fields = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
    try:
        return Kernels(
            head_dims=sorted(int(d) for d in _split(fields["head_dims"])),
            dtypes=sorted(_split(fields["dtypes"])),
            backward={"on": True, "off": False}[fields["backward"]],
        )
    except (KeyError, ValueError):
        raise LabelError(
            f"{prefix or namespace()}.flash-attn.kernels: {text!r} is not head_dims=..;dtypes=..;backward=on|off"
        ) from None


@dataclass(frozen=True)
class Expect:
    """What an image promises, read from its labels."""

    profile: str
    sglang: str
    cuda: str
    cuda_archs: list[str]  # sm_120
    python: str
    torch: str
    torch_cuda: str
    flashinfer: str
    flash_attn: str
    flash_attn_archs: list[str]  # sm_120
    flash_attn_kernels: Kernels
    sgl_kernel_package: str  # the distribution: sgl-kernel or sglang-kernel (import name sgl_kernel either way)
    sgl_kernel: str
    sgl_kernel_archs: list[str]  # what the label says the wheel carries (PyPI's wheel: many)
    patches: list[Patch]
    user: str
    cache_dir: str
    port: int
    stand_ins: str

    @property
    def sgl_kernel_required(self) -> list[str]:
        """sgl-kernel compiles its sm_120 code arch-specific (`compute_120a,code=sm_120a`)."""
        return [a if a.endswith(("a", "f")) else a + "a" for a in self.cuda_archs]

    @property
    def versions(self) -> dict[str, str]:
        """Import name -> the version its label promises."""
        return {
            "torch": self.torch,
            "sglang": self.sglang,
            "sgl_kernel": self.sgl_kernel,
            "flashinfer": self.flashinfer,
            "flash_attn": self.flash_attn,
        }


def missing(labels: Mapping[str, str] | None, prefix: str | None = None) -> list[str]:
    """The required labels `labels` lacks, by full name."""
    prefix = prefix or namespace()
    labels = labels or {}
    return [f"{prefix}.{key}" for key in REQUIRED if f"{prefix}.{key}" not in labels]


def parse(labels: Mapping[str, str] | None, prefix: str | None = None) -> Expect:
    """An image's labels as what it promises; LabelError names the first label missing or malformed."""
    prefix = prefix or namespace()
    labels = labels or {}
    absent = missing(labels, prefix)
    if absent:
        raise LabelError(f"the image has no label {', '.join(absent)}")

    def get(key: str) -> str:
        return labels[f"{prefix}.{key}"].strip()

    patches = []
    for entry in _split(get("patches")):
        name, sep, digest = entry.partition("@sha256:")
        if not sep or not name or len(digest) != 64:
            raise LabelError(f"{prefix}.patches: {entry!r} is not NAME@sha256:HEX")
        patches.append(Patch(name, digest))
    try:
        port = int(get("port"))
    except ValueError:
        raise LabelError(f"{prefix}.port: {get('port')!r} is not a port number") from None
    return Expect(
        profile=get("profile"),
        sglang=get("sglang.version"),
        cuda=get("cuda.version"),
        cuda_archs=_split(get("cuda.archs")),
        python=get("python.version"),
        torch=get("torch.version"),
        torch_cuda=get("torch.cuda"),
        flashinfer=get("flashinfer.version"),
        flash_attn=get("flash-attn.version"),
        flash_attn_archs=_split(get("flash-attn.archs")),
        flash_attn_kernels=parse_kernels(get("flash-attn.kernels"), prefix),
        sgl_kernel_package=get("sgl-kernel.package"),
        sgl_kernel=get("sgl-kernel.version"),
        sgl_kernel_archs=_split(get("sgl-kernel.archs")),
        patches=patches,
        user=get("user"),
        cache_dir=get("cache-dir"),
        port=port,
        stand_ins=labels.get(f"{prefix}.stand-ins", "none"),
    )
