"""`build.py sbom --image REF --out FILE`: an SPDX JSON SBOM of the image's packages, not its files
(sm120/build/sbom.py), checked against what an attestation may hold; publish.yml attests it (actions/attest, sbom-path).

Exit 0: written, one line says what it holds; 1: syft failed or the SBOM is over --max-mib; 2: bad input (no such
image, no Docker Engine, an --out that cannot be written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sm120.arguments import positive_float
from sm120.build import docker_client, image_ref, sbom
from sm120.build.buildx import repository
from sm120.errors import CheckFailed, UsageError
from sm120.plan import image_plan


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sbom", help="an SPDX SBOM of an image's packages (syft), small enough to attest")
    p.description = __doc__
    p.add_argument(
        "--image",
        required=True,
        type=image_ref.image_argument,
        metavar="REF",
        help="the image (tag, id or repository@digest)",
    )
    p.add_argument("--out", required=True, type=Path, metavar="FILE", help="where to write the SPDX JSON")
    p.add_argument(
        "--max-mib",
        type=positive_float,
        default=float(sbom.ATTEST_LIMIT_MIB),
        metavar="N",
        help=f"fail when the SBOM is larger (default {sbom.ATTEST_LIMIT_MIB}: actions/attest's limit)",
    )
    p.add_argument(
        "--with-files",
        action="store_true",
        help="syft's defaults instead (every package-owned file, as BuildKit's --sbom records): for comparison",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.out.is_dir():
        raise UsageError(f"--out {args.out}: is a directory; name the file to write")
    if not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: no directory {args.out.parent}")
    try:
        args.out.open("a").close()
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write it ({exc.strerror})") from None
    engine = docker_client.connect()
    image = docker_client.image(engine, args.image)
    version = args.image.split("@", 1)[1] if "@" in args.image else image.id
    print(
        f"sbom: syft {sbom.syft_version()} in a container of {args.image} "
        f"({'with files, syft defaults' if args.with_files else 'packages only'})",
        flush=True,
    )
    text = _scan(engine, args.image, repository(args.image), version, args.with_files)
    summary = sbom.summarize(text)
    args.out.write_text(text)
    print(f"sbom: {summary.line()} -> {args.out}")
    sbom.check_size(summary, args.max_mib)
    return 0


def _scan(engine, image: str, name: str, version: str, with_files: bool) -> str:
    syft = {
        "entrypoint": [f"{sbom.MOUNT}/syft"],
        "command": sbom.arguments(name, version),
        "environment": sbom.environment(with_files),
        "user": "0",
        "network_disabled": True,
    }
    with image_plan.scratch(engine, image, "sbom", **syft) as box:  # labelled: test_sbom_image finds none left
        box.put_archive("/", sbom.binary_tar(sbom.syft_binary(), "syft"))
        box.start()
        status = box.wait()
        out = box.logs(stdout=True, stderr=False).decode(errors="replace")
        if status.get("StatusCode") != 0:
            err = box.logs(stdout=False, stderr=True).decode(errors="replace").strip().splitlines()
            raise CheckFailed(f"syft exited {status.get('StatusCode')} in {image}: {' | '.join(err[-3:])}")
        return out
