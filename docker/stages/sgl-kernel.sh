#!/usr/bin/env bash
# sgl-kernel stage: SGLang's CUDA kernels as one wheel in OUT_DIR, taken the way the plan says (SGL_KERNEL_SOURCE):
#   wheel   upstream's prebuilt wheel from a direct URL (SGL_KERNEL_WHEEL_URL), checked against
#           SGL_KERNEL_WHEEL_SHA256 before it is kept; the file keeps its own name (e.g. a `+cu130` local
#           version, which satisfies SGLang's `sgl-kernel==X` pin: `==` without a local label matches any).
#           This is what SGLang's own CUDA 13 Dockerfile does.
#   pypi    the PyPI wheel of SGL_KERNEL_PACKAGE==SGL_KERNEL_VERSION (the plan checks that it carries sm_120a code).
#   source  compiled from the SGLang release tag's sgl-kernel/ (opt-in; needs GitHub: the tag and CMake's
#           FetchContent of cutlass, flashinfer, mscclpp, ...). See compile_from_source below for what is
#           changed and what of it is proven.
# Environment: SGLANG_VERSION, SGL_KERNEL_PACKAGE, SGL_KERNEL_VERSION, SGL_KERNEL_SOURCE, OUT_DIR;
#              SGL_KERNEL_WHEEL_URL and SGL_KERNEL_WHEEL_SHA256 for `wheel`; optional WHEELHOUSE (a prebuilt
#              wheel there is used as is) and SGL_KERNEL_WORK_DIR (`source`'s fixed work directory).
# Parallelism (`source` only) comes from the BuildKit secret build_jobs (load_build_jobs in common.sh), never
# from an ARG: a builder of another size keeps the layer's cache key.
# Exit status: 0 a wheel is in OUT_DIR; 1 it could not be had (download, hash, compile); 2 bad settings.
set -euo pipefail
STAGE=sgl-kernel
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=docker/stages/common.sh
. "$here/common.sh"

# ---- wheel: a direct URL pinned by sha256 -----------------------------------------------------------------
download_wheel() {
    local url=${SGL_KERNEL_WHEEL_URL:-} want=${SGL_KERNEL_WHEEL_SHA256:-} name dist tmp got
    if [ -z "$url" ] || ! [[ $want =~ ^[0-9a-f]{64}$ ]]; then
        log "SGL_KERNEL_SOURCE=wheel needs SGL_KERNEL_WHEEL_URL and a 64-hex SGL_KERNEL_WHEEL_SHA256 (got '$url', '$want')"
        exit 2
    fi
    # The file name as pip saves it: the URL's last path segment, percent-decoded (%2B is the `+` of a local version).
    name=$(python3 -c 'import posixpath, sys, urllib.parse
print(posixpath.basename(urllib.parse.unquote(urllib.parse.urlsplit(sys.argv[1]).path)))' "$url")
    dist=${SGL_KERNEL_PACKAGE//-/_}
    case "$name" in
    "$dist-$SGL_KERNEL_VERSION"[-+]*.whl) ;;
    *)
        log "$url is not a wheel of $SGL_KERNEL_PACKAGE $SGL_KERNEL_VERSION ($name): fix the track's wheel URL in build.toml"
        exit 2
        ;;
    esac
    log "downloading $name"
    tmp=$(mktemp -d)
    # pip, not curl: the same proxy and CA settings (PIP_CERT from the ca_bundle secret) as every other download.
    if ! python3 -m pip download -q --no-deps --only-binary :all: -d "$tmp" "$url"; then
        log "could not download $url (pip's error above)"
        exit 1
    fi
    if [ ! -f "$tmp/$name" ]; then
        log "pip downloaded $(ls "$tmp") from $url, expected $name"
        exit 1
    fi
    got=$(sha256sum "$tmp/$name" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        rm -rf "$tmp"
        log "sha256 mismatch for $url: expected $want, found $got"
        exit 1
    fi
    mv "$tmp/$name" "$OUT_DIR/"
    rm -rf "$tmp"
    log "sha256 $got verified"
}

# ---- source: sgl-kernel compiled for sm_120 ----------------------------------------------------------------
# What changes against upstream's build, and why (issue 14, point 3). The CMake text these edits match was
# READ from sgl-project/sglang's sgl-kernel/ (CMakeLists.txt, cmake/flashmla.cmake, python/sgl_kernel/load_utils.py)
# in the stored snapshots of that repository, not from a checkout of the tag: every edit checks that its anchor
# is there and stops the build with a message when it is not, so a release that moved the text fails here,
# loudly, instead of compiling something else.
#  - cmake>=3.31,<4 and scikit-build-core==0.11.6: what upstream built 0.3.21 with (the released 0.3.21 wheel's
#    WHEEL file says `Generator: scikit-build-core 0.11.6`; CMake 3.31, as upstream's sgl-kernel build of that era pinned). CMake 4
#    refuses the `cmake_minimum_required(VERSION 3.2)` of a FetchContent dependency (dlpack, through mscclpp);
#    CMAKE_POLICY_VERSION_MINIMUM=3.5 is set as well, for a CMake 4 that someone pins later (3.31 ignores it).
#  - libnuma-dev: mscclpp's configure looks for numa.h (the runtime stage installs libnuma1).
#  - common_ops: CMakeLists builds the same SOURCES twice, `common_ops_sm90_build` (-use_fast_math, installed
#    to sgl_kernel/sm90) and `common_ops_sm100_build` (installed to sgl_kernel/sm100); load_utils.py loads sm90
#    only on capability 9.0 and sm100 on every other GPU, capability 12 included. The sm90 target is taken out
#    of `all` and its install rule dropped: only the variant sm_120 loads is compiled.
#  - -gencode: in the common flags (everything before `set(SOURCES`), every -gencode line but compute_120a is
#    dropped (ENABLE_BELOW_SM90=OFF drops sm_80/89 too).
#  - FA3 (flash_ops) is KEPT, with upstream's own flags (sm_90a only): SGLang 0.5.9 imports sgl_kernel.flash_attn
#    at module level on CUDA (srt/layers/attention/vision.py), which raises without flash_ops, and the model
#    registry then drops Kimi-K2.5 with only a warning. Its kernels never run on sm_120; the module must load.
#  - FlashMLA (cmake/flashmla.cmake, sm_90a/sm_100a kernels only) is not included.
#  - A fixed work directory, so ccache (CMakeLists turns it on when CCACHE_DIR is set; the Dockerfile sets it
#    and mounts /root/.ccache) sees the same paths every build.
# Proven here: the edits on a CMakeLists with the same anchors (tests/unit/test_sgl_kernel_stage.py), and under
# CMake 3.31 + Ninja on a stand-in project, `all` then builds and installs only the sm100 common_ops and never
# reads flashmla.cmake. The Python side was read in the released 0.3.21 wheel: load_utils.py (sm90 only on 9.0),
# flash_mla.py (its flashmla_ops import is guarded: no FlashMLA is safe), flash_attn.py (raises without flash_ops).
# Not proven (no GitHub from this workplace): that the tag configures and compiles with these edits, that the
# wheel imports on sm_120, how long it takes. `build.py verify`'s SASS check judges what a built wheel carries.
fail_edit() {
    log "sgl-kernel at v$SGLANG_VERSION: $1 (docker/stages/sgl-kernel.sh's source edits need updating for this release)"
    exit 1
}

edit_cmake() {
    local cml=CMakeLists.txt
    grep -q -- '-gencode=arch=compute_120a,code=sm_120a' "$cml" || fail_edit "CMakeLists.txt has no compute_120a -gencode"
    grep -q '^set(SOURCES' "$cml" || fail_edit "CMakeLists.txt has no 'set(SOURCES' line"
    sed -i -E '1,/^set\(SOURCES/{/-gencode=arch=compute_[0-9]+[a-z]?,code=sm_[0-9]+[a-z]?/{/compute_120a/!d}}' "$cml"

    grep -q '^install(TARGETS common_ops_sm90_build ' "$cml" || fail_edit "CMakeLists.txt does not install common_ops_sm90_build"
    grep -q 'OUTPUT_NAME "common_ops"' "$cml" || fail_edit "CMakeLists.txt names no common_ops output"
    sed -i -E '/^install\(TARGETS common_ops_sm90_build /d' "$cml"
    printf '\n# sglang-sm120: sm_120 loads the sm100 variant (load_utils.py); the sm90 one is not built.\n%s\n' \
        'set_target_properties(common_ops_sm90_build PROPERTIES EXCLUDE_FROM_ALL TRUE)' >>"$cml"

    grep -q '^include(.*cmake/flashmla\.cmake)' "$cml" || fail_edit "CMakeLists.txt does not include cmake/flashmla.cmake"
    sed -i -E 's|^include\(.*cmake/flashmla\.cmake\)|# sglang-sm120: no FlashMLA (sm_90a/sm_100a kernels only)|' "$cml"

    grep -q 'set(SGL_KERNEL_ENABLE_FA3 ON)' "$cml" || fail_edit "CMakeLists.txt no longer turns FA3 on by itself"
    log "the -gencode targets left (common flags: sm_120a; FA3: upstream's sm_90a):"
    grep -n -- '-gencode' "$cml" >&2 || true
}

compile_from_source() {
    load_build_jobs
    local work=${SGL_KERNEL_WORK_DIR:-/opt/build/sgl-kernel-src}
    log "installing libnuma-dev (mscclpp's configure needs numa.h)"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends libnuma-dev >/dev/null
    rm -rf /var/lib/apt/lists/*
    rm -rf "$work" && mkdir -p "$work"
    log "cloning SGLang v$SGLANG_VERSION for sgl-kernel/ into $work"
    git clone -q --depth 1 --branch "v$SGLANG_VERSION" https://github.com/sgl-project/sglang "$work/sglang"
    cd "$work/sglang/sgl-kernel"
    grep -q "^version = \"$SGL_KERNEL_VERSION\"" pyproject.toml ||
        fail_edit "pyproject.toml is not version $SGL_KERNEL_VERSION: fix build.toml's track"
    edit_cmake
    pip_install -q "cmake>=3.31,<4" "scikit-build-core==0.11.6"
    export CMAKE_BUILD_PARALLEL_LEVEL=$SGL_KERNEL_MAX_JOBS CMAKE_POLICY_VERSION_MINIMUM=3.5
    log "compiling sgl-kernel for sm_120a (jobs $SGL_KERNEL_MAX_JOBS, nvcc threads $NVCC_THREADS)"
    python3 -m pip wheel -v --no-deps --no-build-isolation -w "$OUT_DIR" \
        -Ccmake.define.ENABLE_BELOW_SM90=OFF \
        -Ccmake.define.SGL_KERNEL_COMPILE_THREADS="$NVCC_THREADS" \
        -Cbuild-dir=build .
    if command -v ccache >/dev/null; then
        ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' | head -n 3 || true
    fi
    cd / && rm -rf "$work"
}

main() {
    : "${SGLANG_VERSION:?}" "${SGL_KERNEL_PACKAGE:?}" "${SGL_KERNEL_VERSION:?}" "${SGL_KERNEL_SOURCE:?}" "${OUT_DIR:?}"
    case "$SGL_KERNEL_SOURCE" in
    wheel | pypi | source) ;;
    *)
        log "SGL_KERNEL_SOURCE=$SGL_KERNEL_SOURCE: use wheel, pypi or source"
        exit 2
        ;;
    esac
    mkdir -p "$OUT_DIR"

    local prebuilt
    prebuilt=$(wheelhouse_wheel "$SGL_KERNEL_PACKAGE" "$SGL_KERNEL_VERSION")
    if [ -n "$prebuilt" ]; then
        log "using the wheelhouse's $(basename "$prebuilt"): no download, no compile"
        cp "$prebuilt" "$OUT_DIR/"
        exit 0
    fi

    case "$SGL_KERNEL_SOURCE" in
    wheel) download_wheel ;;
    pypi)
        log "taking $SGL_KERNEL_PACKAGE==$SGL_KERNEL_VERSION from PyPI"
        python3 -m pip download -q --no-deps --only-binary :all: -d "$OUT_DIR" "$SGL_KERNEL_PACKAGE==$SGL_KERNEL_VERSION"
        ;;
    source) compile_from_source ;;
    esac
    log "$(ls "$OUT_DIR")"
}

# Sourced (the unit tests call edit_cmake on a CMakeLists of their own): define the functions only.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    main
fi
