#!/usr/bin/env bash
# The GPU run of docs/allreduce-sweep.md (that page says what it proves): prepared here, with no GPU, and run on
# the lender's nvidia-h200-x2 kind, which reaches nothing and has no SGLang.
#   benchmarks/allreduce_lender.sh prepare CARRY     here: SGLang 0.5.9 patched as the image patches it, as a
#                                                    tarball, and the cp312 wheels its import needs that the lender lacks
#   benchmarks/allreduce_lender.sh run CARRY OUT     there: the sweep at TP 2 with the capability answered as 12,
#                                                    eager and in CUDA graphs; OUT gets machine.txt, eager.*, graph.*
# CARRY: a git-ignored folder of the checkout (it travels with `carry`). PYTHON: the interpreter here (python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SGLANG=0.5.9
# What `import sglang.srt.distributed.device_communicators.torch_symm_mem` (0.5.9) imports beyond the standard
# library and the lender's packages (measured in the T1 venv; the lender has torch, numpy, aiohttp, requests, ...).
WHEELS=(IPython dill orjson pybase64 pydantic starlette pyzmq)

case ${1:-} in
prepare)
    carry=${2:?usage: $0 prepare CARRY}
    mkdir -p "$carry/wheels"
    tree=$(mktemp -d)
    trap 'rm -rf "$tree"' EXIT
    "${PYTHON:-python3}" "$root/build.py" patches apply --sglang "$SGLANG" --dest "$tree/site"
    tar -C "$tree/site" -czf "$carry/sglang-$SGLANG-patched.tar.gz" sglang
    "${PYTHON:-python3}" -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$carry/wheels" "${WHEELS[@]}"
    du -sh "$carry"
    ;;
run)
    carry=${2:?usage: $0 run CARRY OUT} out=${3:?usage: $0 run CARRY OUT}
    # The lender's rule (KINDS.md): NVLink multicast stays off in NCCL, PyTorch and NVSHMEM, in every process.
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    # What the image's torch-symm-mem rule sets on 0.5.23 (unread by 0.5.9; set so the run is the image's).
    export SGLANG_OPT_USE_INKLING_CUSTOM_AR=0 PYTHONUNBUFFERED=1
    deps=$(mktemp -d)
    tar -C "$deps" -xzf "$carry/sglang-$SGLANG-patched.tar.gz"
    python3 -m pip install --quiet --no-index --no-deps --target "$deps" "$carry"/wheels/*.whl
    export PYTHONPATH="$deps:$root"
    mkdir -p "$out"
    {
        nvidia-smi
        nvidia-smi topo -m
        python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", torch.cuda.nccl.version())'
        env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)='
    } > "$out/machine.txt" 2>&1 || true
    status=0
    python3 -m sm120.image.allreduce --tp 2 --capability 12 --json "$out/eager.json" | tee "$out/eager.md" || status=$?
    python3 -m sm120.image.allreduce --tp 2 --capability 12 --cuda-graph --json "$out/graph.json" | tee "$out/graph.md" \
        || status=$?
    exit "$status"
    ;;
*)
    echo "usage: $0 prepare CARRY | run CARRY OUT" >&2
    exit 2
    ;;
esac
