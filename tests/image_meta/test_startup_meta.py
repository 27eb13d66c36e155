"""T2.5 meta-tests: the start-up check (sm120/verify/suite/test_startup.py) fails `build.py verify`, naming the cause,
on images derived from the reference track's offline image (0.5.9: the release whose SGLang has both defects' gates;
`./dev test` builds it; SM120_IMAGE when it is that track's) that carry one known defect each:

- cuDNN 9.10 with torch 2.9.1: SGLang 0.5.9's cuDNN gate refuses every multimodal model (Kimi-K2.5). The derived
  image gets cuDNN 9.10.2.21's `libcudnn.so.9` (the shim torch loads) and `libcudnn_graph.so.9` (which answers
  cudnnGetVersion(), what torch.backends.cudnn.version() reports) in place of the image's own: one 4.5 MB layer.
  The other cuDNN libraries (engines, 1 GB) stay as they are: the gate reads the version, nothing runs. The two
  files are fetched from PyPI's nvidia-cudnn-cu12 9.10.2.21 wheel with HTTP range requests (remotezip: the
  wheel's index and those members, 1.4 MB, not its 707 MB), checked against the sha256 in the wheel's own
  RECORD, and cached under ~/.cache/sglang-sm120.
- no `sgl_kernel/flash_ops`: SGLang 0.5.9's vision attention imports sgl_kernel.flash_attn at module level on CUDA,
  so Kimi-K2.5 drops out of the model registry. The derived image removes the file (one layer with its whiteout).
  (0.5.2x loads FA3 lazily, on first use, so there the file's absence changes no start-up.)

Each derived image is the image plus one layer, loaded with `docker load` in well under a second
(tests/image_meta/derive.py): no container is started or committed.

    SM120_IMAGE=sglang-sm120:0.5.9-cu13.0.1-offline pytest -m image tests/image_meta/test_startup_meta.py
"""

from __future__ import annotations

import base64
import hashlib
import time

import pytest
import requests
from packaging.version import Version

from sm120.patches import pypi
from sm120.plan import config as cfg
from sm120.plan import image_plan, labels
from sm120.plan import resolve as planmod
from sm120.verify import docker_env
from tests.helpers import run_build_py
from tests.image_meta.derive import needs_image

pytestmark = [pytest.mark.image, pytest.mark.docker]

CUDNN_OLD = "9.10.2.21"  # what PyPI's torch 2.9.1 brings; SGLang 0.5.9 wants >= 9.15
CUDNN_WHEEL = f"nvidia_cudnn_cu12-{CUDNN_OLD}-py3-none-manylinux_2_27_x86_64.whl"
CUDNN_MEMBERS = ("libcudnn.so.9", "libcudnn_graph.so.9")  # under nvidia/cudnn/lib/ in the wheel
SIMPLE = "https://pypi.org/simple/nvidia-cudnn-cu12/"


def left_by(dc, tag: str) -> list[str]:
    """Containers of any verify run started from `tag` (other runs on this engine are not this test's)."""
    image_id = dc.images.get(tag).id
    return [(c.get("Names") or [c["Id"]])[0] for c in docker_env.run_containers(dc) if c.get("ImageID") == image_id]


@pytest.fixture(scope="module")
def reference_image(dc) -> str:
    """The offline image of the track on torch 2.9.1 (the reference track), built here; skipped when it is not."""
    import docker

    config = cfg.load()
    for version in config.tracks:
        if config.tracks[version].torch.version != "2.9.1":
            continue
        tag = planmod.resolve(config, profile="offline", sglang=version).tags[0]
        try:
            dc.images.get(tag)
        except docker.errors.ImageNotFound:
            pytest.skip(f"{tag} (the reference track, torch 2.9.1) is not built here: ./dev test builds every track")
        return tag
    pytest.skip("build.toml has no track on torch 2.9.1 (SGLang 0.5.9's gates)")


def in_image(dc, image: str, command: str) -> str:
    """stdout of `sh -c command` in a throw-away container of the image (no network, removed)."""
    out = image_plan.output(dc, image, "test", entrypoint=["sh", "-c", command], network_mode="none", user="root")
    return out.decode().strip()


def old_cudnn_libraries() -> dict[str, bytes]:
    """cuDNN 9.10.2.21's shim and graph libraries (file name -> content), from PyPI's wheel by range requests,
    each verified against the wheel's RECORD."""
    from remotezip import RemoteZip

    cache = pypi.cache_home() / "cudnn" / CUDNN_OLD
    if all((cache / name).is_file() for name in CUDNN_MEMBERS):
        return {name: (cache / name).read_bytes() for name in CUDNN_MEMBERS}
    try:
        index = requests.get(SIMPLE, headers={"Accept": "application/vnd.pypi.simple.v1+json"}, timeout=(10, 60))
        url = next(f["url"] for f in index.json()["files"] if f["filename"] == CUDNN_WHEEL)
        with RemoteZip(url) as wheel:
            record = wheel.read(f"nvidia_cudnn_cu12-{CUDNN_OLD}.dist-info/RECORD").decode().splitlines()
            found = {name: wheel.read(f"nvidia/cudnn/lib/{name}") for name in CUDNN_MEMBERS}
    except (requests.RequestException, StopIteration, KeyError, ValueError) as exc:
        pytest.skip(f"cannot fetch cuDNN {CUDNN_OLD}'s libraries ({CUDNN_WHEEL}): {type(exc).__name__}: {exc}")
    cache.mkdir(parents=True, exist_ok=True)
    for name, data in found.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert f"nvidia/cudnn/lib/{name},sha256={digest},{len(data)}" in record, f"{name} differs from the RECORD"
        (cache / name).write_bytes(data)
    return found


def _verify(tag: str, select: str) -> tuple[int, str, str, float]:
    started = time.monotonic()
    proc = run_build_py("verify", "--image", tag, "-k", select)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


@needs_image
@pytest.mark.every_track
def test_cudnn_older_than_9_15_with_torch_2_9_1_fails_verify_naming_the_gate(dc, derived, reference_image):
    expect = labels.parse(dc.images.get(reference_image).labels)
    if Version(expect.torch).release[:3] != (2, 9, 1):
        pytest.skip(f"SGLang's cuDNN gate is for torch 2.9.1 only; {reference_image} has torch {expect.torch}")
    found = in_image(dc, reference_image, "find /opt/venv -name libcudnn.so.9 -path '*nvidia*' | head -1")
    assert found, f"{reference_image} has no libcudnn.so.9 under /opt/venv (torch {expect.torch}: cuDNN from a wheel)"
    lib_dir = found.rsplit("/", 1)[0]
    old = old_cudnn_libraries()
    tag = derived(reference_image, add={f"{lib_dir}/{name}": (data, 0o755) for name, data in old.items()})
    rc, stdout, stderr, took = _verify(tag, "test_sglang_accepts_the_entrypoints_command and kimi and baseline")
    assert rc == 1, (stdout + stderr)[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert "test_startup::test_sglang_accepts_the_entrypoints_command[kimi-k25-nvfp4/" in last, last
    assert "CuDNN 9.10" in stdout and "nvidia-cudnn-cu12==9.16.0.29" in stdout, stdout[-2000:]
    assert "Traceback" not in stderr
    assert not left_by(dc, tag)
    print(f"verify on the cuDNN {CUDNN_OLD} image: {took:.0f} s")


@needs_image
@pytest.mark.every_track
def test_an_image_without_flash_ops_fails_verify_naming_the_importing_module(dc, derived, reference_image):
    found = in_image(dc, reference_image, "find /opt/venv -path '*/sgl_kernel/flash_ops*.so' | head -1")
    # Without it already (a source build of sgl-kernel without FA3), the image itself is the case.
    tag = derived(reference_image, remove=[found]) if found else reference_image
    rc, stdout, stderr, took = _verify(tag, "test_the_registry_registers or test_kernel_libraries_imported")
    assert rc == 1, (stdout + stderr)[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert "test_startup::test_the_registry_registers_every_supported_architecture" in last, last
    assert "test_startup::test_kernel_libraries_imported_at_module_level_load" in last, last
    assert "KimiK25ForConditionalGeneration: sglang.srt.layers.attention.vision line" in stdout, stdout[-3000:]
    assert "sgl_kernel (imported by sglang.srt.layers.attention.vision line" in stdout, stdout[-3000:]
    assert "from sgl_kernel.flash_attn import" in stdout
    assert not left_by(dc, tag)
    print(f"verify on the image without flash_ops: {took:.0f} s")
