"""T0: the containers this project makes of an image for one step (sm120.plan.image_plan.scratch: reading the image's
plan.json, `build.py sbom`'s scan, the base checks; verify's own) carry a label of the project with a value of their
own and are removed with their anonymous volumes (the image declares a VOLUME: without `v=True` each container leaves
one behind) however the step ends: an error, Ctrl-C, SIGTERM (raised as Terminated), also when the interrupt cuts the
create call short and the engine makes the container after all. A fake docker client stands in for the engine."""

from __future__ import annotations

import io
import os
import re
import signal
import tarfile
from typing import Any

import pytest
import requests

import docker
from sm120.build import cmd_sbom, sbom
from sm120.errors import CheckFailed, Terminated, UsageError
from sm120.image.entrypoint.spec import PLAN_JSON_PATH
from sm120.plan import image_plan, labels
from sm120.verify import docker_env


def _error(cls: type[docker.errors.APIError], status: int, text: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return cls(text, response=response, explanation=text)


def _tar(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class FakeContainer:
    def __init__(self, engine: FakeEngine, cid: str, labels: dict[str, str], kwargs: dict[str, Any]) -> None:
        self.engine, self.id, self.labels, self.kwargs = engine, cid, labels, kwargs
        self.name = f"fake-{cid}"
        self.removals: list[dict[str, Any]] = []

    def get_archive(self, path: str) -> tuple[list[bytes], dict]:
        if self.engine.on_archive is not None:
            self.engine.on_archive()
        if path not in self.engine.files:
            raise _error(docker.errors.NotFound, 404, f"Could not find the file {path} in container {self.id}")
        return [_tar(path.rsplit("/", 1)[1], self.engine.files[path])], {}

    def put_archive(self, path: str, data: bytes) -> bool:
        return True

    def start(self) -> None:
        pass

    def wait(self) -> dict[str, int]:
        return {"StatusCode": self.engine.exit_code}

    def logs(self, stdout: bool = True, stderr: bool = True) -> bytes:
        return (b"out\n" if stdout else b"") + (b"err\n" if stderr else b"")

    def remove(self, **kw: Any) -> None:
        self.removals.append(kw)
        self.engine.live.pop(self.id, None)


class FakeEngine:
    """containers.create, api.containers (the label filter), api.remove_container. `interrupt_create`: the engine
    makes the container, then the call raises it (the create request was under way when it came); `late_lists`: how
    many listings miss such a container before it shows (the engine finishing the create after a first listing)."""

    def __init__(self, *, images: tuple[str, ...] = ("img",), interrupt_create: BaseException | None = None) -> None:
        self.images, self.interrupt_create = images, interrupt_create
        self.files: dict[str, bytes] = {}
        self.on_archive = None
        self.exit_code = 0
        self.late_lists = 0
        self.made: list[FakeContainer] = []
        self.live: dict[str, FakeContainer] = {}
        self.api_removals: list[tuple[str, dict[str, Any]]] = []
        self.listings = 0
        outer = self

        class Containers:
            def create(self, image: str, **kw: Any) -> FakeContainer:
                if image not in outer.images:
                    raise _error(docker.errors.ImageNotFound, 404, f"No such image: {image}")
                container = FakeContainer(outer, f"c{len(outer.made)}", dict(kw.pop("labels", None) or {}), kw)
                outer.made.append(container)
                outer.live[container.id] = container
                if outer.interrupt_create is not None:
                    raise outer.interrupt_create
                return container

        class Api:
            def containers(self, all: bool = False, filters: dict[str, str] | None = None) -> list[dict[str, Any]]:
                outer.listings += 1
                if outer.listings <= outer.late_lists:
                    return []
                key, _, value = (filters or {})["label"].partition("=")
                return [
                    {"Id": c.id, "Names": [f"/{c.name}"]}
                    for c in outer.live.values()
                    if key in c.labels and (not value or c.labels[key] == value)
                ]

            def remove_container(self, cid: str, **kw: Any) -> None:
                outer.api_removals.append((cid, kw))
                outer.live.pop(cid, None)

        self.containers, self.api = Containers(), Api()


def _one(engine: FakeEngine, role: str) -> FakeContainer:
    (container,) = engine.made
    ((key, value),) = container.labels.items()
    assert key == f"{labels.namespace()}.{role}" and re.fullmatch(r"[0-9a-f]{12}", value), container.labels
    return container


def _removed_with_its_volumes(engine: FakeEngine, container: FakeContainer) -> None:
    assert container.id not in engine.live, "the container outlived the step"
    removals = container.removals + [kw for cid, kw in engine.api_removals if cid == container.id]
    assert removals and all(kw.get("force") and kw.get("v") for kw in removals), removals


# ---------------------------------------------------------------------------------------------------------------
# image_plan.read: the plan-less /bin/true container
# ---------------------------------------------------------------------------------------------------------------


def test_the_plan_json_is_copied_out_of_a_labelled_container_removed_with_its_volumes():
    engine = FakeEngine()
    engine.files[PLAN_JSON_PATH] = b'{"plan": 1}\n'
    assert image_plan.plan_json(engine, "img") == b'{"plan": 1}\n'
    container = _one(engine, "plan")
    assert container.kwargs == {"entrypoint": ["/bin/true"], "network_disabled": True}  # never started
    _removed_with_its_volumes(engine, container)


def test_read_of_a_plan_this_build_py_does_not_read_is_one_line_and_its_container_is_removed():
    engine = FakeEngine()
    engine.files[PLAN_JSON_PATH] = b'{"plan": 1}\n'
    with pytest.raises(UsageError, match=re.escape("img: its plan.json is not one this build.py reads")):
        image_plan.read(engine, "img")
    _removed_with_its_volumes(engine, _one(engine, "plan"))


def test_an_image_without_a_plan_is_one_line_and_its_container_is_removed():
    engine = FakeEngine()
    with pytest.raises(UsageError, match=f"img has no {PLAN_JSON_PATH}"):
        image_plan.read(engine, "img")
    _removed_with_its_volumes(engine, _one(engine, "plan"))


def test_no_such_image_is_one_line_at_once():
    engine = FakeEngine(images=())
    with pytest.raises(UsageError, match="no image gone in the Docker Engine"):
        image_plan.read(engine, "gone")
    assert engine.listings == 0  # the engine answered 404: it made none, nothing to wait for


@pytest.mark.parametrize("raised", [RuntimeError("boom"), KeyboardInterrupt(), Terminated()], ids=type)
def test_an_error_or_interrupt_while_copying_still_removes_it(raised):
    engine = FakeEngine()

    def fail() -> None:
        raise raised

    engine.on_archive = fail
    with pytest.raises(type(raised)):
        image_plan.read(engine, "img")
    _removed_with_its_volumes(engine, _one(engine, "plan"))


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), Terminated()], ids=type)
def test_an_interrupt_during_create_removes_what_the_engine_made_after_all(raised, monkeypatch):
    monkeypatch.setattr(image_plan, "SETTLE_S", 0.6)
    engine = FakeEngine(interrupt_create=raised)
    engine.late_lists = 1  # the first listing comes before the engine has finished the create
    with pytest.raises(type(raised)):
        image_plan.read(engine, "img")
    container = _one(engine, "plan")
    _removed_with_its_volumes(engine, container)
    assert engine.listings >= 3  # kept listing until none had shown for SETTLE_S


def test_sigterm_during_create_removes_it(monkeypatch):
    """A real SIGTERM whose handler raises Terminated, as build.py's commands turn it into one."""
    monkeypatch.setattr(image_plan, "SETTLE_S", 0.3)

    def on_term(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        engine = FakeEngine()
        create = engine.containers.create

        def create_then_sigterm(image: str, **kw: Any) -> FakeContainer:
            create(image, **kw)
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, before create returns
            pytest.fail("SIGTERM did not arrive")

        engine.containers.create = create_then_sigterm  # type: ignore[method-assign]
        with pytest.raises(Terminated):
            image_plan.read(engine, "img")
    finally:
        signal.signal(signal.SIGTERM, previous)
    _removed_with_its_volumes(engine, _one(engine, "plan"))


# ---------------------------------------------------------------------------------------------------------------
# The other steps' containers
# ---------------------------------------------------------------------------------------------------------------


def test_output_returns_stdout_and_removes_its_container():
    engine = FakeEngine()
    assert image_plan.output(engine, "img", "base", command=["-c", "true"], user="root") == b"out\n"
    container = _one(engine, "base")
    assert container.kwargs == {"command": ["-c", "true"], "user": "root"}
    _removed_with_its_volumes(engine, container)


def test_output_of_a_failed_command_is_a_container_error_and_removes_it():
    engine = FakeEngine()
    engine.exit_code = 3
    with pytest.raises(docker.errors.ContainerError) as caught:
        image_plan.output(engine, "img", "base", command=["-c", "exit 3"])
    assert caught.value.exit_status == 3 and caught.value.stderr == b"err\n"
    _removed_with_its_volumes(engine, _one(engine, "base"))


@pytest.mark.parametrize("exit_code", [0, 1])
def test_the_sbom_scan_is_labelled_and_removed_with_its_volumes(exit_code, monkeypatch, tmp_path):
    monkeypatch.setattr(sbom, "syft_binary", lambda: tmp_path / "syft")
    monkeypatch.setattr(sbom, "binary_tar", lambda binary, name: b"")
    engine = FakeEngine()
    engine.exit_code = exit_code
    if exit_code:
        with pytest.raises(CheckFailed, match="syft exited 1"):
            cmd_sbom._scan(engine, "img", "repo", "v1", with_files=False)
    else:
        assert cmd_sbom._scan(engine, "img", "repo", "v1", with_files=False) == "out\n"
    _removed_with_its_volumes(engine, _one(engine, "sbom"))


def test_verify_removes_a_runs_containers_with_their_volumes():
    engine = FakeEngine()
    ours = [engine.containers.create("img", labels={docker_env.run_label(): "run1"}) for _ in range(2)]
    other = engine.containers.create("img", labels={docker_env.run_label(): "run2"})
    removed = docker_env.remove_run(engine, "run1")
    assert removed == sorted(c.name for c in ours)
    for container in ours:
        _removed_with_its_volumes(engine, container)
    assert other.id in engine.live


def test_remove_of_a_container_gone_already_is_fine():
    class Gone:
        def remove(self, **kw: Any) -> None:
            assert kw == {"force": True, "v": True}
            raise _error(docker.errors.NotFound, 404, "No such container")

    image_plan.remove(Gone())
