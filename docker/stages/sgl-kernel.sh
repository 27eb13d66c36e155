#!/usr/bin/env bash
# sgl-kernel stage: SGLang's CUDA kernels as a wheel in OUT_DIR.
#   SGL_KERNEL_SOURCE=pypi   the PyPI wheel (the plan checks that it carries sm_120a code)
#   SGL_KERNEL_SOURCE=source compiled from the SGLang release tag's sgl-kernel/ for sm_120a only: every other
#                            -gencode line of its CMakeLists is dropped and FA3 (Hopper-only) is turned off.
#                            Needs GitHub (the tag, and CMake's FetchContent of cutlass, flashinfer, ...).
# Environment: SGLANG_VERSION, SGL_KERNEL_PACKAGE, SGL_KERNEL_VERSION, SGL_KERNEL_SOURCE, MAX_JOBS,
#              NVCC_THREADS, OUT_DIR; optional WHEELHOUSE (a prebuilt wheel there is used as is).
set -euo pipefail
STAGE=sgl-kernel
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=docker/stages/common.sh
. "$here/common.sh"
: "${SGLANG_VERSION:?}" "${SGL_KERNEL_PACKAGE:?}" "${SGL_KERNEL_VERSION:?}" "${SGL_KERNEL_SOURCE:?}" "${OUT_DIR:?}"
mkdir -p "$OUT_DIR"

prebuilt=$(wheelhouse_wheel "$SGL_KERNEL_PACKAGE" "$SGL_KERNEL_VERSION")
if [ -n "$prebuilt" ]; then
    log "using the wheelhouse's $(basename "$prebuilt"): no compile"
    cp "$prebuilt" "$OUT_DIR/"
    exit 0
fi

case "$SGL_KERNEL_SOURCE" in
pypi)
    log "taking $SGL_KERNEL_PACKAGE==$SGL_KERNEL_VERSION from PyPI"
    python3 -m pip download -q --no-deps --only-binary :all: -d "$OUT_DIR" "$SGL_KERNEL_PACKAGE==$SGL_KERNEL_VERSION"
    ;;
source)
    work=$(mktemp -d)
    log "cloning SGLang v$SGLANG_VERSION for sgl-kernel/"
    git clone -q --depth 1 --branch "v$SGLANG_VERSION" https://github.com/sgl-project/sglang "$work/sglang"
    cd "$work/sglang/sgl-kernel"
    grep -q "^version = \"$SGL_KERNEL_VERSION\"" pyproject.toml || {
        log "sgl-kernel at v$SGLANG_VERSION is not version $SGL_KERNEL_VERSION (pyproject.toml): fix build.toml"
        exit 1
    }
    # sm_120a only: drop every other -gencode, and FA3 (sm_90a-only kernels).
    sed -i -E '/-gencode=arch=compute_[0-9]+a?,code=sm_[0-9]+a?/{/compute_120a/!d}' CMakeLists.txt
    sed -i -E 's/set\(SGL_KERNEL_ENABLE_FA3 ON\)/set(SGL_KERNEL_ENABLE_FA3 OFF)/' CMakeLists.txt
    grep -n -- '-gencode' CMakeLists.txt || true
    pip_install -q scikit-build-core cmake
    export CMAKE_BUILD_PARALLEL_LEVEL="${MAX_JOBS:-$(nproc)}"
    log "compiling sgl-kernel for sm_120a (MAX_JOBS=$CMAKE_BUILD_PARALLEL_LEVEL, NVCC_THREADS=${NVCC_THREADS:-1})"
    python3 -m pip wheel -v --no-deps --no-build-isolation -w "$OUT_DIR" \
        -Ccmake.define.ENABLE_BELOW_SM90=OFF \
        -Ccmake.define.SGL_KERNEL_ENABLE_FA3=OFF \
        -Ccmake.define.SGL_KERNEL_COMPILE_THREADS="${NVCC_THREADS:-1}" \
        -Cbuild-dir=build .
    rm -rf "$work"
    ;;
*)
    log "SGL_KERNEL_SOURCE=$SGL_KERNEL_SOURCE: use pypi or source"
    exit 2
    ;;
esac
log "$(ls "$OUT_DIR")"
