"""The stack up (pytest-docker): compose.yaml with the test overrides, the real image, the stand-in SGLang server
(tests/unit/bench_standin.py) in place of SGLang, wanting the API key of the secret (like SGLang with --api-key).
The image's HEALTHCHECK turns it healthy, a client waits for that through `depends_on: condition: service_healthy`,
`build.py bench --endpoint --api-key-file` measures through the published port, the key is in no `docker inspect`,
command line, environment or log, the cache volume is the image user's, `docker compose down` ends it by SIGTERM
well within the stop grace period, and `eagle3 --dry-run` through Compose prints the command built from the .env
values. The `down` check runs last (the module's order): the checks before it share the one stack.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime

import pytest
import requests

from sm120.image.entrypoint import key_file
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.verify import startup
from tests.compose.conftest import CHECK, COMPOSE_FILE, NO_GPU, ROOT, SERVICE, STACK_FILES, run_compose
from tests.helpers import offline_tokenizer

PLAN = planmod.resolve(cfg.load(), profile="offline")
HEALTH_TIMEOUT_S = 60


@dataclass
class Stack:
    project: str
    sglang: object  # docker Container
    client: object
    first_healthy: datetime  # when the first passing HEALTHCHECK probe ended


_STAMP = re.compile(r"^(?P<head>[^.]+?)(?:\.(?P<frac>\d+))?(?P<zone>Z|[+-]\d\d:\d\d)$")


def _when(stamp: str) -> datetime:
    """Docker's RFC 3339 time (nanoseconds) as a datetime (microseconds)."""
    m = _STAMP.match(stamp)
    assert m, f"not an RFC 3339 time: {stamp!r}"
    zone = "+00:00" if m["zone"] == "Z" else m["zone"]
    return datetime.fromisoformat(f"{m['head']}.{(m['frac'] or '')[:6].ljust(6, '0')}{zone}")


def _containers(dc, project: str, service: str) -> list:
    labels = [f"com.docker.compose.project={project}", f"com.docker.compose.service={service}"]
    return dc.containers.list(all=True, filters={"label": labels})


@pytest.fixture(scope="session")
def stack(docker_services, dc, settings) -> Stack:
    (sglang,) = _containers(dc, settings.project, SERVICE)

    def healthy_and_answering() -> bool:
        sglang.reload()
        if sglang.status != "running":
            pytest.fail(f"the sglang container is {sglang.status}: {sglang.logs()[-500:]!r}", pytrace=False)
        if (sglang.attrs["State"].get("Health") or {}).get("Status") != "healthy":
            return False
        try:
            return requests.get(f"http://127.0.0.1:{settings.host_port}/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    docker_services.wait_until_responsive(check=healthy_and_answering, timeout=HEALTH_TIMEOUT_S, pause=0.5)
    log = sglang.attrs["State"]["Health"]["Log"]  # the last 5 probes: read now, before they rotate out
    first_ok = min(_when(entry["End"]) for entry in log if entry["ExitCode"] == 0)
    (client,) = _containers(dc, settings.project, "client")

    def client_done() -> bool:
        client.reload()
        return client.status == "exited"

    docker_services.wait_until_responsive(check=client_done, timeout=30, pause=0.2)
    return Stack(settings.project, sglang, client, first_ok)


def test_the_image_healthcheck_turns_the_service_healthy(stack, dc, image):
    image_test = dc.images.get(image).attrs["Config"]["Healthcheck"]["Test"]
    config = stack.sglang.attrs["Config"]["Healthcheck"]
    assert config["Test"] == image_test, f"the container's check is not the image's: {config}"
    assert config["Interval"] == 1_000_000_000, "the test override probes every second"
    state = stack.sglang.attrs["State"]["Health"]
    assert state["Status"] == "healthy"
    assert any(e["ExitCode"] == 0 for e in state["Log"]), state["Log"]
    # The probe ran the image's command: python3 ... urlopen(http://127.0.0.1:$PORT/health), which needs no key.
    top = stack.sglang.top(ps_args="-eo pid,args")["Processes"]
    launched = "python3 /opt/sglang-sm120/sm120/image/entrypoint/_with_api_key.py /standin/bench_standin.py"
    assert any(p[1].startswith(launched) and p[1].endswith(" eagle3") for p in top), top


def test_a_client_waits_for_service_healthy(stack):
    stack.client.reload()
    state = stack.client.attrs["State"]
    assert state["ExitCode"] == 0, stack.client.logs().decode(errors="replace")
    assert b"client: sglang answers /health" in stack.client.logs()
    started = _when(state["StartedAt"])
    assert started >= stack.first_healthy, f"the client started at {started}, before sglang was healthy"


def test_bench_measures_through_the_published_port(stack, dc, image, docker_services, settings, tmp_path):
    """bench_serving from the image, with the key from its file, through the port Compose published (loopback
    only). The bench's own cases (no key, a wrong one, no server) are tests/image_meta/test_bench_serving.py's."""
    published = docker_services.port_for(SERVICE, settings.port)
    assert published == settings.host_port
    bindings = stack.sglang.attrs["NetworkSettings"]["Ports"][f"{settings.port}/tcp"]
    assert {b["HostIp"] for b in bindings} == {"127.0.0.1"}, f"published beyond loopback: {bindings}"
    out = tmp_path / "bench"
    tokenizer = offline_tokenizer(dc, image, tmp_path / "tokenizer")
    argv = [sys.executable, str(ROOT / "build.py"), "bench", "--endpoint", f"http://127.0.0.1:{published}"]
    argv += ["--label", "eagle3", "--out", str(out), "--runs", "1", "--concurrency", "2", "--max-tokens", "24"]
    argv += ["--tokenizer", str(tokenizer), "--bench-image", image]
    argv += ["--api-key-file", settings.values["API_KEY_SECRET"]]  # the stand-in, like SGLang, wants the key
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
    written = "".join(p.read_text(errors="replace") for p in out.iterdir() if p.suffix in (".json", ".md"))
    assert settings.api_key not in written + proc.stdout + proc.stderr
    (run,) = json.loads((out / "bench.json").read_text())["labels"]["eagle3"]["runs"]
    # The stand-in's eagle3 defaults: 350 ms to the first token, then bursts of 3 tokens at 80 tok/s. Bounded by
    # the stand-in's pace: it is never faster (a loaded 2-core host makes it slower).
    assert run["completed"] >= 2 and run["failed"] == 0 and run["output_tokens"] == 24 * run["completed"], run
    assert 350 <= run["ttft_ms_p50"] <= 2000, run
    assert run["accept_length"] and run["accept_length"] > 1, run


# Every process's cmdline and environ in the container, read as the image's user. A file that cannot be read is
# asked again until it can, or its process is gone: the HEALTHCHECK's `docker exec` starts as runc's init, which
# makes itself undumpable (its /proc files refuse every other reader) for the moment before it becomes the probe.
# One that still refuses after 10 s is reported, and fails the test.
SCAN = """
import glob, json, time
key = open("/run/secrets/api_key").read().strip()
scanned, holding, unreadable = 0, 0, []
for f in glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ"):
    deadline = time.monotonic() + 10
    while True:
        try:
            text = open(f, "rb").read().decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError):  # the process is gone
            break
        except PermissionError:
            if time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            unreadable.append(f)
            break
        scanned += 1
        holding += key in text
        break
print(json.dumps([scanned, holding, unreadable]))
"""


def test_the_key_is_in_no_setting_command_line_environment_or_log(stack, dc, settings):
    """`docker inspect` (env, command, mounts), `docker top`, every process's cmdline and environment in the
    container, and the server's log (the stand-in prints its arguments, as SGLang logs its ServerArgs) hold no
    key; the server has it (it answers 401 without it, see the bench tests) through the secret, read-only."""
    key = settings.api_key
    for container in (stack.sglang, stack.client):
        container.reload()
        assert key not in json.dumps(container.attrs), f"{container.name}: the key is in `docker inspect`"
    assert "API_KEY_FILE=/run/secrets/api_key" in stack.sglang.attrs["Config"]["Env"]
    mounts = {m["Destination"]: m for m in stack.sglang.attrs["Mounts"]}
    secret = mounts["/run/secrets/api_key"]
    assert (secret["Type"], secret["Source"], secret["RW"]) == ("bind", settings.values["API_KEY_SECRET"], False)
    top = stack.sglang.top(ps_args="-eo pid,args")["Processes"]
    assert not any(key in p[1] for p in top), top
    result = stack.sglang.exec_run(["python3", "-c", SCAN])  # the processes' own user may read their environ
    assert result.exit_code == 0, result.output
    scanned, holding, unreadable = json.loads(result.output)
    assert scanned >= 4 and holding == 0 and not unreadable, result.output
    log = stack.sglang.logs().decode(errors="replace")
    assert "--api-key=********" in log and key not in log, log[-1000:]


def test_the_settings_reach_the_container(stack, settings):
    attrs = stack.sglang.attrs
    host = attrs["HostConfig"]
    assert host["IpcMode"] == "host"
    assert host["RestartPolicy"]["Name"] == "no"  # RESTART=no in the test's .env
    assert not host.get("DeviceRequests"), "no-gpu.yaml must drop the GPU reservation"
    assert attrs["Config"]["StopTimeout"] == 120, "stop_grace_period 120s, also for a plain `docker stop`"
    # The server's own environment: Config.Env also lists a name without a value (NAME, unset in .env), which
    # the engine leaves out of the process's environment.
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    result = stack.sglang.exec_run(["python3", "-c", code])
    assert result.exit_code == 0, result.output
    env = json.loads(result.output)
    v = settings.values
    for name in ("PORT", "MODEL_PATH", "DRAFT_MODEL_PATH", "TP_SIZE", "SPEC_NUM_STEPS", "EXTRA_ARGS"):
        assert env.get(name) == v[name], f"{name}: {env.get(name)!r} in the container, {v[name]!r} in .env"
    assert env.get("API_KEY_FILE") == "/run/secrets/api_key" and "API_KEY_SECRET" not in env
    for name in ("NNODES", "SKIP_RUNTIME_RULES", "HOST", "SGLANG_ENABLE_JIT_DEEPGEMM"):
        assert name not in env, f"{name} is not set in .env, so it must not reach the container: {env.get(name)!r}"


def test_the_cache_volume_is_writable_by_the_image_user_and_models_read_only(stack, compose, settings):
    mounts = {m["Destination"]: m for m in stack.sglang.attrs["Mounts"]}
    cache = mounts[PLAN.image.cache_dir]
    assert (cache["Type"], cache["Name"], cache["RW"]) == ("volume", settings.values["CACHE_VOLUME"], True)
    assert mounts["/models"]["Type"] == "bind" and mounts["/models"]["RW"] is False
    script = (
        'id -u; f="$SM120_CACHE_DIR/.compose-check"; echo ok > "$f" && cat "$f" && rm "$f"; '
        "touch /models/x 2>/dev/null && echo models-writable || echo models-read-only"
    )
    proc = run_compose(
        compose,
        settings.env_file,
        STACK_FILES,
        settings.project,
        "exec",
        "-T",
        SERVICE,
        "sh",
        "-c",
        script,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(PLAN.image.uid), "ok", "models-read-only"], proc.stdout


def test_without_the_override_the_gpu_reservation_reaches_the_engine(compose, settings, dc):
    """compose.yaml alone asks the engine for every GPU: one without the NVIDIA runtime refuses the container.
    (That a GPU host grants it is T4.)"""
    if "nvidia" in (dc.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime: the reservation would be granted (T4)")
    project = f"{settings.project}-gpus"
    extra = {"CACHE_VOLUME": f"{project}-cache"}
    try:
        proc = run_compose(
            compose, settings.env_file, [COMPOSE_FILE], project, "run", "--rm", "-T", "--entrypoint", "true", SERVICE,
            extra_env=extra,
        )  # fmt: skip
    finally:
        run_compose(compose, settings.env_file, [COMPOSE_FILE], project, "down", "-v", extra_env=extra)
    assert proc.returncode != 0
    assert 'could not select device driver "nvidia" with capabilities: [[gpu]]' in proc.stderr, proc.stderr


def test_eagle3_dry_run_through_compose_prints_the_command_from_the_env(compose, settings, image):
    """The real entrypoint (compose.yaml + no-gpu.yaml only), through `docker compose run`."""
    project = f"{settings.project}-dry-run"
    extra = {"CACHE_VOLUME": f"{project}-cache"}  # not the running stack's volume: `down -v` below removes it
    files = [COMPOSE_FILE, NO_GPU]
    try:
        proc = run_compose(
            compose, settings.env_file, files, project, "run", "--rm", "-T", SERVICE, "eagle3", "--dry-run",
            extra_env=extra,
        )  # fmt: skip
    finally:
        run_compose(compose, settings.env_file, files, project, "down", "-v", extra_env=extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    _, args = startup.split_command(shlex.split(lines[-1]))

    v = settings.values
    expected = {
        "--model-path": v["MODEL_PATH"],
        "--speculative-draft-model-path": v["DRAFT_MODEL_PATH"],
        "--tp-size": v["TP_SIZE"],
        "--port": v["PORT"],
        "--host": "0.0.0.0",
        "--speculative-algorithm": "EAGLE3",
        "--speculative-num-steps": v["SPEC_NUM_STEPS"],
        "--speculative-eagle-topk": v["SPEC_EAGLE_TOPK"],
        "--speculative-num-draft-tokens": v["SPEC_NUM_DRAFT_TOKENS"],
        "--mem-fraction-static": "0.81",
        "--max-running-requests": "4",
        "--api-key": key_file.MASK,  # from the secret API_KEY_SECRET names, never shown
    }
    assert {k: startup.option_value(args, k) for k in expected} == expected, lines[-1]
    assert "accepted by SGLang" in proc.stdout, proc.stdout[-800:]
    assert settings.api_key not in proc.stdout + proc.stderr


def test_a_mode_the_entrypoint_refuses_stops_up_and_never_starts_the_server(compose, settings, image, dc):
    """Issue 24: `up` with MODE=turbo ends at compose.yaml's `check` (exit 2, its one line in the log); the server
    container is created but never started, so `restart: unless-stopped` has nothing to restart."""
    project = f"{settings.project}-bad-mode"
    extra = {"CACHE_VOLUME": f"{project}-cache", "MODE": "turbo"}
    files = [COMPOSE_FILE, NO_GPU]
    try:
        up = run_compose(compose, settings.env_file, files, project, "up", "-d", extra_env=extra)
        logs = run_compose(compose, settings.env_file, files, project, "logs", "--no-color", CHECK, extra_env=extra)
        states = {c.labels.get("com.docker.compose.service"): c.status for c in dc.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project}"}
        )}  # fmt: skip
    finally:
        run_compose(compose, settings.env_file, files, project, "down", "-v", extra_env=extra)
    assert up.returncode != 0
    assert 'service "check" didn\'t complete successfully: exit 2' in up.stderr, up.stderr[-1500:]
    assert "unknown mode 'turbo'" in logs.stdout, logs.stdout[-1500:]
    assert states == {CHECK: "exited", SERVICE: "created"}, states


def test_compose_down_ends_it_by_sigterm_within_the_grace_period(stack, compose, settings, dc):
    """Last: it takes the stack down (pytest-docker's own `down -v` then finds nothing to do)."""
    grace = stack.sglang.attrs["Config"]["StopTimeout"]
    since = int(time.time()) - 1
    started = time.monotonic()
    files = [COMPOSE_FILE, NO_GPU, ROOT / "tests" / "compose" / "standin.yaml"]
    proc = run_compose(compose, settings.env_file, files, settings.project, "down", "-v", timeout=grace + 60)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    deaths = list(
        dc.events(
            since=since,
            until=int(time.time()) + 1,
            decode=True,
            filters={"container": stack.sglang.id, "event": "die"},
        )
    )
    assert deaths, "no die event for the sglang container"
    code = deaths[-1]["Actor"]["Attributes"].get("exitCode")
    assert code == "0", f"exit status {code}: the server did not end by SIGTERM (137 = Docker's SIGKILL)"
    assert took < min(grace, 15), f"`docker compose down` took {took:.1f} s (grace period {grace} s)"
    assert not _containers(dc, settings.project, SERVICE)
