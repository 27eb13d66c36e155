#!/usr/bin/env bash
# fixups.sh apply  install the track's CUDA fix-up pins (build.toml [[tracks.*.fixups]]) over what dependency
#                  resolution chose, one at a time in build.toml's order, as SGLang's own CUDA 13 Dockerfile does
# fixups.sh check  `pip check`, where the only conflicts allowed are the ones those pins make on purpose
#                  (a package pinned by a fix-up that torch or SGLang pins to another version); any other
#                  conflict fails the build and is printed
# Environment: FIXUP_PINS, space-separated INSTALL:REQUIREMENT (may be empty), INSTALL being
#   no-deps  pip install --force-reinstall --no-deps REQUIREMENT   (upstream's mode for the CUDA wheels)
#   deps     pip install REQUIREMENT                               (its dependencies resolved against the venv)
set -euo pipefail
STAGE=fixups
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=docker/stages/common.sh
. "$here/common.sh"
read -r -a pins <<< "${FIXUP_PINS:-}"

# Every pin is INSTALL:REQUIREMENT with a known INSTALL; anything else is a broken plan (exit 2).
for pin in "${pins[@]}"; do
    case "${pin%%:*}" in
    no-deps | deps) [[ $pin == *:?* ]] || { log "FIXUP_PINS entry '$pin' has no requirement"; exit 2; } ;;
    *) log "FIXUP_PINS entry '$pin' is not no-deps:REQUIREMENT or deps:REQUIREMENT"; exit 2 ;;
    esac
done

case "${1:-}" in
apply)
    if [ ${#pins[@]} -eq 0 ]; then log "no fix-up pins for this track"; exit 0; fi
    for pin in "${pins[@]}"; do
        requirement=${pin#*:}
        if [ "${pin%%:*}" = no-deps ]; then
            log "pinning $requirement (--force-reinstall --no-deps)"
            pip_install --force-reinstall --no-deps "$requirement"
        else
            log "pinning $requirement (with its dependencies)"
            pip_install "$requirement"
        fi
    done
    ;;
check)
    set +e
    out=$(python3 -m pip check 2>&1)
    set -e
    FIXUP_PINS="${FIXUP_PINS:-}" PIP_CHECK="$out" python3 - <<'PY'
import os, re, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
pinned = {canonicalize_name(Requirement(p.partition(":")[2]).name) for p in os.environ["FIXUP_PINS"].split()}
allowed, other = [], []
for line in os.environ["PIP_CHECK"].splitlines():
    if not line.strip() or line.startswith("No broken requirements"):
        continue
    m = re.search(r", but you have (\S+) ", line)
    (allowed if m and canonicalize_name(m.group(1)) in pinned else other).append(line)
for line in allowed:
    print(f"[fixups] expected (a fix-up pin): {line}")
for line in other:
    print(f"[fixups] pip check: {line}")
if other:
    print(f"[fixups] {len(other)} dependency conflict(s) that no fix-up pin explains", file=sys.stderr)
    sys.exit(1)
print(f"[fixups] pip check clean apart from {len(allowed)} conflict(s) the fix-up pins make on purpose")
PY
    ;;
*)
    echo "usage: fixups.sh apply|check" >&2
    exit 2
    ;;
esac
