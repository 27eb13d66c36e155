#!/usr/bin/env bash
# The four kernel-build measurements of docs/kernel-build-sm120.md (model, release, sample1, sample4: that page
# says what each builds), each benchmarks/kernel_build.py around docker/stages/flash-attn.sh, on a many-core
# machine with nvcc and torch. sample1 and sample4 run side by side (their CPU seconds are compared, not their wall
# times). Each starts from the release plan's build args (PLAN_JSON, made here when not given).
# usage: benchmarks/device_kernel_runs.sh SDIST RESULTS_DIR [PLAN_JSON]
set -uo pipefail
sdist=$1 out=$2
mkdir -p "$out"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
plan=${3:-$out/plan-release.json}
[ -s "$plan" ] || python3 "$here/../build.py" plan --json --profile release > "$plan" || exit 2
cores=$(nproc)
std=17
# C++17 or C++20: the torch headers decide (torch >= 2.13's ATen requires C++20). Python.h is needed too.
torch_inc=$(python3 -c "import sysconfig, torch.utils.cpp_extension as c; \
print(' '.join('-I' + p for p in [*c.include_paths(), sysconfig.get_paths()['include']]))")
# shellcheck disable=SC2086  # $torch_inc is several -I flags: split on purpose
if ! echo '#include <torch/extension.h>' | g++ -std=c++17 -fsyntax-only -x c++ $torch_inc - 2>"$out/cxx17-probe.txt"; then
    std=20
fi
echo "torch $(python3 -c 'import torch; print(torch.__version__)'), C++$std, $cores cores" | tee "$out/env.txt"
nvcc --version | tail -n 2 >> "$out/env.txt"
run() { python3 "$here/kernel_build.py" --plan "$plan" --sdist "$sdist" --out "$out" --cxx-std "$std" "$@"; }
run --label model --archs 120 --head-dims 128 --dtypes bf16 --backward 0 --max-jobs "$cores"
run --label release --max-jobs "$cores"
run --label sample1 --archs 120 --head-dims 128 --dtypes bf16 --backward 1 --max-jobs 6 &
run --label sample4 --archs "80;90;100;120" --head-dims 128 --dtypes bf16 --backward 1 --max-jobs 3 --nvcc-threads 4 &
wait
touch "$out/done"
