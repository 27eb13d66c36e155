"""T2: `build.py bench` runs SGLang's own bench_serving from the image (the server's SGLang) against a stand-in SGLang
server in another container of the image (tests/unit/bench_standin.py, stdlib only), with a small tokenizer made
offline in the image (the `tokenizers` library's WordLevel model, saved by transformers): two labels, two
concurrencies, two runs each; bench.json, bench.md and bench.png written; the key reaches bench_serving from the
mounted file and no output holds it; the stand-in that is not there is one line, exit 2. And `--image`'s server
container (docker_runner.serve, the stand-in as its entrypoint): published on 127.0.0.1, awaited, measured, removed
with its log kept; one that exits at start fails with its log; the key file mounted read-only, in no setting.

The image: $SM120_IMAGE (./dev test sets it to the default track's offline image).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sm120.bench import docker_runner, probe, prompts, serving
from sm120.errors import CheckFailed
from sm120.plan import image_plan
from tests.helpers import docker_or_skip, free_port, offline_tokenizer, run_build_py

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests" / "unit" / "bench_standin.py"


@pytest.fixture(scope="module")
def engine_image():
    dc = docker_or_skip()
    image = os.environ.get("SM120_IMAGE")
    if not image:
        pytest.skip("SM120_IMAGE is not set: ./dev test sets it to the default track's offline image")
    return dc, image


@pytest.fixture(scope="module")
def tokenizer(engine_image, tmp_path_factory) -> Path:
    dc, image = engine_image
    return offline_tokenizer(dc, image, tmp_path_factory.mktemp("tokenizer"))


@contextmanager
def standin(engine_image, mode: str, *extra: str) -> Iterator[str]:
    """The stand-in SGLang server in a container of the image, on a free port of the host's loopback."""
    dc, image = engine_image
    port = free_port()
    command = ["python3", "/standin/bench_standin.py", mode, "--port", str(port), "--ttft", "0.05", *extra]
    volumes = {str(STANDIN): {"bind": "/standin/bench_standin.py", "mode": "ro"}}
    create = {"command": command, "entrypoint": [], "network_mode": "host", "volumes": volumes}
    with image_plan.scratch(dc, image, "test", **create) as box:
        box.start()
        url = f"http://127.0.0.1:{port}"
        # Its first line says it listens: wait for that line (the log stream ends if the container does).
        if not any(b"listening" in chunk for chunk in box.logs(stream=True, follow=True)):
            pytest.fail(f"the stand-in ended before it listened: {box.logs().decode(errors='replace')}")
        probe.health(url, None)
        yield url


def bench(image: str, tokenizer: Path, out: Path, url: str, label: str, *extra: str):
    return run_build_py(
        "bench",
        *("--endpoint", url, "--label", label, "--tokenizer", str(tokenizer), "--bench-image", image),
        *("--concurrency", "1,2", "--runs", "2", "--max-tokens", "8", "--out", str(out), "--run-timeout", "300"),
        *extra,
    )


def test_a_sweep_of_two_labels_on_the_images_bench_serving(engine_image, tokenizer, tmp_path):
    _, image = engine_image
    out = tmp_path / "bench"
    with standin(engine_image, "baseline", "--tok-s", "200") as url:
        first = bench(image, tokenizer, out, url, "baseline")
    assert first.returncode == 0, first.stderr
    with standin(engine_image, "eagle3", "--tok-s", "600", "--burst", "3") as url:
        second = bench(image, tokenizer, out, url, "eagle3")
    assert second.returncode == 0, second.stderr
    data = json.loads((out / "bench.json").read_text())
    assert set(data["labels"]) == {"baseline", "eagle3"}
    for name, label in data["labels"].items():
        assert label["status"] == "complete", (name, label["error"])
        assert [(r["concurrency"], r["repeat"]) for r in label["runs"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
        for run in label["runs"]:
            # bench_serving's own figures: every request done, real percentiles from its per-request details
            assert run["completed"] >= 2 and run["failed"] == 0, run
            assert run["output_tok_s"] > 0 and 0 < run["itl_ms_p50"] <= run["itl_ms_p90"] <= run["itl_ms_p99"]
            assert run["ttft_ms_p50"] >= 40, run  # the stand-in's 0.05 s to the first token
        assert label["server"]["version"].endswith("stand-in")
    assert all(run["accept_length"] is None for run in data["labels"]["baseline"]["runs"])
    assert set(data["speedup"]["eagle3"]) == {"1", "2"}
    assert "eagle3" in data["crossover"]
    md = (out / "bench.md").read_text()
    assert "### baseline" in md and "### eagle3" in md and "stand-in" in md
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p.name for p in out.iterdir() if p.name.startswith(".bench-work")]  # the runs' work directories go


def test_the_key_reaches_bench_serving_from_its_file_and_no_output(engine_image, tokenizer, tmp_path):
    _, image = engine_image
    key = secrets.token_hex(16)
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    out = tmp_path / "bench"
    with standin(engine_image, "baseline", "--api-key", key) as url:
        refused = run_build_py(
            "bench", "--endpoint", url, "--label", "baseline", "--tokenizer", str(tokenizer), "--bench-image", image,
            "--out", str(tmp_path / "refused"),
        )  # fmt: skip
        done = bench(image, tokenizer, out, url, "baseline", "--api-key-file", str(key_file))
    assert refused.returncode == 2 and "wants an API key" in refused.stderr.strip().splitlines()[-1]
    assert done.returncode == 0, done.stderr
    assert len(json.loads((out / "bench.json").read_text())["labels"]["baseline"]["runs"]) == 4
    for text in (done.stdout, done.stderr, *(p.read_bytes().decode("latin-1") for p in out.rglob("*") if p.is_file())):
        assert key not in text


def test_no_server_is_one_line_and_exit_2(engine_image, tokenizer, tmp_path):
    _, image = engine_image
    url = f"http://127.0.0.1:{free_port()}"
    result = bench(image, tokenizer, tmp_path / "bench", url, "baseline")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"build.py bench: failed: cannot reach SGLang at {url}: connection refused"
    ], result.stderr


# `--image`: the mode's server container (docker_runner.serve) as bench starts it, here with the stand-in as its
# entrypoint (the image's own would start SGLang, which needs a GPU), measured by bench_serving from the same image.
VOLUME = "sglang-sm120-bench-test-cache"


def served(image: str, label: str, entrypoint: list[str]) -> docker_runner.ContainerSpec:
    return docker_runner.ContainerSpec(
        image=image,
        mode="eagle3",
        label=label,
        env={"HOST": "0.0.0.0", "PORT": "30000"},
        port=30000,
        cache_dir="/var/cache/sglang",
        cache_volume=VOLUME,
        gpus="none",
        health_timeout_s=120,
        entrypoint=entrypoint,
        extra_volumes={str(ROOT / "tests" / "unit"): {"bind": "/standin", "mode": "ro"}},
    )


def leftovers(dc, label: str) -> list:
    return dc.containers.list(all=True, filters={"label": f"{docker_runner.bench_label()}={label}"})


@pytest.fixture
def volume(engine_image) -> Iterator[None]:
    yield
    for v in engine_image[0].volumes.list(filters={"name": VOLUME}):
        v.remove(force=True)


@pytest.mark.usefixtures("volume")
def test_image_mode_serves_a_mode_measures_it_and_removes_it(engine_image, tokenizer, tmp_path):
    dc, image = engine_image
    spec = served(image, "image-mode", ["python3", "/standin/bench_standin.py"])
    job = serving.Job(image, "", serving.TOKENIZER, max_tokens=8, seed=0, deadline_s=300, tokenizer_dir=tokenizer)
    with docker_runner.serve(dc, spec, tmp_path) as endpoint:
        assert endpoint.startswith("http://127.0.0.1:")
        job = dataclasses.replace(job, endpoint=endpoint)
        (record,) = serving.runs(dc, job, [2], prompts.load(), tmp_path / "work")
    assert record["completed"] >= 8 and record["accept_length"] > 1
    assert not leftovers(dc, "image-mode") and not leftovers(dc, "bench_serving")
    assert (tmp_path / "image-mode.log").read_text().startswith("stand-in SGLang listening on http://0.0.0.0:")


@pytest.mark.usefixtures("volume")
def test_image_mode_a_server_that_exits_at_start_fails_with_its_log(engine_image, tmp_path):
    dc, image = engine_image
    spec = served(image, "image-exits", ["python3", "-c", "import sys; print('model not found'); sys.exit(3)"])
    with (
        pytest.raises(CheckFailed, match=r"image-exits: the container exited \(status 3\)"),
        docker_runner.serve(dc, spec, tmp_path),
    ):
        pytest.fail("serve() must not yield for a container that exited")
    assert "model not found" in (tmp_path / "image-exits.log").read_text()
    assert not leftovers(dc, "image-exits")


@pytest.mark.usefixtures("volume")
def test_image_mode_the_key_file_reaches_the_server_by_a_read_only_mount_only(engine_image, tokenizer, tmp_path):
    """--image --api-key-file: the file mounted read-only, API_KEY_FILE naming it; the stand-in (which then wants the
    key, as SGLang does) started through the checkout's launcher, as the entrypoint starts SGLang."""
    dc, image = engine_image
    key = secrets.token_hex(16)
    tmp_path.chmod(0o755)  # the image's user reads it through the bind mount
    key_path = tmp_path / "api-key"
    key_path.write_text(key + "\n")
    key_path.chmod(0o644)
    spec = served(image, "image-key", ["python3", "/launcher/_with_api_key.py", "/standin/bench_standin.py"])
    spec.api_key_file = key_path
    spec.extra_volumes[str(ROOT / "sm120" / "image" / "entrypoint")] = {"bind": "/launcher", "mode": "ro"}
    job = serving.Job(image, "", serving.TOKENIZER, 8, 0, 300, tokenizer_dir=tokenizer, api_key_file=key_path)
    with docker_runner.serve(dc, spec, tmp_path) as endpoint:
        (container,) = leftovers(dc, "image-key")
        assert key not in json.dumps(container.attrs), "the key is in `docker inspect`"
        assert f"API_KEY_FILE={docker_runner.KEY_MOUNT}" in container.attrs["Config"]["Env"]
        assert {m["Destination"]: m["RW"] for m in container.attrs["Mounts"]}[docker_runner.KEY_MOUNT] is False
        with pytest.raises(probe.KeyRefused, match="the server wants an API key"):
            probe.server_info(endpoint, None)
        (record,) = serving.runs(dc, dataclasses.replace(job, endpoint=endpoint), [1], prompts.load(), tmp_path / "w")
    assert record["completed"] >= 1
    log = (tmp_path / "image-key.log").read_text()
    assert "--api-key=********" in log and key not in log
    assert not leftovers(dc, "image-key")
