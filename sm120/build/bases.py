"""`build.py base`: the offline profile's CUDA bases, made on a machine that reaches no container registry.

1. debootstrap a minimal Debian root file system (Debian's packages are reachable) and `docker import` it;
2. build docker/base/Dockerfile on it: NVIDIA's CUDA wheels from PyPI laid out as /usr/local/cuda, one
   `runtime` and one `devel` image, named by the offline profile.

Idempotent: every image carries a label with the hash of its inputs; a second run with the same inputs finds
them and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sm120.build import base_facts, buildx, docker_client
from sm120.errors import CheckFailed, UsageError
from sm120.plan import ROOT
from sm120.plan.plan_types import cuda_minor

if TYPE_CHECKING:
    import docker
    from sm120.plan.config import Config, Profile

BASE_DIR = ROOT / "docker" / "base"
INPUTS_LABEL_SUFFIX = "base.inputs"


@dataclass(frozen=True)
class BaseSpec:
    os_image: str
    runtime_image: str
    devel_image: str
    inputs: dict[str, object]
    label: str

    @property
    def digest(self) -> str:
        blob = json.dumps(self.inputs, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()


def _recipe_bytes() -> dict[str, str]:
    """The recipe files themselves are inputs: editing one rebuilds the bases."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(BASE_DIR.iterdir()) if p.is_file()} | {
        "bases.py": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    }


def spec(config: Config, profile: Profile) -> BaseSpec:
    if profile.bases != "local":
        raise UsageError(
            f'profile bases = {profile.bases!r}: only a profile with bases = "local" has bases to make '
            "(try --profile offline)"
        )
    lb = config.local_bases
    inputs: dict[str, object] = {
        "debian_suite": lb.debian_suite,
        "debian_mirror": lb.debian_mirror,
        "cuda": config.cuda.version,
        "runtime_components": lb.runtime_components,
        "devel_components": lb.devel_components,
        "recipe": _recipe_bytes(),
    }
    os_image = f"{config.project.image}-base:{lb.debian_suite}"
    return BaseSpec(
        os_image=os_image,
        runtime_image=profile.runtime_base_image,
        devel_image=profile.base_image,
        inputs=inputs,
        label=f"{config.project.name}.{INPUTS_LABEL_SUFFIX}",
    )


def _has(client: docker.DockerClient, name: str, label: str, digest: str) -> bool:
    import docker.errors  # here, not at the top: build.py's other commands run without the SDK

    try:
        image = client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(label) == digest


def _os_digest(s: BaseSpec) -> str:
    keep = {k: s.inputs[k] for k in ("debian_suite", "debian_mirror")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


def _debootstrap(client: docker.DockerClient, s: BaseSpec, log: callable) -> None:
    tool = shutil.which("debootstrap")
    if tool is None:
        raise UsageError("debootstrap is not installed: run ./dev setup (or apt-get install debootstrap)")
    suite = str(s.inputs["debian_suite"])
    mirror = str(s.inputs["debian_mirror"])
    with tempfile.TemporaryDirectory(prefix="sm120-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        log(f"debootstrap {suite} from {mirror} (minbase)")
        proc = subprocess.run(
            [tool, "--variant=minbase", "--include=ca-certificates", suite, str(root), mirror],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise CheckFailed(f"debootstrap {suite} failed: {last[0]}")
        (root / "etc/apt/sources.list").write_text(
            f"deb {mirror} {suite} main\n"
            f"deb {mirror} {suite}-updates main\n"
            f"deb {mirror.replace('/debian', '/debian-security')} {suite}-security main\n"
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        tarball = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(tarball), "."], check=True)
        log(f"docker import -> {s.os_image}")
        repo, _, tag = s.os_image.partition(":")
        client.api.import_image_from_file(
            str(tarball),
            repository=repo,
            tag=tag or "latest",
            changes=[f"LABEL {s.label}.os={_os_digest(s)}", 'CMD ["/bin/bash"]'],
        )


def make(config: Config, profile: Profile, *, force: bool = False, log: callable = print) -> bool:
    """Make the bases if their inputs changed; return True when something was built."""
    s = spec(config, profile)
    client = docker_client.connect()
    digest = s.digest
    if not force and all(_has(client, name, s.label, digest) for name in (s.runtime_image, s.devel_image)):
        log(f"bases up to date ({s.runtime_image}, {s.devel_image}; inputs {digest[:12]}): nothing to do")
        return False
    if force or not _has(client, s.os_image, f"{s.label}.os", _os_digest(s)):
        _debootstrap(client, s, log)
    else:
        log(f"{s.os_image} up to date")
    cuda = config.cuda.version
    major_minor = cuda_minor(cuda)
    args = {
        "OS_IMAGE": s.os_image,
        "CUDA_VERSION": cuda,
        "CUDA_HOME_DIR": f"/usr/local/cuda-{major_minor}",
        "RUNTIME_COMPONENTS": ",".join(config.local_bases.runtime_components),
        "DEVEL_COMPONENTS": ",".join(config.local_bases.devel_components),
    }
    for target, name in (("runtime", s.runtime_image), ("devel", s.devel_image)):
        log(f"building {name} (target {target})")
        buildx.run(
            buildx.BuildRequest(
                context=BASE_DIR,
                dockerfile=BASE_DIR / "Dockerfile",
                target=target,
                tags=[name],
                build_args=args,
                labels={s.label: digest, f"{config.project.name}.cuda.version": cuda},
            )
        )
    check_facts(config, client, s, log)
    log(f"bases ready: {s.runtime_image}, {s.devel_image}")
    sys.stdout.flush()
    return True


def check_facts(config: Config, client: docker.DockerClient, s: BaseSpec, log: callable) -> None:
    """The release bases' facts (docker/base/release-facts.toml) hold on the offline bases, or the build stops."""
    facts = base_facts.load(config)
    for flavour, name in (("runtime", s.runtime_image), ("devel", s.devel_image)):
        outcomes = base_facts.check(client, name, flavour, facts)
        broken = [o for o in outcomes if o.status == "broken"]
        if broken:
            o = broken[0]
            raise CheckFailed(
                f"{name} breaks the release fact {o.fact.id!r} ({base_facts.FACTS_FILE.name}): found {o.detail}; "
                f"{o.fact.why}"
            )
        skipped = sum(o.status == "not reproduced" for o in outcomes)
        log(f"{name}: {len(outcomes) - skipped} release facts hold, {skipped} not reproducible offline (see the file)")
