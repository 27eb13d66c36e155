"""Reaching the Docker Engine through the docker SDK: one place for every command that drives containers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sm120.errors import CheckFailed, UsageError

if TYPE_CHECKING:
    import docker


def describe(exc: Exception) -> str:
    """An SDK error as one short line (the engine's explanation where it gave one)."""
    text = getattr(exc, "explanation", None) or str(exc)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())[:300]


def connect(error: type[Exception] = UsageError) -> docker.DockerClient:
    """A client whose engine answered a ping; else `error` with one line saying what to do."""
    import docker  # here, not at the top: `bench --endpoint` never needs the SDK

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise error(f"cannot reach the Docker Engine: {describe(exc)} (start it, or set DOCKER_HOST)") from None
    return client


def image(client: docker.DockerClient, reference: str, flag: str = "--image") -> Any:
    """The engine's image `reference`; UsageError (exit 2) when it has none, CheckFailed when it cannot say."""
    import docker

    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound:
        raise UsageError(
            f"{flag} {reference}: no such image on this Docker host; build it (build.py build) or docker pull it first"
        ) from None
    except docker.errors.APIError as exc:
        raise CheckFailed(f"cannot inspect image {reference}: {describe(exc)}") from None
