"""T0: Ctrl-C (SIGINT) and SIGTERM stop `build.py build` and `build.py bench --image` within seconds and leave
nothing they started running, without Docker: the signals are real, sent when the program is provably at the step
under test (a line on a pipe, or sent by a stand-in at that step), never after a sleep.

- build: buildx (a stand-in that prints a BuildKit line and waits) gets SIGINT, which cancels a build, also when
  build.py alone got SIGTERM (a CI runner cancelling; exit 143); a buildx that does not end is killed after the
  grace; build.py exits 130 / 143 in one line.
- bench --image: a Ctrl-C while the container is being created or started, or a second one during the graceful
  stop, still removes it; SIGTERM during --image is bench's own (exit 143, "terminated (SIGTERM)").
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import docker
from sm120 import cli
from sm120.bench import cmd_bench, docker_runner
from tests.helpers import ROOT, process_gone
from tests.unit.bench_standin import StandIn

# --------------------------------------------------------------------------------------------------
# build.py build: buildx
# --------------------------------------------------------------------------------------------------

# build.py's error handling (cli._run) around buildx.run, with buildx replaced by a stand-in.
BUILD_DRIVER = r"""
import argparse, os, sys
from pathlib import Path
from sm120 import cli
from sm120.build import buildx

buildx.command = lambda req: [sys.executable, "-c", os.environ["FAKE_BUILDX"]]
if os.environ.get("STOP_GRACE_S"):
    buildx.STOP_GRACE_S = float(os.environ["STOP_GRACE_S"])
request = buildx.BuildRequest(context=Path("."), dockerfile=Path("Dockerfile"))
sys.exit(cli._run(argparse.Namespace(command="build", func=lambda args: buildx.run(request))))
"""

# buildx's stand-in: cancels on SIGINT/SIGTERM as buildx does (exit 1), or ignores them ("stubborn").
FAKE_BUILDX = r"""
import os, signal, sys, time

def cancel(signum, frame):
    print(f"fake-buildx: {signal.Signals(signum).name}: cancelling", flush=True)
    sys.exit(1)

handler = signal.SIG_IGN if os.environ.get("FAKE_BUILDX_STUBBORN") else cancel
signal.signal(signal.SIGINT, handler)
signal.signal(signal.SIGTERM, handler)
print(f"#5 [devel 3/9] RUN make pid={os.getpid()}", flush=True)
while True:
    time.sleep(1)
"""


class Build:
    """The driver in a session of its own (a terminal's foreground job), its output read line by line."""

    def __init__(self, **env: str) -> None:
        environ = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_BUILDX": FAKE_BUILDX, **env}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BUILD_DRIVER],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, daemon=True), threading.Thread(target=self._errors)]
        for reader in self.readers:
            reader.daemon = True
            reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.out.append(line)
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _errors(self) -> None:
        self.err.extend(self.proc.stderr)

    def wait_for_buildx(self, timeout: float = 120) -> int:
        """Until buildx's first line has come through build.py: its pid."""
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no buildx line within {timeout:g} s; stderr: {''.join(self.err)}")
            if line is None:
                self.proc.wait()
                pytest.fail(f"build.py ended ({self.proc.returncode}) before buildx ran: {''.join(self.err)}")
            if line.startswith("#5 [devel 3/9] RUN make pid="):
                return int(line.rsplit("=", 1)[1])

    def result(self, timeout: float = 60) -> tuple[int, str, str]:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for reader in self.readers:
            reader.join(timeout=10)
        return self.proc.returncode, "".join(self.out), "".join(self.err)


BUILD_SIGNALS = [
    # (Ctrl-C reaches buildx straight from the terminal: what it prints then can cross build.py's interruption)
    ("ctrl-c", "ctrl_c", 130, "interrupted", None),
    ("sigterm", "sigterm", 143, "terminated (SIGTERM)", "fake-buildx: SIGINT: cancelling"),
]


@pytest.mark.parametrize(
    ("how", "code", "says", "buildx_says"), [c[1:] for c in BUILD_SIGNALS], ids=[c[0] for c in BUILD_SIGNALS]
)
def test_a_signal_cancels_the_build_and_buildx_ends(how, code, says, buildx_says):
    build = Build()
    pid = build.wait_for_buildx()
    if how == "ctrl_c":
        os.killpg(build.proc.pid, signal.SIGINT)  # the terminal's foreground group: build.py and buildx
    else:
        build.proc.send_signal(signal.SIGTERM)  # build.py alone: buildx is told by build.py
    rc, out, err = build.result()
    assert rc == code, err
    assert err.strip().splitlines()[-1] == f"build.py build: {says}" and "Traceback" not in err, err
    assert buildx_says is None or buildx_says in out  # what buildx printed while it cancelled is still shown
    assert process_gone(pid), "buildx outlived build.py"


@pytest.mark.parametrize("how", ["ctrl_c", "sigterm"])
def test_a_buildx_that_does_not_end_is_killed_after_the_grace(how):
    from sm120.build import buildx

    assert buildx.STOP_GRACE_S <= 30  # "within seconds"; here 1 s, to keep the test short
    build = Build(FAKE_BUILDX_STUBBORN="1", STOP_GRACE_S="1")
    pid = build.wait_for_buildx()
    if how == "ctrl_c":
        os.killpg(build.proc.pid, signal.SIGINT)
    else:
        build.proc.send_signal(signal.SIGTERM)
    rc, _, err = build.result()
    assert rc == (130 if how == "ctrl_c" else 143), err
    assert process_gone(pid), "buildx outlived build.py"


# --------------------------------------------------------------------------------------------------
# build.py bench --image: the container
# --------------------------------------------------------------------------------------------------


class FakeContainer:
    def __init__(self, name: str, ports: dict[str, Any], host_port: int = 9, on_reload=None, on_stop=None) -> None:
        self.name, self.status = name, "running"
        self.ports = {key: [{"HostIp": "127.0.0.1", "HostPort": str(host_port)}] for key in ports}  # as published
        self.attrs: dict[str, Any] = {"State": {"ExitCode": 0}}
        self.on_reload, self.on_stop = on_reload, on_stop
        self.stopped = self.removed = False

    def reload(self) -> None:
        if self.on_reload is not None:
            self.on_reload()

    def logs(self, **kw: Any) -> bytes:
        return b"[stand-in] log\n"

    def stop(self, timeout: int = 10) -> None:
        self.stopped = True
        if self.on_stop is not None:
            self.on_stop()

    def remove(self, force: bool = False, v: bool = False) -> None:
        self.removed = force and v  # at once, with its anonymous volumes


class FakeDocker:
    """containers.run creates a FakeContainer (with `interrupt_in_run`, Ctrl-C comes before it returns)."""

    def __init__(self, interrupt_in_run: bool = False, **container_kw: Any) -> None:
        self.created: dict[str, FakeContainer] = {}
        outer = self

        class Containers:
            def run(self, image: str, **kw: Any) -> FakeContainer:
                container = FakeContainer(kw["name"], kw["ports"], **container_kw)
                outer.created[kw["name"]] = container
                if interrupt_in_run:  # created; the start request is under way when Ctrl-C comes
                    raise KeyboardInterrupt
                return container

            def get(self, name: str) -> FakeContainer:
                if name not in outer.created:
                    raise docker.errors.NotFound(name)
                return outer.created[name]

        class Images:
            def get(self, name: str) -> object:
                return object()

        self.containers, self.images = Containers(), Images()

    def ping(self) -> bool:
        return True


def _spec() -> docker_runner.ContainerSpec:
    return docker_runner.ContainerSpec(
        image="sglang-sm120:test", mode="baseline", label="baseline", env={}, port=30000,
        cache_dir="/cache", cache_volume="sglang-sm120-cache",
    )  # fmt: skip


def _sigterm_to_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # its handler runs in this (the main) thread before the next line


def test_ctrl_c_while_the_container_is_created_or_started_removes_it(tmp_path):
    client = FakeDocker(interrupt_in_run=True)
    with pytest.raises(KeyboardInterrupt), docker_runner.serve(client, _spec(), tmp_path):
        pytest.fail("served a container that did not start")
    (container,) = client.created.values()
    assert container.removed


def test_ctrl_c_again_during_the_graceful_stop_still_removes_it(tmp_path):
    def interrupted() -> None:
        raise KeyboardInterrupt  # the second Ctrl-C, while `docker stop` waits for the server

    with StandIn() as server:  # the container's server: /health answers
        client = FakeDocker(on_stop=interrupted, host_port=server.httpd.server_address[1])
        with pytest.raises(KeyboardInterrupt), docker_runner.serve(client, _spec(), tmp_path):
            raise KeyboardInterrupt  # the first one, during the runs
    (container,) = client.created.values()
    assert container.stopped and container.removed


def test_sigterm_while_waiting_for_health_removes_the_container(tmp_path):
    client = FakeDocker(on_reload=_sigterm_to_self)
    before = signal.getsignal(signal.SIGTERM)
    # bench's handlers (cmd_bench.run holds them for the whole command): SIGTERM raises its Terminated.
    with pytest.raises(cmd_bench.Terminated), cmd_bench._signals(), docker_runner.serve(client, _spec(), tmp_path):
        pytest.fail("served a container that never answered /health")
    (container,) = client.created.values()
    assert container.stopped and container.removed
    assert signal.getsignal(signal.SIGTERM) == before  # put back as it was


def test_sigterm_during_bench_image_is_benchs_own_exit_143(tmp_path, capsys, monkeypatch):
    client = FakeDocker(on_reload=_sigterm_to_self)
    monkeypatch.setattr(docker, "from_env", lambda: client)
    models = tmp_path / "models"
    (models / "target").mkdir(parents=True)
    argv = ["bench", "--image", "sglang-sm120:test", "--models", str(models), "--out", str(tmp_path / "out")]
    argv += ["--env", "MODEL_PATH=/models/target", "--runs", "2", "--modes", "baseline"]
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 143, err
    assert err.strip().splitlines()[-1] == "build.py bench: terminated (SIGTERM): the finished runs are kept", err
    (container,) = client.created.values()
    assert container.stopped and container.removed
