#!/usr/bin/env python3
"""Figures of the offline image build (issue 5): cold build, no-op rebuild, patch-only rebuild (which stages
re-ran), and the sizes of the devel base, the runtime image, and the runtime image built on the devel base.

    .venv/bin/python benchmarks/image_build.py [--cold] [--sglang V] [--out FILE]
    .venv/bin/python benchmarks/image_build.py --sizes [--before] [--out FILE]

--cold removes this project's images and BuildKit's whole build cache first (the figure a fresh machine sees).
--sizes builds nothing: every track's offline image in the engine, its size and the venv's biggest packages; with
--before also the same runtime stage built without the build.toml [[not_shipped]] entries whose `sglang` range
takes the track (one more venv copy, removed after). Writes a JSON report (default .cache/bench/image-build.json
or image-sizes.json).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
BUILD_PY = [sys.executable, str(ROOT / "build.py")]
STEP = re.compile(r"^#\d+ \[(?P<stage>[\w.-]+) (?P<n>\d+)/(?P<m>\d+)\] (?P<what>.*)$")
MIB = 1 << 20
# The size target of every track's offline runtime image (docs/building.md says why): a figure here, not a test.
SIZE_TARGET_MIB = 10_240


def build_py(*args: str) -> str:
    return subprocess.run([*BUILD_PY, *args], check=True, capture_output=True, text=True).stdout


def plan(sglang: str | None) -> dict:
    return json.loads(build_py("plan", "--json", "--profile", "offline", *(["--sglang", sglang] if sglang else [])))


def build(sglang: str, out: Path, name: str) -> tuple[float, list[str]]:
    """Run build.py build (its log: OUT-NAME.log); return the wall time and the stage steps that ran (not CACHED)."""
    started = time.monotonic()
    proc = subprocess.run(
        [*BUILD_PY, "build", "--profile", "offline", "--sglang", sglang], capture_output=True, text=True
    )
    wall = time.monotonic() - started
    log = out.with_name(f"{out.stem}-{name}.log")
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"build failed (log: {log}): {proc.stderr.strip().splitlines()[-1:]}")
    steps: dict[str, str] = {}
    cached: set[str] = set()
    for line in proc.stdout.splitlines():
        key = line.split(" ", 1)[0]
        if m := STEP.match(line):
            steps[key] = f"{m['stage']} {m['n']}/{m['m']} {m['what'][:60]}"
        elif line.endswith(" CACHED"):
            cached.add(key)
    ran = sorted({v for k, v in steps.items() if k not in cached and not v.split(" ")[2].startswith("FROM")})
    if export := re.search(r"exporting layers ([\d.]+)s done", proc.stdout):
        ran.append(f"(exporting layers {export.group(1)} s)")
    return wall, ran


def size(client: docker.DockerClient, tag: str) -> int:
    return client.images.get(tag).attrs["Size"]


def biggest(client: docker.DockerClient, tag: str, python: str, most: int = 12) -> list[tuple[str, int]]:
    """The venv's biggest entries of site-packages (du -sm), as the image's own user sees them."""
    out = client.containers.run(
        tag,
        ["-c", f"cd /opt/venv/lib/python{python}/site-packages && du -sm -- * | sort -rn | head -n {most}"],
        entrypoint=["bash"],
        remove=True,
        network_disabled=True,
    ).decode()
    return [(name, int(mib)) for mib, name in (line.split("\t", 1) for line in out.strip().splitlines())]


def variant(tag: str, track: str, arg: str, value: str, suffix: str) -> str:
    """The image built by the buildx command build.py runs (`--print`) with one build argument and the tag changed;
    returns its tag."""
    cmd = shlex.split(build_py("build", "--profile", "offline", "--sglang", track, "--print"))
    other = f"{tag}-{suffix}"
    cmd = [f"{arg}={value}" if a.startswith(f"{arg}=") else other if a == tag else a for a in cmd]
    subprocess.run(cmd, check=True, capture_output=True)
    return other


def sizes(args: argparse.Namespace) -> int:
    client = docker.from_env()
    report: dict[str, object] = {"date": time.strftime("%Y-%m-%d"), "target_mib": SIZE_TARGET_MIB, "tracks": {}}
    for track in plan(None)["tracks"]:
        p = plan(track)
        tag = p["tags"][0]
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            print(f"{tag}: not in the engine (build it: build.py build --profile offline --sglang {track})")
            continue
        entry: dict[str, object] = {"tag": tag, "mib": size(client, tag) / MIB}
        entry["biggest"] = biggest(client, tag, p["python_version"])
        entry["left_out"] = [{"paths": n["paths"], "reason": n["reason"]} for n in p["not_shipped"]]
        if args.before:
            before = variant(tag, track, "NOT_SHIPPED", "", "before-slim")  # the image before the not_shipped entries
            try:
                entry["before_mib"] = size(client, before) / MIB
                entry["before_biggest"] = biggest(client, before, p["python_version"])
            finally:
                client.images.remove(before)
        report["tracks"][track] = entry  # type: ignore[index]
    args.out.write_text(json.dumps(report, indent=2))
    head = f"MiB (target <= {SIZE_TARGET_MIB:,})"
    print(f"| track | image | {head} | before the not_shipped entries | biggest in site-packages (MiB) |")
    print("|---|---|---|---|---|")
    for track, e in report["tracks"].items():  # type: ignore[union-attr]
        before = f"{e['before_mib']:,.0f}" if "before_mib" in e else "(--before)"
        top = ", ".join(f"{name} {mib:,}" for name, mib in e["biggest"][:8])
        within = "within" if e["mib"] <= SIZE_TARGET_MIB else "OVER"
        print(f"| {track} | {e['tag']} | {e['mib']:,.0f} ({within}) | {before} | {top} |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold", action="store_true", help="remove this project's images and the build cache first")
    ap.add_argument("--sglang", help="SGLang track (default: build.toml's)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--sizes", action="store_true", help="sizes of every track's offline image; builds nothing")
    ap.add_argument("--before", action="store_true", help="with --sizes: also the image without not_shipped")
    args = ap.parse_args()
    args.out = args.out or ROOT / ".cache/bench" / ("image-sizes.json" if args.sizes else "image-build.json")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.sizes:
        return sizes(args)
    p = plan(args.sglang)
    tag, track = p["tags"][0], p["sglang_version"]
    client = docker.from_env()
    report: dict[str, object] = {"tag": tag, "date": time.strftime("%Y-%m-%d"), "cold": args.cold}

    if args.cold:
        for image in client.images.list():
            if any(t.startswith(("sglang-sm120", p["base_image"].split(":")[0])) for t in image.tags):
                client.images.remove(image.id, force=True)
        subprocess.run(["docker", "builder", "prune", "--all", "--force"], check=True, capture_output=True)

    report["first_build_s"], _ = build(track, args.out, "first")
    report["noop_rebuild_s"], report["noop_reran"] = build(track, args.out, "noop")
    # Patch-only rebuild: a new line in an SGLang patch's header changes its bytes (so its layer and the patch
    # stage), not its diff. The patch is restored afterwards.
    victim = ROOT / next(x["path"] for x in p["patches"] if x["component"] == "sglang")
    original = victim.read_bytes()
    try:
        victim.write_bytes(original.replace(b"\n", b"\n(benchmark: a patch-only edit)\n", 1))
        report["patch_rebuild_s"], report["patch_reran"] = build(track, args.out, "patch")
    finally:
        victim.write_bytes(original)
    build(track, args.out, "restore")

    # The runtime stage on the devel base instead of the runtime base: what the runtime base saves.
    started = time.monotonic()
    on_devel = variant(tag, track, "RUNTIME_BASE_IMAGE", p["base_image"], "on-devel")
    report["on_devel_build_s"] = time.monotonic() - started
    s = report["sizes"] = {
        "devel_base": size(client, p["base_image"]),
        "runtime_base": size(client, p["runtime_base_image"]),
        "runtime_image": size(client, tag),
        "runtime_image_on_devel_base": size(client, on_devel),
    }
    report["runtime_over_on_devel"] = s["runtime_image"] / s["runtime_image_on_devel_base"]
    client.images.remove(on_devel)  # only its size was wanted: it holds a second copy of the venv
    args.out.write_text(json.dumps(report, indent=2))
    gb = 1e9
    print(f"| figure | {tag} |\n|---|---|")
    print(f"| {'cold' if args.cold else 'first'} build | {report['first_build_s'] / 60:.1f} min |")
    print(f"| no-op rebuild | {report['noop_rebuild_s']:.0f} s, steps re-run: {len(report['noop_reran'])} |")
    print(f"| patch-only rebuild | {report['patch_rebuild_s']:.0f} s; re-ran: {'; '.join(report['patch_reran'])} |")
    for what in ("devel base", "runtime base", "runtime image"):
        print(f"| {what} | {s[what.replace(' ', '_')] / gb:.2f} GB |")
    print(f"| runtime image built on the devel base | {s['runtime_image_on_devel_base'] / gb:.2f} GB |")
    print(f"| runtime / on-devel | {report['runtime_over_on_devel']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
