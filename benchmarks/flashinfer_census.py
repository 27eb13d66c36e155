#!/usr/bin/env python3
"""Build the FlashInfer JIT modules of the census (benchmarks/flashinfer_census.toml) for sm_120 and measure each
build: wall time, CPU time (children rusage), peak memory of the compiler processes, the sources' count and
per-file compile times (ninja's .ninja_log), and the size of the built .so.

Every module is made by FlashInfer's own generator (the entry's `gen`, called with its `kwargs`) and built by
FlashInfer's own JitSpec.build (its build.ninja, its nvcc flags): no compiler line is written here. The target is
FLASHINFER_CUDA_ARCH_LIST (the census's `flashinfer_cuda_arch_list`, `12.0f`, or --arch), so a machine without an
sm_120 GPU (the H200 lender) compiles for it. The JIT workspace is FLASHINFER_WORKSPACE_BASE (--workspace): a build
stopped by --deadline-s keeps its finished objects there and records the files still compiling (with how long they
had run: lower bounds); a later run with the same workspace resumes it and adds both runs' times up (`resumed`),
but ninja restarts every file that was stopped, so a file longer than one run never finishes that way.

    python3 benchmarks/flashinfer_census.py pack --wheel flashinfer_python-0.7.2-py3-none-any.whl --out FI.tar.xz
    python3 benchmarks/flashinfer_census.py list
    python3 benchmarks/flashinfer_census.py plan --workspace WS       # generate the specs, build nothing
    python3 benchmarks/flashinfer_census.py build --out OUT/census.json --workspace WS [--only fused_moe_120]
        [--skip NAME] [--deadline-s 540] [--jobs N] [--arch 12.0f] [--import light|full]

`pack` writes the subset of FlashInfer's wheel that these builds read (its Python code, headers, CUTLASS/CCCL
includes and the csrc trees of the census's modules: 10 MB as .tar.xz, for the lender's 64 MiB carry limit);
unpack it into a folder on PYTHONPATH beside apache-tvm-ffi. `--import light` (default) imports flashinfer.jit
without running flashinfer/__init__.py, which pulls in FlashInfer's whole Python API and its optional dependencies
(CuTe DSL, cuDNN frontend, ...); the generators need only torch, apache-tvm-ffi, filelock, jinja2, packaging,
requests and nvidia-ml-py. The memory sampler needs psutil (the lender has it) and reuses
benchmarks/kernel_build.py's Sampler. Results: a JSON file, rewritten after every module.
docs/first-start/README.md has the figures and the exact commands.
"""

from __future__ import annotations

import argparse
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
import threading
import time
import types
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
CENSUS = ROOT / "benchmarks" / "flashinfer_census.toml"
STATE = "census_state.json"  # in a module's build dir: the CPU and wall time of earlier, stopped runs
GIB = 1024**3


def load_census(path: Path) -> dict[str, Any]:
    data = tomllib.loads(path.read_text())
    names = [m["name"] for m in data.get("modules", [])]
    if len(names) != len(set(names)):
        raise SystemExit(f"{path}: a module name appears twice")
    return data


# ---------------------------------------------------------------------------------------------------------------
# FlashInfer
# ---------------------------------------------------------------------------------------------------------------


def import_flashinfer(mode: str) -> dict[str, Any]:
    """Import flashinfer.jit; `light` registers the flashinfer package without executing its __init__.py."""
    if mode == "light":
        spec = importlib.util.find_spec("flashinfer")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("flashinfer is not installed (put it on PYTHONPATH)")
        package = types.ModuleType("flashinfer")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__package__ = "flashinfer"
        sys.modules["flashinfer"] = package
    else:
        importlib.import_module("flashinfer")
    jit = importlib.import_module("flashinfer.jit")
    version = importlib.import_module("flashinfer.version")
    env = importlib.import_module("flashinfer.jit.env")
    core = importlib.import_module("flashinfer.jit.core")
    cpp_ext = importlib.import_module("flashinfer.jit.cpp_ext")
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
    gen = getattr(importlib.import_module(module_name), func_name)
    spec = gen(**entry.get("kwargs", {}))
    if spec.name != entry["name"]:
        raise SystemExit(f"{entry['gen']} made JitSpec {spec.name!r}, the census says {entry['name']!r}")
    return spec


def describe_spec(spec: Any) -> dict[str, Any]:
    """The spec's sources and the -gencode targets of the build.ninja FlashInfer writes for it."""
    sources = [Path(s) for s in spec.sources]
    spec.write_ninja()
    ninja = Path(spec.ninja_path).read_text()
    generated = [s for s in sources if s.name.endswith(".generated.cu")]
    return {
        "sources": len(sources),
        "cuda_sources": sum(1 for s in sources if s.suffix == ".cu"),
        "generated_sources": len(generated),
        "generated_by_dir": _count_by_parent(generated),
        "gencode": sorted(set(re.findall(r"-gencode=\S+", ninja))),
        "build_dir": str(spec.build_dir),
    }


def _count_by_parent(paths: list[Path]) -> dict[str, int]:
    """generated/cutlass_instantiations/120/gemm/90/x.cu -> {"gemm/90": n}: which arch's templates were emitted."""
    counts: dict[str, int] = {}
    for path in paths:
        key = f"{path.parent.parent.name}/{path.parent.name}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def ninja_log(build_dir: Path) -> list[dict[str, Any]]:
    """ninja's per-output compile times (the last entry of each output), longest first."""
    log = build_dir / ".ninja_log"
    if not log.exists():
        return []
    entries: dict[str, dict[str, Any]] = {}
    for line in log.read_text().splitlines():
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 4:
            continue
        start, end, output = int(parts[0]), int(parts[1]), parts[3]
        entries[output] = {"output": output, "seconds": round((end - start) / 1000, 1)}
    return sorted(entries.values(), key=lambda e: -e["seconds"])


# ---------------------------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------------------------


def _sampler_class() -> Any:
    """benchmarks/kernel_build.py's Sampler (psutil): per-process peak RSS (VmHWM), per-job peak RSS and source."""
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from kernel_build import Sampler  # type: ignore[import-not-found]

        return Sampler
    except ImportError as exc:  # psutil missing: no memory figures
        print(f"memory sampler off: {exc}", file=sys.stderr)
        return None
    finally:
        sys.path.pop(0)


def memory_summary(sampler: Any) -> dict[str, Any]:
    if sampler is None:
        return {}
    kinds: dict[str, dict[str, Any]] = {}
    top: list[dict[str, Any]] = []
    for info in sampler.procs.values():
        kind = info["kind"]
        if kind is None:
            continue
        k = kinds.setdefault(kind, {"count": 0, "peak_rss_gib": 0.0})
        k["count"] += 1
        k["peak_rss_gib"] = max(k["peak_rss_gib"], round(info["hwm"] / GIB, 2))
        source = sampler.jobs.get(info["job"], {}).get("source") if info["job"] is not None else None
        top.append({"kind": kind, "peak_rss_gib": round(info["hwm"] / GIB, 2), "source": source})
    top.sort(key=lambda p: -p["peak_rss_gib"])
    jobs = sorted(sampler.jobs.values(), key=lambda j: -j["peak_rss"])
    return {
        "peak_total_rss_gib": round(sampler.peak_total / GIB, 1),
        "peak_processes": sampler.peak_procs,
        "kinds": kinds,
        "top_processes": top[:8],
        "top_jobs": [
            {
                "source": j["source"],
                "peak_rss_gib": round(j["peak_rss"] / GIB, 2),
                "wall_s": round(j["last"] - j["first"]),
            }
            for j in jobs[:8]
        ],
    }


def _interrupt_ninja() -> None:
    """SIGINT to the ninja processes below this one (the binary, or a pip `ninja` wrapper script and the binary it
    runs): ninja stops its running jobs, deletes their partial outputs, records the finished ones and exits."""
    parent: dict[int, int] = {}
    is_ninja: dict[int, bool] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(stat.parent.name)
            text = stat.read_text()
            parent[pid] = int(text[text.rindex(")") + 2 :].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
            names = {text[text.index("(") + 1 : text.rindex(")")], *(Path(a.decode()).name for a in argv[:2])}
            is_ninja[pid] = "ninja" in names
    me = os.getpid()
    for pid, ninja in is_ninja.items():
        ancestor = parent.get(pid)
        while ninja and ancestor not in (None, 0, 1, me):
            ancestor = parent.get(ancestor)
        if ninja and ancestor == me:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGINT)


def in_flight(sampler: Any, stopped_at: float) -> list[dict[str, Any]]:
    """The compile jobs still running when the build was stopped, with how long they had run: lower bounds."""
    if sampler is None:
        return []
    jobs = [j for j in sampler.jobs.values() if j["last"] >= stopped_at - 2 * sampler.interval]
    jobs.sort(key=lambda j: j["first"])
    return [{"source": j["source"], "ran_s_at_least": round(j["last"] - j["first"])} for j in jobs]


def build_one(entry: dict[str, Any], deadline: float | None) -> dict[str, Any]:
    """Generate and build one module; stop it at `deadline` (time.monotonic()) and keep what ninja finished."""
    result: dict[str, Any] = {"name": entry["name"], "gen": entry["gen"], "kwargs": entry.get("kwargs", {})}
    started = time.monotonic()
    try:
        spec = make_spec(entry)
    except Exception as exc:
        result.update(status="gen-failed", error=f"{type(exc).__name__}: {exc}"[-2000:])
        return result
    result["generate_s"] = round(time.monotonic() - started, 1)
    result.update(describe_spec(spec))
    build_dir = Path(spec.build_dir)
    state_path = build_dir / STATE
    earlier = json.loads(state_path.read_text()) if state_path.exists() else {"runs": []}
    so = Path(spec.jit_library_path)
    if so.exists() and not earlier["runs"]:
        result["warning"] = "the .so was already built in this workspace: the times below are a no-op ninja run"

    error: list[BaseException] = []

    def target() -> None:
        try:
            spec.build(verbose=False)
        except BaseException as exc:
            error.append(exc)

    sampler_cls = _sampler_class()
    sampler = sampler_cls(os.getpid(), interval=0.5) if sampler_cls is not None else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    if sampler is not None:
        sampler.start()
    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    stopped_at: float | None = None
    while worker.is_alive():
        worker.join(timeout=1.0)
        if worker.is_alive() and deadline is not None and time.monotonic() > deadline and stopped_at is None:
            stopped_at = time.monotonic()
            print(f"{entry['name']}: deadline reached, stopping ninja", file=sys.stderr, flush=True)
            _interrupt_ninja()
    stopped = stopped_at is not None
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if sampler is not None:
        sampler.stop.set()
        sampler.join()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    if stopped:
        status = "stopped"
    elif error:
        status = "failed"
        result["error"] = f"{type(error[0]).__name__}: {error[0]}"[-4000:]
    elif not Path(spec.jit_library_path).exists():
        status = "failed"
        result["error"] = "ninja succeeded but left no .so"
    else:
        status = "built"
    run = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "status": status}
    runs = [*earlier["runs"], run]
    if status == "stopped":
        state_path.write_text(json.dumps({"runs": runs}))
    elif state_path.exists():
        state_path.unlink()

    files = ninja_log(build_dir)
    objects = [f for f in files if f["output"].endswith(".o")]
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
        so_bytes=so.stat().st_size if so.exists() and status == "built" else None,
        so_mib=round(so.stat().st_size / 2**20, 1) if so.exists() and status == "built" else None,
        memory=memory_summary(sampler),
    )
    if stopped_at is not None:
        result["in_flight_at_stop"] = in_flight(sampler, stopped_at)
    return result


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "MAX_JOBS": os.environ.get("MAX_JOBS"),
        "FLASHINFER_NVCC_THREADS": os.environ.get("FLASHINFER_NVCC_THREADS", "1"),
    }
    with contextlib.suppress(OSError, ValueError):
        meminfo = Path("/proc/meminfo").read_text()
        info["mem_total_gib"] = round(int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1)) / 2**20, 1)
    nvcc = shutil.which("nvcc")
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
        info["nvcc_version"] = (re.findall(r"release [\d.]+, V[\d.]+", out) or [out.strip()[-60:]])[0]
    with contextlib.suppress(ImportError):
        import torch

        info["torch"] = torch.__version__
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


# ---------------------------------------------------------------------------------------------------------------
# pack: the part of the wheel the census's builds need
# ---------------------------------------------------------------------------------------------------------------


def _packed(name: str) -> bool:
    """Whether a wheel member goes into the pack: all but experimental code, prebuilt artifacts and the csrc trees
    of modules outside the census (each module's sources are listed by `plan`)."""
    parts = name.split("/")
    if parts[0] != "flashinfer":
        return parts[0].endswith(".dist-info")
    rel = parts[1:]
    if rel[:1] == ["experimental"] or rel[:2] == ["moe_ep", "kernel_src"]:
        return False
    if rel[:2] == ["fused_moe", "backends"]:
        return name.endswith(".py")
    if rel[:2] == ["data", "csrc"]:
        return (
            len(rel) == 3
            or rel[2] == "nv_internal"
            or (rel[2] == "fused_moe" and (len(rel) == 4 or rel[3] == "cutlass_backend"))
        )
    if rel[:2] == ["data", "cutlass"]:
        return rel[2:3] == ["include"] or rel[2:5] == ["tools", "util", "include"]
    return True


def cmd_pack(args: argparse.Namespace) -> int:
    import tarfile
    import zipfile

    count = size = 0
    with zipfile.ZipFile(args.wheel) as wheel, tarfile.open(args.out, "w:xz") as tar:
        for member in wheel.infolist():
            if member.is_dir() or not _packed(member.filename):
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


# ---------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------


def cmd_list(census: dict[str, Any]) -> int:
    print(
        f"census: SGLang {census['census']['sglang']}, FlashInfer {census['census']['flashinfer']}, "
        f"FLASHINFER_CUDA_ARCH_LIST={census['census']['flashinfer_cuda_arch_list']}"
    )
    for m in census["modules"]:
        mark = "measure" if m.get("measure") else "listed"
        print(f"  {m['name']:<26} {mark:<8} {','.join(m['models'])}: {m['what']}")
    for s in census.get("sglang_jit", []):
        print(f"  {s['module']:<52} SGLang JIT (not measured), {','.join(s['models'])}")
    return 0


def _setup_env(census: dict[str, Any], args: argparse.Namespace) -> None:
    """FlashInfer reads these when flashinfer.jit is imported: set them first."""
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = args.arch or census["census"]["flashinfer_cuda_arch_list"]
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(args.workspace.resolve())
    if getattr(args, "jobs", None):
        os.environ["MAX_JOBS"] = str(args.jobs)
    args.workspace.mkdir(parents=True, exist_ok=True)


def cmd_plan(census: dict[str, Any], args: argparse.Namespace) -> int:
    _setup_env(census, args)
    report: dict[str, Any] = {"flashinfer": import_flashinfer(args.import_mode), "modules": []}
    for entry in census["modules"]:
        try:
            report["modules"].append({"name": entry["name"], **describe_spec(make_spec(entry))})
        except Exception as exc:
            report["modules"].append({"name": entry["name"], "error": f"{type(exc).__name__}: {exc}"})
    print(json.dumps(report, indent=2))
    return 0 if all("error" not in m for m in report["modules"]) else 1


def cmd_build(census: dict[str, Any], args: argparse.Namespace) -> int:
    _setup_env(census, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.deadline_s if args.deadline_s else None

    report: dict[str, Any] = {
        "census": str(args.census),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "FLASHINFER_CUDA_ARCH_LIST": os.environ["FLASHINFER_CUDA_ARCH_LIST"],
        "machine": machine(),
        "modules": [],
    }
    report["flashinfer"] = import_flashinfer(args.import_mode)
    entries = [m for m in census["modules"] if m.get("measure")]
    if args.only:
        entries = [m for m in entries if m["name"] in args.only]
    entries = [m for m in entries if m["name"] not in (args.skip or [])]
    for entry in entries:
        if deadline is not None and time.monotonic() > deadline:
            report["modules"].append({"name": entry["name"], "status": "not started (deadline)"})
            continue
        print(f"building {entry['name']} ...", file=sys.stderr, flush=True)
        result = build_one(entry, deadline)
        report["modules"].append(result)
        args.out.write_text(json.dumps(report, indent=2))
        peak = max((p["peak_rss_gib"] for p in result.get("memory", {}).get("top_processes", [])), default=None)
        print(
            f"{result['name']}: {result.get('status')}, {result.get('sources')} sources, "
            f"wall {result.get('wall_s')} s, CPU {result.get('cpu_s')} s, .so {result.get('so_mib')} MiB, "
            f"peak process {peak} GiB",
            file=sys.stderr,
            flush=True,
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
    p = sub.add_parser("plan", help="generate every module's JitSpec (sources, flags) and build nothing")
    p.add_argument("--workspace", type=Path, required=True, help="FLASHINFER_WORKSPACE_BASE")
    p.add_argument("--arch", help="FLASHINFER_CUDA_ARCH_LIST (default: the census's)")
    p.add_argument("--import", dest="import_mode", choices=["light", "full"], default="light")
    b = sub.add_parser("build", help="build and measure the census's modules")
    b.add_argument("--out", type=Path, required=True, help="the JSON results file")
    b.add_argument("--workspace", type=Path, required=True, help="FLASHINFER_WORKSPACE_BASE (kept to resume)")
    b.add_argument("--only", nargs="*", help="module names to build (default: every `measure = true`)")
    b.add_argument("--skip", nargs="*", help="module names to leave out")
    b.add_argument("--arch", help="FLASHINFER_CUDA_ARCH_LIST (default: the census's)")
    b.add_argument("--jobs", type=int, help="MAX_JOBS for ninja (default: ninja's own, cores + 2, as at a first start)")
    b.add_argument("--deadline-s", type=float, help="stop ninja this many seconds after the start, keep what it built")
    b.add_argument("--import", dest="import_mode", choices=["light", "full"], default="light")
    args = ap.parse_args()
    if args.command == "pack":
        return cmd_pack(args)
    census = load_census(args.census)
    if args.command == "list":
        return cmd_list(census)
    if args.command == "plan":
        return cmd_plan(census, args)
    return cmd_build(census, args)


if __name__ == "__main__":
    sys.exit(main())
