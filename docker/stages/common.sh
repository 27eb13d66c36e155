# Sourced by the Dockerfile's RUN steps and the stage scripts (bash).
# - pip trusts the host's CA bundle when the build passes it as the BuildKit secret `ca_bundle`
#   (build.py does; it never lands in a layer);
# - pip_install prefers wheels from the wheelhouse bind-mounted at /wheelhouse (`build.py build --wheelhouse`).
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
