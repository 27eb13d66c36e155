"""T2: `build.py sbom` on the image named by SM120_IMAGE: every package (Debian's and the venv's, at the labelled
versions), no file list, small enough for an attestation (sm120/build/sbom.py), and no container left behind.

    SM120_IMAGE=sglang-sm120:0.5.23-cu13.0.1-offline pytest -m image tests/image_meta/test_sbom_image.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from sm120.build import sbom
from sm120.plan import labels
from tests.helpers import run_build_py
from tests.image_meta.derive import IMAGE, needs_image

pytestmark = [pytest.mark.image, pytest.mark.docker]


def purls(doc: dict) -> dict[str, list[str]]:
    """purl type -> the purls of that type."""
    out: dict[str, list[str]] = {}
    for package in doc["packages"]:
        for ref in package.get("externalRefs", []):
            if ref.get("referenceType") == "purl":
                loc = ref["referenceLocator"]
                out.setdefault(loc.split(":", 1)[1].split("/", 1)[0], []).append(loc)
    return out


@needs_image
def test_the_sbom_lists_the_packages_not_the_files(dc, tmp_path: Path):
    out = tmp_path / "sbom.spdx.json"
    proc = run_build_py("sbom", "--image", IMAGE, "--out", str(out))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    print(proc.stdout.strip().splitlines()[-1])
    size = out.stat().st_size
    assert size < sbom.ATTEST_LIMIT_MIB * sbom.MIB
    doc = json.loads(out.read_text())
    assert doc["spdxVersion"].startswith("SPDX-2")
    found = purls(doc)
    python = {p.split("/", 1)[1].split("@")[0]: p.split("@", 1)[1].split("?")[0] for p in found.get("pypi", [])}
    python = {canonicalize_name(k): v for k, v in python.items()}
    expect = labels.parse(dc.images.get(IMAGE).labels)
    for dist, want in [
        ("torch", expect.torch),
        ("sglang", expect.sglang),
        (expect.sgl_kernel_package, expect.sgl_kernel),
    ]:
        assert canonicalize_name(dist) in python, f"{dist} is not in the SBOM ({len(python)} Python packages)"
        assert Version(python[canonicalize_name(dist)]).public == Version(want).public, (dist, python[dist], want)
    assert len(found.get("deb", [])) > 50, "Debian's packages (the dpkg database) are missing"
    # No package's file list (syft's default lists the package-owned files it finds: 10,771 on the offline 0.5.23
    # image): the only files left are each package's evidence (its METADATA, copyright, the dpkg status).
    files = {f["SPDXID"] for f in doc.get("files") or []}
    uses = [r for r in doc["relationships"] if files & {r["spdxElementId"], r["relatedSpdxElement"]}]
    assert all(r["relationshipType"] == "OTHER" and r.get("comment", "").startswith("evident-by") for r in uses), [
        r for r in uses if not r.get("comment", "").startswith("evident-by")
    ][:3]
    assert not dc.containers.list(all=True, filters={"label": f"{labels.namespace()}.sbom"})
