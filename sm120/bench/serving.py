"""SGLang's own `bench_serving`, from an image (the server's SGLang), in a container of its own on the host's network,
as the calling user: every run of a label in one process (SGLang's imports are paid once), each result read as
bench_serving writes it, each run with a deadline (from the end of the one before).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120.bench import docker_runner, prompts
from sm120.build.docker_client import describe
from sm120.errors import CheckFailed
from sm120.image.entrypoint.errors import redact
from sm120.plan import image_plan

WORK = "/bench"  # the run's work directory (dataset, result), mounted read-write
TOKENIZER = "/tokenizer"  # --tokenizer DIR, mounted read-only
# Inside the container: the key file's line into the environment bench_serving reads (OPENAI_API_KEY: the key is on
# no command line and in no container setting), then bench_serving itself (0.5.23 moved it to
# sglang.benchmark.serving and keeps sglang.bench_serving as a deprecated alias).
LAUNCHER = """\
import importlib.util, json, os, runpy, sys
key = os.environ.pop("BENCH_KEY_FILE", "")
if key:
    with open(key, encoding="utf-8") as f:
        os.environ["OPENAI_API_KEY"] = f.read().strip()
module = "sglang.benchmark.serving" if importlib.util.find_spec("sglang.benchmark") else "sglang.bench_serving"
with open(sys.argv[1], encoding="utf-8") as f:
    runs = json.load(f)
for argv in runs:
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


class RunFailed(CheckFailed):
    """One run ended without a result (a non-zero exit, the deadline, no request completed): exit 1."""


@dataclass(frozen=True)
class Job:
    image: str  # the image whose SGLang runs bench_serving
    endpoint: str  # the server, as the host reaches it
    tokenizer: str  # a path in the container: TOKENIZER, or the model's path under the models mount
    max_tokens: int
    seed: int
    deadline_s: float
    tokenizer_dir: Path | None = None  # mounted at TOKENIZER
    models_dir: Path | None = None  # mounted at docker_runner.MODELS_MOUNT
    api_key_file: Path | None = None

    def argv(self, concurrency: int, requests: int, dataset: str, result: str) -> list[str]:
        """bench_serving's own options (their names are checked against every track's release at T1)."""
        return [
            *("--backend", "sglang", "--base-url", self.endpoint),
            *("--dataset-name", "sharegpt", "--dataset-path", dataset),
            *("--tokenizer", self.tokenizer, "--num-prompts", str(requests)),
            *("--sharegpt-output-len", str(self.max_tokens), "--max-concurrency", str(concurrency)),
            *("--request-rate", "inf", "--seed", str(self.seed), "--warmup-requests", "1"),
            *("--output-file", result, "--output-details", "--disable-tqdm"),
        ]


def requests_for(concurrency: int, prompt_count: int) -> int:
    """Requests per run: every prompt, and at least four per concurrent slot so most of the run is at full load."""
    return max(prompt_count, 4 * concurrency)


def write_dataset(prompt_set: prompts.PromptSet, count: int, path: Path) -> None:
    """The prompt set as bench_serving's sharegpt file, cycled to `count` requests. Each request starts with its own
    number, so no two share a prefix in SGLang's radix cache (a repeated prompt would skip its prefill)."""
    answer = {"from": "gpt", "value": "(the output length is fixed by --sharegpt-output-len)"}
    asked = ({"from": "human", "value": f"Request {i}. {prompt_set.for_run(i).text}"} for i in range(count))
    rows = [{"id": f"r{i}", "conversations": [question, answer]} for i, question in enumerate(asked)]
    path.write_text(json.dumps(rows), encoding="utf-8")


def runs(engine: Any, job: Job, points: list[int], prompt_set: prompts.PromptSet, work: Path) -> Iterator[dict]:
    """bench_serving at each concurrency of `points`, in order: each run's result line (a dict) as it is written;
    RunFailed with one line why a run gave none. The container goes when the iteration ends, however it ends."""
    import docker

    work.mkdir(parents=True, exist_ok=True)
    argvs = []
    for c in points:
        n = requests_for(c, len(prompt_set.prompts))
        write_dataset(prompt_set, n, work / f"dataset-{n}.json")
        argvs.append(job.argv(c, n, f"{WORK}/dataset-{n}.json", f"{WORK}/result.jsonl"))
    result = work / "result.jsonl"
    result.unlink(missing_ok=True)
    mounts = (job.tokenizer_dir, TOKENIZER), (job.models_dir, docker_runner.MODELS_MOUNT)
    volumes = {str(work.resolve()): {"bind": WORK, "mode": "rw"}, **docker_runner.read_only(*mounts)}
    environment = {"HOME": "/tmp", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if job.api_key_file is not None:
        volumes |= docker_runner.read_only((job.api_key_file, docker_runner.KEY_MOUNT))
        environment["BENCH_KEY_FILE"] = docker_runner.KEY_MOUNT
    # The runs' options in a file, not on the command line: --base-url may hold a password (http://user:pw@host).
    plan = work / "runs.json"
    plan.write_text(json.dumps(argvs), encoding="utf-8")
    plan.chmod(0o600)
    create = {"entrypoint": [], "user": f"{os.getuid()}:{os.getgid()}", "network_mode": "host", "volumes": volumes}
    create.update(command=["python3", "-c", LAUNCHER, f"{WORK}/runs.json"], environment=environment)
    try:  # the container is removed with its anonymous volumes however this ends (image_plan.scratch), Ctrl-C too
        with image_plan.scratch(engine, job.image, "bench", **create) as box:
            box.start()
            for index, c in enumerate(points):
                record = json.loads(_line(box, result, index, job.deadline_s, c))
                if not record.get("completed"):
                    errors = [e for e in record.get("errors") or [] if e]
                    why = errors[0].strip().splitlines()[-1] if errors else _said_last(box)
                    raise RunFailed(f"no request completed at concurrency {c}: {redact(why)[:300]}")
                yield record
    except docker.errors.DockerException as exc:
        raise CheckFailed(f"cannot run bench_serving from {job.image}: {describe(exc)}") from None


def _line(box: Any, result: Path, index: int, deadline_s: float, concurrency: int) -> str:
    end = time.monotonic() + deadline_s
    while True:
        box.reload()  # before the file is read: a line written as it exited is still found
        text = result.read_text(encoding="utf-8") if result.exists() else ""
        if text.count("\n") > index:
            return text.splitlines()[index]
        if box.status in ("exited", "dead"):
            code = box.attrs.get("State", {}).get("ExitCode")
            raise RunFailed(f"bench_serving ended (status {code}) at concurrency {concurrency}: {_said_last(box)}")
        if time.monotonic() > end:
            raise RunFailed(
                f"the run at concurrency {concurrency} did not finish within {deadline_s:g} s (--run-timeout)"
            )
        time.sleep(0.25)


def _said_last(box: Any) -> str:
    return docker_runner.last_line(box, 300) or "(it printed nothing)"
