#!/usr/bin/env python3
"""Build the FlashInfer JIT modules of the census (sm120/plan/flashinfer_census.toml) for sm_120 with FlashInfer's
own generators and JitSpec.build, and measure each build: wall and CPU time, the compilers' peak memory
(benchmarks/kernel_build.py's Sampler, with psutil), ninja's per-file times and the size of the .so.

    python3 benchmarks/flashinfer_census.py pack --wheel flashinfer_python-0.7.2-py3-none-any.whl --out FI.tar.xz
    python3 benchmarks/flashinfer_census.py list
    python3 benchmarks/flashinfer_census.py plan --workspace WS       # generate the specs, build nothing
    python3 benchmarks/flashinfer_census.py build --out OUT/census.json --workspace WS [--only fused_moe_120]
        [--skip NAME] [--deadline-s 540] [--jobs N] [--arch 12.0f] [--import light|full]

`pack` keeps the part of FlashInfer's wheel these builds read (for the lender's 64 MiB carry limit). `--import
light` imports flashinfer.jit without running flashinfer/__init__.py (FlashInfer's whole API and its optional
dependencies). A build stopped by --deadline-s keeps its finished objects in the workspace, and a later run with
the same workspace resumes it (ninja restarts the stopped files). docs/first-start/README.md has the figures.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib
import importlib.util
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sm120.errors import say  # noqa: E402
from sm120.plan import tomllib  # noqa: E402 (standard library only: runs where pydantic is absent)
from sm120.plan.prebuilt import CENSUS  # noqa: E402

STATE = "census_state.json"  # in a module's build dir: the CPU and wall time of earlier, stopped runs
GIB = 1024**3


def load_census(path: Path) -> dict[str, Any]:
    data = tomllib.loads(path.read_text())
    names = [m["name"] for m in data.get("modules", [])]
    if len(names) != len(set(names)):
        raise SystemExit(f"{path}: a module name appears twice")
    return data


def import_flashinfer(mode: str) -> dict[str, Any]:
    """Import flashinfer.jit; `light` registers the flashinfer package without executing its __init__.py."""
    if mode == "light":
        spec = importlib.util.find_spec("flashinfer")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("flashinfer is not installed (put it on PYTHONPATH)")
        sys.modules["flashinfer"] = importlib.util.module_from_spec(spec)  # not executed
    else:
        importlib.import_module("flashinfer")
    jit, version, env, core, cpp_ext = (
        importlib.import_module(f"flashinfer.{name}")
        for name in ("jit", "version", "jit.env", "jit.core", "jit.cpp_ext")
    )
    return {
        "import": mode,
        "flashinfer": version.__version__,
        "package": str(Path(jit.__file__).resolve().parent.parent),
        "jit_dir": str(env.FLASHINFER_JIT_DIR),
        "target_archs": sorted(f"{a}.{b}" for a, b in core.current_compilation_context.TARGET_CUDA_ARCHS),
        "cuda_home": cpp_ext.get_cuda_path(),
        "nvcc": str(cpp_ext.get_cuda_version()),
        "aot_providers": [p.distribution for p in env.FLASHINFER_AOT_PROVIDERS],
    }


def make_spec(entry: dict[str, Any]) -> Any:
    module_name, _, func_name = entry["gen"].partition(":")
    spec = getattr(importlib.import_module(module_name), func_name)(**entry.get("kwargs", {}))
    if spec.name != entry["name"]:
        raise SystemExit(f"{entry['gen']} made JitSpec {spec.name!r}, the census says {entry['name']!r}")
    return spec


def describe_spec(spec: Any) -> dict[str, Any]:
    """The spec's sources and the -gencode targets of the build.ninja FlashInfer writes for it."""
    sources = [Path(s) for s in spec.sources]
    spec.write_ninja()
    generated = [s for s in sources if s.name.endswith(".generated.cu")]
    return {
        "sources": len(sources),
        "cuda_sources": sum(1 for s in sources if s.suffix == ".cu"),
        "generated_sources": len(generated),
        # generated/cutlass_instantiations/120/gemm/90/x.cu -> "gemm/90": which arch's templates were emitted
        "generated_by_dir": dict(Counter(f"{s.parent.parent.name}/{s.parent.name}" for s in generated)),
        "gencode": sorted(set(re.findall(r"-gencode=\S+", Path(spec.ninja_path).read_text()))),
        "build_dir": str(spec.build_dir),
    }


def ninja_log(build_dir: Path) -> list[dict[str, Any]]:
    """ninja's per-output compile times (the last entry of each output), longest first."""
    log = build_dir / ".ninja_log"
    entries: dict[str, dict[str, Any]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split("\t")
        if not line.startswith("#") and len(parts) >= 4:
            entries[parts[3]] = {"output": parts[3], "seconds": round((int(parts[1]) - int(parts[0])) / 1000, 1)}
    return sorted(entries.values(), key=lambda e: -e["seconds"])


def _sampler() -> Any:
    """benchmarks/kernel_build.py's Sampler of this process's tree, or None where psutil is missing."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from kernel_build import Sampler  # type: ignore[import-not-found]
    except ImportError as exc:
        print(f"memory sampler off: {exc}", file=sys.stderr)
        return None
    return Sampler(os.getpid(), interval=0.5)


def memory_summary(sampler: Any) -> dict[str, Any]:
    if sampler is None:
        return {}
    top = [
        {
            "kind": p["kind"],
            "peak_rss_gib": round(p["hwm"] / GIB, 2),
            "source": sampler.jobs.get(p["job"], {}).get("source"),
        }
        for p in sampler.procs.values()
        if p["kind"] is not None
    ]
    return {
        "peak_total_rss_gib": round(sampler.peak_total / GIB, 1),
        "peak_processes": sampler.peak_procs,
        "kinds": {
            kind: {"count": k["count"], "peak_rss_gib": round(k["peak_rss_max"] / GIB, 2)}
            for kind, k in sampler.kinds().items()
        },
        "top_processes": sorted(top, key=lambda p: -p["peak_rss_gib"])[:8],
        "top_jobs": [
            {
                "source": j["source"],
                "peak_rss_gib": round(j["peak_rss"] / GIB, 2),
                "wall_s": round(j["last"] - j["first"]),
            }
            for j in sorted(sampler.jobs.values(), key=lambda j: -j["peak_rss"])[:8]
        ],
    }


def _interrupt_ninja() -> None:
    """SIGINT to the ninja processes below this one (the binary, or a pip `ninja` wrapper script and the binary it
    runs): ninja stops its running jobs, deletes their partial outputs, records the finished ones and exits."""
    parent: dict[int, int] = {}
    ninjas = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            parent[int(stat.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")[:2]
            if "ninja" in {text[text.index("(") + 1 : text.rindex(")")], *(Path(a.decode()).name for a in argv)}:
                ninjas.append(int(stat.parent.name))
    for pid in ninjas:
        ancestor = parent.get(pid)
        while ancestor not in (None, 0, 1, os.getpid()):
            ancestor = parent.get(ancestor)
        if ancestor == os.getpid():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGINT)


def build_one(entry: dict[str, Any], deadline: float | None) -> dict[str, Any]:
    """Generate and build one module; stop it at `deadline` (time.monotonic()) and keep what ninja finished."""
    result: dict[str, Any] = {"name": entry["name"], "gen": entry["gen"], "kwargs": entry.get("kwargs", {})}
    started = time.monotonic()
    try:
        spec = make_spec(entry)
    except Exception as exc:
        result.update(status="gen-failed", error=f"{type(exc).__name__}: {exc}"[-2000:])
        return result
    result.update(generate_s=round(time.monotonic() - started, 1), **describe_spec(spec))
    state_path = Path(spec.build_dir) / STATE
    earlier = json.loads(state_path.read_text())["runs"] if state_path.exists() else []
    so = Path(spec.jit_library_path)
    if so.exists() and not earlier:
        result["warning"] = "the .so was already built in this workspace: the times below are a no-op ninja run"

    sampler = _sampler()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    stopped_at: float | None = None
    if sampler is not None:
        sampler.start()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(spec.build, verbose=False)
        while not concurrent.futures.wait([future], timeout=1.0).done:
            if deadline is not None and time.monotonic() > deadline and stopped_at is None:
                stopped_at = time.monotonic()
                say(f"{entry['name']}: deadline reached, stopping ninja")
                _interrupt_ninja()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if sampler is not None:
        sampler.stop.set()
        sampler.join()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    error = future.exception()
    status = "stopped" if stopped_at is not None else "failed" if error or not so.exists() else "built"
    if status == "failed":
        result["error"] = f"{type(error).__name__}: {error}"[-4000:] if error else "ninja succeeded but left no .so"
    runs = [*earlier, {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "status": status}]
    if status == "stopped":
        state_path.write_text(json.dumps({"runs": runs}))
    else:
        state_path.unlink(missing_ok=True)

    files = ninja_log(Path(spec.build_dir))
    objects = [f for f in files if f["output"].endswith(".o")]
    so_bytes = so.stat().st_size if status == "built" else None
    result.update(
        status=status,
        resumed=len(runs) > 1,
        runs=runs,
        wall_s=round(sum(r["wall_s"] for r in runs), 1),
        cpu_s=round(sum(r["cpu_s"] for r in runs), 1),
        cpu_min=round(sum(r["cpu_s"] for r in runs) / 60, 1),
        objects_done=len(objects),
        compile_s_sum=round(sum(f["seconds"] for f in objects), 1),
        slowest_files=files[:12],
        link_s=next((f["seconds"] for f in files if f["output"].endswith(".so")), None),
        so_bytes=so_bytes,
        so_mib=None if so_bytes is None else round(so_bytes / 2**20, 1),
        memory=memory_summary(sampler),
    )
    if stopped_at is not None:  # the compile jobs still running at the stop, with how long they had run: lower bounds
        late = [j for j in sampler.jobs.values() if j["last"] >= stopped_at - 2 * sampler.interval] if sampler else []
        result["in_flight_at_stop"] = [
            {"source": j["source"], "ran_s_at_least": round(j["last"] - j["first"])}
            for j in sorted(late, key=lambda j: j["first"])
        ]
    return result


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "MAX_JOBS": os.environ.get("MAX_JOBS"),
        "FLASHINFER_NVCC_THREADS": os.environ.get("FLASHINFER_NVCC_THREADS", "1"),
        "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, 1),
    }
    if nvcc := shutil.which("nvcc"):
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
        info["nvcc_version"] = (re.findall(r"release [\d.]+, V[\d.]+", out) or [out.strip()[-60:]])[0]
    with contextlib.suppress(ImportError):
        import torch

        info["torch"] = torch.__version__
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


# What `pack` keeps of the wheel: all but experimental code, prebuilt artifacts and the csrc trees of modules
# outside the census (each module's sources are listed by `plan`).
PACKED = re.compile(
    r"""[^/]+\.dist-info(/.*)?
    | flashinfer/(?!(experimental|moe_ep/kernel_src|fused_moe/backends|data/csrc|data/cutlass)(/|$)).*
    | flashinfer/fused_moe/backends/.*\.py
    | flashinfer/data/csrc/([^/]+|nv_internal(/.*)?|fused_moe/([^/]+|cutlass_backend/.*))
    | flashinfer/data/cutlass/(tools/util/)?include(/.*)?""",
    re.VERBOSE,
)


def cmd_pack(args: argparse.Namespace) -> int:
    count = size = 0
    with zipfile.ZipFile(args.wheel) as wheel, tarfile.open(args.out, "w:xz") as tar:
        for member in wheel.infolist():
            if member.is_dir() or not PACKED.fullmatch(member.filename):
                continue
            info = tarfile.TarInfo(member.filename)
            info.size = member.file_size
            info.mtime = int(time.mktime((*member.date_time, 0, 0, -1)))  # stable: ninja sees the same sources
            info.mode = 0o644
            with wheel.open(member) as fh:
                tar.addfile(info, fh)
            count += 1
            size += member.file_size
    print(f"{args.out}: {count} files, {size / 1e6:.0f} MB unpacked, {args.out.stat().st_size / 1e6:.1f} MB")
    return 0


def cmd_list(census: dict[str, Any], args: argparse.Namespace) -> int:
    head = census["census"]
    print(
        f"census: SGLang {head['sglang']}, FlashInfer {head['flashinfer']}, "
        f"FLASHINFER_CUDA_ARCH_LIST={head['flashinfer_cuda_arch_list']}"
    )
    for m in census["modules"]:
        mark = "measure" if m.get("measure") else "listed"
        print(f"  {m['name']:<26} {mark:<8} {','.join(m['models'])}: {m['what']}")
    for s in census.get("sglang_jit", []):
        print(f"  {s['module']:<52} SGLang JIT (not measured), {','.join(s['models'])}")
    return 0


def cmd_plan(census: dict[str, Any], args: argparse.Namespace) -> int:
    report: dict[str, Any] = {"flashinfer": import_flashinfer(args.import_mode), "modules": []}
    for entry in census["modules"]:
        try:
            report["modules"].append({"name": entry["name"], **describe_spec(make_spec(entry))})
        except Exception as exc:
            report["modules"].append({"name": entry["name"], "error": f"{type(exc).__name__}: {exc}"})
    print(json.dumps(report, indent=2))
    return 0 if all("error" not in m for m in report["modules"]) else 1


def cmd_build(census: dict[str, Any], args: argparse.Namespace) -> int:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.deadline_s if args.deadline_s else None
    report: dict[str, Any] = {
        "census": str(args.census),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "FLASHINFER_CUDA_ARCH_LIST": os.environ["FLASHINFER_CUDA_ARCH_LIST"],
        "machine": machine(),
        "modules": [],
        "flashinfer": import_flashinfer(args.import_mode),
    }
    names = set(args.only or [m["name"] for m in census["modules"]]) - set(args.skip or [])
    for entry in [m for m in census["modules"] if m.get("measure") and m["name"] in names]:
        if deadline is not None and time.monotonic() > deadline:
            report["modules"].append({"name": entry["name"], "status": "not started (deadline)"})
            continue
        say(f"building {entry['name']} ...")
        result = build_one(entry, deadline)
        report["modules"].append(result)
        args.out.write_text(json.dumps(report, indent=2))
        peak = max((p["peak_rss_gib"] for p in result.get("memory", {}).get("top_processes", [])), default=None)
        say(
            f"{result['name']}: {result.get('status')}, {result.get('sources')} sources, "
            f"wall {result.get('wall_s')} s, CPU {result.get('cpu_s')} s, .so {result.get('so_mib')} MiB, "
            f"peak process {peak} GiB"
        )
    args.out.write_text(json.dumps(report, indent=2))
    return 0 if all(m.get("status") == "built" for m in report["modules"]) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--census", type=Path, default=CENSUS)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print the census")
    k = sub.add_parser("pack", help="pack the part of FlashInfer's wheel that the builds need, as .tar.xz")
    k.add_argument("--wheel", type=Path, required=True)
    k.add_argument("--out", type=Path, required=True)
    jit = argparse.ArgumentParser(add_help=False)  # the options of plan and build
    jit.add_argument("--workspace", type=Path, required=True, help="FLASHINFER_WORKSPACE_BASE (kept to resume)")
    jit.add_argument("--arch", help="FLASHINFER_CUDA_ARCH_LIST (default: the census's)")
    jit.add_argument("--import", dest="import_mode", choices=["light", "full"], default="light")
    sub.add_parser("plan", parents=[jit], help="generate every module's JitSpec (sources, flags) and build nothing")
    b = sub.add_parser("build", parents=[jit], help="build and measure the census's modules")
    b.add_argument("--out", type=Path, required=True, help="the JSON results file")
    b.add_argument("--only", nargs="*", help="module names to build (default: every `measure = true`)")
    b.add_argument("--skip", nargs="*", help="module names to leave out")
    b.add_argument("--jobs", type=int, help="MAX_JOBS for ninja (default: ninja's own, cores + 2, as at a first start)")
    b.add_argument("--deadline-s", type=float, help="stop ninja this many seconds after the start, keep what it built")
    args = ap.parse_args()
    if args.command == "pack":
        return cmd_pack(args)
    census = load_census(args.census)
    if args.command != "list":  # FlashInfer reads these when flashinfer.jit is imported: set them first
        os.environ["FLASHINFER_CUDA_ARCH_LIST"] = args.arch or census["census"]["flashinfer_cuda_arch_list"]
        os.environ["FLASHINFER_WORKSPACE_BASE"] = str(args.workspace.resolve())
        if getattr(args, "jobs", None):
            os.environ["MAX_JOBS"] = str(args.jobs)
        args.workspace.mkdir(parents=True, exist_ok=True)
    return {"list": cmd_list, "plan": cmd_plan, "build": cmd_build}[args.command](census, args)


if __name__ == "__main__":
    sys.exit(main())
