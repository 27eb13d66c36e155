"""The `--image` container lifecycle against the real Docker Engine (marker `docker`), no GPU needed.

A container of any local image that has python3 runs the stand-in SGLang server (tests/unit/bench_standin.py,
stdlib only) in place of the image's entrypoint, with the mode as its first argument, like the real image.
Checks: the port is published on 127.0.0.1 and found, /health is awaited, the runs are measured through it, the
container is stopped and removed, its log kept; a container that exits at start fails with its log; an API key
file reaches the server by a read-only mount only.

The image: $BENCH_DOCKER_TEST_IMAGE, else the offline runtime base from the plan when it is on this host.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import requests

from sm120.bench import client, docker_runner, prompts, runner
from sm120.bench.results import Label, Results
from sm120.errors import CheckFailed
from sm120.image.entrypoint import key_file
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests.helpers import docker_or_skip

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
PLAN = planmod.resolve(cfg.load())
VOLUME = "sglang-sm120-bench-test-cache"


@pytest.fixture(scope="module")
def engine():
    import os

    import docker

    dc = docker_or_skip()
    candidates = [
        os.environ.get("BENCH_DOCKER_TEST_IMAGE"),
        planmod.resolve(cfg.load(), profile="offline").runtime_base_image,
    ]
    for image in filter(None, candidates):
        try:
            dc.images.get(image)
        except docker.errors.ImageNotFound:
            continue
        if _has_python(dc, image):
            yield dc, image
            break
    else:
        pytest.skip("no local image with python3: set BENCH_DOCKER_TEST_IMAGE")
    for v in dc.volumes.list(filters={"name": VOLUME}):
        v.remove(force=True)


def _has_python(dc, image: str) -> bool:
    import docker

    probe = dc.containers.create(
        image, ["python3", "-c", "print(1)"], entrypoint=[], labels={docker_runner.bench_label(): "probe"}
    )
    try:
        probe.start()
        probe.wait(timeout=60)
        return probe.logs().strip() == b"1"
    except docker.errors.DockerException:
        return False  # e.g. no python3 in the image: the start fails
    finally:
        probe.remove(force=True)


def spec(image: str, label: str, entrypoint: list[str]) -> docker_runner.ContainerSpec:
    port = PLAN.image.port
    return docker_runner.ContainerSpec(
        image=image,
        mode="eagle3",
        label=label,
        env={"HOST": "0.0.0.0", "PORT": str(port)},
        port=port,
        cache_dir=PLAN.image.cache_dir,
        cache_volume=VOLUME,
        gpus="none",
        health_timeout_s=60,
        entrypoint=entrypoint,
        extra_volumes={str(ROOT / "tests" / "unit"): {"bind": "/standin", "mode": "ro"}},
    )


def leftovers(dc, label: str) -> list:
    return dc.containers.list(all=True, filters={"label": f"{docker_runner.bench_label()}={label}"})


def test_the_stand_in_serves_from_a_container_and_the_container_is_removed(engine, tmp_path):
    dc, image = engine
    s = spec(image, "docker-standin", ["python3", "/standin/bench_standin.py"])
    plan = runner.RunPlan(runs=2, warmup=0, sampling=client.SamplingSettings(max_tokens=13), read_timeout_s=30)
    results = Results(settings={"max_tokens": 13})
    label = Label("docker-standin", source={"image": image})
    with docker_runner.serve(dc, s, tmp_path) as endpoint:
        assert endpoint.startswith("http://127.0.0.1:")
        runner.measure_label(endpoint, label, results, tmp_path, prompts.load(), plan)
    assert not leftovers(dc, "docker-standin")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{endpoint}/health", timeout=2)
    assert len(label.runs) == 2
    run = label.runs[0]
    # The stand-in's defaults: 350 ms to the first token, 80 tok/s in bursts of 3 (through Docker's proxy).
    assert 0.35 <= run["ttft_s"] <= 0.40
    assert run["decode_tok_s"] == pytest.approx(80.0, rel=0.05)
    assert run["completion_tokens"] == 13 and run["spec_verify_ct"] == 4
    assert (tmp_path / "docker-standin.log").read_text().startswith("stand-in SGLang listening on http://0.0.0.0:")


def test_a_container_that_exits_at_start_fails_with_its_log_and_is_removed(engine, tmp_path):
    dc, image = engine
    s = spec(image, "docker-exits", ["python3", "-c", "import sys; print('model not found'); sys.exit(3)"])
    with (
        pytest.raises(CheckFailed, match=r"docker-exits: the container exited \(status 3\)"),
        docker_runner.serve(dc, s, tmp_path),
    ):
        pytest.fail("serve() must not yield for a container that exited")
    assert "model not found" in (tmp_path / "docker-exits.log").read_text()
    assert not leftovers(dc, "docker-exits")


def test_a_container_that_cannot_start_is_not_left_behind(engine, tmp_path):
    dc, image = engine
    if "nvidia" in (dc.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime: a GPU request would start")
    s = spec(image, "docker-nogpu", ["python3", "/standin/bench_standin.py"])
    s.gpus = "all"
    with (
        pytest.raises(CheckFailed, match=r"docker-nogpu: cannot start .*capabilities: \[\[gpu\]\]"),
        docker_runner.serve(dc, s, tmp_path),
    ):
        pytest.fail("serve() must not yield for a container that did not start")
    assert not leftovers(dc, "docker-nogpu")


def test_an_api_key_file_reaches_the_server_by_a_read_only_mount_only(engine, tmp_path):
    """--image --api-key-file: the file mounted read-only at KEY_MOUNT, API_KEY_FILE naming it; the stand-in (which
    then wants the key, as SGLang does) started through the checkout's launcher, as the entrypoint starts SGLang."""
    import secrets

    dc, image = engine
    key = secrets.token_hex(16)
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o755)
    tmp_path.chmod(0o755)  # the image's user reads it through the bind mount
    key_path = keys / "api-key"
    key_path.write_text(key + "\n")
    key_path.chmod(0o644)
    launcher = ["python3", "/launcher/_with_api_key.py", "/standin/bench_standin.py"]
    s = spec(image, "docker-key", launcher)
    s.api_key_file = key_path
    s.extra_volumes[str(ROOT / "sm120" / "image" / "entrypoint")] = {"bind": "/launcher", "mode": "ro"}
    plan = runner.RunPlan(runs=1, warmup=0, sampling=client.SamplingSettings(max_tokens=7), read_timeout_s=30)
    keyed = dataclasses.replace(plan, api_key=key_file.read(str(key_path)))
    with docker_runner.serve(dc, s, tmp_path) as endpoint:
        (container,) = leftovers(dc, "docker-key")
        assert key not in json.dumps(container.attrs), "the key is in `docker inspect`"
        assert f"API_KEY_FILE={docker_runner.KEY_MOUNT}" in container.attrs["Config"]["Env"]
        mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
        assert mounts[docker_runner.KEY_MOUNT]["RW"] is False
        with pytest.raises(client.KeyRefused, match="the server wants an API key"):
            runner.measure_label(
                endpoint, Label("no-key", source={}), Results(settings={}), tmp_path, prompts.load(), plan
            )
        label = Label("docker-key", source={"image": image})
        runner.measure_label(endpoint, label, Results(settings={}), tmp_path, prompts.load(), keyed)
    assert len(label.runs) == 1 and label.runs[0]["completion_tokens"] == 7
    log = (tmp_path / "docker-key.log").read_text()
    assert "--api-key=********" in log and key not in log
    assert not leftovers(dc, "docker-key")
