"""Derived images in well under a second: `docker load` of a tarball that holds only the one new layer.

A Dockerfile `RUN rm` costs a container start and a layer commit (80 s on this machine's storage driver while
an image build runs), a `COPY` about 20 s. The Docker Engine's `load` takes an image archive whose manifest
names every layer, but reads a layer's file only when the engine does not have that layer already (moby
image/tarexport/load.go), so an archive of the base's configuration with one more layer, and that layer's tar
alone, makes the derived image: the base's layers are shared, nothing is started or committed. The new layer is
what a build would have committed: files added (owner root) and OCI whiteouts (`.wh.NAME`) for files removed.
`config` sets keys of the image's container configuration, what a Dockerfile's USER or LABEL would have changed;
with no base (`base=None`, a Dockerfile's `FROM scratch`) the image is that configuration and the one layer.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import pytest

import docker
from sm120.plan import image_plan


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def layer(add: Mapping[str, tuple[bytes, int]] | None = None, remove: Sequence[str] = ()) -> bytes:
    """One image layer (uncompressed tar): `add` path -> (content, mode), `remove` paths as whiteouts."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, (data, mode) in (add or {}).items():
            _add(tar, path.lstrip("/"), data, mode)
        for path in remove:
            parent, _, name = path.lstrip("/").rpartition("/")
            _add(tar, f"{parent}/.wh.{name}" if parent else f".wh.{name}", b"")
    return out.getvalue()


def derive(
    dc: docker.DockerClient,
    base: str | None,
    tag: str,
    *,
    add: Mapping[str, tuple[bytes, int]] | None = None,
    remove: Sequence[str] = (),
    config: Mapping[str, Any] | None = None,
    why: str = "sm120 meta-test",
) -> str:
    """`tag` = `base` (None: scratch) + one layer (see `layer`), with `config` over the base's container
    configuration (e.g. {"User": "root"}), loaded into the engine; returns `tag`."""
    if base is None:
        now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        attrs = {
            "Architecture": dc.version()["Arch"],
            "Os": "linux",
            "Created": now,
            "Config": {},
            "RootFS": {"Layers": []},
        }
    else:
        attrs = dc.images.get(base).attrs
    new = layer(add, remove)
    diff_ids = [*attrs["RootFS"]["Layers"], "sha256:" + hashlib.sha256(new).hexdigest()]
    image_config = json.dumps(
        {
            "architecture": attrs["Architecture"],
            "os": attrs["Os"],
            "created": attrs["Created"],
            "config": {**(attrs["Config"] or {}), **(config or {})},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created": attrs["Created"], "created_by": why}],
        }
    ).encode()
    config_name = hashlib.sha256(image_config).hexdigest() + ".json"
    layers = [f"base-{i}/layer.tar" for i in range(len(diff_ids) - 1)] + ["new/layer.tar"]  # only the last is here
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": layers}]).encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in ((config_name, image_config), ("manifest.json", manifest), ("new/layer.tar", new)):
            _add(tar, name, data)
    dc.images.load(archive.getvalue())
    return tag


IMAGE = os.environ.get("SM120_IMAGE", "").strip()  # the image the meta-tests derive from
needs_image = pytest.mark.skipif(not IMAGE, reason="set SM120_IMAGE=TAG (an image made by build.py build)")


Files = dict[str, tuple[bytes, int]]


def followed(dc, image: str, add: Files) -> Files:
    """`add` with each file's directory as the image resolves it (`readlink -m` in a throw-away container): a COPY
    follows the image's links (/usr/local/cuda -> cuda-13.0, its lib64 -> targets/x86_64-linux/lib), where a layer's
    own directory of that name would hide the link and all behind it."""
    dirs = sorted({path.rpartition("/")[0] for path in add})
    out = image_plan.output(dc, image, "test", entrypoint=["readlink", "-m", *dirs], network_mode="none", user="root")
    real = dict(zip(dirs, out.decode().split(), strict=True))
    return {f"{real[d]}/{name}": value for path, value in add.items() for d, _, name in [path.rpartition("/")]}
