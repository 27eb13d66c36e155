# SGLang for NVIDIA Blackwell workstation GPUs (sm_120) on CUDA 13.0.1.
#
# Built by `python3 build.py build`, which resolves build.toml into a plan on the host and passes every ARG below
# from it; only the bases and Python have defaults here (what a person may set by hand), no copy of the plan. A
# hand-run build: `python3 build.py build --print` stages the plan's outputs (PLAN_DIR: plan.json, the patch
# series, flash-attn's patches) and prints the exact `docker buildx build` command. Stages re-declare the ARGs
# they use without a value.
#
# Stage order: devel -> torch -> flash-attn, sgl-kernel (compiled kernels) -> sglang (dependencies) ->
# flashinfer-prebuilt, kernels -> patched (our SGLang patches) -> overlay -> runtime. Kernel stages copy only their own
# scripts and patches, and the patch stage comes after them, so a patch or Python edit never recompiles a kernel. The
# compile parallelism is the BuildKit secret `build_jobs` (docker/stages/common.sh), not an ARG: it is kept out of
# the cache key.
# No `# syntax=` line: BuildKit's built-in Dockerfile frontend is used (a syntax line pulls an image).

ARG BASE_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
ARG RUNTIME_BASE_IMAGE=nvidia/cuda:13.0.1-base-ubuntu24.04
ARG PYTHON_VERSION=3.12

# ---- devel: the CUDA 13.0.1 compiler image plus Python, a virtual environment and build tools.
# Every compile stage starts here. Python comes from the OS (Ubuntu 24.04: 3.12; the offline Debian: 3.11).
FROM ${BASE_IMAGE} AS devel
ARG PYTHON_VERSION
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_PYTHON_VERSION_WARNING=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda \
    CCACHE_DIR=/root/.ccache
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        python3 python3-dev python3-venv build-essential git ninja-build ccache ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${PYTHON_VERSION}', \
        'the base has Python ' + v + ', the plan says ${PYTHON_VERSION}: fix python in build.toml'" \
 && python3 -m venv /opt/venv
COPY docker/stages/common.sh /opt/build/common.sh
RUN --mount=type=secret,id=ca_bundle --mount=type=cache,target=/root/.cache/pip \
    . /opt/build/common.sh && pip install -q --upgrade pip setuptools wheel packaging ninja

# ---- torch: torch for the track (PyTorch's CUDA 13.0 index where PyPI's build is CUDA 12, in `release`).
FROM devel AS torch
ARG TORCH_VERSION
ARG TORCH_INDEX_URL
RUN --mount=type=secret,id=ca_bundle --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /opt/build/common.sh \
 && if [ -n "${TORCH_INDEX_URL}" ]; then pip config --site set global.extra-index-url "${TORCH_INDEX_URL}"; fi \
 && pip_install "torch==${TORCH_VERSION}" \
 && python -c "import torch; print('torch', torch.__version__, 'built with CUDA', torch.version.cuda)"

# ---- flash-attn: compiled from its sdist for the plan's archs, head dims and dtypes, with the plan's patches
# (staged in PLAN_DIR/flash-attn/ by build.py, at their build.toml paths).
FROM torch AS flash-attn
ARG FLASH_ATTN_VERSION
ARG FLASH_ATTN_CUDA_ARCHS
ARG FLASH_ATTN_HEAD_DIMS
ARG FLASH_ATTN_DTYPES
ARG FLASH_ATTN_BACKWARD
ARG FLASH_ATTN_SPLIT_KV
ARG FLASH_ATTN_PATCHES
ARG FLASH_ATTN_ALLOW_CUDA_MISMATCH
ARG CXX_STD
ARG PLAN_DIR
COPY docker/stages/flash-attn.sh /opt/build/
COPY ${PLAN_DIR}/flash-attn/ /opt/build/
RUN --mount=type=secret,id=ca_bundle --mount=type=secret,id=build_jobs --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.ccache \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    OUT_DIR=/wheels PATCH_ROOT=/opt/build bash /opt/build/flash-attn.sh

# ---- sgl-kernel: SGLang's kernels as a wheel, the way build.toml says per track and profile: `wheel` (upstream's
# prebuilt CUDA 13 wheel, pinned by sha256, as SGLang's own CUDA 13 Dockerfile installs it), `pypi`, or `source`
# (opt-in: compiled from the SGLang release tag for sm_120a). docker/stages/sgl-kernel.sh says what each does.
FROM torch AS sgl-kernel
ARG SGLANG_VERSION
ARG SGL_KERNEL_PACKAGE
ARG SGL_KERNEL_VERSION
ARG SGL_KERNEL_SOURCE
ARG SGL_KERNEL_WHEEL_URL
ARG SGL_KERNEL_WHEEL_SHA256
COPY docker/stages/sgl-kernel.sh /opt/build/
RUN --mount=type=secret,id=ca_bundle --mount=type=secret,id=build_jobs --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.ccache \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    OUT_DIR=/wheels bash /opt/build/sgl-kernel.sh

# ---- sglang: SGLang at the pinned version and every dependency, unpatched, with the sgl-kernel wheel; then the
# track's CUDA fix-up pins (build.toml [[tracks.*.fixups]]: cuDNN, NCCL, cuBLAS, cuda-python), after dependency
# resolution, as upstream does. It does not wait for flash-attn: BuildKit runs this install while flash-attn compiles.
FROM torch AS sglang
ARG SGLANG_VERSION
ARG FLASHINFER_VERSION
ARG FIXUP_PINS
COPY docker/stages/fixups.sh /opt/build/
RUN --mount=type=secret,id=ca_bundle --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,from=sgl-kernel,source=/wheels,target=/kernels/sgl-kernel \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /opt/build/common.sh \
 && pip_install /kernels/sgl-kernel/*.whl "sglang==${SGLANG_VERSION}" "flashinfer-python==${FLASHINFER_VERSION}" \
 && bash /opt/build/fixups.sh apply

# ---- flashinfer-prebuilt: FlashInfer's JIT modules for sm_120 that the plan names (from the first-start census),
# built by FlashInfer's own generators, so a first start loads them from site-packages (where a cache volume cannot
# hide them) instead of compiling. It needs FlashInfer, not the kernels: it runs beside flash-attn's compile.
FROM sglang AS flashinfer-prebuilt
ARG FLASHINFER_PREBUILT
COPY docker/stages/flashinfer_prebuilt.py /opt/build/
RUN --mount=type=secret,id=build_jobs . /opt/build/common.sh && load_build_jobs \
 && MAX_JOBS=${FLASHINFER_MAX_JOBS:-$(nproc)} python /opt/build/flashinfer_prebuilt.py /opt/prebuilt

# ---- kernels: the flash-attn wheel added to that environment (its dependencies are already there).
FROM sglang AS kernels
ARG FIXUP_PINS
RUN --mount=type=bind,from=flash-attn,source=/wheels,target=/kernels/flash-attn \
    pip install --no-deps --no-index /kernels/flash-attn/*.whl \
 && bash /opt/build/fixups.sh check

# ---- patched: the SGLang patch series the host resolved (PLAN_DIR/series), applied by the engine `build.py patches`
# runs on the host (sm120/image/patch_engine.py; a conflict names patch, file and hunk). The image's package is
# copied whole (sm120/image/: standard library only), so a host-side edit never re-runs this stage.
FROM kernels AS patched
ARG PYTHON_VERSION
ARG PLAN_DIR
COPY sm120/__init__.py /opt/sglang-sm120/sm120/__init__.py
COPY sm120/image/ /opt/sglang-sm120/sm120/image/
COPY ${PLAN_DIR}/series/ /opt/build/series/
RUN site=/opt/venv/lib/python${PYTHON_VERSION}/site-packages \
 && PYTHONPATH=/opt/sglang-sm120 python -m sm120.image.patch_engine apply /opt/build/series/series.json "$site" \
 && python -m compileall -q "$site/sglang"

# ---- jit-toolchain: what SGLang, FlashInfer and Triton compile with at run time, cut from the devel image:
# nvcc and its backends, the CUDA headers, libcudart.so and the driver stub to link against. Not the static
# libraries, profilers, samples or docs. NVIDIA's `include` and `lib64` are links: the script follows them.
FROM devel AS jit-toolchain
COPY docker/stages/jit-toolchain.sh /opt/build/
RUN bash /opt/build/jit-toolchain.sh collect /usr/local/cuda /opt/jit/cuda

# ---- overlay: what changes more often than the venv (the patched SGLang sources, sm120/image/, the
# entrypoint script and FlashInfer's prebuilt modules), gathered so that the runtime stage adds it as one layer on top of the venv: a patch or
# entrypoint edit re-exports one small layer instead of several (each new layer costs a diff on some drivers).
FROM scratch AS overlay
ARG PYTHON_VERSION
COPY --from=patched /opt/venv/lib/python${PYTHON_VERSION}/site-packages/sglang/ \
     /opt/venv/lib/python${PYTHON_VERSION}/site-packages/sglang/
COPY docker/entrypoint.py /opt/sglang-sm120/entrypoint.py
COPY --from=patched /opt/sglang-sm120/sm120/ /opt/sglang-sm120/sm120/
COPY --from=flashinfer-prebuilt /opt/prebuilt/ /opt/venv/lib/python${PYTHON_VERSION}/site-packages/flashinfer/data/aot/

# ---- runtime: what serving needs and nothing else. Non-root, tini as PID 1, the JIT toolchain, one cache
# directory for every JIT cache (mount a named volume there), a health check on SGLang's /health.
FROM ${RUNTIME_BASE_IMAGE} AS runtime
ARG PYTHON_VERSION
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG IMAGE_USER
ARG IMAGE_UID
ARG CACHE_DIR
ARG PORT
ENV DEBIAN_FRONTEND=noninteractive
# python3-dev: Python.h for Triton's launcher; g++ and ninja: FlashInfer's and SGLang's JIT builds; tini: PID 1;
# libnuma1: sgl-kernel links it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        python3 python3-dev g++ ninja-build tini libnuma1 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/* \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${PYTHON_VERSION}', v"
# The toolchain is merged into the directory /usr/local/cuda resolves to, through the base's own links.
RUN --mount=type=bind,from=jit-toolchain,source=/opt/jit/cuda,target=/mnt/jit \
    --mount=type=bind,source=docker/stages/jit-toolchain.sh,target=/mnt/jit-toolchain.sh \
    bash /mnt/jit-toolchain.sh merge /mnt/jit /usr/local/cuda && ldconfig
# The image's user with build.toml's uid, whether or not the base already has an account with it (Ubuntu
# 24.04's `ubuntu` is uid 1000: it is renamed); its ~/.cache is the cache volume.
RUN --mount=type=bind,source=docker/stages/runtime-user.sh,target=/mnt/runtime-user.sh \
    bash /mnt/runtime-user.sh "${IMAGE_USER}" "${IMAGE_UID}" "${CACHE_DIR}"
# The venv, copied without what serving on sm_120 never loads: build.toml [[not_shipped]] (by SGLang version), each
# entry with its reason and source (an entry that matches nothing stops the build); `build.py verify` checks they stay unused.
ARG NOT_SHIPPED
RUN --mount=type=bind,from=kernels,source=/opt/venv,target=/mnt/venv \
    --mount=type=bind,source=docker/stages/venv_copy.py,target=/mnt/venv_copy.py \
    python3 /mnt/venv_copy.py /mnt/venv /opt/venv "lib/python${PYTHON_VERSION}/site-packages"
COPY --from=overlay / /
# plan.json names the commit (its labels' revision), so every commit changes it: a layer of its own, last, so that a
# commit re-exports this small file and not the overlay.
ARG PLAN_DIR
ARG PLAN_JSON
COPY ${PLAN_DIR}/plan.json ${PLAN_JSON}
# FLASHINFER_CUBINS_REPOSITORY: FlashInfer fetches a missing cubin (TRT-LLM kernels, sm_100 only) from there; a
# directory of the image's own that holds none keeps it off the network (sm120/verify/suite/test_slim.py).
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CUDA_HOME=/usr/local/cuda \
    PORT=${PORT} \
    SM120_CACHE_DIR=${CACHE_DIR} \
    XDG_CACHE_HOME=${CACHE_DIR} \
    TRITON_CACHE_DIR=${CACHE_DIR}/triton \
    TORCHINDUCTOR_CACHE_DIR=${CACHE_DIR}/torchinductor \
    TVM_FFI_CACHE_DIR=${CACHE_DIR}/tvm-ffi \
    SGLANG_CACHE_DIR=${CACHE_DIR}/sglang \
    SGLANG_JIT_CACHE_DIR=${CACHE_DIR}/sglang/jit \
    FLASHINFER_WORKSPACE_BASE=${CACHE_DIR} \
    FLASHINFER_CUBINS_REPOSITORY=/opt/sglang-sm120/no-cubins/ \
    CUDA_CACHE_PATH=${CACHE_DIR}/nv \
    HF_HOME=${CACHE_DIR}/huggingface \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER ${IMAGE_UID}
WORKDIR /home/${IMAGE_USER}
VOLUME ["${CACHE_DIR}"]
EXPOSE ${PORT}
# The probe is the track's (build.toml [tracks."X".probe]): the `health` tool (sm120/image/probe/) reads its route
# and timeout from the image's plan. HEALTHCHECK expands no build args in its flags, so they are written here: --interval, --start-period and
# --retries equal every track's probe, --timeout is a hard stop above every track's timeout_s (the command's own
# limit) plus Python's start; tests/unit/test_probes.py keeps them so.
HEALTHCHECK --interval=30s --timeout=60s --start-period=60m --retries=3 \
    CMD ["/opt/venv/bin/python3", "/opt/sglang-sm120/entrypoint.py", "health"]
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/venv/bin/python3", "/opt/sglang-sm120/entrypoint.py"]
CMD ["baseline"]
