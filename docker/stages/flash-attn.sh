#!/usr/bin/env bash
# flash-attn stage: builds the flash-attn wheel for the plan's archs and kernel subset.
# Run by the Dockerfile's flash-attn stage, and unchanged on a many-core machine to measure it
# (benchmarks/kernel_build.py, docs/kernel-build-sm120.md).
#
# Environment (build args from the plan):
#   FLASH_ATTN_VERSION, FLASH_ATTN_CUDA_ARCHS ("120"), FLASH_ATTN_HEAD_DIMS ("128" or "32,...,256"),
#   FLASH_ATTN_DTYPES ("bf16"), FLASH_ATTN_BACKWARD (0/1), FLASH_ATTN_SPLIT_KV (0/1),
#   FLASH_ATTN_PATCHES (space-separated paths under PATCH_ROOT, applied in order), CXX_STD (17/20), OUT_DIR,
#   FLASH_ATTN_ALLOW_CUDA_MISMATCH (1 only for a stand-in track: a CUDA 12 torch with a CUDA 13 nvcc).
#   Optional: FLASH_ATTN_SDIST (a downloaded sdist: no network needed), WHEELHOUSE (prebuilt wheels).
# Parallelism: FLASH_ATTN_MAX_JOBS and NVCC_THREADS from the build_jobs secret (load_build_jobs), else MAX_JOBS
#   and NVCC_THREADS from the environment (benchmarks/kernel_build.py), else every CPU and 1.
set -euo pipefail
STAGE=flash-attn
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=docker/stages/common.sh
. "$here/common.sh"

: "${FLASH_ATTN_VERSION:?}" "${FLASH_ATTN_CUDA_ARCHS:?}" "${FLASH_ATTN_HEAD_DIMS:?}" "${FLASH_ATTN_DTYPES:?}"
: "${FLASH_ATTN_BACKWARD:?}" "${FLASH_ATTN_SPLIT_KV:?}" "${CXX_STD:?}" "${OUT_DIR:?}"
PATCH_ROOT=${PATCH_ROOT:-$here}
mkdir -p "$OUT_DIR"
load_build_jobs
MAX_JOBS=${FLASH_ATTN_MAX_JOBS:-${MAX_JOBS:-$(nproc)}}

prebuilt=$(wheelhouse_wheel flash-attn "$FLASH_ATTN_VERSION")
if [ -n "$prebuilt" ]; then
    log "using the wheelhouse's $(basename "$prebuilt"): no compile"
    cp "$prebuilt" "$OUT_DIR/"
    exit 0
fi

# A fixed work path: ccache's keys include the source paths, so a random directory would never hit.
work=${FLASH_ATTN_WORK_DIR:-/tmp/flash-attn-build}
rm -rf "$work" && mkdir -p "$work"
if [ -z "${FLASH_ATTN_SDIST:-}" ]; then
    log "downloading the flash-attn $FLASH_ATTN_VERSION sdist"
    # Preparing the sdist's metadata runs its setup.py, which imports torch: no build isolation.
    FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
        -d "$work/dl" "flash-attn==$FLASH_ATTN_VERSION"
    FLASH_ATTN_SDIST=$(echo "$work"/dl/flash_attn-*.tar.gz)
fi
tar -xzf "$FLASH_ATTN_SDIST" -C "$work"
src=$(echo "$work"/flash_attn-"$FLASH_ATTN_VERSION")
for patch in ${FLASH_ATTN_PATCHES:-}; do
    log "applying $patch"
    if command -v git >/dev/null; then
        git -C "$src" apply --verbose "$PATCH_ROOT/$patch"
    else  # machines without git (the H200 lender): GNU patch reads the same unified diff
        patch -d "$src" -p1 --forward --batch < "$PATCH_ROOT/$patch"
    fi
done

# ccache in front of nvcc (torch's cpp_extension honours PYTORCH_NVCC) when the build has it.
if command -v ccache >/dev/null; then
    export PYTORCH_NVCC="ccache nvcc"
fi
export FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTN_CXX_STD="$CXX_STD" \
       FLASH_ATTN_CUDA_ARCHS FLASH_ATTN_HEAD_DIMS FLASH_ATTN_DTYPES FLASH_ATTN_BACKWARD FLASH_ATTN_SPLIT_KV \
       FLASH_ATTN_ALLOW_CUDA_MISMATCH="${FLASH_ATTN_ALLOW_CUDA_MISMATCH:-0}" \
       MAX_JOBS NVCC_THREADS
log "compiling for sm_${FLASH_ATTN_CUDA_ARCHS//;/, sm_}: head dims $FLASH_ATTN_HEAD_DIMS, $FLASH_ATTN_DTYPES," \
    "backward=$FLASH_ATTN_BACKWARD, split_kv=$FLASH_ATTN_SPLIT_KV, C++$CXX_STD, MAX_JOBS=$MAX_JOBS, NVCC_THREADS=$NVCC_THREADS"
started=$(date +%s)
# The full log goes to a file; BuildKit's output shows ninja's progress, one line per compiled file.
set +e +o pipefail
(cd "$src" && python3 -m pip wheel -v --no-deps --no-build-isolation -w "$OUT_DIR" .) 2>&1 | tee "$work/build.log" \
    | grep --line-buffered -E '^\s*\[[0-9]+/[0-9]+\] ' | sed -u -E 's#^\s*(\[[0-9]+/[0-9]+\]) .* -c ([^ ]+) .*#\1 \2#'
rc=${PIPESTATUS[0]}
set -e -o pipefail
wheel=$(compgen -G "$OUT_DIR/flash_attn-$FLASH_ATTN_VERSION-*.whl" | head -n 1 || true)
if [ "$rc" -ne 0 ] || [ -z "$wheel" ]; then
    log "pip wheel failed (status $rc); the end of its log:"
    tail -n 60 "$work/build.log"
    exit 1
fi
log "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $(( $(date +%s) - started )) s"
command -v ccache >/dev/null && ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' | head -n 3 || true
rm -rf "$work"
