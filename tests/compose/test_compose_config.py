"""compose.yaml and .env.example as `docker compose config` resolves them (no engine, no image needed): the
settings the issue asks for, the plan's values, the keys (secrets, and a key file variable set in .env reaching the
container, where the entrypoint reads it or refuses it), compose.yaml passing only what the image reads, and an
example env file that lists every variable the image reads (environment.read_by_image, every track) and every
variable compose.yaml reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sm120.bench import docker_runner
from sm120.image.entrypoint import environment, key_file
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests import entrypoint_helpers as eh
from tests.compose.conftest import (
    _ASSIGNMENT,
    CHECK,
    COMPOSE_FILE,
    ENV_EXAMPLE,
    NO_GPU,
    SERVICE,
    STACK_FILES,
    STANDIN,
    example_assignments,
    plan_image_tag,
    render_env,
    run_compose,
)

PLAN = planmod.resolve(cfg.load())
PROJECT = "sm120-compose-config"
# The example's section for what the image reads but compose.yaml does not pass.
NOT_PASSED_HEADING = "Read by the image, but not set from here"
# Each key file variable, the setting that names its host file, and the secret compose.yaml mounts it as.
KEY_FILES = {
    key_file.VARIABLE: ("API_KEY_SECRET", "api_key"),
    key_file.ADMIN_VARIABLE: ("ADMIN_API_KEY_SECRET", "admin_api_key"),
}


def resolved(compose, tmp_path: Path, values: dict[str, str] | None = None, files=None, **extra_env: str) -> dict:
    env_file = tmp_path / "example.env"
    env_file.write_text(render_env(values or {}))
    proc = run_compose(
        compose, env_file, files or [COMPOSE_FILE], PROJECT, "config", "--format", "json", extra_env=extra_env
    )
    assert proc.returncode == 0, f"`compose config` failed:\n{proc.stderr}"
    return json.loads(proc.stdout)


def entrypoint_variables() -> set[str]:
    """Every variable the image reads, on any track: the entrypoint's one list of them (environment.read_by_image:
    its variable table, the key files, the plan, GPU and cache variables, the symmetric-memory limit) with each
    track's runtime rules (its plan's entrypoint spec)."""
    config = cfg.load()
    names: set[str] = set()
    for track in config.tracks:
        names |= environment.read_by_image(planmod.resolve(config, sglang=track).entrypoint)
    return names


def not_passed_section() -> set[str]:
    """The names the example's last section lists: each line `# NAME, NAME: why` (continuations are indented)."""
    text = ENV_EXAMPLE.read_text()
    assert NOT_PASSED_HEADING in text, f".env.example lacks its section '{NOT_PASSED_HEADING}'"
    section = text.split(NOT_PASSED_HEADING, 1)[1]
    heads = re.findall(r"^# ([A-Z][A-Z0-9_]*(?:, [A-Z][A-Z0-9_]*)*):", section, flags=re.MULTILINE)
    return {name for head in heads for name in head.split(", ")}


def test_compose_config_accepts_the_file_with_the_example_env(compose, tmp_path):
    data = resolved(compose, tmp_path)
    assert sorted(data["services"]) == sorted([SERVICE, CHECK]), "one service for the image, and its check"
    svc = data["services"][SERVICE]
    example = example_assignments()
    assert svc["image"] == example["SGLANG_IMAGE"]
    assert svc["command"] == [example["MODE"]] == ["baseline"]
    assert svc["ipc"] == "host"
    assert svc["restart"] == "unless-stopped"
    assert "healthcheck" not in svc, "compose.yaml must leave the image's HEALTHCHECK alone"


def test_a_start_the_entrypoint_refuses_is_checked_first_not_restarted_for_ever(compose, tmp_path):
    """Issue 24: under `restart: unless-stopped` an exit-2 start (a MODE the entrypoint refuses) would restart
    with Docker's back-off for ever. `check` runs the same request with --dry-run, once, and `sglang` starts only
    after it passed: the same image, variables and mounts, no port, no GPU, no restart."""
    services = resolved(compose, tmp_path, {"MODE": "eagle3", "TP_SIZE": "4"})["services"]
    check, svc = services[CHECK], services[SERVICE]
    assert svc["depends_on"] == {CHECK: {"condition": "service_completed_successfully", "required": True}}
    assert svc["restart"] == "unless-stopped"
    assert check["command"] == ["eagle3", "--dry-run"]
    assert check["restart"] == "no"
    for key in ("image", "environment", "volumes", "ipc"):
        assert check[key] == svc[key], key
    for key in ("ports", "deploy", "depends_on"):
        assert key not in check, key
    assert check["healthcheck"] == {"disable": True}


def test_every_gpu_is_reserved(compose, tmp_path):
    devices = resolved(compose, tmp_path)["services"][SERVICE]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"capabilities": ["gpu"], "driver": "nvidia", "count": -1}], devices  # -1 = all


def test_the_mode_is_chosen_by_an_env_variable(compose, tmp_path):
    assert resolved(compose, tmp_path, {"MODE": "eagle3"})["services"][SERVICE]["command"] == ["eagle3"]
    # The shell wins over .env: `MODE=eagle3 docker compose up -d`.
    assert resolved(compose, tmp_path, MODE="eagle3")["services"][SERVICE]["command"] == ["eagle3"]


def test_models_read_only_cache_volume_and_port_follow_the_plan(compose, tmp_path):
    data = resolved(compose, tmp_path)
    svc = data["services"][SERVICE]
    models = next(v for v in svc["volumes"] if v["target"] == "/models")
    assert models["type"] == "bind" and models["read_only"] is True
    assert models["source"] == example_assignments()["MODELS_DIR"]
    cache = next(v for v in svc["volumes"] if v["type"] == "volume")
    assert cache["target"] == PLAN.image.cache_dir, "the cache volume must sit on the image's cache directory"
    assert data["volumes"][cache["source"]]["name"] == "sglang-cache"
    (port,) = svc["ports"]
    port_number = PLAN.image.port
    assert (port["host_ip"], int(port["published"]), port["target"]) == ("127.0.0.1", port_number, port_number)
    assert svc["environment"]["PORT"] == str(PLAN.image.port)


def test_port_and_publishing_follow_the_env(compose, tmp_path):
    svc = resolved(compose, tmp_path, {"PORT": "31000", "HOST_PORT": "8080", "BIND_ADDRESS": "0.0.0.0"})["services"][
        SERVICE
    ]
    (port,) = svc["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("0.0.0.0", "8080", 31000)
    assert svc["environment"]["PORT"] == "31000", "the HEALTHCHECK reads PORT: it must be the port SGLang uses"


def test_the_stop_grace_period_covers_sglangs_drain(compose, tmp_path):
    # SGLang 0.5.9/0.5.23 (tokenizer_manager.sigterm_watchdog) notices SIGTERM within 5 s and re-checks the
    # requests in flight every 5 s: Docker's default 10 s would SIGKILL it mid-drain.
    assert resolved(compose, tmp_path)["services"][SERVICE]["stop_grace_period"] == "2m0s"
    assert resolved(compose, tmp_path, {"STOP_GRACE_PERIOD": "30s"})["services"][SERVICE]["stop_grace_period"] == "30s"


def test_a_missing_image_or_models_dir_is_named(compose, tmp_path):
    for name in ("SGLANG_IMAGE", "MODELS_DIR"):
        template = "\n".join(line for line in ENV_EXAMPLE.read_text().splitlines() if not line.startswith(f"{name}="))
        env_file = tmp_path / f"no-{name}.env"
        env_file.write_text(template + "\n")
        proc = run_compose(compose, env_file, [COMPOSE_FILE], PROJECT, "config")
        assert proc.returncode != 0
        assert name in proc.stderr and ".env" in proc.stderr, proc.stderr


def test_the_example_image_is_the_one_dev_build_makes():
    """`cp .env.example .env; docker compose up` must find the image `./dev build` made, not try to pull another."""
    tag = plan_image_tag()
    assert example_assignments()["SGLANG_IMAGE"] == tag, (
        f".env.example's SGLANG_IMAGE is not {tag}, the image ./dev build makes (`build.py plan --profile offline "
        "--json`: tags[0])"
    )


def test_the_example_lists_every_variable_the_image_reads(compose, tmp_path):
    names = entrypoint_variables()
    assert {"MODEL_PATH", "SM120_PLAN", "CUDA_VISIBLE_DEVICES", "SGLANG_ENABLE_JIT_DEEPGEMM"} <= names
    assert set(KEY_FILES) <= names
    text = ENV_EXAMPLE.read_text()
    absent = sorted(n for n in names if not re.search(rf"\b{n}\b", text))
    assert not absent, f".env.example does not mention {absent}"
    passed = set(resolved(compose, tmp_path)["services"][SERVICE]["environment"])
    not_passed = not_passed_section()
    assert not passed & not_passed, f"listed as not passed, but compose.yaml passes {sorted(passed & not_passed)}"
    assert not not_passed - names, f".env.example lists {sorted(not_passed - names)} as read, but the image does not"
    unexplained = sorted(names - passed - not_passed)
    assert not unexplained, f"compose.yaml does not pass {unexplained}, and .env.example does not say why"
    lacking = sorted(passed - set(example_assignments()))
    assert not lacking, f"compose.yaml passes {lacking}, but .env.example has no NAME= line for them"


def test_compose_passes_only_what_the_image_reads(compose, tmp_path):
    """Every variable the server's (and the check's) environment holds is one the image reads (on some track)."""
    services = resolved(compose, tmp_path)["services"]
    names = entrypoint_variables()
    for name in (SERVICE, CHECK):
        extra = sorted(set(services[name]["environment"]) - names)
        assert not extra, f"compose.yaml passes {extra} to {name}, which the image does not read"


def test_the_keys_are_secrets_mounted_and_named_only_when_set(compose, tmp_path):
    """API_KEY_SECRET and ADMIN_API_KEY_SECRET set: each file is a secret, and its *_FILE variable names where Compose
    mounts it (the API key's: the path bench --image uses too), on the server and its check; unset: the variables
    empty (no key: the entrypoint warns), /dev/null unread."""
    unset = resolved(compose, tmp_path)
    for variable, (_, secret_name) in KEY_FILES.items():
        assert unset["services"][SERVICE]["environment"][variable] == ""
        assert unset["secrets"][secret_name]["file"] == "/dev/null"
    values, contents = {}, {}
    for variable, (setting, _) in KEY_FILES.items():
        key = tmp_path / setting.lower()
        contents[variable] = f"{setting.lower()}-of-the-test-0123456789"
        key.write_text(contents[variable] + "\n")
        values[setting] = str(key)
    config = resolved(compose, tmp_path, values)
    for name in (SERVICE, CHECK):
        service = config["services"][name]
        mounted = {s["source"]: s["target"] for s in service["secrets"]}
        assert sorted(mounted) == sorted(secret for _, secret in KEY_FILES.values())
        for variable, (setting, secret_name) in KEY_FILES.items():
            assert config["secrets"][secret_name]["file"] == values[setting]
            assert service["environment"][variable] == mounted[secret_name]
    assert config["services"][SERVICE]["environment"][key_file.VARIABLE] == docker_runner.KEY_MOUNT
    assert len(set(mounted.values())) == len(mounted), "two secrets, two paths"
    assert not any(text in json.dumps(config) for text in contents.values()), "a key in the configuration"


@pytest.mark.parametrize("variable", sorted(KEY_FILES))
@pytest.mark.parametrize("where", ["env-file", "shell"])
def test_a_key_file_variable_set_in_env_reaches_the_container(compose, tmp_path, variable, where):
    """The known bug: API_KEY_FILE set in .env was dropped, and the server started without a key. Now a key file
    variable set in .env (or the shell) reaches the server and its check as it is, over the secret's path."""
    setting, _ = KEY_FILES[variable]
    path = "/models/keys/key-file"  # a path in the container (here: under the models mount)
    secret = tmp_path / "secret-key"
    secret.write_text("a-secret-of-the-test-0123456789\n")
    values = {setting: str(secret)}
    if where == "env-file":
        config = resolved(compose, tmp_path, {**values, variable: path})
    else:
        config = resolved(compose, tmp_path, values, **{variable: path})
    for name in (SERVICE, CHECK):
        assert config["services"][name]["environment"][variable] == path
    # Without the secret too.
    alone = resolved(compose, tmp_path, {variable: path})
    assert alone["services"][SERVICE]["environment"][variable] == path


@pytest.mark.parametrize("variable", sorted(KEY_FILES))
def test_a_key_file_the_container_lacks_stops_the_check(compose, tmp_path, variable):
    """A host path in API_KEY_FILE (the likely mistake) is not in the container: the check service's entrypoint, with
    the environment Compose gives it, exits 2 naming the variable, so `up` never starts the server without the key.
    Run here with the stand-in SGLang (the image's own check is the same code: tests/compose/test_compose_stack.py
    runs the image)."""
    host_path = "/etc/sglang/sm120-test-no-such-key"
    check = resolved(compose, tmp_path, {variable: host_path})["services"][CHECK]
    assert check["environment"][variable] == host_path
    run = eh.standin_run(tmp_path)
    keys = {k: v for k, v in check["environment"].items() if k in KEY_FILES and v}
    proc = eh.run_entrypoint(check["command"], {**run["env"], **keys})
    assert proc.returncode == 2, proc.stderr
    # (The path is not shown: a value that names no file may be the key itself, pasted where its path goes.)
    assert proc.stderr.startswith(f"entrypoint: error: {variable} ") and "Traceback" not in proc.stderr


def test_the_example_sets_every_variable_compose_yaml_reads():
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", COMPOSE_FILE.read_text()))
    assert {"SGLANG_IMAGE", "MODE", "MODELS_DIR", "PORT"} <= used
    lacking = sorted(used - set(example_assignments()))
    assert not lacking, f"compose.yaml reads {lacking}, but .env.example has no line for them"


def test_every_example_line_is_commented():
    """Each NAME= line of the example has a comment line right above it or belongs to a commented group."""
    lines = ENV_EXAMPLE.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[A-Z][A-Z0-9_]*=", line):
            above = lines[i - 1] if i else ""
            assert above.startswith("#"), f".env.example line {i + 1} ({line}) has no comment above it"


def test_the_test_overrides_drop_only_the_gpu_reservation(compose, tmp_path):
    plain = resolved(compose, tmp_path)["services"][SERVICE]
    no_gpu = resolved(compose, tmp_path, files=[COMPOSE_FILE, NO_GPU])["services"][SERVICE]
    assert "deploy" in plain and "deploy" not in no_gpu
    assert {k: v for k, v in plain.items() if k != "deploy"} == no_gpu
    stack = resolved(compose, tmp_path, files=STACK_FILES)["services"]
    assert "test" not in stack[SERVICE]["healthcheck"], "the override must keep the image's HEALTHCHECK command"
    assert stack["client"]["depends_on"][SERVICE]["condition"] == "service_healthy"


@pytest.mark.parametrize("path", [COMPOSE_FILE, NO_GPU, STANDIN], ids=lambda p: p.name)
def test_no_image_tag_or_version_is_written_in_a_compose_file(path):
    text = path.read_text()
    for tag in {planmod.resolve(cfg.load(), profile=p).tags[0] for p in cfg.load().profiles}:
        assert tag not in text, f"{path.name} names the tag {tag}: it comes from .env (the plan's)"
    assert not re.search(r"sglang-sm120:\d", text), f"{path.name} names an image tag"


def test_each_setting_has_one_line_in_the_example():
    names = [m[1] for line in ENV_EXAMPLE.read_text().splitlines() if (m := _ASSIGNMENT.match(line))]
    assert len(names) == len(set(names)), f"a setting has two lines: {sorted(n for n in names if names.count(n) > 1)}"
