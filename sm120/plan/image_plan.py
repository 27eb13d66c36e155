"""The plan an image was built from, read from the image itself: its /etc/sglang-sm120/plan.json, which `build.py
build` resolved on the host and staged for the build (sm120/build/build_context.py). verify and bench read what they
expect of an image here and in its labels, never in build.toml, so they judge every track and profile the same way.

The file is copied out of a container that is created and removed, never started (no entrypoint runs), and decoded
strictly into the typed plan (sm120/plan/plan_types.py).
"""

from __future__ import annotations

import io
import tarfile
from typing import Any

from pydantic import TypeAdapter, ValidationError

from sm120.errors import UsageError
from sm120.image.entrypoint.spec import PLAN_JSON_PATH
from sm120.plan.plan_types import Plan

_PLAN = TypeAdapter(Plan)


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
    import docker.errors  # here, not at the top: build.py's other commands run without the SDK

    try:
        container = engine.containers.create(image, entrypoint=["/bin/true"], network_disabled=True)
    except docker.errors.ImageNotFound:
        raise UsageError(f"no image {image} in the Docker Engine (docker images lists what is there)") from None
    except docker.errors.APIError as exc:
        raise UsageError(f"{image}: cannot create a container to read its plan ({exc.explanation or exc})") from None
    try:
        stream, _ = container.get_archive(PLAN_JSON_PATH)
        buf = io.BytesIO(b"".join(stream))
    except docker.errors.NotFound:
        raise UsageError(
            f"{image} has no {PLAN_JSON_PATH}: not an image made by `build.py build`, or by an older one; rebuild it"
        ) from None
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=buf) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        data = tar.extractfile(member).read() if member is not None else b""  # type: ignore[union-attr]
    return decode(data, image)
