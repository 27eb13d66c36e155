"""`--image`: start the image once per mode with the docker SDK, wait for /health, hand back its endpoint. A named
volume on the JIT cache directory (a restart does not recompile), `ipc_mode="host"` (NCCL needs more than Docker's
64 MB /dev/shm), the port on 127.0.0.1 only; always stopped and removed, its log kept in the output directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sm120.bench import probe
from sm120.build.docker_client import describe
from sm120.errors import CheckFailed, say
from sm120.image.entrypoint import key_file
from sm120.image.entrypoint.errors import redact
from sm120.plan.labels import namespace


def bench_label() -> str:
    """The label on every container `bench --image` starts (its value: the mode or grid point)."""
    return f"{namespace()}.bench"


MODELS_MOUNT = "/models"  # where --models DIR appears in the container (the README's `-v /models:/models`)
KEY_MOUNT = key_file.SECRET_PATH  # where --api-key-file appears (read-only), named by API_KEY_FILE
HEALTH_POLL_S = 2.0
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.IGNORECASE)


@dataclass
class ContainerSpec:
    image: str
    mode: str
    label: str
    env: dict[str, str]
    port: int  # the port SGLang listens on inside the container
    cache_dir: str
    cache_volume: str
    models_dir: Path | None = None
    gpus: str = "all"  # all | none | comma-separated device ids
    health_timeout_s: float = 1800.0
    labels: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] | None = None  # None: the image's own (tests run a stand-in server instead)
    extra_volumes: dict[str, dict[str, str]] = field(default_factory=dict)
    api_key_file: Path | None = None  # mounted read-only at KEY_MOUNT, API_KEY_FILE set: the key is in no env

    def recorded_env(self) -> dict[str, str]:
        return {k: ("***" if SECRET.search(k) else v) for k, v in sorted(self.env.items())}


def device_requests(gpus: str) -> list[Any]:
    import docker.types

    if gpus == "none":
        return []
    which = {"count": -1} if gpus == "all" else {"device_ids": [g.strip() for g in gpus.split(",") if g.strip()]}
    return [docker.types.DeviceRequest(**which, capabilities=[["gpu"]])]


def read_only(*mounts: tuple[Path | None, str]) -> dict[str, dict[str, str]]:
    return {str(host.resolve()): {"bind": bind, "mode": "ro"} for host, bind in mounts if host is not None}


def last_line(container: Any, limit: int, **logs: Any) -> str:
    """What the container printed last (redacted, Python's warnings' echoes left out), for a one-line message."""
    try:
        text = container.logs(**logs).decode("utf-8", "replace")
    except Exception:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(("warnings.warn", "  "))]
    return redact(lines[-1])[:limit] if lines else ""


def save_log(container: Any, path: Path) -> None:
    try:
        data = container.logs(stdout=True, stderr=True)
    except Exception:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(redact(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))


def wait_healthy(container: Any, endpoint: str, spec: ContainerSpec, log_path: Path) -> None:
    """Poll /health until 200, the container exits, or --health-timeout passes; the progress on stderr (a tqdm
    line on a terminal, a line every 30 s elsewhere). A 401/403 is the key refused (exit 2), not "not yet"."""
    start, desc = time.monotonic(), f"{spec.label}: starting"
    key = key_file.read(str(spec.api_key_file)).value if spec.api_key_file else None
    with tqdm(
        desc=desc, file=sys.stderr, bar_format="{desc} {elapsed} {postfix}", disable=not sys.stderr.isatty()
    ) as bar:
        while True:
            elapsed = time.monotonic() - start
            container.reload()
            if container.status in ("exited", "dead"):
                raise CheckFailed(
                    f"{spec.label}: the container exited (status {container.attrs['State'].get('ExitCode')}) after "
                    f"{elapsed:.0f} s before /health answered; its log: {log_path}"
                )
            with contextlib.suppress(probe.ServerUnreachable):  # not yet; a KeyRefused ends the wait
                probe.health(endpoint, key, deadline_s=5)
                say(f"{spec.label}: /health answered after {elapsed:.0f} s")
                return
            if elapsed > spec.health_timeout_s:
                raise CheckFailed(
                    f"{spec.label}: /health did not answer within {spec.health_timeout_s:.0f} s (--health-timeout); "
                    f"its log: {log_path}"
                )
            if not bar.disable:
                bar.set_postfix_str(last_line(container, 100, tail=5))
            elif elapsed // 30 > (elapsed - HEALTH_POLL_S) // 30:
                say(f"{spec.label}: waiting for /health, {elapsed:.0f} s; log: {last_line(container, 100, tail=5)}")
            time.sleep(HEALTH_POLL_S)


@contextlib.contextmanager
def serve(client: Any, spec: ContainerSpec, out_dir: Path) -> Iterator[str]:
    """Start the container, wait for /health, yield its endpoint; always stop and remove it (its anonymous volumes
    too), keep its log. A Ctrl-C during the create finds it by its name."""
    import docker

    log_path = out_dir / f"{spec.label}.log"
    volumes = {
        spec.cache_volume: {"bind": spec.cache_dir, "mode": "rw"},
        **read_only((spec.models_dir, MODELS_MOUNT), (spec.api_key_file, KEY_MOUNT)),
        **spec.extra_volumes,
    }
    name = f"{namespace()}-bench-{re.sub(r'[^a-zA-Z0-9_.-]', '-', spec.label)}-{os.getpid()}"
    container = None
    try:
        try:
            container = client.containers.run(
                spec.image,
                command=[spec.mode],
                entrypoint=spec.entrypoint,
                name=name,
                detach=True,
                environment={**spec.env, **({key_file.VARIABLE: KEY_MOUNT} if spec.api_key_file else {})},
                device_requests=device_requests(spec.gpus),
                ipc_mode="host",
                volumes=volumes,
                ports={f"{spec.port}/tcp": ("127.0.0.1", None)},
                labels={bench_label(): spec.label, **spec.labels},
            )
        except docker.errors.DockerException as exc:
            raise CheckFailed(f"{spec.label}: cannot start {spec.image}: {describe(exc)}") from None
        container.reload()
        if not (bindings := (container.ports or {}).get(f"{spec.port}/tcp") or []):
            raise CheckFailed(
                f"{spec.label}: the container published no port {spec.port} (status {container.status}); "
                f"its log: {log_path}"
            )
        endpoint = f"http://127.0.0.1:{bindings[0]['HostPort']}"
        wait_healthy(container, endpoint, spec, log_path)
        try:
            yield endpoint
        except CheckFailed as exc:
            raise CheckFailed(f"{exc}; its log: {log_path}") from None
    finally:
        try:
            if container is not None:
                save_log(container, log_path)
                with contextlib.suppress(docker.errors.DockerException):
                    container.stop(timeout=30)
        finally:  # also on another Ctrl-C during the graceful stop: then it is removed at once
            with contextlib.suppress(docker.errors.DockerException):
                (container or client.containers.get(name)).remove(force=True, v=True)
