"""The Docker side of `verify`: inspect the image, start containers (no network: the checks need none) labelled
`<namespace>.verify=<run id>`, which `remove_run` removes after pytest whatever happened, copy files in and out."""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
from docker.models.containers import Container

import docker
from sm120.build import docker_client
from sm120.errors import UsageError
from sm120.plan import image_plan, labels


def run_label() -> str:
    """The label on every container the suite starts (its value: the run id)."""
    return f"{labels.namespace()}.verify"


class DockerUnavailable(RuntimeError):
    """The Docker Engine cannot be reached (one line)."""


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
        return next((arg for arg in self.entrypoint if Path(arg).name.startswith("python")), "python3")


def inspect(engine: docker.DockerClient, tag: str) -> ImageInfo:
    """The image's facts; UsageError when the engine has no such image, DockerUnavailable when it cannot say."""
    try:
        image = engine.images.get(tag)
    except docker.errors.ImageNotFound:
        raise UsageError(f"no image {tag!r} in the local Docker Engine (see `docker images`)") from None
    except docker.errors.APIError as exc:
        raise DockerUnavailable(f"cannot inspect {tag!r}: {exc.explanation or exc}") from None
    config = image.attrs.get("Config") or {}
    return ImageInfo(
        id=image.id,
        size=int(image.attrs.get("Size") or 0),
        labels=dict(config.get("Labels") or {}),
        user=config.get("User") or "",
        entrypoint=list(config.get("Entrypoint") or []),
        env=dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item),
        healthcheck=list((config.get("Healthcheck") or {}).get("Test") or []),
        exposed_ports=sorted((config.get("ExposedPorts") or {}).keys()),
        volumes=sorted((config.get("Volumes") or {}).keys()),
    )


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def run_containers(engine: docker.DockerClient, run_id: str | None = None) -> list[dict[str, Any]]:
    """Containers of one run (or of any run), from the list call alone (no per-container inspect to race with)."""
    return engine.api.containers(all=True, filters={"label": f"{run_label()}={run_id}" if run_id else run_label()})


def remove_run(engine: docker.DockerClient, run_id: str, *, settle_s: float = 0.0) -> list[str]:
    """Remove every container of a run with its anonymous volumes; returns the names removed (empty when the suite
    cleaned up itself). After an interruption, pass `settle_s` (image_plan.remove_labelled says why)."""
    return image_plan.remove_labelled(engine, f"{run_label()}={run_id}", settle_s=settle_s)


def copy_out(container: Container, path: str, dest: Path) -> Path:
    """Copy one file out of a container (`docker cp`: the one regular file of its archive) into directory `dest`;
    returns the local path."""
    with tarfile.open(fileobj=io.BytesIO(b"".join(container.get_archive(path)[0]))) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        source = tar.extractfile(member) if member is not None else None
        if member is None or source is None:
            raise FileNotFoundError(f"{path}: not a regular file in the container")
        local = dest / Path(member.name).name
        dest.mkdir(parents=True, exist_ok=True)
        local.write_bytes(source.read())
    return local


def copy_in(container: Container, files: Mapping[str, bytes | str], directory: str, *, uid: int = 0) -> None:
    """Write files (name -> content) into `directory` of a container, owned by `uid`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for folder in sorted({str(p) for name in files for p in Path(name).parents[:-1]}):  # a/b/c.json: a, a/b
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, uid, uid
            tar.addfile(info)
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, uid
            tar.addfile(info, io.BytesIO(data))
    if not container.put_archive(directory, buf.getvalue()):
        raise RuntimeError(f"could not copy files into {container.name}:{directory}")
