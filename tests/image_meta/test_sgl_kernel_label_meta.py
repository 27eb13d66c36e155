"""T2: verify's sgl-kernel distribution check reads the label as a release image's label means it.

Upstream's CUDA 13 wheel installs as `0.3.21+cu130`; a label says either the public version (a PyPI pin: any build
of it will do) or, where the plan pins a wheel, that wheel's own version with its local part (only that build will
do). Each case is an image derived from SM120_IMAGE in one `docker load` (tests/image_meta/derive.py): the
sgl-kernel distribution's dist-info renamed to a `+cu130` version (what upstream's wheel installs), and the label
`sgl-kernel.version` set; then `build.py verify -k test_sgl_kernel_is_the_labelled_distribution`.

    SM120_IMAGE=sglang-sm120:0.5.23-cu13.0.1-offline pytest -m image tests/image_meta/test_sgl_kernel_label_meta.py
"""

from __future__ import annotations

import io
import re
import tarfile

import pytest
from packaging.version import Version

from sm120.plan import config as cfg
from sm120.plan import image_plan, labels
from sm120.plan import resolve as planmod
from sm120.plan import resources as res
from tests.helpers import run_build_py
from tests.image_meta.derive import IMAGE, Files, needs_image

pytestmark = [pytest.mark.image, pytest.mark.docker]

CHECK = "test_sgl_kernel_is_the_labelled_distribution"
MACHINE = res.Resources(cpus=2, memory_bytes=24 * 1024**3, source="test")


def dist_info(dc, image: str, package: str, version: str, python: str) -> tuple[str, dict[str, bytes]]:
    """The dist-info directory of `package` `version` in the image and its files (name -> bytes)."""
    site = f"/opt/venv/lib/python{python}/site-packages"
    path = f"{site}/{package.replace('-', '_')}-{version}.dist-info"
    with image_plan.scratch(dc, image, "test", entrypoint=["true"], network_disabled=True) as box:
        stream, _ = box.get_archive(path)
        data = b"".join(stream)
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name.split("/", 1)[1]] = tar.extractfile(member).read()
    assert "METADATA" in files, f"{path} has no METADATA"
    return path, files


def renamed(path: str, files: dict[str, bytes], version: str, new: str) -> tuple[Files, list[str]]:
    """The layer that renames the dist-info to `new` (what installing upstream's wheel of that version leaves)."""
    old_dir = path.rsplit("/", 1)[1]
    new_dir = old_dir.replace(f"-{version}.dist-info", f"-{new}.dist-info")
    add: Files = {}
    for name, data in files.items():
        if name == "METADATA":
            data = re.sub(rb"(?m)^Version: .*$", f"Version: {new}".encode(), data, count=1)
        elif name == "RECORD":
            data = data.replace(old_dir.encode(), new_dir.encode())
        add[f"{path.rsplit('/', 1)[0]}/{new_dir}/{name}"] = (data, 0o644)
    return add, [path]


def release_label(track: str) -> str:
    """The sgl-kernel.version label the release profile's plan writes for this track."""
    plan = planmod.resolve(cfg.load(), profile="release", sglang=track, machine=MACHINE)
    return plan.labels[f"{labels.namespace()}.sgl-kernel.version"]


# (case, passes): the label the derived image carries, with upstream's `+cu130` build of the version installed.
CASES = {
    # the release plan's own label for the image's track (0.5.9: the pinned wheel's 0.3.21+cu130; 0.5.23: 0.4.10)
    "release-label": True,
    # a public label (a PyPI pin) takes upstream's +cu130 build of that version
    "public-label": True,
    # a label that pins another build (local part) does not
    "other-local-part": False,
}


@needs_image
@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_reads_the_sgl_kernel_label_as_the_release_means_it(case: str, dc, derived):
    expect = labels.parse(dc.images.get(IMAGE).labels)
    public = str(Version(expect.sgl_kernel).public)
    path, files = dist_info(dc, IMAGE, expect.sgl_kernel_package, expect.sgl_kernel, expect.python)
    add, remove = renamed(path, files, expect.sgl_kernel, f"{public}+cu130")
    label = {"release-label": release_label(expect.sglang), "public-label": public}.get(case, f"{public}+cu129")
    image_labels = dict(dc.images.get(IMAGE).labels)
    image_labels[f"{labels.namespace()}.sgl-kernel.version"] = label
    tag = derived(IMAGE, add=add, remove=remove, config={"Labels": image_labels})
    proc = run_build_py("verify", "--image", tag, "-k", CHECK)
    output = (proc.stdout + proc.stderr)[-2500:]
    if CASES[case]:
        assert proc.returncode == 0, f"label {label}, {expect.sgl_kernel_package} {public}+cu130 installed:\n{output}"
        assert re.search(r"\b1 passed\b", proc.stdout), output
    else:
        assert proc.returncode == 1, output
        last = proc.stderr.strip().splitlines()[-1]
        assert CHECK in last, last
        assert f"{public}+cu130 in the image, the label says {label}" in proc.stdout + proc.stderr, output
