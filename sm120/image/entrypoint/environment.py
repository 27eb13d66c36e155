"""The container's environment against the variables the image reads: no silent typo, no key in plain sight
(docs/configuration.md, "A misspelt variable is refused"; the order: problem())."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from ..allreduce.report import ENV as SYMM_MEM_VARIABLE
from ..allreduce.sizes import SizeError, parse_limits
from . import key_file, preflight, presets
from .assemble import VARIABLES
from .errors import UsageError, show
from .spec import EntrypointSpec

# The image's own namespaces: a name there that is not one of its variables is a mistake.
OUR_PREFIXES = ("SM120_", "SPEC_", "DRAFT_", "API_KEY", "ADMIN_API_KEY")
# What a container carries that the image does not read, and that must never be refused.
PASS_NAMES = frozenset(
    {
        # Docker, a shell, podman, the Linux login environment
        *("HOSTNAME", "HOME", "PATH", "TERM", "PWD", "OLDPWD", "SHLVL", "USER", "LOGNAME", "SHELL", "MAIL", "_"),
        *("container", "TZ", "TMPDIR", "TMP", "TEMP", "COLUMNS", "LINES", "LANG", "LANGUAGE"),
        *("http_proxy", "https_proxy", "no_proxy", "ftp_proxy", "all_proxy"),
        *("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY"),
        # the image's Dockerfile and its CUDA base image
        *("VIRTUAL_ENV", "DEBIAN_FRONTEND", "NVARCH"),
        # compilers and the JIT builds' knobs, torch.distributed's launchers
        *("CC", "CXX", "CPATH", "LIBRARY_PATH", "MAX_JOBS"),
        *("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"),
    }
)
PASS_PREFIXES = (
    *("NVIDIA_", "NV_", "CUDA_", "CUDNN_", "CUBLAS_", "NCCL_", "NVSHMEM_", "GLOO_", "UCX_", "MOONCAKE_"),
    *("HF_", "HUGGINGFACE_", "HUGGING_FACE_", "TRANSFORMERS_", "TOKENIZERS_", "SAFETENSORS_"),
    *("SGLANG_", "SGL_", "FLASHINFER_", "TVM_", "DG_", "TRITON_", "TORCH", "PYTORCH_"),
    *("PYTHON", "PIP_", "UV_", "LC_", "XDG_", "LD_", "SSL_", "REQUESTS_", "CURL_", "MALLOC_", "GRPC_", "OTEL_"),
    *("OMP_", "MKL_", "KMP_", "OPENBLAS_", "LWS_", "KUBERNETES_", "DOCKER_", "TINI_"),
)
# Kubernetes' service variables: NAME_SERVICE_HOST, NAME_SERVICE_PORT[_PORTNAME], NAME_PORT[_30000_TCP[_ADDR...]].
_SERVICE = re.compile(r"[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT|PORT)(_[A-Z0-9_]+)?")
CLOSE_RATIO = 0.9  # difflib's ratio at which a name of CLOSE_MIN_CHARS or more is a near miss
CLOSE_MIN_CHARS = 10
EDIT_MIN_CHARS = 4  # one edit from a shorter name (HOST, PORT) is not a near miss: too many names are


def read_by_image(spec: EntrypointSpec | None) -> frozenset[str]:
    """Every variable the image reads, from the modules that define them, the symmetric-memory limit the
    torch-symm-mem-sm120 patch reads, and the variables of the plan's runtime rules (set, they override a rule)."""
    names = {v.name for v in VARIABLES} | set(key_file.FILES) | {c.name for c in preflight.CACHE_VARIABLES}
    names |= {presets.VARIABLE, preflight.NVML_VARIABLE, preflight.VISIBLE_DEVICES, SYMM_MEM_VARIABLE}
    for rule in spec.runtime if spec is not None else ():
        names |= set(rule.env)
    return frozenset(names)


def _norm(name: str) -> str:
    """A name without case, underscores or hyphens: `tp_size`, `TPSIZE` and `TP-SIZE` are TP_SIZE."""
    return re.sub(r"[^A-Z0-9]", "", name.upper())


def _one_edit(a: str, b: str) -> bool:
    """Whether a and b differ by one letter missing, extra or changed, or two neighbours swapped (or not at all)."""
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        i = diff[0] if diff else 0
        return len(diff) <= 1 or (diff == [i, i + 1] and a[i] == b[i + 1] and a[i + 1] == b[i])
    short, long = sorted((a, b), key=len)
    return len(long) - len(short) == 1 and any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _ratio(name: str, known: str) -> float:
    return difflib.SequenceMatcher(None, name.upper(), known).ratio()


def _closest(name: str, names: Iterable[str]) -> str:
    return max(sorted(names), key=lambda known: _ratio(name, known))


def resembles(name: str, known: Iterable[str]) -> str | None:
    """The variable `name` is a near miss of: another case, an underscore or hyphen more or less, one letter
    missing, extra, changed or swapped; for longer names, difflib's ratio >= CLOSE_RATIO. Or None."""
    close = []
    for other in known:
        a, b = _norm(name), _norm(other)
        edit = a == b or (len(b) >= EDIT_MIN_CHARS and _one_edit(a, b))
        if edit or (len(other) >= CLOSE_MIN_CHARS and _ratio(name, other) >= CLOSE_RATIO):
            close.append(other)
    return _closest(name, close) if close else None


def secret_file_for(name: str) -> str | None:
    """The key file variable to use instead of `name` (API_KEY -> API_KEY_FILE), where `name` holds a key."""
    stems = {prefix + v.removesuffix("_FILE"): v for v in key_file.FILES for prefix in ("", "SGLANG_")}
    for stem in sorted(stems, key=len, reverse=True):
        if _one_edit(_norm(name), _norm(stem)):
            return stems[stem]
    return None


def passes(name: str) -> bool:
    """What a container normally carries: never refused."""
    return name in PASS_NAMES or name.startswith(PASS_PREFIXES) or _SERVICE.fullmatch(name) is not None


def problem(name: str, known: frozenset[str]) -> str | None:
    """Why the variable `name` (not one the image reads) is refused, in one line; None when it passes."""
    if name in known:
        return None
    if (file_variable := secret_file_for(name)) is not None:
        sglang = " (SGLang's server does not read it either)" if name.upper().startswith("SGLANG") else ""
        return (
            f"{name} holds a key in a variable, which `docker inspect` shows{sglang}: put the key in a file and "
            f"set {file_variable} to its path (its value is not shown; see --help)"
        )
    if passes(name):
        return None
    if (close := resembles(name, known)) is not None:
        return f"{name} is not a variable this image reads; it resembles {close} (a typo? --help lists the variables)"
    if (prefix := next((p for p in OUR_PREFIXES if name.upper().startswith(p)), None)) is not None:
        ours = [k for k in known if k.startswith(prefix)] or list(known)
        return (
            f"{name} is not a variable this image reads, though {prefix}* names are its own; it resembles "
            f"{_closest(name, ours)} (--help lists the variables)"
        )
    return None


def check(environ: Mapping[str, str], spec: EntrypointSpec | None) -> None:
    """Exit 2 (UsageError) on the first variable, in name order, that problem() refuses; then on a symmetric-memory
    limit the patch would ignore (it reads it only once the communicator is built, minutes into the start)."""
    known = read_by_image(spec)
    for name in sorted(environ):
        if (why := problem(name, known)) is not None:
            raise UsageError(why)
    limits = environ.get(SYMM_MEM_VARIABLE, "")
    try:
        if limits.strip():  # empty: unset, as the patch reads it
            parse_limits(limits)
    except SizeError as exc:
        raise UsageError(f"{SYMM_MEM_VARIABLE}={show(limits)}: {exc}; the patch would ignore it") from None
