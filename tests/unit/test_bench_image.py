"""T0: `build.py bench --image` without Docker: the engine is a FakeDocker whose server containers are stand-in SGLang
servers (tests/unit/bench_fakes.py), bench_serving's runs fabricated lines. Checked: each mode's container and its
settings (GPUs, ipc=host, the port on 127.0.0.1, read-only models, the JIT cache volume, the entrypoint's
variables, the API key file), bench_serving run from the same image against it while it serves, every container
stopped and removed with its volumes whatever happens, its log kept, the failure lines, and --spec-grid's best
point and its gate. The grid's rules (sm120/bench/grid.py) too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120.bench import docker_runner, grid, serving
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests.helpers import run_cli
from tests.unit.bench_fakes import FakeDocker, fabricate
from tests.unit.bench_standin import Behaviour

PLAN = planmod.load_plan()
PORT, CACHE_DIR = PLAN.image.port, PLAN.image.cache_dir
REMOVED = {"force": True, "v": True}


def standard(mode: str, env: dict[str, str]) -> Behaviour:
    return Behaviour(burst=1, spec=False) if mode == "baseline" else Behaviour(burst=3, spec=True)


def by_container(engine: FakeDocker, speed: Any) -> Any:
    """An answer whose tok/s is speed(container) (+10 on the second repeat); it checks that the container serving
    the run's endpoint is up while bench_serving runs against it."""

    def answer(job: serving.Job, concurrency: int, repeat: int) -> dict[str, Any]:
        container = engine.at(job.endpoint)
        assert not container.remove_kwargs and not container.stopped
        accept = 3.0 if container.mode == "eagle3" else None
        return fabricate(concurrency, speed(container) + 10 * repeat, 0.1, 0.01, accept)

    return answer


def mode_speed(container: Any) -> float:
    return 100.0 if container.mode == "baseline" else 250.0


@pytest.fixture
def models(tmp_path) -> Path:
    root = tmp_path / "models"
    (root / "target").mkdir(parents=True)
    (root / "draft").mkdir()
    return root


def image_args(models: Path, out: Path, *extra: str) -> list[str]:
    return [
        "bench", "--image", "sglang-sm120:test", "--models", str(models), "--out", str(out), "--env",
        "MODEL_PATH=/models/target", "--env", "DRAFT_MODEL_PATH=/models/draft", "--concurrency", "1", "--runs", "2",
        *extra,
    ]  # fmt: skip


def last_line(err: str) -> str:
    """stderr's last line (from build.py's own words on: see test_a_stderr_that_is_no_terminal_gets_no_bar)."""
    assert "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    return line[line.find("build.py bench:") :] if "build.py bench:" in line else line


def test_each_mode_gets_its_own_container_and_bench_serving_from_the_same_image(bench_fakes, models, tmp_path, capsys):
    d = bench_fakes.docker(standard)
    fake = bench_fakes.serving(by_container(d, mode_speed))
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, *image_args(models, out, "--env", "HF_TOKEN=hf_secret", "--env", "TP_SIZE=8"))
    assert rc == 0, err
    assert [c.mode for c in d.started] == ["baseline", "eagle3"]
    for c in d.started:
        kw = c.kwargs
        assert c.image == "sglang-sm120:test"
        assert kw["command"] == [c.mode] and kw["detach"] is True and kw["entrypoint"] is None
        assert kw["ipc_mode"] == "host" and kw["ports"] == {f"{PORT}/tcp": ("127.0.0.1", None)}
        (req,) = kw["device_requests"]
        assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
        assert kw["volumes"][str(models.resolve())] == {"bind": "/models", "mode": "ro"}
        assert kw["volumes"]["sglang-sm120-cache"] == {"bind": CACHE_DIR, "mode": "rw"}
        env = kw["environment"]
        assert env["MODEL_PATH"] == "/models/target" and env["DRAFT_MODEL_PATH"] == "/models/draft"
        assert env["HOST"] == "0.0.0.0" and env["PORT"] == str(PORT) and env["TP_SIZE"] == "8"
        assert kw["labels"] == {docker_runner.bench_label(): c.mode}
        assert c.stopped and c.remove_kwargs == REMOVED
        assert (out / f"{c.mode}.log").read_bytes().startswith(b"[stand-in] " + c.mode.encode())
    # bench_serving: from the image measured, the model's tokenizer from the read-only models mount.
    assert [(d.at(job.endpoint).mode, c) for job, c in fake.calls] == [("baseline", 1)] * 2 + [("eagle3", 1)] * 2
    for job, _ in fake.calls:
        assert (job.image, job.tokenizer, job.tokenizer_dir, job.models_dir) == (
            "sglang-sm120:test", "/models/target", None, models
        )  # fmt: skip
    assert d.images_asked == ["sglang-sm120:test"]
    data = json.loads((out / "bench.json").read_text())
    assert list(data["labels"]) == ["baseline", "eagle3"]
    eagle3 = data["labels"]["eagle3"]
    assert eagle3["source"]["env"]["HF_TOKEN"] == "***" and eagle3["source"]["mode"] == "eagle3"
    assert eagle3["server"]["speculative_algorithm"] == "EAGLE3" and eagle3["status"] == "complete"
    assert eagle3["summary"]["1"]["accept_length"]["mean"] == 3.0
    assert data["speedup"]["eagle3"]["1"]["ratio"] == pytest.approx(255.0 / 105.0)
    assert "hf_secret" not in (out / "bench.md").read_text() + (out / "bench.json").read_text()


def test_a_tokenizer_directory_is_mounted_in_place_of_the_models(bench_fakes, models, tmp_path, capsys):
    d = bench_fakes.docker(standard)
    fake = bench_fakes.serving(by_container(d, mode_speed))
    (tmp_path / "tok").mkdir()
    argv = image_args(models, tmp_path / "out", "--modes", "baseline", "--tokenizer", str(tmp_path / "tok"))
    assert run_cli(capsys, *argv)[0] == 0
    assert {(job.tokenizer, job.tokenizer_dir) for job, _ in fake.calls} == {("/tokenizer", tmp_path / "tok")}


FAILURES = [
    # id, what happens to eagle3, exit status, the last line's start
    ("exits-before-health", "exit", 1, "build.py bench: failed: eagle3: the container exited (status 3) after "),
    ("run-failed", serving.RunFailed("bench_serving exited with status 1: CUDA error"), 1, None),
    ("ctrl-c", KeyboardInterrupt(), 130, "build.py bench: interrupted"),
]


@pytest.mark.parametrize(("what", "code", "line"), [c[1:] for c in FAILURES], ids=[c[0] for c in FAILURES])
def test_a_failing_mode_keeps_the_finished_runs_and_every_container_is_removed(
    bench_fakes, models, tmp_path, capsys, what, code, line
):
    d = bench_fakes.docker(lambda mode, env: "exit" if what == "exit" and mode == "eagle3" else standard(mode, env))
    answer = by_container(d, mode_speed)

    def failing(job: serving.Job, concurrency: int, repeat: int) -> dict[str, Any]:
        if d.at(job.endpoint).mode == "eagle3" and repeat == 1:
            raise what
        return answer(job, concurrency, repeat)

    bench_fakes.serving(failing)
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, *image_args(models, out))
    assert rc == code, err
    log = out / "eagle3.log"
    if line is None:  # a run failed: its line, and where the server's log is
        assert last_line(err) == f"build.py bench: failed: {what}; its log: {log}"
    else:
        assert last_line(err).startswith(line)
    assert isinstance(what, KeyboardInterrupt) or last_line(err).endswith(f"its log: {log}")
    assert log.is_file()
    assert all(c.remove_kwargs == REMOVED for c in d.started) and d.created_only == []
    labels = json.loads((out / "bench.json").read_text())["labels"]
    assert labels["baseline"]["status"] == "complete" and len(labels["baseline"]["runs"]) == 2
    eagle3_runs = 0 if what == "exit" else 1
    status = "interrupted" if code == 130 else "failed"
    assert labels["eagle3"]["status"] == status and len(labels["eagle3"]["runs"]) == eagle3_runs
    assert f"Status: {status}" in (out / "bench.md").read_text().split("### eagle3", 1)[1]


def test_a_stderr_that_is_no_terminal_gets_no_bar(bench_fakes, models, tmp_path, capsys):
    d = bench_fakes.docker(lambda mode, env: "exit")
    bench_fakes.serving(by_container(d, mode_speed))
    rc, _, err = run_cli(capsys, *image_args(models, tmp_path / "out", "--modes", "baseline"))
    assert rc == 1 and "\r" not in err and err.startswith("build.py bench: failed: baseline: the container exited"), err


def test_spec_grid_sweeps_the_settings_reports_the_best_and_gates_it(bench_fakes, models, tmp_path, capsys):
    # tok/s known per setting: (3, 1, 4) is the fastest; (2, 4, 16) cannot start its server.
    speeds = {("2", "1", "3"): 300.0, ("3", "1", "4"): 600.0}

    def behaviour(mode: str, env: dict[str, str]) -> Behaviour | str:
        key = (env.get("SPEC_NUM_STEPS"), env.get("SPEC_EAGLE_TOPK"), env.get("SPEC_NUM_DRAFT_TOKENS"))
        return "exit" if key == ("2", "4", "16") else standard(mode, env)

    def speed(c: Any) -> float:
        return speeds[(c.env["SPEC_NUM_STEPS"], c.env["SPEC_EAGLE_TOPK"], c.env["SPEC_NUM_DRAFT_TOKENS"])] if (
            c.mode == "eagle3"
        ) else 200.0  # fmt: skip

    d = bench_fakes.docker(behaviour)
    bench_fakes.serving(by_container(d, speed))
    out = tmp_path / "out"
    grid_args = ["--spec-grid", "--grid-steps", "2", "--grid-topk", "1,4", "--grid-draft", "16", "--min-speedup", "2"]
    rc, _, err = run_cli(capsys, *image_args(models, out, *grid_args))
    assert rc == 0, err
    started = [(c.mode, c.env.get("SPEC_NUM_STEPS"), c.env.get("SPEC_EAGLE_TOPK")) for c in d.started]
    assert started == [("baseline", None, None), ("eagle3", "2", "1"), ("eagle3", "2", "4"), ("eagle3", "3", "1")]
    assert all(c.remove_kwargs == REMOVED for c in d.started)
    assert "eagle3-s2-k4-d16: the container exited (status 3)" in err and "going on with the next setting" in err
    data = json.loads((out / "bench.json").read_text())
    points = ["eagle3-s2-k1-d3", "eagle3-s2-k4-d16", "eagle3-s3-k1-d4"]
    assert [p["label"] for p in data["grid"]["points"]] == points and data["grid"]["best"] == "eagle3-s3-k1-d4"
    assert list(data["labels"]) == ["baseline", *points]  # the sweep replaces the plain eagle3 run
    assert data["labels"]["eagle3-s2-k4-d16"]["status"] == "failed"
    assert data["labels"]["eagle3-s3-k1-d4"]["source"]["spec"] == {"steps": 3, "topk": 1, "draft": 4}
    assert data["gate"]["labels"] == ["eagle3-s3-k1-d4"] and data["gate"]["passed"] is True
    assert "EAGLE-3 settings sweep: best `eagle3-s3-k1-d4` of 3 points." in (out / "bench.md").read_text()


def test_an_api_key_file_is_mounted_read_only_and_named_never_passed(bench_fakes, models, tmp_path, capsys):
    """Each server container gets the file read-only at KEY_MOUNT and API_KEY_FILE naming it (no variable holds the
    key: `docker inspect` shows none); bench's probe sends the key, bench_serving gets the file's path."""
    key = "image-k3y-0123456789abcdef"
    key_path = tmp_path / "api_key"
    key_path.write_text(key + "\n")
    d = bench_fakes.docker(lambda mode, env: Behaviour(burst=1, spec=mode == "eagle3", api_key=key))
    fake = bench_fakes.serving(by_container(d, mode_speed))
    out = tmp_path / "out"
    rc, stdout, err = run_cli(capsys, *image_args(models, out, "--api-key-file", str(key_path)))
    assert rc == 0, err
    assert len(d.started) == 2
    for c in d.started:
        assert c.kwargs["volumes"][str(key_path.resolve())] == {"bind": docker_runner.KEY_MOUNT, "mode": "ro"}
        assert c.env["API_KEY_FILE"] == docker_runner.KEY_MOUNT and key not in json.dumps(c.kwargs)
    assert {job.api_key_file for job, _ in fake.calls} == {key_path}
    assert all(lab["server"]["version"] for lab in json.loads((out / "bench.json").read_text())["labels"].values())
    written = [p.read_text(errors="replace") for p in out.iterdir() if p.suffix in (".json", ".md", ".log")]
    assert key not in "".join(written) + stdout + err


def test_a_container_that_cannot_start_is_removed_and_named(bench_fakes, models, tmp_path, capsys):
    d = bench_fakes.docker(lambda mode, env: "nostart")
    fake = bench_fakes.serving(by_container(d, mode_speed))
    rc, _, err = run_cli(capsys, *image_args(models, tmp_path / "o"))
    assert rc == 1 and fake.calls == []
    assert last_line(err).startswith("build.py bench: failed: baseline: cannot start sglang-sm120:test: ")
    assert d.created_only == [] and d.started == []


def test_a_missing_image_is_exit_2_before_any_container(bench_fakes, models, tmp_path, capsys):
    d = bench_fakes.docker(standard)
    d.missing.add("sglang-sm120:test")
    rc, _, err = run_cli(capsys, *image_args(models, tmp_path / "o"))
    assert rc == 2 and d.started == []
    assert last_line(err) == (
        "build.py bench: error: --image sglang-sm120:test: no such image on this Docker host; build it "
        "(build.py build) or docker pull it first"
    )


def test_image_mode_reads_the_image_not_build_toml(bench_fakes, models, tmp_path, capsys):
    """--image serves what the image's own plan.json says (read_image_plan, stood in for by conftest): a --config
    that does not exist is never read. --endpoint still needs build.toml (the port to default to)."""
    d = bench_fakes.docker(standard)
    bench_fakes.serving(by_container(d, mode_speed))
    missing = tmp_path / "nonexistent.toml"
    rc, _, err = run_cli(capsys, *image_args(models, tmp_path / "o", "--config", str(missing)))
    assert rc == 0, err
    rc, _, err = run_cli(capsys, "bench", "--endpoint", "http://127.0.0.1:1", "--label", "a", "--config", str(missing))
    assert rc == 2 and f"{missing}: no such file" in err


def test_device_requests():
    assert docker_runner.device_requests("none") == []
    (req,) = docker_runner.device_requests("0,1")
    assert req["DeviceIDs"] == ["0", "1"] and req["Capabilities"] == [["gpu"]]


def test_grid_follows_sglangs_rules():
    # top-k 1: SGLang forces draft tokens = steps + 1.
    assert grid.canonical(3, 1, 16) == grid.Point(3, 1, 4)
    # steps 2, top-k 4: 4 + 16 = 20 candidates, so at most 21 draft tokens.
    assert grid.canonical(2, 4, 21) == grid.Point(2, 4, 21)
    assert grid.canonical(2, 4, 22) is None
    assert grid.canonical(1, 8, 9) == grid.Point(1, 8, 9) and grid.canonical(1, 8, 10) is None
    points = grid.points((2,), (1, 4), (8, 16), reference=(2, 4, 16))
    assert points == [grid.Point(2, 1, 3), grid.Point(2, 4, 8), grid.Point(2, 4, 16), grid.Point(3, 1, 4)]
    assert grid.Point(2, 4, 16).env() == {"SPEC_NUM_STEPS": "2", "SPEC_EAGLE_TOPK": "4", "SPEC_NUM_DRAFT_TOKENS": "16"}


def test_grid_includes_the_reference_from_build_toml():
    reference = planmod.resolve(cfg.load(), sglang="0.5.9").entrypoint.modes["eagle3"].draft_tree
    assert reference is not None  # the reference track sets its tree
    points = grid.points(grid.DEFAULT_STEPS, grid.DEFAULT_TOPK, grid.DEFAULT_DRAFT, reference)
    assert grid.canonical(*reference) in points
    assert grid.Point(*grid.UPSTREAM_SUGGESTION) in points
    # A track that leaves the tree to SGLang adds no reference point of its own.
    assert planmod.resolve(cfg.load(), sglang="0.5.23").entrypoint.modes["eagle3"].draft_tree is None
    assert grid.points((2,), (4,), (8,), None) == [grid.Point(2, 4, 8), grid.Point(*grid.UPSTREAM_SUGGESTION)]
