"""T0: one probe, from the plan (build.toml [tracks."X".probe]), asked the same way by the image's HEALTHCHECK,
Compose and the Kubernetes manifests, for every track.

- The Dockerfile's HEALTHCHECK: its flags cannot come from a build arg (Docker expands none in them), so
  --interval, --start-period and --retries must equal every track's probe and --timeout must be a hard stop above
  every track's timeout_s; its command reads the route and the timeout from the image's plan.json: run here against
  a stand-in server with a plan of our own, it asks that route, and gives up after that timeout.
- compose.yaml keeps the image's HEALTHCHECK (no healthcheck of its own for the server).
- The Kubernetes probes (`build.py deploy kubernetes --sglang TRACK`, one node and several): the plan's route on the
  plan's port, its timeout and interval, a startup probe that allows its start period, a readiness probe that gives
  up after its retries.
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests.kubernetes_pods import MODELS, container, render, template, workload

ROOT = Path(__file__).resolve().parents[2]
CONFIG = cfg.load()
TRACKS = sorted(CONFIG.tracks)
PLANS = {track: planmod.resolve(CONFIG, sglang=track) for track in TRACKS}
_DURATION = re.compile(r"(\d+)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def seconds(text: str) -> float:
    """A Docker duration (Go's time.ParseDuration, as the HEALTHCHECK flags take it): 30s, 60m, 1h30m."""
    parts = _DURATION.findall(text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    return sum(int(n) * _UNITS[u] for n, u in parts)


def healthcheck() -> tuple[dict[str, str], list[str]]:
    """The Dockerfile's HEALTHCHECK: its flags and its CMD (exec form)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith("HEALTHCHECK ")]
    flags_text, cmd = line.split(" CMD ", 1)
    flags = dict(re.findall(r"--([a-z-]+)=(\S+)", flags_text))
    return flags, json.loads(cmd)


@pytest.mark.parametrize("track", TRACKS)
def test_the_healthchecks_flags_agree_with_every_tracks_probe(track):
    probe = PLANS[track].probe
    flags, _ = healthcheck()
    assert set(flags) == {"interval", "timeout", "start-period", "retries"}, flags
    assert seconds(flags["interval"]) == probe.interval_s
    assert seconds(flags["start-period"]) == probe.start_period_s
    assert int(flags["retries"]) == probe.retries
    # A hard stop: the command's own limit is the plan's timeout, Python's start comes on top.
    assert seconds(flags["timeout"]) >= probe.timeout_s + 10
    assert probe.timeout_s > probe.sglang_timeout_s


def test_the_healthchecks_command_is_the_images_health_tool():
    """No route, port or timeout of its own: the entrypoint's `health` tool (sm120/image/probe/) reads the plan."""
    _, cmd = healthcheck()
    assert cmd == ["/opt/venv/bin/python3", "/opt/sglang-sm120/entrypoint.py", "health"]
    code = (ROOT / "sm120" / "image" / "probe" / "__main__.py").read_text()
    assert "/health" not in code and not re.search(r"timeout=\d", code), "the route and timeout come from the plan"


class _ComposeLoader(yaml.SafeLoader):
    """YAML with Compose's `!reset` (an override's "drop this key"), read as None: its value is not looked at."""


_ComposeLoader.add_constructor("!reset", lambda loader, node: None)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def serve(route: str, delay: float = 0.0) -> tuple[_Server, list[str]]:
    """A stand-in SGLang on a free port of 127.0.0.1: 200 on `route` after `delay` seconds, 404 elsewhere."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            time.sleep(delay)
            self.send_response(200 if self.path == route else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, asked


def run_healthcheck(tmp_path: Path, port: int, probe: dict) -> subprocess.CompletedProcess[str]:
    """The HEALTHCHECK's command as the engine runs it (the checkout's entrypoint script), reading a plan.json of
    ours (SM120_PLAN) in place of the image's."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"probe": probe}))
    env = {"PORT": str(port), "PATH": "/usr/bin:/bin", "SM120_PLAN": str(plan)}
    argv = [sys.executable, str(ROOT / "docker" / "entrypoint.py"), "health"]
    # cwd: not the checkout, where `python -c` would find the sm120 package whatever sys.path the tool set up
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)


@pytest.mark.parametrize("track", TRACKS)
def test_the_healthcheck_asks_the_plans_route_on_port(tmp_path, track):
    probe = PLANS[track].to_dict()["probe"]
    server, asked = serve(probe["route"])
    try:
        port = server.server_address[1]
        assert run_healthcheck(tmp_path, port, probe).returncode == 0
        assert asked == [probe["route"]]
        # Another route in the plan: the command follows it (a 404 there fails the check).
        assert run_healthcheck(tmp_path, port, {**probe, "route": "/elsewhere"}).returncode != 0
        assert asked[-1] == "/elsewhere"
    finally:
        server.shutdown()


def test_the_healthcheck_gives_up_after_the_plans_timeout(tmp_path):
    probe = {**PLANS[TRACKS[0]].to_dict()["probe"], "timeout_s": 1}
    server, _ = serve(probe["route"], delay=5)
    try:
        started = time.monotonic()
        proc = run_healthcheck(tmp_path, server.server_address[1], probe)
        assert proc.returncode != 0 and time.monotonic() - started < 4, proc.stderr
    finally:
        server.shutdown()


def test_compose_keeps_the_images_healthcheck():
    """compose.yaml's server has no healthcheck of its own: `docker compose ps` and `service_healthy` see the
    image's, which is the plan's (only the one-shot `check` service turns it off)."""
    services = yaml.load((ROOT / "compose.yaml").read_text(), Loader=_ComposeLoader)["services"]
    assert "healthcheck" not in services["sglang"]
    assert {name for name, s in services.items() if "healthcheck" in s} == {"check"}
    assert services["check"]["healthcheck"] == {"disable": True}


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("track", TRACKS)
def test_the_kubernetes_probes_are_the_plans(tmp_path, track, nodes):
    plan = PLANS[track]
    probe = plan.probe
    options = ["--nodes", str(nodes), "--gpus", "8", "--mode", "baseline", "--model-path", MODELS["MODEL_PATH"]]
    docs = render(tmp_path / "out", *options, "--sglang", track)
    lws = workload(docs)
    leader = container(template(lws, 0))
    ports = {p["name"]: p["containerPort"] for p in leader["ports"]}
    for name in ("startupProbe", "readinessProbe"):
        got = leader[name]
        assert got["httpGet"]["path"] == probe.route and ports[got["httpGet"]["port"]] == plan.image.port
        assert (got["timeoutSeconds"], got["periodSeconds"]) == (probe.timeout_s, probe.interval_s)
    startup = leader["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= probe.start_period_s
    assert (startup["failureThreshold"] - 1) * startup["periodSeconds"] < probe.start_period_s, "no more than it"
    assert leader["readinessProbe"]["failureThreshold"] == probe.retries
    assert "livenessProbe" not in leader
    for index in range(1, nodes):
        assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(container(template(lws, index)))
