"""Model directories like the real ones, config.json only (no weights): a Kimi-K2.5-like target and an EAGLE-3
drafter. verify's suite copies them into the image for the entrypoint's checks; the entrypoint's tests use them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_model(directory: Path, config: dict[str, Any], extra_files: dict[str, Any] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    for name, content in (extra_files or {}).items():
        (directory / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return directory


def kimi_target(directory: Path, *, nvfp4: bool = True, architecture: str = "KimiK25ForConditionalGeneration") -> Path:
    """A Kimi-K2.5-like target: a multimodal wrapper whose language model config is text_config."""
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": "kimi_k25",
        "text_config": {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "kimi_k2",
            "hidden_size": 7168,
            "num_hidden_layers": 61,
            "vocab_size": 163840,
        },
    }
    if nvfp4:  # as NVIDIA's ModelOpt export writes it
        config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    return write_model(directory, config)


def eagle3_draft(directory: Path, *, architecture: str = "LlamaForCausalLMEagle3", **overrides: Any) -> Path:
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": "llama",
        "hidden_size": 7168,
        "num_hidden_layers": 1,
        "vocab_size": 163840,
        "draft_vocab_size": 32000,
    }
    config.update(overrides)
    return write_model(directory, config)
