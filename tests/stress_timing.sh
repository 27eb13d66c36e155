#!/usr/bin/env bash
# Stress the suite's timing-sensitive tests (signals sent while a program is mid-run: bench, verify, build, the
# entrypoint under tini, ./dev test's T2 lanes) on a loaded machine: one busy loop per CPU, then the tests N times in
# a plain loop, stopping at the first failure. A test that passes here does not depend on the machine's speed.
#
#   tests/stress_timing.sh [N] [PYTEST_ARGS...]    # N: rounds, default 50; the tests: the list below by default
#
# Prints `P passed, F failed` at the end (rounds; a round is one pytest run of all the tests) and exits 0 only when
# every round passed. The busy loops end with the script, however it ends. Not a test module: pytest skips it.
set -u

cd "$(dirname "$0")/.." || exit 2
rounds=${1:-50}
[ $# -eq 0 ] || shift
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: tests/stress_timing.sh [N] [PYTEST_ARGS...]  (N: a positive number of rounds)" >&2
    exit 2
fi
if [ $# -eq 0 ]; then
    set -- \
        tests/unit/test_bench_keeps_runs.py \
        tests/unit/test_verify_signals.py \
        tests/unit/test_stop_on_signals.py \
        tests/unit/test_entrypoint_signals.py
fi
py=.venv/bin/python
[ -x "$py" ] || py=python3

busy=()
log=$(mktemp)
cleanup() {
    if [ ${#busy[@]} -gt 0 ]; then
        kill "${busy[@]}" 2>/dev/null
        wait "${busy[@]}" 2>/dev/null
    fi
    busy=()
    rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cpus=$(nproc 2>/dev/null || echo 1)
for _ in $(seq "$cpus"); do
    yes >/dev/null &
    busy+=("$!")
done
echo "stress: $cpus busy loop(s), one per CPU; $rounds round(s) of: $*"

passed=0
failed=0
start=$SECONDS
for ((round = 1; round <= rounds; round++)); do
    t0=$SECONDS
    if "$py" -m pytest -q -p no:cacheprovider "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "round $round/$rounds: passed ($((SECONDS - t0)) s; $(grep -E '[0-9]+ passed' "$log" | tail -n 1))"
    else
        failed=$((failed + 1))
        echo "round $round/$rounds: FAILED ($((SECONDS - t0)) s); pytest's output:"
        tail -n 80 "$log"
        break
    fi
done
echo "$passed passed, $failed failed (wall time $((SECONDS - start)) s)"
[ "$failed" -eq 0 ]
