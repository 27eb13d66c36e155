"""The plan's facts that leave the host, one row each (`FACTS`): the Docker build arg and the image label it becomes,
and how verify reads that label back; the label values' own formats are written and read here, side by side."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sm120.image.entrypoint.spec import PLAN_JSON_PATH
from sm120.plan.plan_types import Plan, sm


class LabelError(ValueError):
    """The image lacks a label the checks need, or a label is malformed."""


def split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class Kernels:
    """flash-attn's kernel subset: `head_dims=128;dtypes=bf16;backward=off;split_kv=off`."""

    head_dims: list[int]
    dtypes: list[str]
    backward: bool
    split_kv: bool


_FLAGS = {"on": True, "off": False}  # the label's switches (backward, split_kv)


def _kernels(plan: Plan) -> str:
    fa, word = plan.flash_attn, {v: k for k, v in _FLAGS.items()}
    return f"head_dims={','.join(map(str, fa.head_dims))};dtypes={','.join(fa.dtypes)};" + ";".join(
        f"{name}={word[getattr(fa, name)]}" for name in ("backward", "split_kv")
    )


def _prebuilt(plan: Plan) -> str:
    return ",".join(m["name"] for m in plan.flashinfer_prebuilt["modules"]) or "none"


def parse_kernels(text: str) -> Kernels:
    fields = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
    try:
        return Kernels(
            head_dims=sorted(int(d) for d in split(fields["head_dims"])),
            dtypes=sorted(split(fields["dtypes"])),
            backward=_FLAGS[fields["backward"]],
            split_kv=_FLAGS[fields["split_kv"]],
        )
    except (KeyError, ValueError):
        raise LabelError(f"{text!r} is not head_dims=..;dtypes=..;backward=on|off;split_kv=on|off") from None


@dataclass(frozen=True)
class Patch:
    name: str
    sha256: str


def _patches(plan: Plan) -> str:
    return ",".join(f"{x.name}@sha256:{x.sha256}" for x in plan.patches)


def parse_patches(text: str) -> list[Patch]:
    patches = []
    for entry in split(text):
        name, sep, digest = entry.partition("@sha256:")
        if not sep or not name or len(digest) != 64:
            raise LabelError(f"{entry!r} is not NAME@sha256:HEX")
        patches.append(Patch(name, digest))
    return patches


def parse_port(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LabelError(f"{text!r} is not a port number") from None


def _archs(plan: Plan) -> str:
    return ",".join(sm(a) for a in plan.cuda_archs)


@dataclass(frozen=True)
class Fact:
    value: Callable[[Plan], str]  # the fact as text, from the plan
    arg: str | None = None  # its Docker build arg (the Dockerfile declares it; tests/unit/test_dockerfile.py)
    label: str | None = None  # its label, below the namespace (build.toml's [project] name)
    field: str | None = None  # the labels.Expect field the label reads back into (None: written, not read)
    read: Callable[[str], Any] = str  # the label's text -> the Expect value (LabelError when malformed)
    required: bool = True  # an image without the label was not built by `build.py build`


FACTS: tuple[Fact, ...] = (
    # devel-base: what the kernels were compiled on (name@digest where pinned; the runtime base is OCI base.name)
    Fact(lambda p: p.base_image, arg="BASE_IMAGE", label="devel-base", required=False),
    Fact(lambda p: p.runtime_base_image, arg="RUNTIME_BASE_IMAGE"),
    Fact(lambda p: p.profile, label="profile", field="profile"),
    Fact(lambda p: p.python_version, arg="PYTHON_VERSION", label="python.version", field="python"),
    Fact(lambda p: p.sglang_version, arg="SGLANG_VERSION", label="sglang.version", field="sglang"),
    Fact(lambda p: p.cuda_version, label="cuda.version", field="cuda"),
    Fact(_archs, label="cuda.archs", field="cuda_archs", read=split),
    Fact(lambda p: p.torch_version, arg="TORCH_VERSION", label="torch.version", field="torch"),
    Fact(lambda p: p.torch_cuda, label="torch.cuda", field="torch_cuda"),
    Fact(lambda p: p.torch_index or "", arg="TORCH_INDEX_URL"),
    Fact(lambda p: p.flashinfer_version, arg="FLASHINFER_VERSION", label="flashinfer.version", field="flashinfer"),
    Fact(lambda p: p.flash_attn_version, arg="FLASH_ATTN_VERSION", label="flash-attn.version", field="flash_attn"),
    Fact(lambda p: ";".join(p.flash_attn.archs), arg="FLASH_ATTN_CUDA_ARCHS"),
    Fact(_archs, label="flash-attn.archs", field="flash_attn_archs", read=split),
    Fact(lambda p: ",".join(map(str, p.flash_attn.head_dims)), arg="FLASH_ATTN_HEAD_DIMS"),
    Fact(lambda p: ",".join(p.flash_attn.dtypes), arg="FLASH_ATTN_DTYPES"),
    Fact(lambda p: "1" if p.flash_attn.backward else "0", arg="FLASH_ATTN_BACKWARD"),
    Fact(lambda p: "1" if p.flash_attn.split_kv else "0", arg="FLASH_ATTN_SPLIT_KV"),
    Fact(_kernels, label="flash-attn.kernels", field="flash_attn_kernels", read=parse_kernels),
    Fact(lambda p: " ".join(x.path for x in p.patches if x.component == "flash-attn"), arg="FLASH_ATTN_PATCHES"),
    Fact(lambda p: "1" if p.torch_cuda_differs else "0", arg="FLASH_ATTN_ALLOW_CUDA_MISMATCH"),
    Fact(lambda p: str(p.flash_attn.cxx_std), arg="CXX_STD"),
    Fact(
        lambda p: p.sgl_kernel.package, arg="SGL_KERNEL_PACKAGE", label="sgl-kernel.package", field="sgl_kernel_package"
    ),
    Fact(lambda p: p.sgl_kernel.version, arg="SGL_KERNEL_VERSION", label="sgl-kernel.version", field="sgl_kernel"),
    Fact(lambda p: p.sgl_kernel.cuda, label="sgl-kernel.cuda", required=False),
    Fact(lambda p: ",".join(p.sgl_kernel.archs), label="sgl-kernel.archs", field="sgl_kernel_archs", read=split),
    Fact(lambda p: p.sgl_kernel.source, arg="SGL_KERNEL_SOURCE", label="sgl-kernel.install", required=False),
    Fact(lambda p: p.sgl_kernel.wheel_url, arg="SGL_KERNEL_WHEEL_URL"),
    Fact(lambda p: p.sgl_kernel.wheel_sha256, arg="SGL_KERNEL_WHEEL_SHA256"),
    # INSTALL:REQUIREMENT, what docker/stages/fixups.sh reads (no-deps: --force-reinstall --no-deps; deps: with them)
    Fact(lambda p: " ".join(f"{f.install}:{f.requirement}" for f in p.fixups), arg="FIXUP_PINS"),
    Fact(lambda p: " ".join(g for n in p.not_shipped for g in n.paths), arg="NOT_SHIPPED"),
    Fact(lambda p: json.dumps(p.flashinfer_prebuilt), arg="FLASHINFER_PREBUILT"),
    Fact(_prebuilt, label="flashinfer.prebuilt", required=False),
    Fact(lambda p: " ".join(f.requirement for f in p.fixups) or "none", label="fixups", required=False),
    Fact(_patches, label="patches", field="patches", read=parse_patches),
    Fact(lambda p: " | ".join(p.stand_ins) or "none", label="stand-ins", field="stand_ins", required=False),
    Fact(lambda p: p.image.user, arg="IMAGE_USER", label="user", field="user"),
    Fact(lambda p: str(p.image.uid), arg="IMAGE_UID"),
    Fact(lambda p: p.image.cache_dir, arg="CACHE_DIR", label="cache-dir", field="cache_dir"),
    Fact(lambda p: str(p.image.port), arg="PORT", label="port", field="port", read=parse_port),
    Fact(lambda p: PLAN_JSON_PATH, arg="PLAN_JSON"),  # where the entrypoint reads the plan
    # Where `build.py build` stages what the image build takes from the plan (sm120/build/build_context.py).
    Fact(lambda p: f".plan/{p.profile}-{p.sglang_version}", arg="PLAN_DIR"),
)

# Optional labels that are read back when present, and what they mean when absent.
ABSENT = {"stand-ins": "none"}
