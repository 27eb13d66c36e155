"""What an image promises, read from its own labels: `sm120.labels` (writer and reader side by side), under the
name the image suite has imported it by."""

from __future__ import annotations

from ..labels import REQUIRED, Expect, Kernels, LabelError, Patch, missing, namespace, parse, parse_kernels

NS = namespace()

__all__ = [
    "NS",
    "REQUIRED",
    "Expect",
    "Kernels",
    "LabelError",
    "Patch",
    "missing",
    "namespace",
    "parse",
    "parse_kernels",
]
