"""The release stages' user and JIT-toolchain steps, walked against the release bases' facts (T0, no Docker).

The Dockerfile's runtime stage runs docker/stages/runtime-user.sh and docker/stages/jit-toolchain.sh. Here both
run against file trees laid out as docker/base/release-facts.toml says NVIDIA's images are: an /etc/passwd in
which uid 1000 is `ubuntu`, and /usr/local/cuda resolving to cuda-13.0 whose `include` and `lib64` are links
into targets/x86_64-linux/. A plain `useradd --uid 1000` or a `cp -a include` copy fails these tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sm120.build import base_facts
from sm120.plan import config as cfg

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "docker" / "stages"
CONFIG = cfg.load(ROOT / "build.toml")
FACTS = {f.id: f for f in base_facts.load(CONFIG)}

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="useradd --prefix needs root and the shadow tools"
)


def _etc(root: Path, with_fact_user: bool) -> None:
    etc = root / "etc"
    etc.mkdir(parents=True)
    passwd = ["root:x:0:0:root:/root:/bin/bash", "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"]
    group = ["root:x:0:", "nogroup:x:65534:"]
    shadow = ["root:*:19000:0:99999:7:::", "nobody:*:19000:0:99999:7:::"]
    gshadow = ["root:*::", "nogroup:*::"]
    (root / "home").mkdir()
    if with_fact_user:
        fact = FACTS["uid-1000-taken"]
        name, uid, gid, home = fact["name"], fact["uid"], fact["gid"], fact["home"]
        passwd.append(f"{name}:x:{uid}:{gid}:Ubuntu:{home}:/bin/bash")
        group.append(f"{name}:x:{gid}:")
        shadow.append(f"{name}:!:19000:0:99999:7:::")
        gshadow.append(f"{name}:!::")
        (root / home.lstrip("/")).mkdir(parents=True)
        (root / home.lstrip("/") / ".bashrc").write_text("# the base's\n")
    for name, lines in (("passwd", passwd), ("group", group), ("shadow", shadow), ("gshadow", gshadow)):
        (etc / name).write_text("\n".join(lines) + "\n")
    (etc / "login.defs").write_text("UID_MIN 1000\nUID_MAX 60000\nGID_MIN 1000\nGID_MAX 60000\nCREATE_HOME yes\n")


def _user_step(root: Path) -> subprocess.CompletedProcess[str]:
    image = CONFIG.image
    return subprocess.run(
        ["bash", str(STAGES / "runtime-user.sh"), image.user, str(image.uid), image.cache_dir, str(root)],
        capture_output=True,
        text=True,
        check=False,
    )


def _account(root: Path, name: str) -> list[str] | None:
    for line in (root / "etc" / "passwd").read_text().splitlines():
        if line.split(":")[0] == name:
            return line.split(":")
    return None


@needs_root
@pytest.mark.parametrize("base_has_uid", [True, False], ids=["release-base-uid-1000-taken", "no-such-account"])
def test_user_step_gives_the_configured_uid_on_either_base(tmp_path: Path, base_has_uid: bool):
    _etc(tmp_path, with_fact_user=base_has_uid)
    result = _user_step(tmp_path)
    assert result.returncode == 0, result.stderr
    image = CONFIG.image
    account = _account(tmp_path, image.user)
    assert account is not None and account[2] == str(image.uid)
    assert account[5] == f"/home/{image.user}"
    uids = [line.split(":")[2] for line in (tmp_path / "etc" / "passwd").read_text().splitlines()]
    assert uids.count(str(image.uid)) == 1, "two accounts share the image's uid"
    assert _account(tmp_path, FACTS["uid-1000-taken"]["name"]) is None
    home = tmp_path / "home" / image.user
    assert home.is_dir()
    assert os.readlink(home / ".cache") == image.cache_dir
    cache = tmp_path / image.cache_dir.lstrip("/")
    assert cache.stat().st_uid == image.uid
    if base_has_uid:
        assert (home / ".bashrc").exists(), "the base's home was not moved"


@needs_root
def test_user_step_is_idempotent(tmp_path: Path):
    _etc(tmp_path, with_fact_user=True)
    assert _user_step(tmp_path).returncode == 0
    again = _user_step(tmp_path)
    assert again.returncode == 0, again.stderr


@needs_root
def test_plain_useradd_fails_on_the_release_base(tmp_path: Path):
    """The old step, for the record: the facts make it fail as it would on nvidia/cuda:*-ubuntu24.04."""
    _etc(tmp_path, with_fact_user=True)
    old = subprocess.run(
        ["useradd", "--prefix", str(tmp_path), "--uid", str(CONFIG.image.uid), "--create-home", CONFIG.image.user],
        capture_output=True,
        text=True,
        check=False,
    )
    assert old.returncode != 0 and "not unique" in old.stderr


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _nvidia_cuda(root: Path, flavour: str) -> Path:
    """/usr/local/cuda-13.0 under root, with the links the facts name for that base."""
    cuda = FACTS["cuda-home"]["to"]
    home = root / cuda.lstrip("/")
    lib_link = FACTS["cuda-lib64-link"]
    lib = home / lib_link["target"]
    lib.mkdir(parents=True)
    _link(root / "usr/local/cuda", cuda.rsplit("/", 1)[1])
    _link(root / lib_link["path"].lstrip("/"), lib_link["target"])
    (lib / "libcudart.so.13").write_text("cudart")
    if flavour == "devel":
        inc_link = FACTS["cuda-include-link"]
        inc = home / inc_link["target"]
        inc.mkdir(parents=True)
        (inc / "cuda.h").write_text("/* cuda.h */")
        (inc / "crt").mkdir()
        (inc / "crt" / "host_config.h").write_text("/* crt */")
        _link(root / inc_link["path"].lstrip("/"), inc_link["target"])
        _link(lib / "libcudart.so", "libcudart.so.13")
        (lib / "stubs").mkdir()
        (lib / "stubs" / "libcuda.so").write_text("stub")
        (home / "bin" / "crt").mkdir(parents=True)
        for tool in ("nvcc", "nvcc.profile", "ptxas", "fatbinary", "nvlink", "cudafe++", "bin2c"):
            (home / "bin" / tool).write_text(tool)
        (home / "nvvm" / "bin").mkdir(parents=True)
        (home / "nvvm" / "bin" / "cicc").write_text("cicc")
    return root / "usr/local/cuda"


def test_toolchain_copy_lands_real_headers_beside_the_runtime_bases_libraries(tmp_path: Path):
    devel = _nvidia_cuda(tmp_path / "devel", "devel")
    runtime = _nvidia_cuda(tmp_path / "runtime", "runtime")
    jit = tmp_path / "jit"
    script = str(STAGES / "jit-toolchain.sh")
    subprocess.run(["bash", script, "collect", str(devel), str(jit)], check=True, capture_output=True, text=True)
    assert (jit / "include" / "cuda.h").is_file()
    merged = subprocess.run(["bash", script, "merge", str(jit), str(runtime)], capture_output=True, text=True)
    assert merged.returncode == 0, merged.stderr
    # The runtime base's links are still links; what the toolchain brought is reachable through them, and
    # where nvcc.profile looks: $(TOP)/targets/x86_64-linux/{include,lib}.
    assert (runtime.resolve() / "lib64").is_symlink()
    target = runtime / FACTS["cuda-include-link"]["target"]
    assert (target / "cuda.h").is_file(), "nvcc reads the headers from targets/x86_64-linux/include"
    assert (runtime / FACTS["cuda-lib64-link"]["target"] / "stubs" / "libcuda.so").is_file()
    assert (runtime / "include" / "cuda.h").is_file()
    assert (runtime / "include" / "crt" / "host_config.h").is_file()
    assert (runtime / "lib64" / "libcudart.so").resolve().name == "libcudart.so.13"
    assert (runtime / "lib64" / "libcudart.so").resolve().is_file()
    assert (runtime / "lib64" / "stubs" / "libcuda.so").is_file()
    assert (runtime / "bin" / "nvcc").is_file() and (runtime / "nvvm" / "bin" / "cicc").is_file()


def test_old_toolchain_copy_fails_on_the_release_layout(tmp_path: Path):
    """The old steps (cp -a nvvm include ...; cp -a JIT/. CUDA/), for the record."""
    devel = _nvidia_cuda(tmp_path / "devel", "devel")
    runtime = _nvidia_cuda(tmp_path / "runtime", "runtime")
    jit = tmp_path / "jit"
    (jit / "lib64").mkdir(parents=True)
    old = (
        f"cd {devel} && cp -a nvvm include {jit}/ && cp -a lib64/stubs lib64/libcudart.so {jit}/lib64/ "
        f"&& cp -a {jit}/. {runtime}/"
    )
    result = subprocess.run(["bash", "-c", old], capture_output=True, text=True)
    header = runtime / "include" / "cuda.h"
    assert result.returncode != 0 or not header.is_file()
