#!/usr/bin/env bash
# fixups.sh apply  install the track's CUDA fix-up pins (build.toml [[tracks.*.fixups]]) over what dependency
#                  resolution chose, as SGLang's own CUDA 13 Dockerfile does
# fixups.sh check  `pip check`, where the only conflicts allowed are the ones those pins make on purpose
#                  (a package pinned by a fix-up that torch or SGLang pins to another version); any other
#                  conflict fails the build and is printed
# Environment: FIXUP_PINS (space-separated requirements, may be empty).
set -euo pipefail
STAGE=fixups
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=docker/stages/common.sh
. "$here/common.sh"
read -r -a pins <<< "${FIXUP_PINS:-}"

case "${1:-}" in
apply)
    if [ ${#pins[@]} -eq 0 ]; then log "no fix-up pins for this track"; exit 0; fi
    log "pinning ${pins[*]}"
    pip_install "${pins[@]}"
    ;;
check)
    set +e
    out=$(python3 -m pip check 2>&1)
    set -e
    FIXUP_PINS="${FIXUP_PINS:-}" PIP_CHECK="$out" python3 - <<'PY'
import os, re, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
pinned = {canonicalize_name(Requirement(p).name) for p in os.environ["FIXUP_PINS"].split()}
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
