"""T2 image suite: pytest + testinfra against containers of one image, expectations read from its labels and plan.

    python3 build.py verify --image TAG           # the way to run it (prints a table, cleans up after itself)
    SM120_IMAGE=TAG pytest sm120/verify/suite     # the same checks, plain pytest (without SM120_IMAGE: all skipped)

`box` is one long-running container of the image (`sleep infinity`, the image's user), `host` / `root_host`
testinfra's view of it; `py(code)` runs Python in the image's interpreter there, the code calling `report(obj)`.
REPORT holds the facts the checks measured (versions, SASS archs, warnings), written to $SM120_VERIFY_REPORT.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import testinfra

from sm120.errors import UsageError
from sm120.plan import image_plan, labels
from sm120.plan.plan_types import Plan
from sm120.verify import docker_env, report
from sm120.verify.startup_probe import MARK

IMAGE = os.environ.get("SM120_IMAGE", "").strip()
RUN_ID = os.environ.get("SM120_VERIFY_RUN") or docker_env.new_run_id()
REPORT = report.Report(image=IMAGE)
PRELUDE = f"def report(obj):\n    import json\n    print({MARK!r} + json.dumps(obj), flush=True)\n"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.image)
            item.add_marker(pytest.mark.docker)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not IMAGE or not (REPORT.kernels or REPORT.warnings):
        return
    terminalreporter.section("kernel libraries: SASS archs (cuobjdump)")
    for kernel in REPORT.kernels:
        terminalreporter.line(report.arch_line(kernel))
    for warning in REPORT.warnings:
        terminalreporter.line(f"warning: {warning}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if (path := os.environ.get("SM120_VERIFY_REPORT")) and IMAGE:
        Path(path).write_text(REPORT.model_dump_json(indent=1))


@pytest.fixture(scope="session")
def dc():
    if not IMAGE:
        pytest.skip("no image to check: run `build.py verify --image TAG` or set SM120_IMAGE=TAG")
    try:
        return docker_env.client()
    except docker_env.DockerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def image(dc) -> docker_env.ImageInfo:
    try:
        info = docker_env.inspect(dc, IMAGE)
    except UsageError as exc:
        pytest.fail(str(exc), pytrace=False)
    REPORT.image_id, REPORT.size = info.id, info.size
    REPORT.profile = info.labels.get(f"{labels.namespace()}.profile", "")
    return info


@functools.cache
def plan_of_image() -> Plan | None:
    """The image's own plan (its plan.json), read once; None without an image or when it cannot be read (the
    `plan` fixture then fails saying why). Checks parametrized by what the image serves call it at collection."""
    if not IMAGE:
        return None
    try:
        return image_plan.read(docker_env.client(), IMAGE)
    except (UsageError, docker_env.DockerUnavailable):
        return None


@pytest.fixture(scope="session")
def plan(dc, image) -> Plan:
    """The plan the image was built from (/etc/sglang-sm120/plan.json, resolved on the build's host)."""
    try:
        plan = image_plan.read(dc, image.id)
    except UsageError as exc:
        pytest.fail(str(exc), pytrace=False)
    REPORT.flashinfer = plan.flashinfer_prebuilt  # the census table beside the start-up decisions
    return plan


@pytest.fixture(scope="session")
def expect(image) -> labels.Expect:
    try:
        parsed = labels.parse(image.labels)
    except labels.LabelError as exc:
        pytest.fail(f"{IMAGE}: {exc}", pytrace=False)
    REPORT.expected = dict(parsed.versions)
    return parsed


@pytest.fixture(scope="session")
def start(dc, image) -> Iterator[Callable[..., Any]]:
    """start(name_hint, **containers.run kwargs: command, entrypoint, device_requests, ...): a detached container of
    the image without network, labelled with the run id (build.py verify removes what is left), removed at the end of
    the session."""
    started = []

    def _start(name_hint: str, **kwargs: Any):
        name = f"sm120-verify-{RUN_ID}-{name_hint}-{uuid.uuid4().hex[:4]}"
        run = {"detach": True, "network_mode": "none", "labels": {docker_env.run_label(): RUN_ID}, "name": name}
        started.append(dc.containers.run(image.id, **run, **kwargs))
        return started[-1]

    yield _start
    for container in started:
        image_plan.remove(container)


@pytest.fixture(scope="session")
def box(start):
    """The image with `sleep infinity` as its program (not through the entrypoint: checks of that start their own)."""
    container = start("box", entrypoint=["sleep", "infinity"])
    container.reload()
    if container.status != "running":
        logs = container.logs().decode(errors="replace").strip()[-300:]
        pytest.fail(f"a container of {IMAGE} with `sleep infinity` is {container.status}: {logs}", pytrace=False)
    return container


@pytest.fixture(scope="session")
def host(box):
    return testinfra.get_host(f"docker://{box.id}")


@pytest.fixture(scope="session")
def root_host(box):
    return testinfra.get_host(f"docker://root@{box.id}")


def last_json(stdout: str) -> Any:
    lines = [line for line in stdout.splitlines() if line.startswith(MARK)]
    return json.loads(lines[-1][len(MARK) :]) if lines else None


@pytest.fixture(scope="session")
def py(image, host, root_host) -> Callable[..., Any]:
    """py(code, env={}, root=False, check=True): run code in the image's Python in `box` (as root: root=True); it
    reports by calling `report(obj)` (defined for it), whose JSON is returned. A non-zero exit fails the check."""

    def _py(code: str, *, env: dict[str, str] | None = None, root: bool = False, check: bool = True) -> Any:
        pairs = [f"{k}={v}" for k, v in (env or {}).items()]
        argv = [*(["env", *pairs] if pairs else []), image.python, "-c", PRELUDE + code]
        result = (root_host if root else host).run(shlex.join(argv))
        if check and result.rc != 0:
            tail = " | ".join([ln for ln in result.stderr.strip().splitlines() if ln.strip()][-4:])
            pytest.fail(f"{image.python} exited {result.rc}: {tail}", pytrace=False)
        found = last_json(result.stdout)
        if check and found is None:
            pytest.fail(f"{image.python} reported nothing; stderr: {result.stderr.strip()[-300:]}", pytrace=False)
        return found

    return _py


@pytest.fixture(scope="session")
def image_uid(host) -> int:
    return int(host.check_output("id -u"))


def entrypoint(box, image, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """The image's ENTRYPOINT + args, as the image's user (tini not as PID 1 here: TINI_SUBREAPER keeps it quiet)."""
    assert image.entrypoint, "the image has no ENTRYPOINT"
    result = box.exec_run([*image.entrypoint, *args], environment={"TINI_SUBREAPER": "1", **env}, demux=True)
    stdout, stderr = (part.decode(errors="replace") if part else "" for part in result.output)
    return result.exit_code, stdout, stderr
