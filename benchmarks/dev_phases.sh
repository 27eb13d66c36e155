#!/usr/bin/env bash
# Where `./dev build` and `./dev test` spend their time and disk, from a fresh clone, as a newcomer runs them.
#
#   benchmarks/dev_phases.sh [--cold] [--only test] [CLONE_DIR]
#
# Clones this checkout's HEAD into CLONE_DIR (default: a new temporary directory), runs `./dev build` then
# `./dev test` there (`--only test`: the test command alone), and prints each phase's wall seconds and the GiB
# left on the disk after it (`./dev` records them in .cache/ci/phases-build.tsv and phases-test.tsv), the totals
# against the targets (45 min from nothing, 12 min warm for `./dev test`), and `df` before and after.
# --cold starts from nothing first: this project's images, BuildKit's whole build cache and the T1 environments
# (~/.cache/sglang-sm120) are removed. Without it the run uses whatever cache is there (the warm figure).
# Figures, not a timed test: nothing here passes or fails on a time.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cold=0 only=''
while [ $# -gt 0 ]; do
    case $1 in
        --cold) cold=1; shift ;;
        --only) only=${2:?--only takes build or test}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | cut -c3-; exit 0 ;;
        -*) echo "dev_phases.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
case $only in ''|build|test) ;; *) echo "dev_phases.sh: error: --only takes build or test, not $only" >&2; exit 2 ;; esac
clone=${1:-$(mktemp -d /tmp/sm120-phases.XXXXXX)}
[ ! -e "$clone/.git" ] || { echo "dev_phases.sh: error: $clone already holds a clone: name a new directory" >&2; exit 2; }

if [ "$cold" = 1 ]; then
    echo "[phases] from nothing: removing this project's images, the build cache and the T1 environments"
    docker image ls --format '{{.Repository}}:{{.Tag}}' | { grep -E '^sglang-sm120' || true; } | xargs -r docker image rm -f >/dev/null
    # A new machine may not have the buildx plugin yet (./dev installs it): then there is no build cache to drop.
    ! docker buildx version >/dev/null 2>&1 || docker buildx prune --all --force >/dev/null
    rm -rf "${SGLANG_SM120_CACHE:-$HOME/.cache/sglang-sm120}"
fi
echo "[phases] df before: $(df -h --output=avail "$here" | tail -n 1 | tr -d ' ') free"
git clone -q "$here" "$clone"
cd "$clone"
start=$(date +%s)
status=0
for command in ${only:-build test}; do
    t0=$(date +%s)
    ./dev "$command" || { status=$?; echo "[phases] ./dev $command failed (exit $status)"; }
    echo "[phases] ./dev $command: $(( ($(date +%s) - t0) / 60 )) min"
    [ "$status" = 0 ] || break
done
echo
for command in build test; do
    f=.cache/ci/phases-$command.tsv
    [ -f "$f" ] || continue
    echo "./dev $command"
    # Lane `main`: the phases, one after the other (their sum is the command's time); another lane's steps ran
    # beside them (./dev test's T2 lanes), shown indented under the lane's name.
    awk -F'\t' 'NR > 1 { main = ($4 == "" || $4 == "main"); printf "  %7.1f min  %5s GiB free  %s%s\n", $2 / 60, $3,
        main ? "" : "  [" $4 "] ", $1; if (main) t += $2 } END { printf "  %7.1f min  total\n", t / 60 }' "$f"
done
total=$(( ($(date +%s) - start) / 60 ))
target=45
[ "$cold" = 1 ] || [ "$only" != test ] || target=12
echo "total: $total min (target $target min); df after: $(df -h --output=avail "$here" | tail -n 1 | tr -d ' ') free"
exit "$status"
