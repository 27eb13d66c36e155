"""The plan: build.toml read and checked (`config`), resolved for a profile, a track and a machine (`resolve`),
and the formats written from it with their readers (`exported`, `build_args`, `labels`, `image_plan`)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (sm120/plan/ -> ../..): build.toml, Dockerfile, patches/
