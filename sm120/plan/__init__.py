"""The plan: build.toml read and checked (`config`), resolved for a profile, a track and a machine (`resolve`),
and the formats written from it with their readers (`exported`, `build_args`, `labels`, `image_plan`)."""

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # noqa: F401 (re-exported: the plan and track modules import it from here)

ROOT = Path(__file__).resolve().parents[2]  # the checkout (sm120/plan/ -> ../..): build.toml, Dockerfile, patches/
