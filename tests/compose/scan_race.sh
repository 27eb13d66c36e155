#!/usr/bin/env bash
# The Compose key test's /proc scan (SCAN in tests/compose/test_compose_stack.py) against the race that failed CI:
# the HEALTHCHECK's `docker exec` starts as runc's init, which makes itself undumpable, so its /proc files refuse
# every other reader for a moment. Here a loop of `docker exec` keeps starting that init in a container of the image
# while the scan runs N times; the scan the test had before (one read a file, no retry) runs beside it as the control.
#
#   tests/compose/scan_race.sh [IMAGE] [N]    # IMAGE: the default track's offline image (the plan's tag); N: 50
#
# Exits 0 only when every scan read every file (or saw its process go) and found no key. Not a test module.
set -u
cd "$(dirname "$0")/../.." || exit 2
py=.venv/bin/python
[ -x "$py" ] || py=python3
image=${1:-$("$py" build.py plan --profile offline --json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["tags"][0])')}
n=${2:-50}
key=$(mktemp)
head -c 24 /dev/urandom | base64 > "$key"
chmod 644 "$key"
scan=$("$py" -c 'from tests.compose.test_compose_stack import SCAN; print(SCAN)') || exit 2
control="import glob; k = open('/run/secrets/api_key').read().strip()
files = glob.glob('/proc/[0-9]*/cmdline') + glob.glob('/proc/[0-9]*/environ')
print(len(files), sum(k in open(f, 'rb').read().decode(errors='replace') for f in files))"
box=$(docker run -d --rm --entrypoint sleep -v "$key:/run/secrets/api_key:ro" "$image" infinity) || exit 2
(while docker exec "$box" true 2>/dev/null; do :; done) &
loop=$!
trap 'kill "$loop" 2>/dev/null; docker rm -f "$box" >/dev/null; rm -f "$key"' EXIT
failed=0 control_failed=0
for i in $(seq "$n"); do
    out=$(docker exec "$box" python3 -c "$scan" 2>&1)
    case $out in '['*', 0, []]') ;; *) failed=$((failed + 1)); echo "scan $i: $out" ;; esac
    docker exec "$box" python3 -c "$control" >/dev/null 2>&1 || control_failed=$((control_failed + 1))
done
echo "of $n scans beside a docker exec loop: the test's scan failed $failed, the old one-read scan $control_failed"
[ "$failed" -eq 0 ]
