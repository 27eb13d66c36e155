"""T0: `build.py bench --image` with the docker SDK mocked: each "container" is a stand-in SGLang server.

What is checked: the container settings (GPUs, ipc=host, ports on 127.0.0.1, read-only models, the JIT cache
volume, the entrypoint's variables), that every container is stopped and removed whatever happens, that its log
is kept, the failure messages, and the EAGLE-3 settings sweep.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import docker
from sm120 import cli
from sm120.bench import docker_runner, grid
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests.unit.bench_standin import Behaviour, StandIn

PLAN = planmod.resolve(cfg.load())
PORT = PLAN.image.port
CACHE_DIR = PLAN.image.cache_dir
FAST = dict(ttft=0.01, tok_s=500.0)
COMMON = ["--runs", "2", "--warmup", "0", "--max-tokens", "7"]


class FakeContainer:
    def __init__(self, image: str, kwargs: dict[str, Any], behaviour: Behaviour | str) -> None:
        self.image, self.kwargs = image, kwargs
        self.mode = kwargs["command"][0]
        self.stopped = self.removed = False
        self.attrs: dict[str, Any] = {"State": {"ExitCode": 0}}
        self.standin: StandIn | None = None
        if behaviour == "exit":
            self.status, self.ports = "exited", {}
            self.attrs["State"]["ExitCode"] = 3
        else:
            self.standin = StandIn(behaviour).start()
            self.status = "running"
            port = self.standin.httpd.server_address[1]
            self.ports = {f"{PORT}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}

    def reload(self) -> None:
        if self.standin is not None and self.standin.died:
            self.status = "exited"
            self.attrs["State"]["ExitCode"] = 137

    def logs(self, **kw: Any) -> bytes:
        return f"[stand-in] {self.mode} {self.kwargs['environment'].get('SPEC_NUM_STEPS', '')}\nlast line\n".encode()

    def stop(self, timeout: int = 10) -> None:
        self.stopped = True
        if self.standin is not None:
            self.standin.stop()
        self.status = "exited"

    def remove(self, force: bool = False) -> None:
        self.removed = True


class FakeDocker:
    def __init__(self, behaviour_for) -> None:
        self.behaviour_for = behaviour_for
        self.started: list[FakeContainer] = []
        self.created_only: list[str] = []
        self.images_present = True
        outer = self

        class Containers:
            def run(self, image: str, **kwargs: Any) -> FakeContainer:
                behaviour = outer.behaviour_for(kwargs["command"][0], kwargs["environment"])
                if behaviour == "nostart":  # docker-py created it, then the start failed
                    outer.created_only.append(kwargs["name"])
                    raise docker.errors.APIError('could not select device driver "" with capabilities: [[gpu]]')
                c = FakeContainer(image, kwargs, behaviour)
                outer.started.append(c)
                return c

            def get(self, name: str) -> Any:
                class Created:
                    def remove(self, force: bool = False) -> None:
                        outer.created_only.remove(name)

                if name not in outer.created_only:
                    raise docker.errors.NotFound(name)
                return Created()

        class Images:
            def get(self, name: str) -> object:
                if not outer.images_present:
                    raise docker.errors.ImageNotFound("no such image")
                return object()

        self.containers, self.images = Containers(), Images()

    def ping(self) -> bool:
        return True


@pytest.fixture
def fake(monkeypatch):
    holder: dict[str, FakeDocker] = {}

    def install(behaviour_for) -> FakeDocker:
        holder["d"] = FakeDocker(behaviour_for)
        monkeypatch.setattr(docker, "from_env", lambda: holder["d"])
        return holder["d"]

    yield install
    if "d" in holder:
        for c in holder["d"].started:
            if c.standin is not None:
                c.standin.stop()


@pytest.fixture
def models(tmp_path) -> Path:
    root = tmp_path / "models"
    (root / "target").mkdir(parents=True)
    (root / "draft").mkdir()
    return root


def standard(mode: str, env: dict[str, str]) -> Behaviour:
    if mode == "baseline":
        return Behaviour(**FAST, burst=1, spec=False)
    return Behaviour(**FAST, burst=3, spec=True)


def bench(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["bench", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def image_args(models: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--image", "sglang-sm120:test", "--models", str(models), "--out", str(out),
        "--env", "MODEL_PATH=/models/target", "--env", "DRAFT_MODEL_PATH=/models/draft", *COMMON, *extra,
    ]  # fmt: skip


def test_each_mode_gets_its_own_container_with_the_contract_settings(fake, models, tmp_path, capsys):
    d = fake(standard)
    out = tmp_path / "out"
    rc, _, err = bench(capsys, *image_args(models, out, "--env", "HF_TOKEN=hf_secret", "--env", "TP_SIZE=8"))
    assert rc == 0, err
    assert [c.mode for c in d.started] == ["baseline", "eagle3"]
    for c in d.started:
        kw = c.kwargs
        assert c.image == "sglang-sm120:test"
        assert kw["command"] == [c.mode] and kw["detach"] is True and kw["entrypoint"] is None
        assert kw["ipc_mode"] == "host"
        assert kw["ports"] == {f"{PORT}/tcp": ("127.0.0.1", None)}
        (req,) = kw["device_requests"]
        assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
        assert kw["volumes"][str(models.resolve())] == {"bind": "/models", "mode": "ro"}
        assert kw["volumes"]["sglang-sm120-cache"] == {"bind": CACHE_DIR, "mode": "rw"}
        env = kw["environment"]
        assert env["MODEL_PATH"] == "/models/target" and env["DRAFT_MODEL_PATH"] == "/models/draft"
        assert env["HOST"] == "0.0.0.0" and env["PORT"] == str(PORT) and env["TP_SIZE"] == "8"
        assert c.stopped and c.removed
        assert (out / f"{c.mode}.log").read_bytes().startswith(b"[stand-in] " + c.mode.encode())
    data = json.loads((out / "bench.json").read_text())
    assert set(data["labels"]) == {"baseline", "eagle3"}
    assert data["labels"]["eagle3"]["source"]["env"]["HF_TOKEN"] == "***"
    assert data["labels"]["eagle3"]["source"]["mode"] == "eagle3"
    assert data["speedup"]["eagle3"]["decode_tok_s"]["ratio"] > 0
    assert data["labels"]["eagle3"]["summary"]["spec_accept_length"]["mean"] == pytest.approx(7 / 2)


def test_a_container_that_exits_before_health_fails_with_its_log(fake, models, tmp_path, capsys):
    d = fake(lambda mode, env: "exit" if mode == "eagle3" else standard(mode, env))
    out = tmp_path / "out"
    rc, _, err = bench(capsys, *image_args(models, out))
    assert rc == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("build.py bench: failed: eagle3: the container exited (status 3) after ")
    assert last.endswith(f"its log: {out / 'eagle3.log'}")
    assert (out / "eagle3.log").is_file()
    assert all(c.stopped and c.removed for c in d.started)
    data = json.loads((out / "bench.json").read_text())
    assert len(data["labels"]["baseline"]["runs"]) == 2
    assert data["labels"]["eagle3"]["status"] == "failed"


def test_a_container_that_dies_mid_run_names_the_run_and_is_removed(fake, models, tmp_path, capsys):
    def behaviour(mode, env):
        if mode == "eagle3":
            return Behaviour(**FAST, burst=3, spec=True, die_on_request=2, die_after_tokens=2)
        return standard(mode, env)

    d = fake(behaviour)
    out = tmp_path / "out"
    rc, _, err = bench(capsys, *image_args(models, out))
    assert rc == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("build.py bench: failed: eagle3 run 2/2 failed: ")
    assert "the container exited (status 137)" in last and f"its log: {out / 'eagle3.log'}" in last
    assert all(c.stopped and c.removed for c in d.started)
    assert len(json.loads((out / "bench.json").read_text())["labels"]["eagle3"]["runs"]) == 1


def test_ctrl_c_still_removes_the_container(fake, models, tmp_path, capsys, monkeypatch):
    d = fake(standard)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("sm120.bench.runner.measure_label", interrupted)
    rc, _, err = bench(capsys, *image_args(models, tmp_path / "out"))
    assert rc == 130
    assert err.strip().endswith("interrupted")
    assert len(d.started) == 1 and d.started[0].stopped and d.started[0].removed


def test_spec_grid_sweeps_the_settings_and_reports_the_best(fake, models, tmp_path, capsys):
    # Decode speed known per setting: (3, 1, 4) is the fastest; (2, 4, 16) cannot start.
    speed = {("2", "1", "3"): 300.0, ("3", "1", "4"): 600.0}

    def behaviour(mode, env):
        if mode == "baseline":
            return Behaviour(ttft=0.01, tok_s=200.0, burst=1, spec=False)
        key = (env["SPEC_NUM_STEPS"], env["SPEC_EAGLE_TOPK"], env["SPEC_NUM_DRAFT_TOKENS"])
        if key == ("2", "4", "16"):
            return "exit"
        return Behaviour(ttft=0.01, tok_s=speed[key], burst=3, spec=True)

    d = fake(behaviour)
    out = tmp_path / "out"
    argv = image_args(models, out, "--spec-grid", "--grid-steps", "2", "--grid-topk", "1,4", "--grid-draft", "16")
    rc, _, err = bench(capsys, *argv, "--min-speedup", "2.0")
    assert rc == 0, err
    started = [(c.mode, c.kwargs["environment"].get("SPEC_NUM_STEPS")) for c in d.started]
    assert started == [("baseline", None), ("eagle3", "2"), ("eagle3", "2"), ("eagle3", "3")]
    assert all(c.stopped and c.removed for c in d.started)
    data = json.loads((out / "bench.json").read_text())
    assert [p["label"] for p in data["grid"]["points"]] == ["eagle3-s2-k1-d3", "eagle3-s2-k4-d16", "eagle3-s3-k1-d4"]
    assert data["grid"]["best"] == "eagle3-s3-k1-d4"
    failed = [p for p in data["grid"]["points"] if p.get("error")]
    assert [p["label"] for p in failed] == ["eagle3-s2-k4-d16"]
    assert data["gate"]["labels"] == ["eagle3-s3-k1-d4"] and data["gate"]["passed"]
    assert data["labels"]["eagle3-s3-k1-d4"]["source"]["spec"] == {"steps": 3, "topk": 1, "draft": 4}
    md = (out / "bench.md").read_text()
    assert "EAGLE-3 settings sweep" in md and "| 3 | 1 | 4 |" in md and "best |" in md
    assert "eagle3" not in data["labels"]  # the sweep replaces the plain eagle3 run


def test_docker_engine_unreachable_exits_2(models, tmp_path, capsys, monkeypatch):
    def boom():
        raise docker.errors.DockerException("Error while fetching server API version: connection refused")

    monkeypatch.setattr(docker, "from_env", boom)
    rc, _, err = bench(capsys, *image_args(models, tmp_path / "o"))
    assert rc == 2
    assert err.strip().startswith("build.py bench: failed: cannot reach the Docker Engine: ")
    assert len(err.strip().splitlines()) == 1


def test_image_mode_reads_the_image_not_build_toml(fake, models, tmp_path, capsys):
    """--image serves what the image's own plan.json says (read_image_plan, stood in for by conftest): a --config
    that does not exist is never read. --endpoint still needs build.toml (the port to default to)."""
    fake(standard)
    missing = tmp_path / "nonexistent.toml"
    rc, _, err = bench(capsys, *image_args(models, tmp_path / "o", "--config", str(missing)))
    assert rc == 0, err
    assert str(missing) not in err
    rc, _, err = bench(capsys, "--endpoint", "http://127.0.0.1:1", "--label", "a", "--config", str(missing))
    assert rc == 2 and f"{missing}: no such file" in err


def test_a_missing_image_is_a_usage_error(fake, models, tmp_path, capsys):
    fake(standard).images_present = False
    rc, _, err = bench(capsys, *image_args(models, tmp_path / "o"))
    assert rc == 2
    assert "--image sglang-sm120:test: no such image on this Docker host" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--image", "t", "--modes", "baseline"], "--image needs --env MODEL_PATH=PATH"),
        (["--image", "t", "--env", "MODEL_PATH=m"], "mode eagle3 needs --env DRAFT_MODEL_PATH"),
        (["--image", "t", "--modes", "turbo", "--env", "MODEL_PATH=m"], "--modes 'turbo': the image knows baseline"),
        (["--image", "t", "--modes", "baseline", "--env", "MODEL_PATH=/models/x"], "give --models DIR"),
        (["--image", "t", "--modes", "baseline", "--env", "MODEL_PATH"], "--env 'MODEL_PATH': give NAME=VALUE"),
        (["--image", "t", "--modes", "baseline", "--env", "MODEL_PATH=m", "--spec-grid"], "add eagle3 to --modes"),
        (["--image", "t", "--modes", "baseline", "--env", "MODEL_PATH=m", "--gpus", "x"], "--gpus 'x'"),
        (["--image", "t", "--modes", "baseline,baseline", "--env", "MODEL_PATH=m"], "listed twice"),
    ],
)
def test_image_usage_errors(argv, message, tmp_path, capsys):
    rc, _, err = bench(capsys, *argv, "--out", str(tmp_path))
    assert rc == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_a_model_path_missing_on_the_host_is_named(models, tmp_path, capsys):
    argv = ["--image", "t", "--modes", "baseline", "--models", str(models), "--env", "MODEL_PATH=/models/nope"]
    rc, _, err = bench(capsys, *argv, "--out", str(tmp_path))
    assert rc == 2
    assert f"{models / 'nope'} does not exist on this host" in err


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


def test_grid_list_errors():
    with pytest.raises(Exception, match="--grid-steps '2,x'"):
        grid.parse_list("2,x", "--grid-steps")
    with pytest.raises(Exception, match="--grid-topk '0'"):
        grid.parse_list("0", "--grid-topk")


def test_a_container_that_cannot_start_is_removed_and_named(fake, models, tmp_path, capsys):
    d = fake(lambda mode, env: "nostart")
    rc, _, err = bench(capsys, *image_args(models, tmp_path / "o"))
    assert rc == 1
    assert err.strip().splitlines()[-1].startswith("build.py bench: failed: baseline: cannot start sglang-sm120:test: ")
    assert d.created_only == [] and d.started == []


def test_an_api_key_file_is_mounted_read_only_and_named_never_passed(fake, models, tmp_path, capsys):
    """--api-key-file with --image: each container gets the file read-only at KEY_MOUNT and API_KEY_FILE naming it
    (the key is in no variable: `docker inspect` shows none); bench sends the key to the servers that want it."""
    key = "image-k3y-0123456789abcdef"
    key_path = tmp_path / "api_key"
    key_path.write_text(key + "\n")
    d = fake(lambda mode, env: Behaviour(**FAST, burst=1, spec=mode == "eagle3", api_key=key))
    out = tmp_path / "out"
    rc, stdout, err = bench(capsys, *image_args(models, out, "--api-key-file", str(key_path)))
    assert rc == 0, err
    assert len(d.started) == 2
    for c in d.started:
        assert c.kwargs["volumes"][str(key_path.resolve())] == {"bind": docker_runner.KEY_MOUNT, "mode": "ro"}
        assert c.kwargs["environment"]["API_KEY_FILE"] == docker_runner.KEY_MOUNT
        assert not any(key in str(v) for v in c.kwargs["environment"].values())
        assert c.standin is not None and len(c.standin.bodies) == 2  # past the key check
    written = [p.read_text(errors="replace") for p in out.iterdir() if p.suffix in (".json", ".md", ".log")]
    assert key not in "".join(written) + stdout + err


def test_api_key_file_goes_through_its_flag_not_env(fake, models, tmp_path, capsys):
    fake(standard)
    rc, _, err = bench(capsys, *image_args(models, tmp_path / "o", "--env", "API_KEY_FILE=/run/secrets/x"))
    assert rc == 2 and "--env API_KEY_FILE=...: give --api-key-file FILE" in err, err
