"""Stand-ins for Docker and for SGLang's bench_serving in the T0 tests of `build.py bench` (no Docker, no SGLang).

- fabricate(): a bench_serving result line (`--output-file --output-details`) with known figures;
- FakeServing: sm120.bench.serving.runs' stand-in, each run answered by a function of (job, concurrency, repeat);
- FakeDocker: docker.from_env()'s stand-in. Each server container it "starts" (`--image`) is a stand-in SGLang
  server (tests/unit/bench_standin.py) on 127.0.0.1, so bench's /health and /server_info probes are real HTTP.
BenchFakes (the `bench_fakes` fixture, tests/unit/conftest.py) installs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import docker
from sm120.bench import serving
from tests.helpers import free_port
from tests.unit.bench_standin import Behaviour, StandIn

Answer = Callable[[serving.Job, int, int], dict[str, Any]]


def fabricate(
    concurrency: int,
    tok_s: float,
    ttft: float,
    itl: float,
    accept: float | None = None,
    *,
    requests: int = 8,
    tokens: int = 9,
    failed: int = 0,
    error: str = "Traceback (most recent call last):\nRuntimeError: the connection was closed",
) -> dict[str, Any]:
    """bench_serving's result line for one run at `concurrency`: `requests` requests of `tokens` output tokens each,
    request i (from 0) with TTFT ttft·(1 + i/10) s and inter-token latencies itl·(1 + i/10)·(1 + j/20) s
    (j = 0 .. tokens-2); output throughput `tok_s`; then `failed` requests that failed as bench_serving records
    them (no output, the error text); accept_length only where given (bench_serving leaves it out without
    speculative decoding)."""
    ttfts, itls, lens, errors = [], [], [], []
    for i in range(requests):
        f = 1 + i / 10
        ttfts.append(ttft * f)
        itls.append([itl * f * (1 + j / 20) for j in range(tokens - 1)])
        lens.append(tokens)
        errors.append("")
    for _ in range(failed):
        ttfts.append(0.0)
        itls.append([])
        lens.append(0)
        errors.append(error)
    duration = requests * tokens / tok_s
    record: dict[str, Any] = {
        "backend": "sglang",
        "max_concurrency": concurrency,
        "completed": requests,
        "duration": duration,
        "total_input_tokens": 50 * (requests + failed),
        "total_output_tokens": requests * tokens,
        "request_throughput": requests / duration,
        "input_throughput": 50 * requests / duration,
        "output_throughput": tok_s,
        "ttfts": ttfts,
        "itls": itls,
        "output_lens": lens,
        "input_lens": [50] * (requests + failed),
        "errors": errors,
        "generated_texts": [" tok" * n for n in lens],
        "server_info": {"version": "stand-in", "api_key": "server_info is not kept"},
    }
    if accept is not None:
        record["accept_length"] = accept
    return record


class FakeServing:
    """serving.runs' stand-in: each run recorded as (job, concurrency), in order, as bench asks for it; answered by
    answer(job, concurrency, repeat), repeat counting the earlier runs for the same endpoint and concurrency (from 0).
    `answer` may raise: the sweep sees it at that run."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.calls: list[tuple[serving.Job, int]] = []

    def __call__(
        self, engine: Any, job: serving.Job, points: list[int], prompt_set: Any, work: Path
    ) -> Iterator[dict[str, Any]]:
        assert work.is_dir(), "bench hands serving.runs a work directory"
        for concurrency in points:
            repeat = sum(1 for j, c in self.calls if j.endpoint == job.endpoint and c == concurrency)
            self.calls.append((job, concurrency))
            yield self.answer(job, concurrency, repeat)


def by_endpoint(table: dict[str, dict[int, list[float]]], **figures: Any) -> Answer:
    """An answer from {endpoint: {concurrency: [tok/s of repeat 1, 2, ...]}} (the list repeats when a label is
    measured again); TTFT 0.1 s and ITL 0.01 s unless `figures` say otherwise."""

    def answer(job: serving.Job, concurrency: int, repeat: int) -> dict[str, Any]:
        speeds = table[job.endpoint][concurrency]
        return fabricate(concurrency, speeds[repeat % len(speeds)], **{"ttft": 0.1, "itl": 0.01, **figures})

    return answer


class FakeContainer:
    """A server container: a stand-in SGLang server (`Behaviour`), or one that exits (status 3) once it has
    published its port (nothing listens there), before /health answers ("exit")."""

    def __init__(self, image: str, kwargs: dict[str, Any], behaviour: Behaviour | str) -> None:
        self.image, self.kwargs, self.mode = image, kwargs, kwargs["command"][0]
        self.stopped, self.remove_kwargs = False, {}  # remove_kwargs: how it was removed ({}: not yet)
        self.attrs: dict[str, Any] = {"State": {"ExitCode": 0}}
        self.standin: StandIn | None = None
        self.status, self.exits, self.reloads = "running", behaviour == "exit", 0
        if self.exits:
            port = free_port()
        else:
            assert isinstance(behaviour, Behaviour)
            self.standin = StandIn(behaviour).start()
            port = self.standin.httpd.server_address[1]
        (published,) = kwargs["ports"]
        self.ports = {published: [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}

    @property
    def env(self) -> dict[str, str]:
        return self.kwargs["environment"]

    def reload(self) -> None:
        self.reloads += 1
        if self.exits and self.reloads > 1:  # the first reload is serve()'s, for the published port
            self.status, self.ports = "exited", {}
            self.attrs["State"]["ExitCode"] = 3

    def logs(self, **kw: Any) -> bytes:
        return f"[stand-in] {self.mode} {self.env.get('SPEC_NUM_STEPS', '')}\nlast line\n".encode()

    def stop(self, timeout: int = 10) -> None:
        self.stopped = True

    def remove(self, force: bool = False, v: bool = False) -> None:
        self.remove_kwargs = {"force": force, "v": v}
        if self.standin is not None:
            self.standin.stop()


class FakeDocker:
    """docker.from_env()'s stand-in. behaviour_for(mode, environment) gives each server container's stand-in
    Behaviour, "exit" (exited before /health) or "nostart" (created, then the start failed, as docker-py does);
    `missing` lists images the engine does not have."""

    def __init__(self, behaviour_for: Callable[[str, dict[str, str]], Behaviour | str] | None = None) -> None:
        self.behaviour_for = behaviour_for or (lambda mode, env: Behaviour())
        self.started: list[FakeContainer] = []
        self.created_only: list[str] = []
        self.missing: set[str] = set()
        self.images_asked: list[str] = []
        outer = self

        class Containers:
            def run(self, image: str, **kwargs: Any) -> FakeContainer:
                behaviour = outer.behaviour_for(kwargs["command"][0], kwargs["environment"])
                if behaviour == "nostart":
                    outer.created_only.append(kwargs["name"])
                    raise docker.errors.APIError('could not select device driver "" with capabilities: [[gpu]]')
                container = FakeContainer(image, kwargs, behaviour)
                outer.started.append(container)
                return container

            def get(self, name: str) -> Any:
                if name not in outer.created_only:
                    raise docker.errors.NotFound(name)
                return SimpleNamespace(remove=lambda force=False, v=False: outer.created_only.remove(name))

        class Images:
            def get(self, name: str) -> object:
                outer.images_asked.append(name)
                if name in outer.missing:
                    raise docker.errors.ImageNotFound("no such image")
                return object()

        self.containers, self.images = Containers(), Images()

    def ping(self) -> bool:
        return True

    def at(self, endpoint: str) -> FakeContainer:
        """The container serving `endpoint`."""
        (found,) = [c for c in self.started if c.standin is not None and c.standin.url == endpoint]
        return found

    def close(self) -> None:
        for container in self.started:
            if container.standin is not None:
                container.standin.stop()


class BenchFakes:
    """What the `bench_fakes` fixture gives: serving(answer) puts FakeServing in place of serving.runs (and a
    FakeDocker in place of the engine, unless docker() installed one first); docker(behaviour_for) a FakeDocker."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.engine: FakeDocker | None = None

    def docker(self, behaviour_for: Callable[[str, dict[str, str]], Behaviour | str] | None = None) -> FakeDocker:
        if self.engine is not None:
            self.engine.close()
        engine = self.engine = FakeDocker(behaviour_for)
        self.monkeypatch.setattr(docker, "from_env", lambda: engine)
        return engine

    def serving(self, answer: Answer) -> FakeServing:
        fake = FakeServing(answer)
        self.monkeypatch.setattr(serving, "runs", fake)
        if self.engine is None:
            self.docker()
        return fake

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
