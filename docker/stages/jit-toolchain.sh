#!/usr/bin/env bash
# jit-toolchain.sh collect CUDA_HOME OUT   (devel stage) what SGLang, FlashInfer and Triton compile with at
#                                          run time, cut from the devel image into OUT
# jit-toolchain.sh merge OUT CUDA_HOME     (runtime stage) OUT merged into the runtime base's CUDA directory
#
# NVIDIA's layout (docker/base/release-facts.toml): /usr/local/cuda resolves to /usr/local/cuda-13.0, whose
# `include` and `lib64` are links into targets/x86_64-linux/. So `collect` follows the links it is given
# (cp -H: the headers, not a link to them), and `merge` copies each part into the directory its name resolves
# to on the runtime base (lib64's files land in targets/x86_64-linux/lib beside the base's own libcudart;
# a directory is never copied onto a link).
set -euo pipefail
cmd=$1 from=$2 to=$3

collect() {
    local cuda=$1 out=$2
    mkdir -p "$out/bin" "$out/lib64"
    cd "$cuda"
    cp -a bin/nvcc bin/nvcc.profile bin/ptxas bin/fatbinary bin/nvlink bin/cudafe++ bin/bin2c bin/crt "$out/bin/"
    cp -aH nvvm include "$out/"
    cp -aH lib64/stubs "$out/lib64/"
    cp -a lib64/libcudart.so "$out/lib64/"
    rm -rf "$out/nvvm/libnvvm-samples" "$out"/include/*.a
    [ -f "$out/include/cuda.h" ] || { echo "jit-toolchain: no include/cuda.h collected from $cuda" >&2; exit 1; }
}

merge() {
    local jit=$1 cuda=$2 part dest
    for part in "$jit"/*; do
        part=$(basename "$part")
        dest=$(readlink -m "$cuda/$part")
        mkdir -p "$dest"
        cp -a "$jit/$part/." "$dest/"
    done
}

case "$cmd" in
collect) collect "$from" "$to" ;;
merge) merge "$from" "$to" ;;
*) echo "usage: jit-toolchain.sh collect CUDA_HOME OUT | merge OUT CUDA_HOME" >&2; exit 2 ;;
esac
