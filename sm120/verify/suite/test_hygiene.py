"""Runtime hygiene: a non-root user; no pip cache, credentials or `.netrc`; no world-writable files outside the
places meant for it; tini is PID 1 with the program as its direct child; `docker stop` ends the container within
two seconds; the HEALTHCHECK probes the configured port."""

from __future__ import annotations

import json
import re
import time

import pytest

# World-writable directories that are meant to be (sticky: users cannot remove each other's files).
SHARED_DIRS = {"/tmp", "/var/tmp", "/run/lock", "/var/lock", "/dev/shm"}
STOP_LIMIT_S = 2.0

# One walk of the image's file system as root (the container's own file system: -xdev leaves /proc, /sys, /dev
# and the cache volume out), tagging what the checks below look for.
SCAN = r"""
find / -xdev \( -path /proc -o -path /sys -o -path /dev \) -prune -o \( \
     \( -perm -0002 ! -type l -printf 'WW %y %m %p\n' \) , \
     \( \( -name .netrc -o -name _netrc -o -name .pypirc -o -name .git-credentials -o -name .npmrc \
           -o -name id_rsa -o -name id_dsa -o -name id_ecdsa -o -name id_ed25519 -o -path '*/.docker/config.json' \
           -o -path '*/.aws/credentials' -o -path '*/.config/gh/hosts.yml' -o -path '*/huggingface/token' \) \
        -printf 'CRED %p\n' \) , \
     \( -type d \( -path '*/.cache/pip' -o -path '*/.cache/uv' -o -path '*/.ccache' -o -path '/root/.cache/pip' \) \
        -printf 'CACHE %p\n' \) , \
     \( -type f \( -path '/var/cache/apt/archives/*.deb' -o -path '/var/lib/apt/lists/*_Packages*' \) \
        -printf 'APT %p\n' \) , \
     \( -name pip.conf -type f -printf 'PIPCONF %p\n' \) \
   \) 2>/dev/null
true
"""

CREDENTIAL_IN_URL = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
SECRET_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|ACCESS_KEY|CREDENTIAL", re.IGNORECASE)


@pytest.fixture(scope="session")
def scan(root_host) -> dict[str, list[str]]:
    tagged: dict[str, list[str]] = {}
    for line in root_host.check_output(SCAN).splitlines():
        tag, _, rest = line.partition(" ")
        tagged.setdefault(tag, []).append(rest)
    return tagged


def test_runs_as_the_labelled_non_root_user(image, expect, host):
    assert image.user not in ("", "root", "0") and not image.user.startswith(("root:", "0:")), (
        f"the image runs as {image.user or 'root (no USER)'}"
    )
    assert host.check_output("id -un") == expect.user, f"the image's user is not {expect.user}"
    assert host.check_output("id -u") != "0"
    # Numeric (USER 1000), so Kubernetes' runAsNonRoot can check it without the image's /etc/passwd.
    assert image.user.split(":")[0].isdigit(), f"the image's USER is {image.user!r}, not a numeric uid"


def test_no_world_writable_files_outside_shared_directories(scan):
    entries = [entry.split(" ", 2) for entry in scan.get("WW", [])]
    bad = [f"{p} ({k} {m})" for k, m, p in entries if not (k == "d" and p in SHARED_DIRS and int(m, 8) & 0o1000)]
    assert not bad, f"{len(bad)} world-writable path(s): {', '.join(bad[:20])}"


def test_no_credentials(scan, image, root_host):
    assert not scan.get("CRED"), f"credential files in the image: {', '.join(scan['CRED'])}"
    pipconf = [p for p in scan.get("PIPCONF", []) if CREDENTIAL_IN_URL.search(root_host.file(p).content_string)]
    leaks = [f"{path} holds a URL with a user and password" for path in pipconf]
    for key, value in image.env.items():
        if SECRET_NAME.search(key) or CREDENTIAL_IN_URL.search(value):
            leaks.append(f"ENV {key}")
    keys = root_host.run(
        "grep -rlsI -e '-----BEGIN [A-Z ]*PRIVATE KEY-----' /root /home /etc /opt/sglang-sm120 "
        "--exclude-dir=/etc/ssl/certs 2>/dev/null; true"
    ).stdout.split()
    leaks += [f"{path} holds a private key" for path in keys]
    assert not leaks, "; ".join(leaks)


def test_no_package_caches(scan):
    assert not scan.get("CACHE"), f"build caches left in the image: {', '.join(scan['CACHE'])}"
    assert not scan.get("APT"), f"{len(scan['APT'])} apt package list(s) or .deb files left, e.g. {scan['APT'][0]}"


# The entrypoint's process tree and signals, in a container started the way users start it.

PROCESSES = r"""
import os
procs = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\0") if a]
    except OSError:
        continue
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    procs.append({"pid": int(pid), "ppid": ppid, "argv": argv})
report(procs)
"""


def _processes(container) -> list[dict]:
    from sm120.verify.suite.conftest import PRELUDE, last_json

    result = container.exec_run(["python3", "-c", PRELUDE + PROCESSES])
    assert result.exit_code == 0, result.output.decode(errors="replace")[-300:]
    return last_json(result.output.decode())


@pytest.fixture(scope="module")
def passthrough(start):
    """`docker run IMAGE sleep infinity`: the entrypoint's pass-through for a program on PATH."""
    container = start("passthrough", command=["sleep", "infinity"])
    deadline = time.monotonic() + 30
    while True:
        container.reload()
        if container.status != "running":
            logs = container.logs().decode(errors="replace").strip()[-300:]
            pytest.fail(f"`IMAGE sleep infinity` exited ({container.status}): {logs}", pytrace=False)
        procs = _processes(container)
        if any(p["argv"][:1] == ["sleep"] for p in procs) or time.monotonic() > deadline:
            return container, procs
        time.sleep(0.2)


def test_tini_is_pid_1_and_the_program_its_direct_child(passthrough, image):
    _container, procs = passthrough
    by_pid = {p["pid"]: p for p in procs}
    assert 1 in by_pid, "no PID 1 visible"
    init = by_pid[1]["argv"]
    assert init and init[0].endswith("/tini"), f"PID 1 is {init}, not tini"
    assert image.entrypoint[:1] == init[:1], f"the ENTRYPOINT starts {image.entrypoint[:1]}, PID 1 is {init[:1]}"
    children = [p for p in procs if p["ppid"] == 1]
    assert [c["argv"] for c in children] == [["sleep", "infinity"]], (
        f"PID 1's children are {[c['argv'] for c in children]}: the entrypoint must exec the program, not wrap it"
    )


def test_docker_stop_ends_it_within_two_seconds(passthrough):
    container, _ = passthrough
    started = time.monotonic()
    container.stop(timeout=10)
    took = time.monotonic() - started
    container.reload()
    code = container.attrs["State"]["ExitCode"]
    assert took < STOP_LIMIT_S, f"docker stop took {took:.1f} s (exit {code}): SIGTERM does not reach the program"
    assert code == 128 + 15, f"exit status {code}: the program did not end by SIGTERM"


# HEALTHCHECK: defined, and it probes the plan's route on the configured port: run it against a stand-in there.

HEALTH_PROBE = r"""
import http.server, os, subprocess, threading
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == ROUTE else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
def run_check():
    kind, *rest = TEST
    argv = ["/bin/sh", "-c", rest[0]] if kind == "CMD-SHELL" else rest
    return subprocess.run(argv, capture_output=True, text=True, timeout=60).returncode
server = http.server.HTTPServer(("127.0.0.1", PORT), Health)
thread = threading.Thread(target=server.serve_forever, daemon=True)
thread.start()
up = run_check()
server.shutdown()
server.server_close()
down = run_check()
report({"up": up, "down": down})
"""


def test_healthcheck_probes_the_configured_port(image, expect, plan, py):
    test = image.healthcheck
    assert test and test[0] in ("CMD", "CMD-SHELL"), f"no HEALTHCHECK (Test: {test})"
    route = plan.probe.route
    assert image.env.get("PORT") == str(expect.port), (
        f"ENV PORT={image.env.get('PORT')}, the label sglang-sm120.port says {expect.port}"
    )
    assert f"{expect.port}/tcp" in image.exposed_ports, f"EXPOSE lacks {expect.port} ({image.exposed_ports})"
    out = py(f"TEST = {json.dumps(test)}\nPORT = {expect.port}\nROUTE = {route!r}\n{HEALTH_PROBE}")
    assert out["up"] == 0, f"the HEALTHCHECK fails while {route} answers 200 on port {expect.port}"
    assert out["down"] != 0, f"the HEALTHCHECK passes with nothing listening on port {expect.port}"
