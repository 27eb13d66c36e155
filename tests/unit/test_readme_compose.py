"""T0: the README's Compose path works as written. `cp .env.example .env` beside compose.yaml, then `docker compose
config` (no engine, no image): the image it names is the one `./dev build` makes (`build.py plan --profile offline
--json`: tags[0]), so `docker compose up` finds it instead of trying to pull another. Needs only the Compose CLI
(v2); skipped, saying so, where there is none. The Compose suite with the real image is tests/compose (T2)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
# `NAME=value` or `# NAME=value` lines of .env.example: the variables it sets (a value in the shell would win).
ASSIGNMENT = re.compile(r"^\s*(?:#\s*)?([A-Z][A-Z0-9_]*)=")


def compose_cli() -> list[str]:
    for argv in (["docker", "compose"], ["docker-compose"]):
        try:
            proc = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0 and re.match(r"v?([2-9]|\d{2,})\.", proc.stdout.strip()):
            return argv
    pytest.skip("no Compose v2 here (`docker compose` or a v2 `docker-compose`): `./dev setup` installs it")


def offline_tag() -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "build.py"), "plan", "--profile", "offline", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["tags"][0]


def compose_config(folder: Path) -> dict:
    """`docker compose config` in `folder` as a user runs it there: .env read from the folder; the variables
    .env.example names removed from the environment first (the shell would win over .env)."""
    names = {m[1] for line in ENV_EXAMPLE.read_text().splitlines() if (m := ASSIGNMENT.match(line))}
    env = {k: v for k, v in os.environ.items() if k not in names and not k.startswith("COMPOSE_")}
    proc = subprocess.run(
        [*compose_cli(), "config", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"`docker compose config` with .env.example as .env failed:\n{proc.stderr}"
    return json.loads(proc.stdout)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of compose.yaml's folder as the README uses it: compose.yaml, and .env copied from .env.example."""
    shutil.copy(COMPOSE_FILE, tmp_path / "compose.yaml")
    shutil.copy(ENV_EXAMPLE, tmp_path / ".env")
    return tmp_path


def test_compose_with_the_example_env_names_the_image_dev_build_makes(folder):
    config = compose_config(folder)
    tag = offline_tag()
    images = {name: service["image"] for name, service in config["services"].items()}
    assert images and set(images.values()) == {tag}, (
        f"with .env.example as .env, compose.yaml names {images}; ./dev build makes {tag}: `docker compose up` "
        "would try to pull an image that is not there"
    )


def test_the_example_env_serves_the_default_mode(folder):
    config = compose_config(folder)
    assert config["services"]["sglang"]["command"] == ["baseline"]
