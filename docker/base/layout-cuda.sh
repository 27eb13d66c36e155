#!/bin/sh
# layout-cuda VENV DEST runtime|devel
# Lays NVIDIA's CUDA wheels, installed in the virtual environment VENV (they unpack into one prefix,
# site-packages/nvidia/cu<major>), out under DEST as NVIDIA's images lay out /usr/local/cuda-<version>:
#   runtime: targets/x86_64-linux/lib/ with the shared libraries only, and lib64 -> targets/x86_64-linux/lib
#   devel:   bin/, nvvm/{bin,libdevice,lib64}, targets/x86_64-linux/{include,lib}/ (+ unversioned .so links,
#            static libraries), include -> targets/x86_64-linux/include, lib64 -> targets/x86_64-linux/lib,
#            and lib64/stubs/libcuda.so, a link-time stand-in for the driver library (NVIDIA's devel images
#            ship one; FlashInfer's JIT links -lcuda from there). The real libcuda.so.1 comes from the driver.
# The links are those NVIDIA's cuda-*-13-0 packages install (docker/base/release-facts.toml): the build must
# work with `include` and `lib64` being links, as it must on the release bases.
set -eu
venv=$1 dest=$2 flavour=$3
set -- "$venv"/lib/python3*/site-packages/nvidia/cu[0-9]*
[ -d "$1" ] || { echo "layout-cuda: no nvidia/cu* prefix in $venv" >&2; exit 1; }
src=$1
target=targets/x86_64-linux
mkdir -p "$dest/$target/lib"
ln -sfn "$target/lib" "$dest/lib64"
if [ "$flavour" = runtime ]; then
    cp -a "$src"/lib/*.so* "$dest/lib64/"
    exit 0
fi
cp -a "$src"/lib/. "$dest/lib64/"
mkdir -p "$dest/$target/include"
cp -a "$src"/include/. "$dest/$target/include/"
ln -sfn "$target/include" "$dest/include"
for d in "$src"/*; do
    name=$(basename "$d")
    case "$name" in lib|include) continue ;; esac
    cp -a "$d" "$dest/"
done
rm -rf "$dest/lib64/cmake" "$dest/lib64/__pycache__" "$dest"/__pycache__ "$dest"/__init__.py
# nvcc.profile links from lib64 (lib$(_TARGET_SIZE_)) and expects libnvvm under nvvm/lib64.
if ls "$dest"/lib64/libnvvm.so* >/dev/null 2>&1; then
    mkdir -p "$dest/nvvm/lib64" && mv "$dest"/lib64/libnvvm.so* "$dest/nvvm/lib64/"
fi
# Unversioned development links (libcudart.so -> libcudart.so.13), as the -dev packages install them.
for lib in "$dest"/lib64/*.so.* "$dest"/nvvm/lib64/*.so.*; do
    [ -e "$lib" ] || continue
    base=${lib%%.so.*}.so
    [ -e "$base" ] || ln -s "$(basename "$lib")" "$base"
done
# The driver stub: every cu* entry point that cuda.h declares (after macro expansion, so the _v2 names),
# in a library whose soname is libcuda.so.1, the name the driver installs.
mkdir -p "$dest/lib64/stubs"
echo '#include <cuda.h>' | gcc -E -I"$dest/include" -x c - \
    | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | tr -d '( \t' | sort -u \
    | awk '{ print "void " $1 "(void) {}" }' > /tmp/libcuda-stub.c
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$dest/lib64/stubs/libcuda.so" /tmp/libcuda-stub.c
echo "layout-cuda: $(wc -l < /tmp/libcuda-stub.c) driver entry points in lib64/stubs/libcuda.so"
