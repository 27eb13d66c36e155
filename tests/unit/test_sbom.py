"""`build.py sbom` (sm120/build/sbom.py): syft's settings (packages, not files), what the SBOM holds, the size limit,
bad input. The scan of a real image is T2 (tests/image_meta/test_sbom_image.py)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from sm120.build import sbom
from sm120.errors import CheckFailed
from tests.helpers import docker_or_skip, run_build_py


def spdx(packages: int, files: int = 0, purl: str = "pkg:pypi/x@1") -> str:
    return json.dumps(
        {
            "spdxVersion": "SPDX-2.3",
            "SPDXID": "SPDXRef-DOCUMENT",
            "packages": [
                {"name": f"p{i}", "externalRefs": [{"referenceType": "purl", "referenceLocator": purl}]}
                for i in range(packages)
            ],
            "files": [{"fileName": f"f{i}"} for i in range(files)],
            "relationships": [],
        }
    )


def test_packages_only_turns_off_the_file_listing_and_ownership():
    env = sbom.environment(with_files=False)
    assert env["SYFT_FILE_METADATA_SELECTION"] == "none"
    assert env["SYFT_RELATIONSHIPS_PACKAGE_FILE_OWNERSHIP"] == "false"
    defaults = sbom.environment(with_files=True)
    assert not set(sbom.PACKAGES_ONLY) & set(defaults)  # syft's defaults: what BuildKit's scanner records


def test_syft_scans_the_root_as_an_image_without_its_own_binary_or_the_kernel_file_systems():
    args = sbom.arguments("ghcr.io/o/sglang-sm120", "sha256:" + "a" * 64)
    assert args[:2] == ["scan", "dir:/"]
    assert args[args.index("--override-default-catalogers") + 1] == "image"
    assert args[args.index("--output") + 1] == "spdx-json"
    excluded = [args[i + 1] for i, a in enumerate(args) if a == "--exclude"]
    assert {"./proc/**", "./sys/**", "./dev/**", f".{sbom.MOUNT}/**"} == set(excluded)
    assert args[args.index("--source-version") + 1] == "sha256:" + "a" * 64


def test_the_pinned_syft_binary_is_there_and_runs():
    binary = sbom.syft_binary()
    assert binary.is_file() and os.access(binary, os.X_OK), binary
    with tarfile.open(fileobj=io.BytesIO(sbom.binary_tar(binary, "syft"))) as tar:
        (member,) = tar.getmembers()
    assert member.name == sbom.MOUNT.lstrip("/") + "/syft" and member.mode == 0o755 and member.uid == 0


def test_summary_counts_packages_by_purl_type_and_files():
    text = spdx(3, files=2, purl="pkg:deb/debian/adduser@3.134?arch=all")
    summary = sbom.summarize(text)
    assert (summary.packages, summary.files, summary.by_type) == (3, 2, {"deb": 3})
    assert summary.size == len(text.encode()) and "3 packages (3 deb), 2 files" in summary.line()


@pytest.mark.parametrize("text", ["not json", json.dumps({"bomFormat": "CycloneDX"}), json.dumps([1])])
def test_anything_but_spdx_json_fails(text: str):
    with pytest.raises(CheckFailed):
        sbom.summarize(text)


def test_an_sbom_over_the_attestation_limit_fails_naming_size_and_limit():
    summary = sbom.Summary(size=17 * sbom.MIB, packages=1, files=77_000, relationships=77_000, by_type={"pypi": 1})
    with pytest.raises(CheckFailed, match=r"17\.0 MiB, over the 16 MiB"):
        sbom.check_size(summary, sbom.ATTEST_LIMIT_MIB)
    sbom.check_size(summary, 40)  # BuildKit's own limit would take it


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--max-mib", "0"], "--max-mib"),
        (["--max-mib", "inf"], "--max-mib"),
        (["--out", "/nonexistent-dir/sbom.json"], "no directory"),
    ],
)
def test_bad_options_are_exit_2_in_one_line(args: list[str], says: str, tmp_path: Path):
    base = ["sbom", "--image", "x"]
    if "--out" not in args:
        base += ["--out", str(tmp_path / "sbom.json")]
    out = run_build_py(*base, *args)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert says in line


def test_out_a_directory_is_exit_2(tmp_path: Path):
    out = run_build_py("sbom", "--image", "x", "--out", str(tmp_path))
    assert out.returncode == 2 and "is a directory" in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.docker
def test_no_such_image_is_exit_2(tmp_path: Path):
    docker_or_skip()
    out = run_build_py("sbom", "--image", "sm120-no-such-image:0", "--out", str(tmp_path / "s.json"))
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "--image sm120-no-such-image:0: no such image" in line
