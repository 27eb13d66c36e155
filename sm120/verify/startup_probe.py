"""SGLang's real start-up path on an sm_120 persona, run INSIDE the image by its Python, as its user, without a GPU
(the T2.5 check, sm120/verify/suite/test_startup.py; docs/verification.md). Standard library only, plus the image's
torch, SGLang and entrypoint package. `python startup_probe.py JOB.json` prints one `SM120-JSON {...}` line.

Before SGLang is imported the driver stub is linked as WORKDIR/lib/libcuda.so.1 (LD_LIBRARY_PATH is read at
start: the process re-executes itself once) and a stand-in nvidia-smi goes first on PATH; torch.cuda's device
queries answer from the persona, and every call that would initialise CUDA, allocate or launch raises
PersonaBoundary: a BaseException, so no `except Exception` in SGLang swallows it (and it is recorded anyway).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fnmatch
import importlib.util
import ipaddress
import json
import logging.handlers
import os
import re
import subprocess
import sys
import traceback
import types
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

MARK = "SM120-JSON "
READY = "SM120_PERSONA_READY"
STUBS = ("/usr/local/cuda/lib64/stubs/libcuda.so", "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# torch.cuda entry points that would initialise CUDA, allocate device memory or launch work.
GUARDED = (
    "_lazy_init",
    "init",
    "set_device",
    "synchronize",
    "current_stream",
    "default_stream",
    "set_stream",
    "empty_cache",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "reset_peak_memory_stats",
    "get_rng_state",
    "set_rng_state",
    "ipc_collect",
    "can_device_access_peer",
)
GUARDED_CLASSES = ("Stream", "Event", "CUDAGraph")

# Top-level packages of kernel libraries (what `kernels` reports when SGLang imported them).
KERNEL_PACKAGES = (
    "sgl_kernel",
    "flashinfer",
    "flash_attn",
    "flash_attn_2_cuda",
    "deep_gemm",
    "triton",
    "tvm_ffi",
    "cutlass",
    "cuda",
    "flash_mla",
    "sglang.jit_kernel",
)


class PersonaBoundary(BaseException):
    """SGLang reached a call the persona must not answer (it would need a real GPU)."""


BOUNDARIES: list[dict[str, str]] = []
ASKED: collections.Counter[str] = collections.Counter()


def _in_sglang(path: str) -> bool:
    return "/sglang/" in path and "startup_probe" not in path


def _short(path: str) -> str:
    return path.rpartition("site-packages/")[2]


def _at(frame: traceback.FrameSummary) -> str:
    return f"{_short(frame.filename)}:{frame.lineno} ({frame.name})"


def _oneline(text: object, limit: int) -> str:
    return " ".join(ANSI.sub("", str(text)).split())[:limit]


def boundary(call: str) -> PersonaBoundary:
    """The exception for a guarded call, recorded with the first SGLang frame outward and the immediate caller."""
    stack = traceback.extract_stack(sys._getframe(2))[::-1]
    sglang = next((_at(f) for f in stack if _in_sglang(f.filename)), "no SGLang frame")
    caller = _at(stack[0]) if stack else "?"
    BOUNDARIES.append({"call": call, "sglang_frame": sglang, "caller": caller})
    return PersonaBoundary(
        f"{call} would need a real GPU; reached from {sglang}" + (f" via {caller}" if caller != sglang else "")
    )


# Staging: the driver stub and nvidia-smi, then re-execute with them on the search paths.

NVIDIA_SMI = r"""#!{python}
# Stand-in nvidia-smi of the sm_120 persona (sm120/verify/startup_probe.py): answers from the persona only.
import json, sys
args = sys.argv[1:]
persona = json.load(open({persona!r}))
with open({log!r}, "a") as log:
    log.write(json.dumps(args) + "\n")
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
fields = {{
    "memory.total": str(persona["total_memory"] >> 20) + ("" if "nounits" in fmt else " MiB"),
    "name": persona["name"],
    "compute_cap": "%d.%d" % tuple(persona["capability"]),
}}
if query is None or "csv" not in fmt or any(q.strip() not in fields for q in query.split(",")):
    sys.stderr.write("sm_120 persona: no answer for nvidia-smi %s\n" % " ".join(args))
    sys.exit(9)
for _ in range(persona["devices"]):
    print(", ".join(fields[q.strip()] for q in query.split(",")))
"""


# The driver stub's entry points do nothing (they are for linking); the persona's libcuda.so.1 is the stub's
# entry points plus the two answers a library asks the driver for before any device work: cuInit succeeds and
# cuDriverGetVersion reports the persona's driver (CUTLASS DSL, imported by SGLang >= 0.5.16, picks its CUDA
# toolkit flavour from it at import). Without a compiler in the image, the stub is linked as it is.
PERSONA_DRIVER_C = """
int cuInit(unsigned int flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *version) { if (!version) return 1; *version = %d; return 0; }
"""


def stage(job_file: Path, job: dict[str, Any]) -> None:
    work = Path(job["workdir"])
    for sub in ("bin", "lib"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    if (stub := next((s for s in STUBS if Path(s).is_file()), None)) is None:
        emit({"error": f"no CUDA driver stub in the image (looked at {', '.join(STUBS)})"})
        sys.exit(0)
    link = work / "lib" / "libcuda.so.1"
    link.unlink(missing_ok=True)  # not written through a link left by an earlier run
    try:
        symbols = subprocess.run(["nm", "-D", "--defined-only", stub], capture_output=True, text=True, check=True)
        names = {w for w in symbols.stdout.split() if w.startswith("cu") and w.isidentifier()}
        source = work / "lib" / "libcuda-persona.c"
        stubs = "".join(f"void {n}(void) {{}}\n" for n in sorted(names - {"cuInit", "cuDriverGetVersion"}))
        source.write_text(stubs + PERSONA_DRIVER_C % job["persona"]["driver_cuda_version"])
        compile_c = ["g++", "-x", "c", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(link), str(source)]
        subprocess.run(compile_c, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        link.unlink(missing_ok=True)
        link.symlink_to(stub)
    persona_file = work / "persona.json"
    persona_file.write_text(json.dumps(job["persona"]))
    smi = work / "bin" / "nvidia-smi"
    smi.write_text(NVIDIA_SMI.format(python=sys.executable, persona=str(persona_file), log=str(work / "smi.log")))
    smi.chmod(0o755)
    env = dict(os.environ)
    env.pop("SGLANG_DISABLE_CUDNN_CHECK", None)  # the cuDNN gate runs for real
    env["PATH"] = f"{work / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(work / "lib"), env.get("LD_LIBRARY_PATH", "")) if p)
    env.update(job.get("env", {}))  # the launch command's environment (the runtime rules), from the start
    env[READY] = "1"
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), str(job_file)], env)


# The persona in torch.cuda


class DeviceProperties:
    """What torch.cuda.get_device_properties() returns under the persona: its values, nothing more."""

    def __init__(self, persona: dict[str, Any]) -> None:
        self.name = persona["name"]
        self.major, self.minor = persona["capability"]
        self.total_memory = persona["total_memory"]
        self.multi_processor_count = persona["multi_processor_count"]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise boundary(f"torch.cuda.get_device_properties().{attr} (the persona has no value for it)")

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory >> 20}MB, multi_processor_count={self.multi_processor_count})"
        )


def install(persona: dict[str, Any]) -> None:
    import torch

    cuda = torch.cuda
    props = DeviceProperties(persona)

    def index(device: Any) -> None:
        """A device the persona does not have is refused (as torch refuses it), not counted."""
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {device}")
        elif device is not None and not 0 <= int(device) < persona["devices"]:
            raise AssertionError("Invalid device id")

    answers = {
        "is_available": True,
        "device_count": persona["devices"],
        "current_device": 0,
        "get_device_name": props.name,
        "get_device_capability": (props.major, props.minor),
        "get_device_properties": props,
        "mem_get_info": (persona["free_memory"], persona["total_memory"]),
    }
    for name, value in answers.items():

        def answer(device: Any = None, _name: str = name, _value: Any = value) -> Any:
            index(device)
            ASKED[_name] += 1
            return _value

        answer.__name__ = answer.__qualname__ = name
        setattr(cuda, name, answer)

    def guard(call: str) -> Any:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            raise boundary(call)

        return guarded

    for name in GUARDED:
        if hasattr(cuda, name):
            setattr(cuda, name, guard(f"torch.cuda.{name}"))
    for name in GUARDED_CLASSES:
        if isinstance(klass := getattr(cuda, name, None), type):
            klass.__new__ = staticmethod(guard(f"torch.cuda.{name}()"))  # type: ignore[method-assign,assignment]


# What SGLang did


def failure(exc: BaseException) -> dict[str, Any]:
    """An exception as data: type, one-line message, the innermost SGLang frame, and for an import failure the
    innermost SGLang module whose top-level code raised, with its line (the import statement)."""
    sglang = [f for f in traceback.extract_tb(exc.__traceback__) if _in_sglang(f.filename)]
    out: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": _oneline(exc, 1500),
        "sglang_frame": _at(sglang[-1]) if sglang else None,
        "missing": exc.name if isinstance(exc, ImportError) else None,
    }
    if (innermost := next((f for f in reversed(sglang) if f.name == "<module>"), None)) is not None:
        out["module"] = _short(innermost.filename).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        out["line"] = innermost.lineno
        out["statement"] = (innermost.line or "").strip()
    return out


def platform_flags() -> dict[str, Any]:
    """SGLang's own view of the device under the persona (whichever of these helpers the release has)."""
    out: dict[str, Any] = {}
    try:
        from sglang.srt import utils
    except BaseException as exc:  # reported, not hidden
        return {"error": failure(exc)}
    for name in ("is_cuda", "is_sm120_supported", "is_blackwell_supported", "is_sm100_supported", "is_sm90_supported"):
        if callable(fn := getattr(utils, name, None)):
            try:
                out[name] = bool(fn())
            except BaseException as exc:
                out[name] = f"raised {type(exc).__name__}: {exc}"
    return out


def task_registry(job: dict[str, Any]) -> dict[str, Any]:
    handler = logging.handlers.BufferingHandler(1 << 30)  # the registry's warnings (it logs what it drops)
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    out: dict[str, Any] = {"platform": platform_flags(), "dropped": {}, "modules": {}}
    try:
        from sglang.srt.models.registry import ModelRegistry

        out["archs"] = sorted(ModelRegistry.get_supported_archs())
    except BaseException as exc:
        out["error"] = failure(exc)
    ignored = re.compile(r"Ignore import error when loading (sglang\.srt\.models\.[\w.]+): (.*)")
    dropped = dict(m.groups() for r in handler.buffer if (m := ignored.search(_oneline(r.getMessage(), 600))))
    for module in sorted(dropped):  # import again, apart, for the traceback the registry's warning leaves out
        try:
            importlib.import_module(module)
            out["dropped"][module] = {"message": dropped[module], "reimport": "succeeded"}
        except BaseException as exc:
            out["dropped"][module] = failure(exc)
    # What the image's own entrypoint reads from SGLang's files (its code, not a copy of its rules).
    sys.path.insert(0, job["entrypoint_root"])
    from sm120.image.entrypoint import models as entrypoint_models
    from sm120.image.entrypoint import sglang_source

    installed = sglang_source.locate()
    out["entry_classes"] = {}  # module -> the classes its EntryClass names (from the source: it did not import)
    for module in dropped if installed else ():
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin and (names := installed.entry_classes(Path(spec.origin))):
            out["entry_classes"][module] = names
    out["eagle3_in_source"] = installed.registered_like(entrypoint_models.EAGLE3_MARK) if installed else []
    for module in job.get("modules", []):  # start-up modules beyond the models (item: kernel libraries)
        try:
            importlib.import_module(module)
            out["modules"][module] = None
        except ModuleNotFoundError as exc:
            out["modules"][module] = None if exc.name == module else failure(exc)
        except BaseException as exc:
            out["modules"][module] = failure(exc)
    loaded = {name: module for name in KERNEL_PACKAGES if (module := sys.modules.get(name)) is not None}
    out["kernels"] = {
        n: str(getattr(m, "__version__", "") or getattr(m, "__file__", "") or "") for n, m in loaded.items()
    }
    out["warnings"] = [f"{r.name}: {_oneline(r.getMessage(), 600)}" for r in handler.buffer][-50:]
    logging.getLogger().removeHandler(handler)
    return out


def _json_tree(value: Any) -> bool:
    """A value JSON holds as it is: scalars, and lists and string-keyed dicts of them (nested records)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_tree(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_json_tree(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def settings(server_args: Any) -> dict[str, Any]:
    """What SGLang decided, each setting JSON can hold: 0.5.2x serialise their resolution pass (msgspec Structs)
    themselves (`resolved_dict`, as /server_info); 0.5.9's ServerArgs is a dataclass its post-init decided; else {}."""
    values = {}
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()
        values = server_args.resolved_dict()
    elif dataclasses.is_dataclass(server_args):
        for field in dataclasses.fields(server_args):
            with contextlib.suppress(BaseException):  # a field that cannot be resolved is left out
                values[field.name] = getattr(server_args, field.name)
    return {k: v for k, v in values.items() if _json_tree(v)}


def task_server_args(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "platform": platform_flags(), "cases": {}}
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except BaseException as exc:
        out["cudnn"] = f"raised {type(exc).__name__}: {exc}"
    from sglang.srt.server_args import prepare_server_args

    for case in job["cases"]:
        os.environ.update(case["env"])
        before = len(BOUNDARIES)
        rec: dict[str, Any] = {}
        try:
            server_args = prepare_server_args(case["argv"])
            rec["settings"] = settings(server_args)
        except BaseException as exc:  # SGLang's own refusal is the finding
            rec["error"] = failure(exc)
        if "settings" in rec:
            # What the server does with the settings before it starts its scheduler processes, in its order
            # (entrypoints/engine.py _launch_subprocesses): the environment and version checks, then
            # check_server_args() (the cuDNN gate of 0.5.9 is there).
            try:
                engine = importlib.import_module("sglang.srt.entrypoints.engine")
                if (set_envs := getattr(engine, "_set_envs_and_config", None)) is not None:
                    set_envs(server_args)
                if (check := getattr(server_args, "check_server_args", None)) is not None:
                    check()
            except BaseException as exc:  # refused after deciding: the decisions are still reported
                rec["error"] = failure(exc)
            rec["runners"] = runners(server_args)
            if draft := rec["settings"].get("speculative_draft_model_path"):
                rec["runners"]["draft_model"] = draft_model(server_args, draft)
        rec["boundaries"] = BOUNDARIES[before:]
        out["cases"][case["id"]] = rec
    try:  # SGLang's DeepGEMM decision (module-level, from SGLANG_ENABLE_JIT_DEEPGEMM and the device)
        configurer = vars(importlib.import_module("sglang.srt.layers.deep_gemm_wrapper.configurer"))
        out["deep_gemm"] = {k: v for k, v in configurer.items() if k.isupper() and isinstance(v, (bool, int, str))}
    except BaseException as exc:
        out["deep_gemm"] = {"error": failure(exc)}
    return out


def runners(server_args: Any) -> dict[str, Any]:
    """The MoE / FP8 / FP4 GEMM runners as the scheduler resolves them at start (Scheduler.init_moe_gemm_config,
    SGLang's own code, on the model config SGLang builds from the server args)."""
    try:
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.managers.scheduler import Scheduler

        module = importlib.import_module("sglang.srt.server_args")
        setter = getattr(module, "set_global_server_args_for_scheduler", None)
        if (setter := setter or getattr(module, "set_global_server_args", None)) is not None:
            setter(server_args)
        model_config = ModelConfig.from_server_args(server_args)
        Scheduler.init_moe_gemm_config(types.SimpleNamespace(server_args=server_args, model_config=model_config))
    except BaseException as exc:
        return {"error": failure(exc)}
    out: dict[str, Any] = {"quantization": getattr(model_config, "quantization", None)}
    try:  # the model loader's first step (model_loader/loader.py): JSON and the device's capability, no weights
        from sglang.srt.configs.load_config import LoadConfig
        from sglang.srt.model_loader.loader import _get_quantization_config

        quant_config = _get_quantization_config(model_config, LoadConfig())
        out["quant_config"] = type(quant_config).__name__ if quant_config is not None else None
    except BaseException as exc:
        out["load_error"] = failure(exc)
    for key, module, getter in (
        ("moe_runner", "sglang.srt.layers.moe.utils", "get_moe_runner_backend"),
        ("fp4_gemm_runner", "sglang.srt.layers.quantization.fp4_utils", "get_fp4_gemm_runner_backend"),
        ("fp8_gemm_runner", "sglang.srt.layers.quantization.fp8_utils", "get_fp8_gemm_runner_backend"),
    ):
        try:
            value = getattr(importlib.import_module(module), getter)()
            out[key] = getattr(value, "value", str(value))
        except BaseException as exc:
            out[key] = f"? ({type(exc).__name__}: {exc})"[:200]
    return out


def draft_model(server_args: Any, path: str) -> dict[str, Any]:
    """The EAGLE-3 draft's model config as the draft worker builds it (ModelConfig.from_server_args with
    is_draft_model, SGLang's own code on the draft's config.json): its class and attention kind (MLA or MHA)."""
    try:
        from sglang.srt.configs.model_config import ModelConfig

        config = ModelConfig.from_server_args(server_args, model_path=path, is_draft_model=True)
    except BaseException as exc:
        return {"error": failure(exc)}
    arch = getattr(config, "attention_arch", None)
    return {
        "architecture": (getattr(config.hf_config, "architectures", None) or ["?"])[0],
        "attention_arch": getattr(arch, "name", str(arch)),
        "head_dim": getattr(config, "head_dim", None),
        "kv_lora_rank": getattr(config, "kv_lora_rank", None),
    }


def emit(obj: Any) -> None:
    print(MARK + json.dumps(obj, default=str), flush=True)


# What the start-up touched that it must not: a file the image leaves out (build.toml not_shipped: an open or an
# import of it, which a try/except might otherwise swallow) or an address off this machine (nothing is fetched).
AUDIT: list[dict[str, str]] = []


def audit(site: str, globs: list[str]) -> None:
    """Record (sys.addaudithook: every open, import, library load, program run and socket connect of this process)
    what lands under a not_shipped glob or leaves the machine."""
    prefix = site.rstrip("/") + "/"

    def note(event: str, what: str) -> None:
        if {"event": event, "what": what} not in AUDIT and len(AUDIT) < 200:
            AUDIT.append({"event": event, "what": what})

    def left_out(path: Any) -> bool:
        if not isinstance(path, str) or not (path := os.path.abspath(path)).startswith(prefix):
            return False
        rel = path[len(prefix) :]
        return any(fnmatch.fnmatchcase(rel, g) or fnmatch.fnmatchcase(rel, g + "/*") for g in globs)

    def module_left_out(name: str) -> str | None:
        # CPython raises "import" before it looks for the module, with no file name: a module whose file was left
        # out is never found (ModuleNotFoundError, which a try/except may swallow), so its would-be paths are matched.
        base = prefix + name.replace(".", "/")
        paths = (base, base + ".py", base + "/__init__.py", *(base + s for s in EXTENSION_SUFFIXES))
        return next((path[len(prefix) :] for path in paths if left_out(path)), None)

    def hook(event: str, args: tuple) -> None:
        try:
            if event in ("open", "ctypes.dlopen") and left_out(args[0]):
                note("open" if event == "open" else "dlopen", args[0])
            elif event == "import" and left_out(args[1]):
                note("import", f"{args[0]} from {args[1]}")
            elif event == "import" and isinstance(args[0], str) and (path := module_left_out(args[0])):
                note("import", f"{args[0]} (left out: {path})")
            elif event in ("subprocess.Popen", "os.exec", "os.posix_spawn"):
                # subprocess.Popen (executable, args, cwd, env); os.exec/os.posix_spawn (path, argv, env)
                program = os.path.abspath(os.fsdecode(args[0] or args[1][0]))
                if left_out(program):
                    note("run", program)
            elif event == "socket.connect" and isinstance(args[1], tuple) and args[1]:
                host = str(args[1][0])
                try:
                    outside = not ipaddress.ip_address(host).is_loopback
                except ValueError:
                    outside = host != "localhost"
                if outside:
                    note("connect", f"{host}:{args[1][1] if len(args[1]) > 1 else ''}")
        except Exception:  # an audit hook must never break what it watches
            pass

    sys.addaudithook(hook)


def main(argv: list[str]) -> int:
    job_file = Path(argv[1])
    job = json.loads(job_file.read_text())
    if os.environ.get(READY) != "1":
        stage(job_file, job)
    result: dict[str, Any] = {}
    try:
        if job.get("not_shipped") is not None:
            audit(job["site_packages"], job["not_shipped"])
        install(job["persona"])
        for task in job["tasks"]:
            result[task] = {"registry": task_registry, "server_args": task_server_args}[task](job)
    except BaseException as exc:  # whatever stopped it is the finding
        result["error"] = failure(exc)
    result.update(asked=dict(ASKED), boundaries_all=BOUNDARIES, audit=AUDIT)
    smi_log = Path(job["workdir"]) / "smi.log"
    result["nvidia_smi"] = [json.loads(x) for x in smi_log.read_text().splitlines()] if smi_log.is_file() else []
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
