"""The Docker side of `verify`: inspect the image, start containers that are always removed, copy files out.

Every container the suite starts carries the label `sglang-sm120.verify=<run id>`; `remove_run(run_id)` removes
what is left of a run (the command calls it after pytest, whatever happened: a failure, Ctrl-C, a killed
pytest), so nothing stays running. Containers run with no network: the checks need none.
"""

from __future__ import annotations

import io
import tarfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
from docker.models.containers import Container

import docker
from sm120.build import docker_client
from sm120.plan import labels


def run_label() -> str:
    """The label on every container the suite starts (its value: the run id)."""
    return f"{labels.namespace()}.verify"


class DockerUnavailable(RuntimeError):
    """The Docker Engine cannot be reached (one line)."""


class NoSuchImage(LookupError):
    """The image is not in the local Docker Engine (one line)."""


def client() -> docker.DockerClient:
    return docker_client.connect(DockerUnavailable)


@dataclass(frozen=True)
class ImageInfo:
    tag: str
    id: str
    size: int  # bytes, as `docker images` counts them
    labels: dict[str, str]
    user: str
    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    healthcheck: list[str]  # Healthcheck.Test, e.g. ["CMD", "python3", "-c", "..."]; [] when none
    exposed_ports: list[str]
    volumes: list[str]
    created: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def python(self) -> str:
        """The interpreter the entrypoint runs (the image's Python), else python3 from PATH."""
        for arg in self.entrypoint:
            if Path(arg).name.startswith("python"):
                return arg
        return "python3"


def inspect(engine: docker.DockerClient, tag: str) -> ImageInfo:
    try:
        image = engine.images.get(tag)
    except docker.errors.ImageNotFound:
        raise NoSuchImage(f"no image {tag!r} in the local Docker Engine (see `docker images`)") from None
    except docker.errors.APIError as exc:
        raise DockerUnavailable(f"cannot inspect {tag!r}: {exc.explanation or exc}") from None
    attrs = image.attrs
    config = attrs.get("Config") or {}
    env = dict(item.split("=", 1) for item in (config.get("Env") or []) if "=" in item)
    return ImageInfo(
        tag=tag,
        id=image.id,
        size=int(attrs.get("Size") or 0),
        labels=dict(config.get("Labels") or {}),
        user=config.get("User") or "",
        entrypoint=list(config.get("Entrypoint") or []),
        cmd=list(config.get("Cmd") or []),
        env=env,
        healthcheck=list((config.get("Healthcheck") or {}).get("Test") or []),
        exposed_ports=sorted((config.get("ExposedPorts") or {}).keys()),
        volumes=sorted((config.get("Volumes") or {}).keys()),
        created=attrs.get("Created", ""),
        raw=attrs,
    )


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def start(
    engine: docker.DockerClient,
    image: str,
    run_id: str,
    *,
    command: Sequence[str] | None = None,
    entrypoint: Sequence[str] | None = None,
    environment: Mapping[str, str] | None = None,
    user: str | None = None,
    name_hint: str = "check",
    **extra: Any,
) -> Container:
    """A detached container of `image`, labelled with the run id, without network (`extra`: more
    `containers.run` arguments, e.g. device_requests)."""
    kwargs: dict[str, Any] = dict(extra)
    if entrypoint is not None:
        kwargs["entrypoint"] = list(entrypoint)
    if user is not None:
        kwargs["user"] = user
    return engine.containers.run(
        image,
        command=list(command) if command is not None else None,
        detach=True,
        network_mode="none",
        labels={run_label(): run_id},
        environment=dict(environment or {}),
        name=f"sm120-verify-{run_id}-{name_hint}-{uuid.uuid4().hex[:4]}",
        **kwargs,
    )


def remove(container: Container) -> None:
    """Force-remove a container and its anonymous volumes (the image declares a VOLUME); gone already is fine."""
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.response is None or exc.response.status_code != 409:  # 409: removal already in progress
            raise


def run_containers(engine: docker.DockerClient, run_id: str | None = None) -> list[dict[str, Any]]:
    """Containers of one run (or of any run), from the list call alone (no per-container inspect to race with)."""
    label = f"{run_label()}={run_id}" if run_id else run_label()
    return engine.api.containers(all=True, filters={"label": label})


def remove_run(engine: docker.DockerClient, run_id: str, *, settle_s: float = 0.0, limit_s: float = 60.0) -> list[str]:
    """Remove every container of a run; returns the names removed (empty when the suite cleaned up itself).

    A create request that was in flight when a run was interrupted can finish after a first listing: after an
    interruption, pass `settle_s` and the listing is repeated until it has been empty that long. It gives up after
    `limit_s` (a removal the engine never finishes): the caller lists what is left."""
    removed: list[str] = []
    started = quiet_since = time.monotonic()
    while True:
        found = run_containers(engine, run_id)
        for entry in found:
            try:
                engine.api.remove_container(entry["Id"], force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.response is None or exc.response.status_code != 409:
                    raise
            removed.append((entry.get("Names") or [entry["Id"][:12]])[0].lstrip("/"))
        now = time.monotonic()
        if found:
            quiet_since = now
        if (not found and now - quiet_since >= settle_s) or now - started >= limit_s:
            return sorted(set(removed))
        time.sleep(0.25)


def copy_out(container: Container, path: str, dest: Path) -> Path:
    """Copy one file out of a container (`docker cp`) into directory `dest`; returns the local path."""
    stream, _stat = container.get_archive(path)
    buf = io.BytesIO()
    for chunk in stream:
        buf.write(chunk)
    buf.seek(0)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buf) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        if member is None:
            raise FileNotFoundError(f"{path}: not a regular file in the container")
        source = tar.extractfile(member)
        assert source is not None
        out = dest / Path(member.name).name
        with open(out, "wb") as handle:
            while chunk := source.read(1 << 20):
                handle.write(chunk)
    return out


def copy_in(container: Container, files: Mapping[str, bytes | str], directory: str, *, uid: int = 0) -> None:
    """Write files (name -> content) into `directory` of a container, owned by `uid`."""
    buf = io.BytesIO()
    dirs_done: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in files.items():
            for parent in reversed(Path(name).parents[:-1]):  # a/b/c.json: a, a/b first, owned by uid too
                if str(parent) not in dirs_done:
                    info = tarfile.TarInfo(str(parent))
                    info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, uid, uid
                    tar.addfile(info)
                    dirs_done.add(str(parent))
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, uid
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    if not container.put_archive(directory, buf.getvalue()):
        raise RuntimeError(f"could not copy files into {container.name}:{directory}")
