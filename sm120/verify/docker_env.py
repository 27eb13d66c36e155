"""The Docker side of `verify`: inspect the image, start containers that are always removed, copy files out.

Every container the suite starts carries the label `sglang-sm120.verify=<run id>`; `remove_run(run_id)` removes
what is left of a run with its anonymous volumes (the command calls it after pytest, whatever happened: a failure,
Ctrl-C, a killed pytest), so nothing stays running. Containers run with no network: the checks need none.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
from docker.models.containers import Container

import docker
from sm120.build import docker_client
from sm120.plan import image_plan, labels


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
    id: str
    size: int  # bytes, as `docker images` counts them
    labels: dict[str, str]
    user: str
    entrypoint: list[str]
    env: dict[str, str]
    healthcheck: list[str]  # Healthcheck.Test, e.g. ["CMD", "python3", "-c", "..."]; [] when none
    exposed_ports: list[str]
    volumes: list[str]

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
        id=image.id,
        size=int(attrs.get("Size") or 0),
        labels=dict(config.get("Labels") or {}),
        user=config.get("User") or "",
        entrypoint=list(config.get("Entrypoint") or []),
        env=env,
        healthcheck=list((config.get("Healthcheck") or {}).get("Test") or []),
        exposed_ports=sorted((config.get("ExposedPorts") or {}).keys()),
        volumes=sorted((config.get("Volumes") or {}).keys()),
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
    return engine.containers.run(
        image,
        command=list(command) if command is not None else None,
        entrypoint=list(entrypoint) if entrypoint is not None else None,
        user=user,
        detach=True,
        network_mode="none",
        labels={run_label(): run_id},
        environment=dict(environment or {}),
        name=f"sm120-verify-{run_id}-{name_hint}-{uuid.uuid4().hex[:4]}",
        **extra,
    )


def run_containers(engine: docker.DockerClient, run_id: str | None = None) -> list[dict[str, Any]]:
    """Containers of one run (or of any run), from the list call alone (no per-container inspect to race with)."""
    label = f"{run_label()}={run_id}" if run_id else run_label()
    return engine.api.containers(all=True, filters={"label": label})


def remove_run(engine: docker.DockerClient, run_id: str, *, settle_s: float = 0.0, limit_s: float = 60.0) -> list[str]:
    """Remove every container of a run with its anonymous volumes; returns the names removed (empty when the suite
    cleaned up itself). After an interruption, pass `settle_s` (image_plan.remove_labelled says why)."""
    return image_plan.remove_labelled(engine, f"{run_label()}={run_id}", settle_s=settle_s, limit_s=limit_s)


def copy_out(container: Container, path: str, dest: Path) -> Path:
    """Copy one file out of a container (`docker cp`) into directory `dest`; returns the local path."""
    stream, _stat = container.get_archive(path)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        source = tar.extractfile(member) if member is not None else None
        if member is None or source is None:
            raise FileNotFoundError(f"{path}: not a regular file in the container")
        out = dest / Path(member.name).name
        with source, open(out, "wb") as handle:
            shutil.copyfileobj(source, handle, 1 << 20)
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
