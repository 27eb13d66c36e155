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

# load_build_jobs: FLASH_ATTN_MAX_JOBS, SGL_KERNEL_MAX_JOBS and NVCC_THREADS, the plan's split of one job budget
# between the kernel stages that compile at the same time. They come as the BuildKit secret `build_jobs` (shell
# assignments written by build.py), not as build args: a secret is not part of a layer's cache key, so a
# builder of another size still finds the compiled layers in the registry cache.
load_build_jobs() {
    if [ -f /run/secrets/build_jobs ]; then
        # shellcheck source=/dev/null
        . /run/secrets/build_jobs
    fi
    NVCC_THREADS=${NVCC_THREADS:-1}
}
