"""T0: the README's commands work as written, and the README stays short.

Every fenced shell block of README.md is read as a shell would split it (continuation lines joined, comments,
pipes, `&&` and redirections), and each command is checked:

- `./dev SUBCOMMAND`: `./dev --help` lists it;
- `python3 build.py ...`: build.py's own argument parser takes it (its arguments up to `--help`: the subcommand,
  every option value it checks), and every option it names is in that subcommand's `--help`; images are the
  plan's tags;
- `docker run ... IMAGE MODE ...`: the image is one the plan tags (offline, or a registry's release tag), and the
  same variables, mounts and arguments go to the entrypoint's `--dry-run` (docker/entrypoint.py as the image runs
  it, with the track's real plan and a stand-in SGLang of that release; container paths under the mounts become
  directories of the test, with a config.json like the model's): it must exit 0, print the SGLang command, and
  show an API key only as `********`;
- `docker pull`: a registry's release tag of the plan; `docker compose`: a subcommand compose.yaml's users run
  (compose.yaml itself is checked by test_readme_compose.py);
- `curl`: a URL on the port a `docker run` of the README publishes, an SGLang route, and JSON data that parses;
- `cp`: the source file exists in the checkout; a few system tools (openssl, tee, mkdir, chown, chmod, cat) are
  taken as written. Any other program fails the test: a new kind of command needs a check here.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from sm120 import cli
from tests.entrypoint_helpers import clean_env, eagle3_draft, fake_sglang, kimi_target, run_entrypoint

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 200
SHELL_FENCES = {"sh", "bash", "shell", "console"}
SYSTEM_TOOLS = {"openssl", "tee", "mkdir", "chown", "chmod", "cat"}
SEPARATORS = {";", "&&", "||", "|", "&"}
REDIRECTIONS = {">", ">>", "<", ">&", "<&"}
KEY_MASK = "'********'"
# The model directories the README's commands name under a mount, and a config.json like each one's.
MODEL_DIRS = {
    "Kimi-K2.5-NVFP4": lambda path: kimi_target(path),
    "kimi-k2.5-eagle3-mla": lambda path: eagle3_draft(path, architecture="Eagle3DeepseekV2ForCausalLM"),
}
# What `-e NAME` (no value: Docker takes it from the shell) gets in the test.
FROM_THE_SHELL = {"HF_TOKEN": "hf_a_token_of_the_test"}
# SGLang's HTTP routes a README request may use (OpenAI-compatible API, health, server info).
SGLANG_ROUTES = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/generate"}
COMPOSE_SUBCOMMANDS = {"up", "down", "ps", "logs", "run", "config", "stop", "pull"}


# ---------------------------------------------------------------------------------------------------------------
# Reading the README's commands
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Command:
    argv: list[str]
    line: int  # README line where its block starts

    def __str__(self) -> str:
        return f"README.md block at line {self.line}: {shlex.join(self.argv)}"


def shell_blocks(text: str) -> list[tuple[int, str]]:
    """(line of the opening fence, body) for every fenced block whose info string is a shell."""
    blocks, body, start, fence = [], [], 0, None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None:
            m = re.match(r"^(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if m:
                fence, lang, start, body = m[1], m[2].lower(), number, []
                if lang not in SHELL_FENCES:
                    lang = None
                blocks.append((start, lang, body))
        elif stripped.startswith(fence) and not stripped.strip(fence[0]):
            fence = None
        else:
            body.append(line)
    assert fence is None, f"README.md: the block opened at line {start} is never closed"
    return [(start, "\n".join(lines)) for start, lang, lines in blocks if lang]


def split_commands(block: str) -> list[list[str]]:
    """The simple commands of a block: continuations joined, comments dropped, split at ; && || | &,
    redirections and `sudo` removed."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        current: list[str] = []
        skip_next = False
        for token in [*tokens, ";"]:
            if skip_next:
                skip_next = False
            elif token in REDIRECTIONS:
                skip_next = True
            elif token in SEPARATORS:
                while current and current[0] == "sudo":
                    current.pop(0)
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(token)
    return commands


def readme_commands() -> list[Command]:
    return [Command(argv, start) for start, body in shell_blocks(README.read_text()) for argv in split_commands(body)]


# ---------------------------------------------------------------------------------------------------------------
# The plan's images, per track
# ---------------------------------------------------------------------------------------------------------------


def build_py(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """build.py's main in this process (a process would add only the interpreter's start): exit status, output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse: --help (0), a usage error (2)
            code = exc.code if isinstance(exc.code, int) else 0
    proc = subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
    if check:
        assert proc.returncode == 0, f"build.py {shlex.join(args)} failed:\n{proc.stderr}"
    return proc


@cache
def plan_json(profile: str, track: str | None = None) -> dict:
    args = ["plan", "--json", "--profile", profile] + (["--sglang", track] if track else [])
    return json.loads(build_py(*args).stdout)


@cache
def tracks() -> tuple[str, ...]:
    return tuple(plan_json("offline")["tracks"])


@cache
def image_tracks() -> dict[str, tuple[str, str]]:
    """Every tag the plan gives an image -> (profile, track)."""
    return {
        tag: (profile, track)
        for profile in ("offline", "release")
        for track in tracks()
        for tag in plan_json(profile, track)["tags"]
    }


def image_track(image: str) -> tuple[str, str]:
    """(profile, track) of an image the README names: a plan tag as `./dev build` makes it, or a release tag
    under a registry (`ghcr.io/OWNER/...`)."""
    known = image_tracks()
    if image in known:
        return known[image]
    registry, _, tag = image.rpartition("/")
    assert registry and tag in known and known[tag][0] == "release", (
        f"the README names the image {image!r}: neither a tag the plan makes ({sorted(known)}) nor a release tag "
        "under a registry (ghcr.io/OWNER/<release tag>)"
    )
    return known[tag]


# ---------------------------------------------------------------------------------------------------------------
# docker run -> the entrypoint's --dry-run
# ---------------------------------------------------------------------------------------------------------------

DOCKER_VALUE_OPTIONS = {
    "-p": "publish",
    "--publish": "publish",
    "-v": "volume",
    "--volume": "volume",
    "-e": "env",
    "--env": "env",
    "--gpus": "gpus",
    "--ipc": "ipc",
    "--shm-size": "shm",
    "--name": "name",
    "-u": "user",
    "--user": "user",
}
DOCKER_FLAGS = {"--rm", "-d", "--detach", "-i", "-t", "-it", "--init"}


@dataclass
class DockerRun:
    options: dict[str, list[str]] = field(default_factory=dict)
    image: str = ""
    args: list[str] = field(default_factory=list)


def parse_docker_run(argv: list[str]) -> DockerRun:
    run = DockerRun()
    rest = list(argv)
    while rest:
        token = rest.pop(0)
        name, eq, value = token.partition("=")
        if name in DOCKER_VALUE_OPTIONS:
            if not eq:
                assert rest, f"docker run: {name} without a value"
                value = rest.pop(0)
            run.options.setdefault(DOCKER_VALUE_OPTIONS[name], []).append(value)
        elif token in DOCKER_FLAGS:
            continue
        elif token.startswith("-"):
            pytest.fail(f"docker run: the option {token} is not one this test knows: add it to DOCKER_VALUE_OPTIONS")
        else:
            run.image, run.args = token, rest
            break
    assert run.image, "docker run without an image"
    return run


def published_ports(run: DockerRun) -> list[tuple[int, int]]:
    """(host port, container port) of each -p."""
    ports = []
    for spec in run.options.get("publish", []):
        parts = spec.split(":")
        assert len(parts) in (2, 3), f"-p {spec}: expected [ADDRESS:]HOST:CONTAINER"
        ports.append((int(parts[-2]), int(parts[-1].split("/")[0])))
    return ports


def dry_run_env(run: DockerRun, plan: dict, track: str, tmp: Path) -> tuple[dict[str, str], dict[str, Path]]:
    """The entrypoint's environment for the README's `docker run`: the variables as given, container paths under
    a bind mount moved into the test's directory (model directories and key files made there), the named volume
    on the plan's cache directory replaced by one of the test's."""
    cache_dir = plan["entrypoint"]["cache_dir"]
    mounts: dict[str, Path] = {}
    for spec in run.options.get("volume", []):
        source, target, *mode = spec.split(":")
        assert target.startswith("/"), f"-v {spec}: the target must be a path in the container"
        if "/" not in source:  # a named volume
            assert target == cache_dir, f"-v {spec}: the named volume belongs on the image's cache directory"
            continue
        assert mode in ([], ["ro"], ["rw"]), f"-v {spec}: unexpected mount options"
        mounts[target] = tmp / "root" / target.lstrip("/")
    env: dict[str, str] = {}
    for spec in run.options.get("env", []):
        name, eq, value = spec.partition("=")
        if not eq:
            assert name in FROM_THE_SHELL, f"-e {name} takes its value from the shell: add it to FROM_THE_SHELL"
            value = FROM_THE_SHELL[name]
        for target, local in mounts.items():
            if value == target or value.startswith(target + "/"):
                value = str(local) + value[len(target) :]
        env[name] = value
    for name in ("MODEL_PATH", "DRAFT_MODEL_PATH"):
        path = Path(env[name]) if env.get(name, "").startswith(str(tmp)) else None
        if path is not None:
            assert path.name in MODEL_DIRS, (
                f"{name}={path.name}: a model directory this test cannot stand in for (add it to MODEL_DIRS)"
            )
            MODEL_DIRS[path.name](path)
    if env.get("API_KEY_FILE", "").startswith(str(tmp)):
        key = Path(env["API_KEY_FILE"])
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_text("a-key-of-the-readme-test-0123456789\n")
        key.chmod(0o400)
    (tmp / "cache").mkdir(exist_ok=True)
    version_at_least_0_5_12 = tuple(int(p) for p in track.split(".")) >= (0, 5, 12)
    site = fake_sglang(tmp / "site", version=track, kimi_hooks=True, mla_drafter=version_at_least_0_5_12)
    plan_file = tmp / "plan.json"
    plan_file.write_text(json.dumps(plan))
    full = clean_env(SM120_PLAN=str(plan_file), PYTHONPATH=str(site), SM120_CACHE_DIR=str(tmp / "cache"), **env)
    return full, mounts


def check_docker_run(command: Command, tmp: Path) -> None:
    run = parse_docker_run(command.argv[2:])
    _, track = image_track(run.image)
    plan = plan_json("offline", track)  # what the image holds as /etc/sglang-sm120/plan.json (its entrypoint part)
    assert run.options.get("gpus") == ["all"], f"{command}: --gpus all is missing"
    assert run.options.get("ipc") == ["host"] or run.options.get("shm"), f"{command}: no --ipc=host or --shm-size"
    env, _ = dry_run_env(run, plan, track, tmp)
    port = int(env.get("PORT", plan["entrypoint"]["port"]))
    assert all(inside == port for _, inside in published_ports(run)), f"{command}: -p must publish port {port}"
    assert run.args, f"{command}: no mode after the image"
    proc = run_entrypoint([*run.args, "--dry-run"], env)
    assert proc.returncode == 0, f"{command}\nthe entrypoint's --dry-run exited {proc.returncode}:\n{proc.stderr}"
    sglang = proc.stdout.strip().splitlines()[-1]
    assert "-m sglang.launch_server" in sglang and f"--port {port}" in sglang, sglang
    model = env.get("MODEL_PATH")
    assert model and f"--model-path {shlex.quote(model)}" in sglang, f"{command}: {sglang}"
    if "API_KEY_FILE" in env:
        assert f"--api-key {KEY_MASK}" in sglang and "a-key-of-the-readme-test" not in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------------------------
# ./dev, build.py, docker pull/compose, curl, cp
# ---------------------------------------------------------------------------------------------------------------


@cache
def dev_subcommands() -> set[str]:
    """What `./dev --help` lists (its help, or the usage line an older ./dev prints with exit 2)."""
    proc = subprocess.run([str(ROOT / "dev"), "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    found = set(re.findall(r"(?:^|\s|\|)\./dev (\w[\w-]*)", proc.stdout + proc.stderr))
    assert {"build", "test"} <= found, f"./dev --help lists {sorted(found)}"
    return found


def check_dev(command: Command) -> None:
    argv = command.argv
    assert len(argv) >= 2, f"{command}: ./dev needs a subcommand"
    assert argv[1] in dev_subcommands(), f"{command}: `./dev --help` lists {sorted(dev_subcommands())}"
    if argv[1] == "build" and len(argv) > 2:  # ./dev build passes its options to build.py build
        check_build_py_args(command, ["build", *argv[2:]])


def check_build_py_args(command: Command, args: list[str]) -> None:
    """build.py's parser takes the arguments: with --help after them it checks the subcommand and every option
    value up to there, then prints that subcommand's help, where every option named must appear."""
    proc = build_py(*args, "--help", check=False)
    assert proc.returncode == 0, f"{command}: build.py does not take it:\n{proc.stderr}"
    for token in args:
        if token.startswith("--"):
            option = token.split("=", 1)[0]
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", proc.stdout), (
                f"{command}: build.py {args[0]} has no option {option}"
            )
    for i, token in enumerate(args[:-1]):
        if token == "--image":
            image_track(args[i + 1])


def check_build_py(command: Command) -> None:
    argv = command.argv
    assert len(argv) >= 3, f"{command}: build.py needs a command"
    check_build_py_args(command, argv[2:])


def check_docker(command: Command, tmp: Path) -> None:
    sub = command.argv[1] if len(command.argv) > 1 else ""
    if sub == "run":
        check_docker_run(command, tmp)
    elif sub == "pull":
        profile, _ = image_track(command.argv[-1])
        assert profile == "release" and "/" in command.argv[-1], f"{command}: pull a registry's release tag"
    elif sub == "compose":
        words = [a for a in command.argv[2:] if not a.startswith("-")]
        assert words and words[0] in COMPOSE_SUBCOMMANDS, f"{command}: not a Compose subcommand this README uses"
    else:
        pytest.fail(f"{command}: a docker subcommand this test has no check for")


def readme_ports() -> set[int]:
    ports = set()
    for command in readme_commands():
        if command.argv[:2] == ["docker", "run"]:
            ports |= {host for host, _ in published_ports(parse_docker_run(command.argv[2:]))}
    return ports


def check_curl(command: Command) -> None:
    urls = [a for a in command.argv if re.match(r"https?://", a)]
    assert len(urls) == 1, f"{command}: one URL expected"
    m = re.match(r"https?://(localhost|127\.0\.0\.1)(?::(\d+))?(/[^?]*)?", urls[0])
    assert m, f"{command}: the URL must be the local server"
    port = int(m[2] or 80)
    assert port in readme_ports(), f"{command}: port {port} is not one a `docker run` of the README publishes"
    assert (m[3] or "/") in SGLANG_ROUTES, f"{command}: {m[3]} is not an SGLang route this README uses"
    argv = command.argv
    for i, token in enumerate(argv[:-1]):
        if token in ("-d", "--data", "--data-raw"):
            json.loads(argv[i + 1])  # raises, naming the position, if the body is not JSON
        if token in ("-H", "--header"):
            assert re.match(r"^[A-Za-z-]+: \S", argv[i + 1]), f"{command}: header {argv[i + 1]!r}"


def check_cp(command: Command) -> None:
    sources = [a for a in command.argv[1:-1] if not a.startswith("-")]
    assert sources, f"{command}: nothing to copy"
    for source in sources:
        assert (ROOT / source).is_file(), f"{command}: {source} is not a file of the checkout"


def check(command: Command, tmp: Path) -> None:
    program = command.argv[0]
    if program == "./dev":
        check_dev(command)
    elif Path(program).name.startswith("python") and command.argv[1:2] == ["build.py"]:
        check_build_py(command)
    elif program == "docker":
        check_docker(command, tmp)
    elif program == "curl":
        check_curl(command)
    elif program == "cp":
        check_cp(command)
    elif program not in SYSTEM_TOOLS:
        pytest.fail(f"{command}: this test has no check for `{program}`: add one")


# ---------------------------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------------------------

COMMANDS = readme_commands()


def test_the_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines: at most {MAX_LINES} (move the detail to docs/)"


def test_the_readme_has_the_commands_it_promises():
    programs = {shlex.join(c.argv[:2]) for c in COMMANDS}
    assert {"./dev build", "./dev test", "docker run"} <= programs, sorted(programs)
    runs = [c for c in COMMANDS if c.argv[:2] == ["docker", "run"]]
    modes = {parse_docker_run(c.argv[2:]).args[0] for c in runs}
    assert {"baseline", "eagle3"} <= modes, modes
    assert any("API_KEY_FILE" in " ".join(c.argv) for c in runs), "the API-key variant is missing"
    assert any(c.argv[0] == "curl" for c in COMMANDS), "no request to send the server"


def test_the_readme_names_the_image_dev_build_makes():
    tag = plan_json("offline")["tags"][0]
    images = {parse_docker_run(c.argv[2:]).image for c in COMMANDS if c.argv[:2] == ["docker", "run"]}
    assert images == {tag}, f"the README's docker run lines name {sorted(images)}; ./dev build makes {tag}"


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c.argv)[:60] for c in COMMANDS])
def test_each_readme_command(command: Command, tmp_path: Path):
    check(command, tmp_path)


# The checks themselves: a broken command is caught.


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ("./dev deploy", "./dev --help"),
        ("python3 build.py plann --json", "build.py does not take it"),
        ("python3 build.py plan --profile offline --jsn", "no option --jsn"),
        ("docker run --gpus all --ipc=host -p 30000:30000 no-such-image:1 baseline", "neither a tag the plan makes"),
        ("curl http://localhost:30000/v1/chat/completions -d '{\"model\": }'", "Expecting value"),
        ("curl http://localhost:8080/health", "port 8080"),
        ("cp .env.sample .env", "not a file of the checkout"),
        ("hf download Qwen/Qwen3-8B", "no check for `hf`"),
    ],
    ids=["dev", "build-py-command", "build-py-option", "image", "json", "port", "cp", "unknown-program"],
)
def test_a_broken_command_is_caught(block, says, tmp_path):
    (argv,) = split_commands(block)
    with pytest.raises((AssertionError, pytest.fail.Exception, json.JSONDecodeError)) as caught:
        check(Command(argv, 1), tmp_path)
    assert says in str(caught.value), str(caught.value)


def test_a_docker_run_the_entrypoint_refuses_is_caught(tmp_path):
    tag = plan_json("offline")["tags"][0]
    block = (
        f"docker run --gpus all --ipc=host -p 30000:30000 -v sglang-cache:/var/cache/sglang "
        f"-e MODEL_PATH=Qwen/Qwen3-8B -e TP_SIZE=eight {tag} baseline"
    )
    (argv,) = split_commands(block)
    with pytest.raises(AssertionError, match="--dry-run exited 2"):
        check(Command(argv, 1), tmp_path)


def test_shell_splitting():
    block = (
        "sudo mkdir -p /etc/x   # a comment\n"
        "openssl rand -hex 32 | sudo tee /etc/x/key >/dev/null\n"
        'curl http://h -H "Authorization: Bearer $(sudo cat /etc/x/key)" \\\n    -d \'{"a": "#1"}\'\n'
        "./dev build && ./dev test"
    )
    assert split_commands(block) == [
        ["mkdir", "-p", "/etc/x"],
        ["openssl", "rand", "-hex", "32"],
        ["tee", "/etc/x/key"],
        ["curl", "http://h", "-H", "Authorization: Bearer $(sudo cat /etc/x/key)", "-d", '{"a": "#1"}'],
        ["./dev", "build"],
        ["./dev", "test"],
    ]


def test_the_dry_run_gets_the_readmes_variables_and_mounts(tmp_path):
    """Only the README's variables and the test's plumbing reach the dry run, never the runner's own; container
    paths under a bind mount become the test's directories."""
    plan = plan_json("offline")
    argv = ["-v", "/models:/models", "-e", "MODEL_PATH=/models/Kimi-K2.5-NVFP4", "-e", "HF_TOKEN", plan["tags"][0]]
    env, mounts = dry_run_env(parse_docker_run([*argv, "baseline"]), plan, plan["sglang_version"], tmp_path)
    plumbing = {"PATH", "HOME", "LANG", "SM120_NVML_LIBRARY", "SM120_PLAN", "PYTHONPATH", "SM120_CACHE_DIR"}
    assert set(env) == plumbing | {"MODEL_PATH", "HF_TOKEN"}
    assert mounts == {"/models": tmp_path / "root" / "models"}
    assert env["MODEL_PATH"] == str(tmp_path / "root" / "models" / "Kimi-K2.5-NVFP4")
    assert (tmp_path / "root" / "models" / "Kimi-K2.5-NVFP4" / "config.json").is_file()
