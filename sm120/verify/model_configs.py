"""Model directories like the real ones, config.json only (no weights): a Kimi-K2.5-like target and an EAGLE-3
drafter (their configs: startup_models.json "entrypoint"). verify's suite copies them into the image for the
entrypoint's checks; the entrypoint's tests use them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_CONFIGS = json.loads(Path(__file__).with_name("startup_models.json").read_text())["entrypoint"]


def write_model(directory: Path, config: dict[str, Any], extra_files: dict[str, Any] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    for name, content in (extra_files or {}).items():
        (directory / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return directory


def kimi_target(directory: Path, *, nvfp4: bool = True, architecture: str = "KimiK25ForConditionalGeneration") -> Path:
    """A Kimi-K2.5-like target: a multimodal wrapper whose language model config is text_config; NVFP4 with the
    quantization_config NVIDIA's ModelOpt export writes."""
    config = {"architectures": [architecture], **_CONFIGS["kimi_target"]}
    if not nvfp4:
        del config["quantization_config"]
    return write_model(directory, config)


def eagle3_draft(directory: Path, *, architecture: str = "LlamaForCausalLMEagle3", **overrides: Any) -> Path:
    return write_model(directory, {"architectures": [architecture], **_CONFIGS["eagle3_draft"], **overrides})
