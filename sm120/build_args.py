"""The Docker build args: written from the plan (`write`), declared in the Dockerfile (`dockerfile_defaults`,
`stage_args` read the declarations back).

`build.py build` passes every arg `write` returns; the Dockerfile declares each one's default once, above the first
FROM (the default plan's value, for people who run `docker buildx build .` by hand), and re-declares it without a
value in each stage that uses it. tests/unit/test_dockerfile.py keeps the two equal. The compile parallelism is
not a build arg (it would change a compiled layer's cache key): it is the BuildKit secret `build_jobs`.
"""

from __future__ import annotations

import re

from .entrypoint.spec import PLAN_JSON_PATH
from .plan_types import Plan


def write(plan: Plan) -> dict[str, str]:
    """Every build arg of the image `plan` builds, by name."""
    flash_attn, sgl_kernel, image = plan.flash_attn, plan.sgl_kernel, plan.image
    return {
        "BASE_IMAGE": plan.base_image,
        "RUNTIME_BASE_IMAGE": plan.runtime_base_image,
        "PROFILE": plan.profile,
        "PYTHON_VERSION": plan.python_version,
        "SGLANG_VERSION": plan.sglang_version,
        "TORCH_VERSION": plan.torch_version,
        "TORCH_INDEX_URL": plan.torch_index or "",
        "FLASHINFER_VERSION": plan.flashinfer_version,
        "FLASH_ATTN_VERSION": plan.flash_attn_version,
        "FLASH_ATTN_CUDA_ARCHS": ";".join(flash_attn.archs),
        "FLASH_ATTN_HEAD_DIMS": ",".join(map(str, flash_attn.head_dims)),
        "FLASH_ATTN_DTYPES": ",".join(flash_attn.dtypes),
        "FLASH_ATTN_BACKWARD": "1" if flash_attn.backward else "0",
        "FLASH_ATTN_PATCHES": " ".join(p.path for p in plan.patches if p.component == "flash-attn"),
        "FLASH_ATTN_ALLOW_CUDA_MISMATCH": "1" if plan.torch_cuda_differs else "0",
        "CXX_STD": str(flash_attn.cxx_std),
        "SGL_KERNEL_PACKAGE": sgl_kernel.package,
        "SGL_KERNEL_VERSION": sgl_kernel.version,
        "SGL_KERNEL_SOURCE": sgl_kernel.source,
        "SGL_KERNEL_WHEEL_URL": sgl_kernel.wheel_url,
        "SGL_KERNEL_WHEEL_SHA256": sgl_kernel.wheel_sha256,
        "FIXUP_PINS": " ".join(f.requirement for f in plan.fixups),
        "IMAGE_USER": image.user,
        "IMAGE_UID": str(image.uid),
        "CACHE_DIR": image.cache_dir,
        "PORT": str(image.port),
        "PLAN_JSON": PLAN_JSON_PATH,  # where the entrypoint reads the plan
    }


def stage_env(build_args: dict[str, str], dockerfile: str, stage: str) -> dict[str, str]:
    """The build args the Dockerfile's `stage` declares, with their values: that stage's environment."""
    return {name: build_args[name] for name in sorted(stage_args(dockerfile)[stage])}


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def dockerfile_defaults(text: str) -> dict[str, str]:
    """The Dockerfile's `ARG NAME=default` declarations above its first FROM."""
    head = text[: text.index("\nFROM ")]
    return {name: _unquote(value) for name, value in re.findall(r"^ARG (\w+)=(.*)$", head, flags=re.MULTILINE)}


def stages(text: str) -> dict[str, str]:
    """Stage name -> its text, from its FROM line to the next."""
    parts = re.split(r"^(?=FROM )", text[text.index("\nFROM ") + 1 :], flags=re.MULTILINE)
    out = {}
    for part in parts:
        match = re.search(r" AS ([\w-]+)", part.splitlines()[0]) if part.startswith("FROM ") else None
        if match:
            out[match.group(1)] = part
    return out


def stage_args(text: str) -> dict[str, set[str]]:
    """Stage name -> the ARGs it re-declares without a value (the build args it uses)."""
    return {name: set(re.findall(r"^ARG (\w+)$", part, flags=re.MULTILINE)) for name, part in stages(text).items()}
