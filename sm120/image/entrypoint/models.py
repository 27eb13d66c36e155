"""Model directories, read from config.json (and hf_quant_config.json) the way SGLang reads them, so a mistake shows
in seconds instead of after a ten-minute load: the draft is an EAGLE-3 drafter that takes the target's hidden
states; NVFP4 as SGLang's ModelOpt parsing finds it (configs/model_config.py `_parse_modelopt_quant_config`)."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError, parse_json, show
from .options import Item

# A Hugging Face repo id ("org/name") that is not a local path: SGLang downloads it; nothing to check here.
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TEXT_CONFIGS = ("text_config", "language_config", "llm_config")
NVFP4_METHODS = ("modelopt_fp4", "modelopt_mixed")
EAGLE3_MARK = "Eagle3"


@dataclass
class Model:
    item: Item  # where the path came from (MODEL_PATH, --model-path after --, ...)
    path: Path | None  # None for a Hugging Face repo id
    config: dict[str, Any]

    @property
    def label(self) -> str:
        return self.item.label()

    @property
    def architecture(self) -> str | None:
        archs = self.config.get("architectures")
        return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None

    def configs(self) -> list[Mapping[str, Any]]:
        """config.json's object, then its nested text configs (multimodal wrappers such as Kimi-K2.5)."""
        return [c for c in (self.config, *map(self.config.get, _TEXT_CONFIGS)) if isinstance(c, Mapping)]

    def text_value(self, key: str) -> Any:
        """A key of the language model's config: top level first, else a nested text config."""
        return next((c[key] for c in self.configs() if key in c), None)


CONFIG_MAX_BYTES = 64 << 20  # a model's config.json is kilobytes; anything this large is not one


def access_hint(path: Path) -> str:
    """Who may enter the path and what to change: one line for an error about a path this user cannot read."""
    try:
        st = path.stat()
        owner = f"owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"
        user = f"--user {st.st_uid}:{st.st_gid}"
    except OSError:
        owner, user = "", "--user UID:GID of its owner"
    return (
        f"uid {os.getuid()} cannot read {path}" + (f" ({owner})" if owner else "") + "; on the host: chmod -R a+rX "
        f"{path}, or run the container with {user}"
    )


def first_blocked(path: Path) -> Path:
    """The first directory on the way to path (path included) that this user cannot enter."""
    full = Path(os.path.abspath(path))
    for probe in [*reversed(full.parents), full]:
        if not os.access(probe, os.X_OK):
            return probe
    return full


def _exists(path: Path, item: Item) -> bool:
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError:
        raise UsageError(f"{item.label()}: {access_hint(first_blocked(path))}") from None
    except OSError as exc:  # a loop of links, a name too long
        raise UsageError(f"{item.label()}: cannot be read ({exc.strerror or exc})") from None
    return True


def _read_config(config_file: Path, item: Item) -> dict[str, Any]:
    label = item.label()
    try:
        st = os.stat(config_file)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise UsageError(f"{label}: {config_file} is {kind}", "config.json must be the model's JSON file")
        if st.st_size > CONFIG_MAX_BYTES:
            raise UsageError(f"{label}: {config_file} is {st.st_size} bytes, not a model's config.json (kilobytes)")
        with open(config_file, "rb") as handle:
            text = handle.read(CONFIG_MAX_BYTES + 1).decode("utf-8")
    except FileNotFoundError:
        raise UsageError(
            f"{label}: the directory has no config.json", "give the model's own directory (with config.json)"
        ) from None
    except PermissionError:
        raise UsageError(f"{label}: {access_hint(config_file)}") from None
    except OSError as exc:
        raise UsageError(f"{label}: {config_file} cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{label}: {config_file} is not UTF-8 text") from None
    config = parse_json(text, f"{label}: config.json is", "a model's config")
    if not isinstance(config, dict):
        raise UsageError(
            f"{label}: config.json is not a JSON object (a {type(config).__name__})",
            'a model\'s config.json is an object such as {"architectures": [...], ...}',
        )
    return config


# Mount types that never hold a model (the mount table's pseudo file systems).
_PSEUDO_FS = {"proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2", "devtmpfs", "securityfs", "debugfs"}


def mounted_dirs(mountinfo: str = "/proc/self/mountinfo") -> list[Path]:
    """The mount points of this container other than / and the pseudo file systems (where -v puts models)."""
    try:
        text = Path(mountinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 10 or "-" not in fields:
            continue
        fstype = fields[fields.index("-") + 1]
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if point != "/" and fstype not in _PSEUDO_FS and not point.startswith(("/proc", "/sys", "/dev")):
            found.append(Path(point))
    return found


def open_model(item: Item) -> Model:
    """The model at the item's path, exactly as SGLang will get it (no ~ expansion: there is no shell)."""
    value = item.value or ""
    path = Path(value)
    if not _exists(path, item) and not value.startswith(("/", ".", "~")) and _REPO_ID.match(value):
        # A model directory (with config.json) under a mount: SGLang would download the repo id instead of reading it
        local = next((root / value for root in mounted_dirs() if os.path.isfile(root / value / "config.json")), None)
        if local is not None:
            raise UsageError(
                f"{item.label()}: a relative path is read as a Hugging Face repo id (SGLang would download it), "
                f"but {local} is a model directory",
                f"give the full path: {local}",
            )
        return Model(item, None, {})
    if not _exists(path, item):
        hint = "mount the model directory, e.g. -v /models:/models"
        if value.startswith("~"):
            hint = "~ is not expanded (SGLang gets the path as written): give the full path"
        raise UsageError(f"{item.label()}: no such directory", hint)
    if not path.is_dir():  # os.stat answered in _exists
        raise UsageError(f"{item.label()}: is a file, not a directory", "give the directory that holds config.json")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"{item.label()}: {access_hint(path)}")
    return Model(item, path, _read_config(path / "config.json", item))


def _modelopt_method(quant: Mapping[str, Any]) -> str | None:
    # SGLang's unwrap_modelopt_quantization_config: {"quantization": {...}} nests the real config.
    inner = quant.get("quantization", quant)
    nested = inner.get("quantization") if isinstance(inner, Mapping) else None
    conf = nested if isinstance(nested, Mapping) else inner if isinstance(inner, Mapping) else {}
    algo = conf.get("quant_algo")
    algo = algo if isinstance(algo, str) else ""
    if algo == "MIXED_PRECISION":
        layers = conf.get("quantized_layers")
        nvfp4 = isinstance(layers, Mapping) and any(
            isinstance(info, Mapping) and str(info.get("quant_algo")).upper() in ("NVFP4", "W4A16_NVFP4")
            for info in layers.values()
        )
        return "modelopt_mixed" if nvfp4 else "w4afp8"
    if "FP4" in algo:
        return "modelopt_fp4"
    return None


def _quant_configs(model: Model) -> list[Mapping[str, Any]]:
    return [q for c in model.configs() if isinstance(q := c.get("quantization_config"), Mapping)]


def quantization(model: Model) -> str | None:
    """The quantization method SGLang would find for a local model ("modelopt_fp4", "fp8", ...), or None."""
    if model.path is None:
        return None
    for quant in _quant_configs(model):
        method = quant.get("quant_method")
        if method in (None, "modelopt") and (parsed := _modelopt_method(quant)):
            return parsed
        if isinstance(method, str):
            return method
    hf_quant = model.path / "hf_quant_config.json"
    try:
        if not hf_quant.is_file() or hf_quant.stat().st_size > CONFIG_MAX_BYTES:
            return None
        data = json.loads(hf_quant.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return _modelopt_method(data) if isinstance(data, Mapping) else None


def check_drafter(draft: Model) -> str | None:
    """Raise unless the draft's config names an EAGLE-3 drafter; return its architecture (None: a repo id)."""
    if draft.path is None:
        return None
    if (arch := draft.architecture) is None:
        raise UsageError(
            f"{draft.label}: config.json has no architectures",
            "an EAGLE-3 drafter names its class there, e.g. LlamaForCausalLMEagle3",
        )
    if EAGLE3_MARK not in arch:
        kind = "an EAGLE-1/2 drafter" if arch.endswith("Eagle") else "not an EAGLE-3 drafter"
        raise UsageError(
            f"{draft.label}: architecture {arch} is {kind}",
            "eagle3 needs an EAGLE-3 drafter (config.json architectures like LlamaForCausalLMEagle3)",
        )
    return arch


def check_pair(target: Model, draft: Model) -> list[str]:
    """Raise when the drafter cannot take the target's hidden states; return warnings for doubtful pairs."""
    if target.path is None or draft.path is None:
        return []
    target_hidden = target.text_value("hidden_size")
    draft_in = draft.config.get("target_hidden_size", draft.config.get("hidden_size"))
    if isinstance(target_hidden, int) and isinstance(draft_in, int) and target_hidden != draft_in:
        key = "target_hidden_size" if "target_hidden_size" in draft.config else "hidden_size"
        raise UsageError(
            f"{draft.label}: the drafter takes hidden states of size {draft_in} ({key}), "
            f"the target's hidden_size is {target_hidden}",
            f"this drafter was trained for another model than {target.architecture or 'the target'}",
        )
    target_vocab = target.text_value("vocab_size")
    draft_vocab = draft.config.get("vocab_size")
    if isinstance(target_vocab, int) and isinstance(draft_vocab, int) and target_vocab != draft_vocab:
        return [
            f"the drafter's vocab_size {draft_vocab} differs from the target's {target_vocab}: "
            "was it trained for this target?"
        ]
    return []


def describe(model: Model) -> str:
    if model.path is None:
        return f"{show(model.item.value)} (a Hugging Face repo id: SGLang downloads it; not checked here)"
    return f"{model.path} ({model.architecture or 'no architectures'})"


def check_heads(model: Model, tp: int, role: str) -> None:
    """SGLang splits the attention heads over the TP ranks (its linear layers assert that they divide): a TP
    that does not divide num_attention_heads stops the server while it builds the model, after minutes."""
    heads = model.text_value("num_attention_heads")
    if model.path is None or isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or tp <= 1:
        return
    if heads % tp:
        fits = [n for n in range(2, min(heads, 64) + 1) if heads % n == 0][:6]
        raise UsageError(
            f"TP {tp} does not divide the {role}'s {heads} attention heads ({model.label}: num_attention_heads)",
            f"allowed TP sizes for it: 1, {', '.join(map(str, fits))}" + (", ..." if len(fits) == 6 else ""),
        )


def raw_quant_method(model: Model) -> str | None:
    """config.json's quantization_config.quant_method as SGLang reads it (lower-cased), or None."""
    methods = [q["quant_method"] for q in _quant_configs(model) if isinstance(q.get("quant_method"), str)]
    return methods[0].lower() if methods and model.path is not None else None
