"""`docker buildx build`, driven from Python: BuildKit's own progress output, and on failure one line naming the
stage (and the patch, when the patch step failed). Through the buildx CLI plugin: the docker SDK's build API drives
the classic builder only (no secrets, no cache mounts).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sm120.errors import CheckFailed, UsageError, stop_on_signals

# Plain progress, on failure: " > [flash-attn 4/6] RUN ...:".
_FAILED = re.compile(r"^(?:ERROR: .*)?\s*> \[(?P<stage>[\w.-]+)(?: (?P<n>\d+)/(?P<m>\d+))?\] (?P<what>.*?):?$")
# The patch step's own error line (sm120/image/patch_engine.py in the build; `build.py patches` on the host).
_PATCH_LINE = re.compile(r"(?:build\.py patches|patch_engine): (?:failed|error): (?P<msg>.*)$")


@dataclass
class BuildRequest:
    context: Path
    dockerfile: Path
    tags: Sequence[str] = ()
    target: str | None = None
    build_args: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    cache_from: Sequence[str] = ()
    cache_to: Sequence[str] = ()
    push: bool = False
    # Push the image under its digest only (no tag moves): `tags` name the repositories; a verified digest is
    # tagged afterwards (docker buildx imagetools create), so a broken build never replaces a good tag.
    push_by_digest: bool = False
    sbom: bool = False
    provenance: bool = False
    metadata_file: Path | None = None
    progress: str = "plain"
    extra_secrets: Mapping[str, Path] = field(default_factory=dict)


def ca_bundle() -> Path | None:
    """The host's CA bundle that pip should trust inside RUN steps (a TLS-intercepting proxy's CA is in it on some
    machines). Passed as a BuildKit secret: used during the build, never stored in a layer."""
    paths = [Path(value) for value in map(os.environ.get, ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")) if value]
    return next((path for path in [*paths, Path("/etc/ssl/certs/ca-certificates.crt")] if path.is_file()), None)


def ensure_buildx() -> list[str]:
    """The command prefix for BuildKit builds, or a UsageError that says how to get buildx."""
    if (docker := shutil.which("docker")) is None:
        raise UsageError("docker is not on PATH: install the Docker CLI (./dev setup does)")
    if subprocess.run([docker, "buildx", "version"], capture_output=True, text=True, check=False).returncode != 0:
        raise UsageError(
            "docker buildx is missing: run ./dev setup (installs the docker-buildx CLI plugin) "
            "or install buildx from your Docker distribution"
        )
    return [docker, "buildx", "build"]


def command(req: BuildRequest) -> list[str]:
    bundle = ca_bundle()
    secrets = {**({"ca_bundle": bundle} if bundle is not None else {}), **req.extra_secrets}
    cmd = [*ensure_buildx(), "--progress", req.progress, "--file", str(req.dockerfile)]
    for flag, values in (
        ("--target", [req.target] if req.target else []),
        ("--tag", () if req.push_by_digest else req.tags),
        ("--build-arg", [f"{k}={v}" for k, v in req.build_args.items()]),
        ("--label", [f"{k}={v}" for k, v in req.labels.items()]),
        ("--cache-from", req.cache_from),
        ("--cache-to", req.cache_to),
        ("--secret", [f"id={sid},src={src}" for sid, src in secrets.items()]),
    ):
        cmd += [word for value in values for word in (flag, value)]
    cmd += [flag for flag, on in (("--sbom=true", req.sbom), ("--provenance=mode=max", req.provenance)) if on]
    if req.metadata_file is not None:
        cmd += ["--metadata-file", str(req.metadata_file)]
    if req.push_by_digest:
        names = ",".join(sorted({repository(tag) for tag in req.tags}))
        cmd += ["--output", f'type=image,"name={names}",push-by-digest=true,name-canonical=true,push=true']
    else:
        cmd += ["--push" if req.push else "--load"]
    return [*cmd, str(req.context)]


def repository(reference: str) -> str:
    """`registry/name` of an image reference, without its tag or digest."""
    name = reference.split("@", 1)[0]
    return name.rpartition(":")[0] if name.rfind(":") > name.rfind("/") else name


def pushed_digest(metadata_file: Path) -> str:
    """The image digest buildx wrote to its metadata file (`containerimage.digest`)."""
    try:
        digest = json.loads(metadata_file.read_text(encoding="utf-8")).get("containerimage.digest", "")
    except (OSError, ValueError) as exc:
        raise CheckFailed(f"cannot read buildx's metadata file {metadata_file}: {exc}") from None
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", str(digest)):
        raise CheckFailed(f"buildx's metadata file {metadata_file} has no image digest (containerimage.digest)")
    return str(digest)


def failure_summary(lines: Iterable[str]) -> str:
    """One line naming the failed stage and step (and patch), from BuildKit's plain output."""
    failed: re.Match[str] | None = None
    patch_msg = ""
    for line in lines:
        failed = _FAILED.match(line) or failed
        if p := _PATCH_LINE.search(line):
            patch_msg = p.group("msg").strip()
    if failed is None:
        return "the build failed before any stage ran (see BuildKit's output above)"
    where = f"stage '{failed['stage']}'" + (f" step {failed['n']}/{failed['m']}" if failed["n"] else "")
    what = failed["what"].strip()
    what = what if len(what) <= 100 else what[:97] + "..."
    return f"{where} failed: {what}" + (f" | {patch_msg}" if patch_msg else "")


STOP_GRACE_S = 15.0  # after Ctrl-C or SIGTERM: how long buildx gets to cancel the build before it is killed


def run(req: BuildRequest, *, echo: bool = True) -> None:
    """Run the build, streaming BuildKit's output; raise CheckFailed with the failed stage on error.

    Ctrl-C (which reaches buildx too: the terminal's foreground group) and SIGTERM (sent to this process alone; it
    raises Terminated, exit 143) cancel the build: buildx is sent SIGINT and is killed if it has not ended within
    STOP_GRACE_S (at once on another Ctrl-C), so no build goes on after build.py has ended."""
    cmd = command(req)
    env = dict(os.environ, DOCKER_BUILDKIT="1", BUILDKIT_PROGRESS=req.progress)
    tail: deque[str] = deque(maxlen=4000)

    with (
        stop_on_signals(),
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env, bufsize=1
        ) as proc,
    ):
        assert proc.stdout is not None
        try:
            _show(proc.stdout, tail, echo)
            code = proc.wait()
        except KeyboardInterrupt:
            _cancel(proc, tail, echo)
            raise
    if code != 0:
        raise CheckFailed(failure_summary(tail))


def _show(lines: Iterable[str], tail: deque[str], echo: bool) -> None:
    for line in lines:
        tail.append(line.rstrip("\n"))
        if echo:
            print(line, end="", flush=True)


def _cancel(proc: subprocess.Popen, tail: deque[str], echo: bool) -> None:
    """buildx cancels the build on SIGINT or SIGTERM (a terminal's Ctrl-C sent it one already; a third one makes it
    exit at once); what it prints meanwhile is still read (a full pipe would hold it up)."""
    proc.send_signal(signal.SIGINT)  # nothing when it has ended

    def drain() -> None:
        with contextlib.suppress(Exception):  # a closed pipe or stdout: nothing more to show
            _show(proc.stdout, tail, echo)  # type: ignore[arg-type]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()
    reader.join(timeout=2)
