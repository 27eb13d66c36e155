"""A registry profile's bases pinned by digest for one build (`build.py build --base-image-digest D
--runtime-base-image-digest D`; build.toml's `[profiles.<p>] base_image_digest` pins them for every build): the
plan then builds `FROM name@digest`. A digest given both ways must be the same one.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from sm120.errors import UsageError

if TYPE_CHECKING:
    from sm120.plan import config as cfg

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
OPTIONS = {"base_image_digest": "--base-image-digest", "runtime_base_image_digest": "--runtime-base-image-digest"}


def digest(text: str) -> str:
    if not DIGEST.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be an image digest sha256:<64 hex digits>, got {text!r}")
    return text


def pin(config: cfg.Config, profile: str, **digests: str | None) -> cfg.Config:
    """`config` with `profile`'s bases pinned to `digests` (base_image_digest=..., runtime_base_image_digest=...)."""
    given = {key: value for key, value in digests.items() if value}
    if not given:
        return config
    settings = config.profile(profile)
    if settings.bases != "registry":
        raise UsageError(
            f"{', '.join(OPTIONS[k] for k in given)}: profile {profile!r} makes its bases here (bases = "
            f"{settings.bases!r}); digests pin a registry's bases"
        )
    for key, value in given.items():
        pinned = getattr(settings, key)
        if pinned and pinned != value:
            raise UsageError(
                f"{OPTIONS[key]} {value}: {config.path.name} pins profiles.{profile}.{key} = {pinned}; drop one"
            )
    return config.model_copy(update={"profiles": {**config.profiles, profile: settings.model_copy(update=given)}})
