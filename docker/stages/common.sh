# Sourced by the Dockerfile's RUN steps and the stage scripts (bash).
# - pip trusts the host's CA bundle when the build passes it as the BuildKit secret `ca_bundle`
#   (build.py does; it never lands in a layer);
# - pip_install prefers wheels from the wheelhouse bind-mounted at /wheelhouse (`build.py build --wheelhouse`);
# - load_build_jobs reads the plan's compile parallelism from the BuildKit secret `build_jobs`.
set -euo pipefail
if [ -f /run/secrets/ca_bundle ]; then
    export PIP_CERT=/run/secrets/ca_bundle SSL_CERT_FILE=/run/secrets/ca_bundle
fi
WHEELHOUSE=${WHEELHOUSE:-/wheelhouse}

log() { printf '[%s] %s\n' "${STAGE:-build}" "$*"; }

pip_install() {
    local find_links=()
    if compgen -G "$WHEELHOUSE/*.whl" >/dev/null; then
        find_links=(--find-links "$WHEELHOUSE")
    fi
    python3 -m pip install --progress-bar off "${find_links[@]}" "$@"
}

# wheelhouse_wheel DIST VERSION: the path of a prebuilt wheel for DIST==VERSION in the wheelhouse, if any.
wheelhouse_wheel() {
    local dist=${1//-/_}
    compgen -G "$WHEELHOUSE/${dist}-${2}[-+]*.whl" | head -n 1 || true
}

# load_build_jobs: the compile parallelism of the kernel stages. `build.py build` passes it as the BuildKit
# secret `build_jobs` (shell assignments SGL_KERNEL_MAX_JOBS=N, FLASH_ATTN_MAX_JOBS=N, NVCC_THREADS=N): a
# secret is not part of any layer's cache key, so a builder of another size still hits the registry cache of
# the compiled layers, which an ARG or ENV would not. Without the secret: MAX_JOBS from the environment if set
# (a Dockerfile that still passes it), else one job per CPU; one nvcc thread. BUILD_JOBS_FILE names another
# file (the tests use it).
load_build_jobs() {
    local file=${BUILD_JOBS_FILE:-/run/secrets/build_jobs} name
    if [ -f "$file" ]; then
        # shellcheck source=/dev/null
        . "$file"
    fi
    SGL_KERNEL_MAX_JOBS=${SGL_KERNEL_MAX_JOBS:-${MAX_JOBS:-$(nproc)}}
    FLASH_ATTN_MAX_JOBS=${FLASH_ATTN_MAX_JOBS:-${MAX_JOBS:-$(nproc)}}
    NVCC_THREADS=${NVCC_THREADS:-1}
    for name in SGL_KERNEL_MAX_JOBS FLASH_ATTN_MAX_JOBS NVCC_THREADS; do
        if ! [[ ${!name} =~ ^[1-9][0-9]*$ ]]; then
            log "$name=${!name} (from ${file}): must be a positive integer"
            return 2
        fi
    done
    export SGL_KERNEL_MAX_JOBS FLASH_ATTN_MAX_JOBS NVCC_THREADS
}
