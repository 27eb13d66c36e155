"""The plan an image was built from, read from the image itself (its plan.json, copied out of a container that is
created, never started), and `scratch`: every container this project makes of an image for one step, labelled and
removed with its anonymous volumes (the image declares a VOLUME) however the step ends, Ctrl-C and SIGTERM included."""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import TypeAdapter, ValidationError

from sm120.errors import UsageError
from sm120.image.entrypoint.spec import PLAN_JSON_PATH
from sm120.plan import labels
from sm120.plan.plan_types import Plan

_PLAN = TypeAdapter(Plan)
SETTLE_S = 2.0  # after a create call cut short: how long no container of its label may appear before cleanup ends


def decode(text: str | bytes, where: str) -> Plan:
    """A plan.json's text as the typed plan; UsageError naming `where` when it is not one this build.py writes."""
    try:
        return _PLAN.validate_json(text, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise UsageError(
            f"{where}: its plan.json is not one this build.py reads ({key}: {first['msg']}); rebuild the image "
            "with this checkout's build.py build"
        ) from None


def read(engine: Any, image: str) -> Plan:
    """The plan of `image` (a tag or id in the engine): UsageError when it has none or it cannot be read."""
    return decode(plan_json(engine, image), image)


def plan_json(engine: Any, image: str) -> bytes:
    """The plan.json `image` holds, as its bytes: UsageError when it has none or it cannot be read."""
    import docker.errors  # here, not at the top: build.py's other commands run without the SDK

    try:
        with scratch(engine, image, "plan", entrypoint=["/bin/true"], network_disabled=True) as container:
            stream, _ = container.get_archive(PLAN_JSON_PATH)
            buf = io.BytesIO(b"".join(stream))
    except docker.errors.ImageNotFound:
        raise UsageError(f"no image {image} in the Docker Engine (docker images lists what is there)") from None
    except docker.errors.NotFound:
        raise UsageError(
            f"{image} has no {PLAN_JSON_PATH}: not an image made by `build.py build`, or by an older one; rebuild it"
        ) from None
    except docker.errors.APIError as exc:
        raise UsageError(f"{image}: cannot read its plan in a container ({exc.explanation or exc})") from None
    with tarfile.open(fileobj=buf) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        return tar.extractfile(member).read() if member is not None else b""  # type: ignore[union-attr]


@contextlib.contextmanager
def scratch(engine: Any, image: str, role: str, **create: Any) -> Iterator[Any]:
    """A container of `image` for the block (`create`: more `containers.create` arguments), labelled
    `<namespace>.<role>=<a value of its own>` and removed with its anonymous volumes however the block ends; also when
    an interrupt cut the create call short and the engine made the container after all (found by its label)."""
    import docker.errors

    key, value = f"{labels.namespace()}.{role}", uuid.uuid4().hex[:12]
    try:
        container = engine.containers.create(image, labels={key: value}, **create)
    except BaseException as exc:
        if not (isinstance(exc, docker.errors.APIError) and exc.is_client_error()):  # a 4xx: the engine made none
            remove_labelled(engine, f"{key}={value}", settle_s=SETTLE_S)
        raise
    try:
        yield container
    finally:
        remove(container)


def output(engine: Any, image: str, role: str, **create: Any) -> bytes:
    """The stdout of a `scratch` container of `image` run to its end; docker.errors.ContainerError (with its stderr)
    when it exits non-zero, as the SDK's `containers.run` raises."""
    import docker.errors

    with scratch(engine, image, role, **create) as container:
        container.start()
        status = container.wait()["StatusCode"]
        if status != 0:
            err = container.logs(stdout=False, stderr=True)
            raise docker.errors.ContainerError(container, status, create.get("command"), image, err)
        return container.logs(stdout=True, stderr=False)


def remove(container: Any) -> None:
    """Force-remove a container and its anonymous volumes; gone already is fine."""
    with _gone_is_fine():
        container.remove(force=True, v=True)


@contextlib.contextmanager
def _gone_is_fine() -> Iterator[None]:
    """Around a removal: the container gone already, or being removed (409), is fine."""
    import docker.errors

    try:
        yield
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.response is None or exc.response.status_code != 409:
            raise


def remove_labelled(engine: Any, label: str, *, settle_s: float = 0.0, limit_s: float = 60.0) -> list[str]:
    """Remove every container carrying `label` (`key=value`) with its anonymous volumes; returns the names removed.
    A create in flight when a step was interrupted can finish after a first listing: `settle_s` repeats the listing
    until it has been empty that long. It gives up after `limit_s` (a removal never finished): the caller lists what
    is left."""
    removed: list[str] = []
    started = quiet_since = time.monotonic()
    while True:
        found = engine.api.containers(all=True, filters={"label": label})
        for entry in found:
            with _gone_is_fine():
                engine.api.remove_container(entry["Id"], force=True, v=True)
            removed.append((entry.get("Names") or [entry["Id"][:12]])[0].lstrip("/"))
        now = time.monotonic()
        if found:
            quiet_since = now
        if (not found and now - quiet_since >= settle_s) or now - started >= limit_s:
            return sorted(set(removed))
        time.sleep(0.25)
