"""SGLang's real start-up path on an sm_120 persona, run INSIDE the image (T2.5; sm120/verify/suite/test_startup.py).

Copied into a container and run by the image's Python as the image's user, without a GPU: `python startup_probe.py
JOB.json` prints one `SM120-JSON {...}` line, what SGLang did and decided. Standard library only, plus the image's
torch, SGLang and entrypoint package (to read the model files as the entrypoint does). JOB.json: {"persona": {...},
"workdir", "entrypoint_root", "env", "tasks": ["registry", "server_args"], "modules", "cases": [{"id", "env", "argv"}]}.

Before SGLang is imported: the CUDA driver stub is linked as WORKDIR/lib/libcuda.so.1 (on LD_LIBRARY_PATH: the
process re-executes itself once), so that kernel libraries linked against the driver load; a stand-in `nvidia-smi`
first on PATH answers `--query-gpu=memory.total|name|compute_cap` from the persona (anything else exits 9, logged);
torch.cuda's device queries answer from the persona (each question counted; a device property it has no value for
stops the check, naming it); every torch.cuda entry point that would initialise CUDA, allocate or launch work raises
PersonaBoundary (a BaseException: no `except Exception` in SGLang swallows it) naming the call and the SGLang line,
recorded even if something swallows it.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import traceback
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


def _where(frame: Any) -> tuple[str, str]:
    """(the first SGLang frame outward from `frame`, the immediate caller), as `path:line (function)`."""
    caller, sglang = None, None
    while frame is not None:
        code = frame.f_code
        text = f"{_short(code.co_filename)}:{frame.f_lineno} ({code.co_name})"
        if caller is None:
            caller = text
        if "/sglang/" in code.co_filename and "startup_probe" not in code.co_filename:
            sglang = text
            break
        frame = frame.f_back
    return sglang or "no SGLang frame", caller or "?"


def _short(path: str) -> str:
    marker = "site-packages/"
    return path.split(marker, 1)[1] if marker in path else path


def boundary(call: str) -> PersonaBoundary:
    sglang, caller = _where(sys._getframe(2))
    message = f"{call} would need a real GPU; reached from {sglang}" + (f" via {caller}" if caller != sglang else "")
    BOUNDARIES.append({"call": call, "sglang_frame": sglang, "caller": caller})
    return PersonaBoundary(message)


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
# toolkit flavour from it at import). Every other entry point stays the stub's no-op.
PERSONA_DRIVER_C = """
int cuInit(unsigned int flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *version) { if (!version) return 1; *version = %d; return 0; }
"""


def persona_driver(stub: Path, out: Path, persona: dict[str, Any]) -> None:
    """Build the persona's libcuda.so.1 (the stub's symbols + PERSONA_DRIVER_C) with the image's compiler;
    without a compiler, link the stub as it is."""
    answered = {"cuInit", "cuDriverGetVersion"}
    try:
        symbols = subprocess.run(
            ["nm", "-D", "--defined-only", str(stub)], capture_output=True, text=True, check=True
        ).stdout.split()
        names = sorted({w for w in symbols if w.startswith("cu") and w.isidentifier()} - answered)
        source = out.parent / "libcuda-persona.c"
        source.write_text(
            "".join(f"void {n}(void) {{}}\n" for n in names) + PERSONA_DRIVER_C % persona["driver_cuda_version"]
        )
        subprocess.run(
            ["g++", "-x", "c", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(source)],
            capture_output=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        out.unlink(missing_ok=True)
        out.symlink_to(stub)


def stage(job_file: Path, job: dict[str, Any]) -> None:
    work = Path(job["workdir"])
    (work / "bin").mkdir(parents=True, exist_ok=True)
    (work / "lib").mkdir(parents=True, exist_ok=True)
    stub = next((s for s in STUBS if Path(s).is_file()), None)
    if stub is None:
        emit({"error": f"no CUDA driver stub in the image (looked at {', '.join(STUBS)})"})
        sys.exit(0)
    link = work / "lib" / "libcuda.so.1"
    link.unlink(missing_ok=True)  # not written through a link left by an earlier run
    persona_driver(Path(stub), link, job["persona"])
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
    devices = persona["devices"]

    def index(device: Any) -> int:
        if device is None:
            return 0
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {device}")
            return 0 if device.index is None else device.index
        idx = int(device)
        if not 0 <= idx < devices:
            raise AssertionError("Invalid device id")
        return idx

    answers = {
        "is_available": True,
        "device_count": devices,
        "current_device": 0,
        "get_device_name": props.name,
        "get_device_capability": (props.major, props.minor),
        "get_device_properties": props,
        "mem_get_info": (persona["free_memory"], persona["total_memory"]),
    }
    for name, value in answers.items():

        def answer(device: Any = None, _name: str = name, _value: Any = value) -> Any:
            index(device)  # a device the persona does not have is refused, not counted
            ASKED[_name] += 1
            return _value

        answer.__name__ = answer.__qualname__ = name
        setattr(cuda, name, answer)

    def guard(name: str) -> Any:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            raise boundary(f"torch.cuda.{name}")

        guarded.__name__ = name
        return guarded

    for name in GUARDED:
        if hasattr(cuda, name):
            setattr(cuda, name, guard(name))
    for name in GUARDED_CLASSES:
        klass = getattr(cuda, name, None)
        if isinstance(klass, type):

            def new(cls: type, *args: Any, _name: str = name, **kwargs: Any) -> Any:
                raise boundary(f"torch.cuda.{_name}()")

            klass.__new__ = new  # type: ignore[method-assign]


# What SGLang did


def failure(exc: BaseException) -> dict[str, Any]:
    """An exception as data: type, one-line message, the innermost SGLang frame, and for an import failure the
    innermost SGLang module whose top-level code raised, with its line (the import statement)."""
    frames = traceback.extract_tb(exc.__traceback__)
    sglang = [f for f in frames if "/sglang/" in f.filename and "startup_probe" not in f.filename]
    module_level = [f for f in sglang if f.name == "<module>"]
    innermost = module_level[-1] if module_level else None
    out: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": " ".join(ANSI.sub("", str(exc)).split())[:1500],
        "sglang_frame": f"{_short(sglang[-1].filename)}:{sglang[-1].lineno} ({sglang[-1].name})" if sglang else None,
        "missing": getattr(exc, "name", None) if isinstance(exc, ImportError) else None,
    }
    if innermost is not None:
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
        fn = getattr(utils, name, None)
        if callable(fn):
            try:
                out[name] = bool(fn())
            except BaseException as exc:
                out[name] = f"raised {type(exc).__name__}: {exc}"
    return out


def kernels_loaded() -> dict[str, str]:
    loaded = {name: mod for name in KERNEL_PACKAGES if (mod := sys.modules.get(name)) is not None}
    return {name: str(getattr(m, "__version__", "") or getattr(m, "__file__", "") or "") for name, m in loaded.items()}


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {' '.join(ANSI.sub('', record.getMessage()).split())[:600]}")


def task_registry(job: dict[str, Any]) -> dict[str, Any]:
    handler = Records()
    logging.getLogger().addHandler(handler)
    out: dict[str, Any] = {"platform": platform_flags()}
    try:
        from sglang.srt.models.registry import ModelRegistry

        archs = sorted(ModelRegistry.get_supported_archs())
        out["archs"] = archs
    except BaseException as exc:
        out["error"] = failure(exc)
        archs = []
    ignored = re.compile(r"Ignore import error when loading (sglang\.srt\.models\.[\w.]+): (.*)")
    dropped = dict(m.groups() for line in handler.lines if (m := ignored.search(line)))
    out["dropped"] = {}
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
    out["entry_classes"] = _entry_classes(installed, dropped) if installed else {}
    out["eagle3_in_source"] = installed.registered_like(entrypoint_models.EAGLE3_MARK) if installed else []
    out["modules"] = {}
    for module in job.get("modules", []):  # start-up modules beyond the models (item: kernel libraries)
        try:
            importlib.import_module(module)
            out["modules"][module] = None
        except ModuleNotFoundError as exc:
            out["modules"][module] = None if exc.name == module else failure(exc)
        except BaseException as exc:
            out["modules"][module] = failure(exc)
    out["kernels"] = kernels_loaded()
    out["warnings"] = handler.lines[-50:]
    logging.getLogger().removeHandler(handler)
    return out


def _entry_classes(installed: Any, modules: dict[str, str]) -> dict[str, list[str]]:
    """module -> the class names its EntryClass names (read from the source: the module did not import)."""
    out = {}
    for module in modules:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            out[module] = installed.entry_classes(Path(spec.origin))
    return {module: names for module, names in out.items() if names}


def _json_tree(value: Any) -> bool:
    """A value JSON holds as it is: scalars, and lists and string-keyed dicts of them (nested records)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_tree(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_json_tree(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def settings(server_args: Any) -> dict[str, Any]:
    """What SGLang decided, each setting JSON can hold. Releases with a resolution pass (0.5.2x: a record of
    msgspec Structs) serialise it themselves (`resolved_dict`, what /server_info reports); 0.5.9's ServerArgs is a
    dataclass whose post-init has decided. Anything else yields nothing (the suite then says which traps read
    nothing)."""
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()
        values = server_args.resolved_dict()
    elif dataclasses.is_dataclass(server_args):
        values = {}
        for field in dataclasses.fields(server_args):
            try:
                values[field.name] = getattr(server_args, field.name)
            except BaseException:  # a field that cannot be resolved is left out
                continue
    else:
        values = {}
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
            try:
                launch_checks(server_args)
            except BaseException as exc:  # refused after deciding: the decisions are still reported
                rec["error"] = failure(exc)
            rec["runners"] = runners(server_args)
            draft = rec["settings"].get("speculative_draft_model_path")
            if draft:
                rec["runners"]["draft_model"] = draft_model(server_args, draft)
        rec["boundaries"] = BOUNDARIES[before:]
        out["cases"][case["id"]] = rec
    out["deep_gemm"] = _deep_gemm()
    return out


def launch_checks(server_args: Any) -> None:
    """What the server does with the settings before it starts its scheduler processes, in its order
    (entrypoints/engine.py _launch_subprocesses): the environment and version checks, then check_server_args()
    (the cuDNN gate of 0.5.9 is there)."""
    engine = importlib.import_module("sglang.srt.entrypoints.engine")
    set_envs = getattr(engine, "_set_envs_and_config", None)
    if set_envs is not None:
        set_envs(server_args)
    check = getattr(server_args, "check_server_args", None)
    if check is not None:
        check()


def runners(server_args: Any) -> dict[str, Any]:
    """The MoE / FP8 / FP4 GEMM runners as the scheduler resolves them at start (Scheduler.init_moe_gemm_config,
    SGLang's own code, on the model config SGLang builds from the server args)."""
    import types

    try:
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.managers.scheduler import Scheduler

        setter = None
        for name in ("set_global_server_args_for_scheduler", "set_global_server_args"):
            setter = setter or getattr(importlib.import_module("sglang.srt.server_args"), name, None)
        if setter is not None:
            setter(server_args)
        model_config = ModelConfig.from_server_args(server_args)
        holder = types.SimpleNamespace(server_args=server_args, model_config=model_config)
        Scheduler.init_moe_gemm_config(holder)
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
    archs = getattr(config.hf_config, "architectures", None) or ["?"]
    arch = getattr(config, "attention_arch", None)
    return {
        "architecture": archs[0],
        "attention_arch": getattr(arch, "name", str(arch)),
        "head_dim": getattr(config, "head_dim", None),
        "kv_lora_rank": getattr(config, "kv_lora_rank", None),
    }


def _deep_gemm() -> dict[str, Any]:
    """SGLang's DeepGEMM decision (module-level, from SGLANG_ENABLE_JIT_DEEPGEMM and the device)."""
    try:
        configurer = importlib.import_module("sglang.srt.layers.deep_gemm_wrapper.configurer")
    except BaseException as exc:
        return {"error": failure(exc)}
    return {k: v for k, v in vars(configurer).items() if k.isupper() and isinstance(v, (bool, int, str))}


def emit(obj: Any) -> None:
    print(MARK + json.dumps(obj, default=str), flush=True)


# What the start-up touched that it must not: a file the image leaves out (build.toml not_shipped: an open or an
# import of it, which a try/except might otherwise swallow) or an address off this machine (nothing is fetched).
AUDIT: list[dict[str, str]] = []


def audit(site: str, globs: list[str]) -> None:
    """Record (sys.addaudithook: every open, import, library load, program run and socket connect of this process)
    what lands under a not_shipped glob or leaves the machine."""
    import fnmatch
    import ipaddress
    from importlib.machinery import EXTENSION_SUFFIXES

    prefix = site.rstrip("/") + "/"
    seen: set[tuple[str, str]] = set()

    def note(event: str, what: str) -> None:
        if (event, what) not in seen and len(AUDIT) < 200:
            seen.add((event, what))
            AUDIT.append({"event": event, "what": what})

    def left_out(path: str) -> bool:
        if not path.startswith(prefix):
            return False
        rel = path[len(prefix) :]
        return any(fnmatch.fnmatchcase(rel, g) or fnmatch.fnmatchcase(rel, g + "/*") for g in globs)

    def module_left_out(name: str) -> str | None:
        # CPython raises "import" before it looks for the module, with no file name: a module whose file was left
        # out is never found (ModuleNotFoundError, which a try/except may swallow), so its would-be paths are matched.
        base = prefix + name.replace(".", "/")
        for path in (base, base + ".py", base + "/__init__.py", *(base + s for s in EXTENSION_SUFFIXES)):
            if left_out(path):
                return path[len(prefix) :]
        return None

    def program(args: tuple) -> str | None:
        # subprocess.Popen (executable, args, cwd, env); os.exec/os.posix_spawn (path, argv, env)
        first = args[0] if args and args[0] else (args[1][0] if len(args) > 1 and args[1] else None)
        return os.path.abspath(os.fsdecode(first)) if isinstance(first, (str, bytes)) else None

    def hook(event: str, args: tuple) -> None:
        try:
            if event == "open" and isinstance(args[0], str) and left_out(os.path.abspath(args[0])):
                note("open", args[0])
            elif event == "import" and args[1] and isinstance(args[1], str) and left_out(args[1]):
                note("import", f"{args[0]} from {args[1]}")
            elif event == "import" and isinstance(args[0], str) and (path := module_left_out(args[0])):
                note("import", f"{args[0]} (left out: {path})")
            elif event == "ctypes.dlopen" and isinstance(args[0], str) and left_out(os.path.abspath(args[0])):
                note("dlopen", args[0])
            elif event in ("subprocess.Popen", "os.exec", "os.posix_spawn") and (path := program(args)):
                if left_out(path):
                    note("run", path)
            elif event == "socket.connect" and isinstance(args[1], tuple) and args[1]:
                host = str(args[1][0])
                try:
                    outside = not ipaddress.ip_address(host).is_loopback
                except ValueError:
                    outside = host not in ("localhost",)
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
    result["asked"] = dict(ASKED)
    result["boundaries_all"] = BOUNDARIES
    result["audit"] = AUDIT
    smi_log = Path(job["workdir"]) / "smi.log"
    result["nvidia_smi"] = [json.loads(x) for x in smi_log.read_text().splitlines()] if smi_log.is_file() else []
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
