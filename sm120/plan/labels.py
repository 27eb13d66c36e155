"""The image's labels: written from the plan (`write`), read back by verify (`parse`), which never reads build.toml
for what an image holds. Every project label is `<namespace>.<key>`, the namespace being build.toml's [project] name."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.version import Version

from sm120.errors import UsageError
from sm120.plan import ROOT, tomllib
from sm120.plan.config import Project
from sm120.plan.exported import ABSENT, FACTS, Kernels, LabelError, Patch
from sm120.plan.plan_types import Plan

# Labels the suite reads; an image without them was not built by `build.py build`.
REQUIRED = tuple(f.label for f in FACTS if f.label and f.required)


@functools.cache
def namespace() -> str:
    """The label namespace of this checkout: build.toml's [project] name, read alone (verify and bench --image read
    nothing else of build.toml; `plan` checks the name's form)."""
    path = ROOT / "build.toml"
    try:
        return str(tomllib.loads(path.read_text(encoding="utf-8"))["project"]["name"])
    except (OSError, ValueError, KeyError, TypeError) as exc:  # ValueError: TOMLDecodeError, a bad encoding
        raise UsageError(f"{path}: no [project] name to name the labels by ({exc})") from None


def write(plan: Plan, project: Project, image_version: str, revision: str | None) -> dict[str, str]:
    """The labels of the image `plan` builds (OCI annotations first, then the project's own, from exported.FACTS)."""
    labels = {
        "org.opencontainers.image.title": project.title,
        "org.opencontainers.image.description": project.description,
        "org.opencontainers.image.version": image_version,
        "org.opencontainers.image.licenses": project.licenses,
        "org.opencontainers.image.base.name": plan.runtime_base_image,
    }
    labels.update({f"{project.name}.{f.label}": f.value(plan) for f in FACTS if f.label})
    if revision:
        labels["org.opencontainers.image.revision"] = revision
    if "@sha256:" in plan.runtime_base_image:
        labels["org.opencontainers.image.base.digest"] = plan.runtime_base_image.split("@", 1)[1]
    return labels


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
        """Import name -> the version its label promises (each field is named after its import name)."""
        return {name: getattr(self, name) for name in ("torch", "sglang", "sgl_kernel", "flashinfer", "flash_attn")}


def is_labelled_version(found: str, label: str) -> bool:
    """What a version label means: the public version, and the local part (`+cu130`) only where the label has one:
    a label `0.3.21` (a PyPI pin) takes `0.3.21+cu130`, a label `0.3.21+cu130` (a pinned wheel's) only that build."""
    want, got = Version(label), Version(found)
    return Version(got.public) == Version(want.public) and (want.local is None or got.local == want.local)


def missing(labels: Mapping[str, str] | None, prefix: str | None = None) -> list[str]:
    """The required labels `labels` lacks, by full name."""
    prefix = prefix or namespace()
    return [f"{prefix}.{key}" for key in REQUIRED if f"{prefix}.{key}" not in (labels or {})]


def parse(labels: Mapping[str, str] | None, prefix: str | None = None) -> Expect:
    """An image's labels as what it promises; LabelError names the first label missing or malformed."""
    prefix = prefix or namespace()
    labels = labels or {}
    if absent := missing(labels, prefix):
        raise LabelError(f"the image has no label {', '.join(absent)}")
    values = {}
    for fact in (f for f in FACTS if f.label and f.field):
        key = f"{prefix}.{fact.label}"
        text = labels[key].strip() if key in labels else ABSENT[fact.label]
        try:
            values[fact.field] = fact.read(text)
        except LabelError as exc:
            raise LabelError(f"{key}: {exc}") from None
    return Expect(**values)
