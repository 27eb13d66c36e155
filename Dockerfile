# SGLang for NVIDIA Blackwell workstation GPUs (sm_120) on CUDA 13.0.1.
#
# `python3 build.py build [--profile offline]` passes every ARG below from the resolved plan (build.toml).
# The defaults mirror build.toml's default track and profile (SGLang 0.5.9, release) for people who run
# `docker buildx build .` by hand; tests/unit/test_dockerfile.py keeps them equal to the plan.
#
# Stage order: devel -> torch -> flash-attn, sgl-kernel (compiled kernels) -> sglang (dependencies) -> kernels
# -> patched (our SGLang patches) -> overlay -> runtime. Kernel stages copy only their own scripts and patches, and the
# patch stage comes after them, so a patch or Python edit never recompiles a kernel.
# No `# syntax=` line: BuildKit's built-in Dockerfile frontend is used (a syntax line pulls an image).

ARG BASE_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
ARG RUNTIME_BASE_IMAGE=nvidia/cuda:13.0.1-base-ubuntu24.04

# ---- devel: the CUDA 13.0.1 compiler image plus Python, a virtual environment and build tools.
# Every compile stage starts here. Python comes from the OS (Ubuntu 24.04: 3.12; the offline Debian: 3.11).
FROM ${BASE_IMAGE} AS devel
ARG PYTHON_VERSION=3.12
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
ARG TORCH_VERSION=2.9.1
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
RUN --mount=type=secret,id=ca_bundle --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /opt/build/common.sh \
 && if [ -n "${TORCH_INDEX_URL}" ]; then pip config --site set global.extra-index-url "${TORCH_INDEX_URL}"; fi \
 && pip_install "torch==${TORCH_VERSION}" \
 && python -c "import torch; print('torch', torch.__version__, 'built with CUDA', torch.version.cuda)"

# ---- flash-attn: compiled from its sdist for the plan's archs, head dims and dtypes (patches/flash-attn).
FROM torch AS flash-attn
ARG FLASH_ATTN_VERSION=2.8.3
ARG FLASH_ATTN_CUDA_ARCHS=120
ARG FLASH_ATTN_HEAD_DIMS=32,64,96,128,192,256
ARG FLASH_ATTN_DTYPES=fp16,bf16
ARG FLASH_ATTN_BACKWARD=0
ARG FLASH_ATTN_PATCHES=patches/flash-attn/2.8.3/kernel-subset.patch
ARG FLASH_ATTN_ALLOW_CUDA_MISMATCH=0
ARG CXX_STD=17
ARG MAX_JOBS
ARG NVCC_THREADS=1
COPY docker/stages/flash-attn.sh /opt/build/
COPY patches/flash-attn/ /opt/build/patches/flash-attn/
RUN --mount=type=secret,id=ca_bundle --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.ccache \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    OUT_DIR=/wheels PATCH_ROOT=/opt/build bash /opt/build/flash-attn.sh

# ---- sgl-kernel: SGLang's kernels. `release` compiles them from the SGLang release tag for sm_120a only;
# `offline` takes the PyPI wheel, which carries sm_120a code (the plan checks that).
FROM torch AS sgl-kernel
ARG SGLANG_VERSION=0.5.9
ARG SGL_KERNEL_PACKAGE=sgl-kernel
ARG SGL_KERNEL_VERSION=0.3.21
ARG SGL_KERNEL_SOURCE=source
ARG MAX_JOBS
ARG NVCC_THREADS=1
COPY docker/stages/sgl-kernel.sh /opt/build/
RUN --mount=type=secret,id=ca_bundle --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.ccache \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    OUT_DIR=/wheels bash /opt/build/sgl-kernel.sh

# ---- sglang: SGLang at the pinned version and every dependency, unpatched, with the sgl-kernel wheel. It does
# not wait for flash-attn: BuildKit runs this install while flash-attn compiles.
FROM torch AS sglang
ARG SGLANG_VERSION=0.5.9
ARG FLASHINFER_VERSION=0.6.3
RUN --mount=type=secret,id=ca_bundle --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,from=sgl-kernel,source=/wheels,target=/kernels/sgl-kernel \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /opt/build/common.sh \
 && pip_install /kernels/sgl-kernel/*.whl "sglang==${SGLANG_VERSION}" "flashinfer-python==${FLASHINFER_VERSION}"

# ---- kernels: the flash-attn wheel added to that environment (its dependencies are already there).
FROM sglang AS kernels
RUN --mount=type=bind,from=flash-attn,source=/wheels,target=/kernels/flash-attn \
    pip install --no-deps --no-index /kernels/flash-attn/*.whl \
 && python -m pip check

# ---- patched: our patch series for this SGLang version, checked and applied by the same code as
# `build.py patches apply` on the host; then the plan, baked in for the entrypoint.
FROM kernels AS patched
ARG SGLANG_VERSION=0.5.9
ARG PROFILE=release
ARG PYTHON_VERSION=3.12
COPY build.py build.toml /opt/sglang-sm120/src/
COPY sm120/ /opt/sglang-sm120/src/sm120/
COPY patches/ /opt/sglang-sm120/src/patches/
RUN cd /opt/sglang-sm120/src \
 && site=/opt/venv/lib/python${PYTHON_VERSION}/site-packages \
 && python build.py patches apply --sglang "${SGLANG_VERSION}" --source "$site" --dest "$site" \
 && python -m compileall -q "$site/sglang" \
 && mkdir -p /etc/sglang-sm120 \
 && python build.py plan --json --profile "${PROFILE}" --sglang "${SGLANG_VERSION}" > /etc/sglang-sm120/plan.json

# ---- jit-toolchain: what SGLang, FlashInfer and Triton compile with at run time, cut from the devel image:
# nvcc and its backends, the CUDA headers, libcudart.so and the driver stub to link against. Not the static
# libraries, profilers, samples or docs.
FROM devel AS jit-toolchain
RUN mkdir -p /opt/jit/cuda/bin /opt/jit/cuda/lib64 \
 && cd /usr/local/cuda \
 && cp -a bin/nvcc bin/nvcc.profile bin/ptxas bin/fatbinary bin/nvlink bin/cudafe++ bin/bin2c bin/crt \
        /opt/jit/cuda/bin/ \
 && cp -a nvvm include /opt/jit/cuda/ \
 && cp -a lib64/stubs lib64/libcudart.so /opt/jit/cuda/lib64/ \
 && rm -rf /opt/jit/cuda/nvvm/libnvvm-samples /opt/jit/cuda/include/*.a

# ---- overlay: what changes more often than the venv (the patched SGLang sources, the plan, the entrypoint),
# gathered so that the runtime stage adds it as one layer on top of the venv: a patch or entrypoint edit then
# re-exports one small layer instead of several (each new layer costs a diff of the tree on some drivers).
FROM scratch AS overlay
ARG PYTHON_VERSION=3.12
COPY --from=patched /opt/venv/lib/python${PYTHON_VERSION}/site-packages/sglang/ \
     /opt/venv/lib/python${PYTHON_VERSION}/site-packages/sglang/
COPY --from=patched /etc/sglang-sm120/plan.json /etc/sglang-sm120/plan.json
COPY docker/entrypoint.py /opt/sglang-sm120/entrypoint.py
COPY docker/entrypoint/ /opt/sglang-sm120/entrypoint/

# ---- runtime: what serving needs and nothing else. Non-root, tini as PID 1, the JIT toolchain, one cache
# directory for every JIT cache (mount a named volume there), a health check on SGLang's /health.
FROM ${RUNTIME_BASE_IMAGE} AS runtime
ARG PYTHON_VERSION=3.12
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG IMAGE_USER=sglang
ARG IMAGE_UID=1000
ARG CACHE_DIR=/var/cache/sglang
ARG PORT=30000
ENV DEBIAN_FRONTEND=noninteractive
# python3-dev: Python.h for Triton's launcher; g++ and ninja: FlashInfer's and SGLang's JIT builds; tini: PID 1;
# libnuma1: sgl-kernel links it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        python3 python3-dev g++ ninja-build tini libnuma1 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/* \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${PYTHON_VERSION}', v"
RUN --mount=type=bind,from=jit-toolchain,source=/opt/jit/cuda,target=/mnt/jit \
    cp -a /mnt/jit/. /usr/local/cuda/ && ldconfig
# The user's ~/.cache is the cache volume too: a library that writes under ~/.cache (SGLang >= 0.5.16's JIT,
# for one, unless SGLANG_JIT_CACHE_DIR is set) still lands on the volume.
RUN useradd --uid "${IMAGE_UID}" --create-home --shell /bin/bash "${IMAGE_USER}" \
 && mkdir -p "${CACHE_DIR}" \
 && chown "${IMAGE_USER}:${IMAGE_USER}" "${CACHE_DIR}" \
 && chmod 0755 "${CACHE_DIR}" \
 && ln -s "${CACHE_DIR}" "/home/${IMAGE_USER}/.cache"
COPY --from=kernels /opt/venv /opt/venv
COPY --from=overlay / /
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
    CUDA_CACHE_PATH=${CACHE_DIR}/nv \
    HF_HOME=${CACHE_DIR}/huggingface \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER ${IMAGE_USER}
WORKDIR /home/${IMAGE_USER}
VOLUME ["${CACHE_DIR}"]
EXPOSE ${PORT}
HEALTHCHECK --interval=30s --timeout=10s --start-period=30m --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ['PORT'], timeout=8)"]
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/venv/bin/python3", "/opt/sglang-sm120/entrypoint.py"]
CMD ["baseline"]
