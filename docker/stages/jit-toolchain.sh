#!/usr/bin/env bash
# jit-toolchain.sh collect CUDA_HOME OUT   (devel stage) what SGLang, FlashInfer and Triton compile with at
#                                          run time, cut from the devel image into OUT
# jit-toolchain.sh merge OUT CUDA_HOME     (runtime stage) OUT merged into the runtime base's CUDA directory
#
# NVIDIA's layout (docker/base/release-facts.toml): /usr/local/cuda resolves to /usr/local/cuda-13.0, whose
# `include` and `lib64` are links into targets/x86_64-linux/, and nvcc.profile looks for headers and libraries
# in targets/x86_64-linux/ ($(TOP)/$(_TARGET_DIR_)/include). So `collect` keeps that layout: what the devel
# image has under a link is copied to where the link points, and the link is kept; `merge` copies each real
# directory into the directory its name resolves to on the runtime base (lib64's files land beside the base's
# own libcudart in targets/x86_64-linux/lib; a directory is never copied onto a link) and adds a link only
# where the runtime base has nothing of that name.
set -euo pipefail
cmd=$1 from=$2 to=$3

collect() {
    local cuda=$1 out=$2 part real
    mkdir -p "$out/bin"
    cd "$cuda"
    cp -a bin/nvcc bin/nvcc.profile bin/ptxas bin/fatbinary bin/nvlink bin/cudafe++ bin/bin2c bin/crt "$out/bin/"
    cp -aH nvvm "$out/"
    for part in include lib64; do
        real=$part
        if [ -L "$part" ]; then
            real=$(realpath --relative-to="$(pwd -P)" "$(readlink -f "$part")")
            case "$real" in ..*) echo "jit-toolchain: $cuda/$part points outside $cuda ($real)" >&2; exit 1 ;; esac
            ln -s "$real" "$out/$part"
        fi
        mkdir -p "$out/$real"
        if [ "$part" = include ]; then
            cp -a "$part/." "$out/$real/"
        else
            cp -a "$part/stubs" "$part/libcudart.so" "$out/$real/"
        fi
    done
    rm -rf "$out/nvvm/libnvvm-samples" "$out"/include/*.a
    [ -f "$out/include/cuda.h" ] || { echo "jit-toolchain: no include/cuda.h collected from $cuda" >&2; exit 1; }
}

merge() {
    local jit=$1 cuda=$2 part name dest
    cuda=$(readlink -f "$cuda")
    for part in "$jit"/*; do
        name=$(basename "$part")
        if [ -L "$part" ]; then
            [ -e "$cuda/$name" ] || [ -L "$cuda/$name" ] || ln -s "$(readlink "$part")" "$cuda/$name"
            continue
        fi
        dest=$(readlink -m "$cuda/$name")
        mkdir -p "$dest"
        cp -a "$part/." "$dest/"
    done
}

case "$cmd" in
collect) collect "$from" "$to" ;;
merge) merge "$from" "$to" ;;
*) echo "usage: jit-toolchain.sh collect CUDA_HOME OUT | merge OUT CUDA_HOME" >&2; exit 2 ;;
esac
