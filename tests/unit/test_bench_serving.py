"""T0: a label's runs of SGLang's bench_serving (sm120/bench/serving.py) with the docker SDK faked: the one container
it starts (the image, host network, the caller's user, the work directory, the tokenizer and the key file mounted
read-only, only the key file's path in its environment, the runs' options in a file), each result read back as it
is written, and the container removed with its volumes on success, on an early exit, on the deadline, when the
caller stops early and when it cannot start. The launcher that runs inside it is run here with a stand-in sglang
package: every run in one process, the key in bench_serving's environment from the file, never on a command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

import docker
from sm120.bench import docker_runner, prompts, serving
from sm120.errors import CheckFailed
from sm120.image.entrypoint.errors import SECRETS
from tests.unit.bench_fakes import fabricate

KEY = "serving-k3y-0123456789abcdef"


class Engine:
    """A docker SDK client and its one container: containers.create records its arguments; start() writes `records`
    (one line each), as bench_serving appends them to result.jsonl in the mounted work directory, then the container
    is `status` (running: it never ends; exited: with `code`)."""

    def __init__(
        self,
        records: list[dict[str, Any]] | None = None,
        status: str = "exited",
        code: int = 0,
        logs: bytes = b"",
        create_error: Exception | None = None,
        start_error: Exception | None = None,
    ) -> None:
        self.records, self.status, self.code, self.output = records or [], status, code, logs
        self.create_error, self.start_error = create_error, start_error
        self.created: list[dict[str, Any]] = []
        self.removed: list[dict[str, bool]] = []
        self.containers = self
        self.attrs: dict[str, Any] = {"State": {"ExitCode": code}}

    def create(self, image: str, **kwargs: Any) -> Engine:
        self.created.append({"image": image, **kwargs})
        if self.create_error is not None:
            raise self.create_error
        (self.work,) = [Path(h) for h, bind in kwargs["volumes"].items() if bind["bind"] == serving.WORK]
        return self

    def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error
        lines = "".join(json.dumps(r) + "\n" for r in self.records)
        (self.work / "result.jsonl").write_text(lines)

    def reload(self) -> None:
        pass

    def logs(self, **kw: Any) -> bytes:
        return self.output

    def remove(self, force: bool = False, v: bool = False) -> None:
        self.removed.append({"force": force, "v": v})


def client_error(message: str, status: int) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(message, response=response, explanation=message)


@pytest.fixture
def key_known() -> Iterator[None]:
    """The key as bench knows it once it read --api-key-file: in SECRETS."""
    SECRETS.add(KEY)
    yield
    SECRETS.clear()


@pytest.fixture
def job(tmp_path) -> serving.Job:
    (tmp_path / "tok").mkdir()
    (tmp_path / "api_key").write_text(KEY + "\n")
    return serving.Job(
        image="sglang-sm120:test",
        endpoint="http://user:pw-0123@127.0.0.1:30000",
        tokenizer=serving.TOKENIZER,
        tokenizer_dir=tmp_path / "tok",
        max_tokens=256,
        seed=7,
        deadline_s=0.3,
        api_key_file=tmp_path / "api_key",
    )


def options(argv: list[str]) -> dict[str, str | None]:
    """bench_serving's options as {--name: value (None for a flag)}."""
    out: dict[str, str | None] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            out[a] = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
    return out


def test_a_labels_runs_are_one_container_of_the_image_against_the_endpoint(job, tmp_path):
    records = [fabricate(1, 100.0, 0.1, 0.01), fabricate(4, 300.0, 0.1, 0.01)]
    engine = Engine(records)
    work = tmp_path / "work"
    shipped = prompts.load()
    assert list(serving.runs(engine, job, [1, 4], shipped, work)) == records  # each line, in order
    (kw,) = engine.created
    assert kw["command"] == ["python3", "-c", serving.LAUNCHER, "/bench/runs.json"]
    runs = json.loads((work / "runs.json").read_text())
    assert (work / "runs.json").stat().st_mode & 0o777 == 0o600  # --base-url may hold a password
    sizes = [serving.requests_for(c, len(shipped.prompts)) for c in (1, 4)]
    assert runs == [
        job.argv(c, n, f"/bench/dataset-{n}.json", "/bench/result.jsonl") for c, n in zip((1, 4), sizes, strict=True)
    ]
    assert options(runs[1]) == {
        "--backend": "sglang", "--base-url": "http://user:pw-0123@127.0.0.1:30000", "--dataset-name": "sharegpt",
        "--dataset-path": f"/bench/dataset-{sizes[1]}.json", "--tokenizer": "/tokenizer",
        "--num-prompts": str(sizes[1]), "--sharegpt-output-len": "256", "--max-concurrency": "4",
        "--request-rate": "inf", "--seed": "7", "--warmup-requests": "1", "--output-file": "/bench/result.jsonl",
        "--output-details": None, "--disable-tqdm": None,
    }  # fmt: skip
    assert "pw-0123" not in json.dumps(kw)  # the URL's password is in the file, on no command line
    assert (kw["image"], kw["entrypoint"], kw["network_mode"]) == ("sglang-sm120:test", [], "host")
    assert kw["user"] == f"{os.getuid()}:{os.getgid()}"
    assert list(kw["labels"]) == [docker_runner.bench_label()]  # its value: this container's own
    assert kw["volumes"] == {
        str(work.resolve()): {"bind": "/bench", "mode": "rw"},
        str((tmp_path / "tok").resolve()): {"bind": "/tokenizer", "mode": "ro"},
        str((tmp_path / "api_key").resolve()): {"bind": docker_runner.KEY_MOUNT, "mode": "ro"},
    }
    # The key file's path, never the key: not in the environment, the command or any other setting.
    assert kw["environment"] == {
        "HOME": "/tmp", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
        "BENCH_KEY_FILE": docker_runner.KEY_MOUNT,
    }  # fmt: skip
    assert KEY not in json.dumps(kw) + json.dumps(runs)
    assert engine.removed == [{"force": True, "v": True}]
    # The datasets: every prompt, cycled to the run's requests, each starting with its own number (no shared prefix).
    rows = json.loads((work / f"dataset-{sizes[1]}.json").read_text())
    assert len(rows) == sizes[1] == max(len(shipped.prompts), 16)
    texts = [row["conversations"][0]["value"] for row in rows]
    assert texts == [f"Request {i}. {shipped.for_run(i).text}" for i in range(sizes[1])]


def test_without_a_key_or_a_tokenizer_there_is_no_such_mount(job, tmp_path):
    plain = serving.Job(**{**job.__dict__, "api_key_file": None, "tokenizer_dir": None, "models_dir": tmp_path})
    engine = Engine([fabricate(1, 50.0, 0.1, 0.01)])
    list(serving.runs(engine, plain, [1], prompts.load(), tmp_path / "work"))
    (kw,) = engine.created
    assert "BENCH_KEY_FILE" not in kw["environment"]
    assert [bind for bind in kw["volumes"].values()] == [
        {"bind": "/bench", "mode": "rw"},
        {"bind": docker_runner.MODELS_MOUNT, "mode": "ro"},
    ]


def test_a_caller_that_stops_early_removes_the_container(job, tmp_path):
    engine = Engine([fabricate(1, 50.0, 0.1, 0.01)] * 2, status="running")
    runs = serving.runs(engine, job, [1, 1], prompts.load(), tmp_path / "work")
    next(runs)
    assert engine.removed == []
    runs.close()  # what bench's `contextlib.closing` does on Ctrl-C or a failed save
    assert engine.removed == [{"force": True, "v": True}]


# bench_serving's line when every request failed (here a server that quotes the request's key in its 401).
NOT_COMPLETED = {"completed": 0, "errors": ["", f"Traceback\nClientResponseError: 401, Bearer {KEY}\n"]}
LOGS = f"loading\nValueError: bad (key {KEY})\n  warnings.warn(x)\n".encode()  # the last line, not a warning's
FAILURES: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    (
        "exits-before-its-line",
        dict(code=1, logs=LOGS),
        serving.RunFailed,
        "bench_serving ended (status 1) at concurrency 4: ValueError: bad (key ********)",
    ),
    ("deadline", dict(status="running"), serving.RunFailed, "at concurrency 4 did not finish within 0.3 s"),
    ("silent", dict(), serving.RunFailed, "ended (status 0) at concurrency 4: (it printed nothing)"),
    (
        "none-completed",
        dict(records=[NOT_COMPLETED]),
        serving.RunFailed,
        "no request completed at concurrency 4: ClientResponseError: 401, Bearer ********",
    ),
    (
        "cannot-start",
        dict(start_error=client_error("no GPU driver", 500)),
        CheckFailed,
        "bench_serving from sglang-sm120:test: no GPU driver",
    ),
]


@pytest.mark.usefixtures("key_known")
@pytest.mark.parametrize(("engine_kw", "error", "message"), [c[1:] for c in FAILURES], ids=[c[0] for c in FAILURES])
def test_a_failed_run_is_one_line_and_its_container_is_removed(job, tmp_path, engine_kw, error, message):
    engine = Engine(**engine_kw)
    with pytest.raises(error) as raised:
        list(serving.runs(engine, job, [4], prompts.load(), tmp_path / "work"))
    assert message in str(raised.value) and "\n" not in str(raised.value) and KEY not in str(raised.value)
    assert engine.removed == [{"force": True, "v": True}]


def test_an_image_the_engine_refuses_leaves_no_container(job, tmp_path):
    engine = Engine(create_error=client_error("No such image: sglang-sm120:test", 404))
    with pytest.raises(CheckFailed, match="bench_serving from sglang-sm120:test: No such image") as raised:
        list(serving.runs(engine, job, [1], prompts.load(), tmp_path / "work"))
    assert not isinstance(raised.value, serving.RunFailed) and engine.removed == []


def _stand_in_sglang(root: Path, module: str) -> Path:
    """A package `sglang` whose `module` prints what bench_serving would see: its argv and its key."""
    parts = module.split(".")
    for i in range(1, len(parts)):
        package = root.joinpath(*parts[:i])
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").touch()
    root.joinpath(*parts).with_suffix(".py").write_text(
        "import json, os, sys\n"
        "print(json.dumps({'module': __name__, 'spec': __spec__.name, 'argv': sys.argv, "
        "'key': os.environ.get('OPENAI_API_KEY'), 'file': os.environ.get('BENCH_KEY_FILE')}))\n"
    )
    return root


@pytest.mark.parametrize(
    ("module", "with_key"),
    [
        pytest.param("sglang.bench_serving", True, id="0.5.9-layout"),
        pytest.param("sglang.bench_serving", False, id="0.5.9-layout-no-key"),
        pytest.param("sglang.benchmark.serving", True, id="0.5.23-layout"),
        pytest.param("sglang.benchmark.serving", False, id="0.5.23-layout-no-key"),
    ],
)
def test_the_launcher_runs_each_run_with_the_key_from_the_file_not_a_command_line(tmp_path, module, with_key):
    root = _stand_in_sglang(tmp_path / "site", module)
    if module != "sglang.bench_serving":  # 0.5.23 keeps the old name as an alias: the new one is run
        _stand_in_sglang(root, "sglang.bench_serving")
    (tmp_path / "api_key").write_text(KEY + "\n")
    (tmp_path / "runs.json").write_text(json.dumps([["--max-concurrency", "1"], ["--max-concurrency", "4"]]))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(root)}
    if with_key:
        env["BENCH_KEY_FILE"] = str(tmp_path / "api_key")
    proc = subprocess.run(
        [sys.executable, "-c", serving.LAUNCHER, str(tmp_path / "runs.json")],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    seen = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [s["argv"][1:] for s in seen] == [["--max-concurrency", "1"], ["--max-concurrency", "4"]]
    for one in seen:  # argv[0]: runpy's, the file
        assert one["module"] == "__main__" and one["spec"] == module
        assert one["key"] == (KEY if with_key else None) and one["file"] is None
