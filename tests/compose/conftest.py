"""The Compose suite (T2): compose.yaml and .env.example checked by `docker compose config`, then the real image
brought up by pytest-docker with the test overrides (no-gpu.yaml: no GPU reservation; standin.yaml: the stand-in
SGLang server in place of SGLang, started through the image's API-key launcher with the secret API_KEY_SECRET
names, and a client service that waits for `service_healthy`).

    SM120_IMAGE=TAG .venv/bin/python -m pytest tests/compose      # ./dev test runs it in its T2 step

Compose: `docker compose` (v2), else a v2 `docker-compose`; $SM120_COMPOSE names another command (e.g. the
plugin binary run by itself). Compose v1 (docker-compose 1.x) is refused: it cannot drop a key in an override
(no `!reset`), so no-gpu.yaml could not remove the GPU reservation. The image: $SM120_IMAGE, else the offline
tag from the plan (`build.py plan --profile offline --json`: tags[0]); the stack checks skip when it is absent.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pytest_docker.plugin import DockerComposeExecutor, Services

from sm120.image.entrypoint.key_file import mask
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests import entrypoint_helpers as eh
from tests.helpers import docker_or_skip, free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
COMPOSE_FILE = ROOT / "compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
NO_GPU = HERE / "no-gpu.yaml"
STANDIN = HERE / "standin.yaml"
STACK_FILES = [COMPOSE_FILE, NO_GPU, STANDIN]  # what pytest-docker brings up
SERVICE = "sglang"
CHECK = "check"  # compose.yaml's one-shot --dry-run of the same request, before `sglang` starts

# `NAME=value` or `# NAME=value`: a value is one word or one quoted string (prose such as "# set X=1 to ..." is not).
_ASSIGNMENT = re.compile(r"""^\s*(?:#\s*)?([A-Z][A-Z0-9_]*)=("[^"]*"|'[^']*'|[^\s"']*)\s*$""")
_VERSION = re.compile(r"(\d+)\.(\d+)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.docker)


# ---------------------------------------------------------------------------------------------------------------
# The example env file: its assignments (set or commented out), and a copy with the test's values
# ---------------------------------------------------------------------------------------------------------------


def example_assignments(text: str | None = None) -> dict[str, str]:
    """NAME -> value for every `NAME=value` or `# NAME=value` line of .env.example."""
    text = ENV_EXAMPLE.read_text() if text is None else text
    return {m[1]: m[2] for line in text.splitlines() if (m := _ASSIGNMENT.match(line))}


def render_env(values: dict[str, str], template: str | None = None) -> str:
    """.env.example with `values` set: each NAME's line (commented out or not) becomes `NAME=value` (quoted when
    it holds a space); the other lines stay. A NAME the example does not have is an error: it must list it."""
    lines = (ENV_EXAMPLE.read_text() if template is None else template).splitlines()
    missing = set(values)
    out = []
    for line in lines:
        m = _ASSIGNMENT.match(line)
        if m and m[1] in values:
            value = values[m[1]]
            out.append(f'{m[1]}="{value}"' if re.search(r"\s", value) else f"{m[1]}={value}")
            missing.discard(m[1])
        else:
            out.append(line)
    assert not missing, f".env.example has no line for {sorted(missing)}"
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Compose itself
# ---------------------------------------------------------------------------------------------------------------


def _compose_version(argv: list[str]) -> tuple[int, int] | None:
    try:
        proc = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _VERSION.search(proc.stdout) if proc.returncode == 0 else None
    return (int(m[1]), int(m[2])) if m else None


def find_compose() -> tuple[list[str] | None, str]:
    """(the Compose v2 command, '') or (None, why there is none)."""
    chosen = os.environ.get("SM120_COMPOSE", "").strip()
    candidates = [shlex.split(chosen)] if chosen else [["docker", "compose"], ["docker-compose"]]
    seen = []
    for argv in candidates:
        version = _compose_version(argv)
        if version is not None and version[0] >= 2:
            return argv, ""
        seen.append(f"`{' '.join(argv)}`: " + (f"version {version[0]}.{version[1]}" if version else "not found"))
    return None, "no Compose v2 (" + "; ".join(seen) + "): `./dev setup` installs the docker compose plugin"


@pytest.fixture(scope="session")
def compose() -> list[str]:
    argv, why = find_compose()
    if argv is None:
        pytest.skip(why)
    return argv


def run_compose(
    compose: list[str],
    env_file: Path,
    files: list[Path],
    project: str,
    *args: str,
    extra_env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Compose with only `env_file`'s settings: the variables .env.example names are removed from the
    environment first (a value in the shell would win over the file), `extra_env` added."""
    env = {k: v for k, v in os.environ.items() if k not in example_assignments()}
    env.update(extra_env or {})
    argv = [*compose, "--env-file", str(env_file), *(a for f in files for a in ("-f", str(f))), "-p", project, *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout, check=False)


# ---------------------------------------------------------------------------------------------------------------
# The image, the engine, and the test's settings
# ---------------------------------------------------------------------------------------------------------------


def plan_image_tag() -> str:
    return planmod.resolve(cfg.load(), profile="offline").tags[0]


@pytest.fixture(scope="session")
def dc():
    return docker_or_skip()


@pytest.fixture(scope="session")
def image(dc) -> str:
    import docker

    tag = os.environ.get("SM120_IMAGE", "").strip() or plan_image_tag()
    try:
        dc.images.get(tag)
    except docker.errors.ImageNotFound:
        pytest.skip(f"no image {tag} here: `./dev build` makes it (or set SM120_IMAGE)")
    return tag


@dataclass(frozen=True)
class Settings:
    """What the test's .env sets (a copy of .env.example with these values)."""

    env_file: Path
    values: dict[str, str]
    project: str
    models: Path
    api_key: str = field(default="", repr=False)  # what the file API_KEY_SECRET names holds

    @property
    def port(self) -> int:
        return int(self.values["PORT"])

    @property
    def host_port(self) -> int:
        return int(self.values["HOST_PORT"])


@pytest.fixture(scope="session")
def models() -> Iterator[Path]:
    """A Kimi-K2.5-like target and an EAGLE-3 drafter (config.json only), readable by the image's user: the
    container mounts this directory at /models (pytest's tmp_path is 0700, hence a directory of our own)."""
    import shutil

    top = Path(tempfile.mkdtemp(prefix="sm120-compose-models-"))
    try:
        eh.kimi_target(top / "target")
        eh.eagle3_draft(top / "draft")
        for path in [top, *top.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="session")
def api_key_file() -> Iterator[tuple[Path, str]]:
    """A key file (a fresh key each session) readable by the image's user: the secret API_KEY_SECRET names."""
    import secrets
    import shutil

    top = Path(tempfile.mkdtemp(prefix="sm120-compose-key-"))
    try:
        key = secrets.token_hex(24)
        path = top / "api-key"
        path.write_text(key + "\n")
        path.chmod(0o644)
        top.chmod(0o755)
        yield path, key
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="session")
def settings(image, models, api_key_file, tmp_path_factory) -> Settings:
    project = f"sm120-compose-{os.getpid()}"
    values = {
        "SGLANG_IMAGE": image,
        "MODE": "eagle3",
        "MODELS_DIR": str(models),
        "BIND_ADDRESS": "127.0.0.1",
        "HOST_PORT": str(free_port()),
        "CACHE_VOLUME": f"{project}-cache",
        "RESTART": "no",
        "PORT": "30001",  # not the image's default: the HEALTHCHECK, the publishing and the server must follow
        "MODEL_PATH": "/models/target",
        "DRAFT_MODEL_PATH": "/models/draft",
        "TP_SIZE": "4",
        "SPEC_NUM_STEPS": "3",
        "SPEC_EAGLE_TOPK": "2",
        "SPEC_NUM_DRAFT_TOKENS": "8",
        "EXTRA_ARGS": "--mem-fraction-static 0.81 --max-running-requests 4",
        "API_KEY_SECRET": str(api_key_file[0]),  # the stand-in, like SGLang with --api-key, then wants the key
    }
    env_file = tmp_path_factory.mktemp("compose") / "test.env"
    env_file.write_text(render_env(values))
    return Settings(env_file, values, project, models, api_key_file[1])


# ---------------------------------------------------------------------------------------------------------------
# pytest-docker: the stack is compose.yaml + no-gpu.yaml + standin.yaml, with the test's .env
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker_compose_command(compose, settings) -> str:
    """pytest-docker runs `<this> -f FILE... -p PROJECT SUBCOMMAND` through the shell."""
    unset = " ".join(f"-u {name}" for name in sorted(example_assignments()))
    return f"env {unset} {shlex.join(compose)} --env-file {shlex.quote(str(settings.env_file))}"


@pytest.fixture(scope="session")
def docker_compose_file() -> list[str]:
    return [str(f) for f in STACK_FILES]


@pytest.fixture(scope="session")
def docker_compose_project_name(settings) -> str:
    return settings.project


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    # `up` starts `client` only once `sglang` is healthy (depends_on: service_healthy), so it returns then.
    return ["up -d"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    # The stack, its network, its cache volume and the containers' anonymous volumes; gone already is fine.
    return ["down -v --timeout 10"]


@pytest.fixture(scope="session")
def docker_services(
    docker_compose_command, docker_compose_file, docker_compose_project_name, docker_setup, docker_cleanup, settings
) -> Iterator[Services]:
    """pytest-docker's fixture, with the stack brought down however `up` ends (see `stack_up`)."""
    executor = DockerComposeExecutor(docker_compose_command, docker_compose_file, docker_compose_project_name)
    with stack_up(executor.execute, docker_setup, docker_cleanup, settings.api_key):
        yield Services(executor)


@contextlib.contextmanager
def stack_up(execute: Callable[[str], bytes], setup: list[str], cleanup: list[str], key: str) -> Iterator[None]:
    """The setup commands, the block, then the cleanup commands, which run however `up` ends (pytest-docker 3.2.6 runs
    its setup outside the try that cleans up: a failed `up` left the project's containers behind). A failed setup
    command fails the fixture with its output and the stack's logs, the key masked in both."""
    try:
        for command in setup:
            try:
                execute(command)
            except Exception as exc:  # pytest-docker's: the command, its exit status and its output
                try:
                    logs = execute("logs --no-color --timestamps --tail 200").decode(errors="replace")
                except Exception as why:
                    logs = f"(none: {why})"
                pytest.fail(mask(f"{exc}\nthe stack's logs:\n{logs}", key), pytrace=False)
        yield
    finally:
        for command in cleanup:
            execute(command)
