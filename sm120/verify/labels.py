"""What an image promises, read from its own labels (written by `build.py build` from the plan).

The suite never reads build.toml: the labels are the contract, so the same checks hold for every track and
profile, and an image built from another checkout is checked against what it says about itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

NS = "sglang-sm120"

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


def parse_kernels(text: str) -> Kernels:
    fields = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
    try:
        return Kernels(
            head_dims=sorted(int(d) for d in _split(fields["head_dims"])),
            dtypes=sorted(_split(fields["dtypes"])),
            backward={"on": True, "off": False}[fields["backward"]],
        )
    except (KeyError, ValueError):
        raise LabelError(f"{NS}.flash-attn.kernels: {text!r} is not head_dims=..;dtypes=..;backward=on|off") from None


@dataclass(frozen=True)
class Expect:
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


def missing(labels: Mapping[str, str] | None) -> list[str]:
    labels = labels or {}
    return [f"{NS}.{key}" for key in REQUIRED if f"{NS}.{key}" not in labels]


def parse(labels: Mapping[str, str] | None) -> Expect:
    labels = labels or {}
    absent = missing(labels)
    if absent:
        raise LabelError(f"the image has no label {', '.join(absent)}")

    def get(key: str) -> str:
        return labels[f"{NS}.{key}"].strip()

    patches = []
    for entry in _split(get("patches")):
        name, sep, digest = entry.partition("@sha256:")
        if not sep or not name or len(digest) != 64:
            raise LabelError(f"{NS}.patches: {entry!r} is not NAME@sha256:HEX")
        patches.append(Patch(name, digest))
    try:
        port = int(get("port"))
    except ValueError:
        raise LabelError(f"{NS}.port: {get('port')!r} is not a port number") from None
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
        flash_attn_kernels=parse_kernels(get("flash-attn.kernels")),
        sgl_kernel_package=get("sgl-kernel.package"),
        sgl_kernel=get("sgl-kernel.version"),
        sgl_kernel_archs=_split(get("sgl-kernel.archs")),
        patches=patches,
        user=get("user"),
        cache_dir=get("cache-dir"),
        port=port,
        stand_ins=labels.get(f"{NS}.stand-ins", "none"),
    )
