"""T0: the entrypoint's exit-2 contract for bad input, as tables of cases.

1. files the image's user cannot read (run as another uid when the tests run as root: root reads everything);
2. abbreviations of SGLang options, from any layer, and SGLang's reading compared with the entrypoint's;
3. values that parse but cannot work (numbers not in plain ASCII digits, ~ paths), and --dry-run's last
   line, which stays the whole command whatever the paths hold;
4. numbers past CPython's 4300-digit int() limit (variables, EXTRA_ARGS, after `--`, config.json, the plan);
5. addresses that parse but cannot work: bracketed HOST forms uvicorn cannot bind, DIST_INIT_ADDR read like
   SGLang reads it (IPv4 octets, the port, [IPv6]) while host names keep working, an empty PORT (the
   HEALTHCHECK would probe port 80);
6. a FIFO where a file is read, and a full stdout (exit 1).
Each case: exit 2, at most three lines on stderr, the first naming the input, no traceback. What the entrypoint
reads from model directories is in test_entrypoint_models.py, its checks of ports and GPUs in
test_entrypoint_preflight.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.entrypoint_helpers import (
    ENTRYPOINT,
    RTX_PRO,
    clean_env,
    eagle3_draft,
    fake_nvidia_smi,
    kimi_target,
    run_entrypoint,
    standin_run,
    stderr_lines,
    synthetic_plan,
    write_model,
)

OTHER_UID = 65534  # nobody: what the image's uid 1000 is to a root-owned host directory


def assert_usage_error(proc: subprocess.CompletedProcess[str], *expected: str) -> None:
    lines = stderr_lines(proc)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert 1 <= len(lines) <= 3, proc.stderr
    assert lines[0].startswith("entrypoint: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for text in expected:
        assert text in proc.stderr, (text, proc.stderr)


BIG = "1" + "0" * 5000  # past int()'s 4300 digits
HEAD = BIG[:20]  # what a message shows of it (cut short, but naming it)


def assert_refused(proc: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert_usage_error(proc)  # exit 2, 1-3 lines, the first `entrypoint: error: `, no traceback
    assert "internal error" not in proc.stderr
    assert all(len(line) < 600 for line in stderr_lines(proc)), "a value must be shown cut short, not in full"
    first = stderr_lines(proc)[0]
    for text in expected:
        assert text in first or text in proc.stderr, (text, proc.stderr)


def dry_run_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr[-1500:]
    return proc.stdout.rstrip("\n").split("\n")[-1]


@pytest.fixture
def setup(tmp_path: Path) -> dict:
    """The stand-in SGLang on PYTHONPATH, 8 fake GPUs, a cache directory, a synthetic plan, two models."""
    return standin_run(tmp_path)


# --------------------------------------------------------------------------------------------------
# 1. Files the image's user cannot read
# --------------------------------------------------------------------------------------------------


def _python_for(uid: int) -> str | None:
    """An interpreter (3.10+) that uid can run: the entrypoint needs the standard library only."""
    for candidate in (sys.executable, shutil.which("python3") or "", "/usr/bin/python3"):
        if not candidate:
            continue
        try:
            ok = subprocess.run(
                [candidate, "-c", "import sys; assert sys.version_info >= (3, 10)"],
                user=uid,
                capture_output=True,
                timeout=30,
                check=False,
            )
        except OSError:
            continue
        if ok.returncode == 0:
            return candidate
    return None


@pytest.fixture
def unprivileged(request: pytest.FixtureRequest) -> Iterator[dict]:
    """A directory every user may enter, and how to run the entrypoint as a user that permissions bind.

    As root: the entrypoint runs as uid 65534 (root-owned files then behave as a root-owned host model folder
    does for the image's uid 1000). As another user: it runs as that user, and chmod does the rest.
    """
    root = os.geteuid() == 0
    uid = OTHER_UID if root else os.geteuid()
    python = _python_for(uid) if root else sys.executable
    if python is None:
        pytest.skip(f"no Python that uid {uid} may run (the tests' own lies under a private home)")
    base = Path(tempfile.mkdtemp(prefix="sm120-perm-"))
    base.chmod(0o755)
    plan = synthetic_plan(base / "plan.json")
    plan.chmod(0o644)
    (base / "cache").mkdir(mode=0o777)
    (base / "cache").chmod(0o777)
    target = kimi_target(base / "target")
    draft = eagle3_draft(base / "draft")
    for path in (target, draft):
        path.chmod(0o755)
        (path / "config.json").chmod(0o644)

    def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, str(ENTRYPOINT), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
            **({"user": uid} if root else {}),
        )

    env = clean_env(
        SM120_PLAN=str(plan),
        MODEL_PATH=str(target),
        DRAFT_MODEL_PATH=str(draft),
        SM120_CACHE_DIR=str(base / "cache"),
        HOME="/tmp",
    )
    yield {"base": base, "uid": uid, "run": run, "env": env, "root": root}
    for dirpath, dirnames, _ in os.walk(base):
        for name in dirnames:
            with_mode = Path(dirpath) / name
            if not with_mode.is_symlink():
                with_mode.chmod(0o755)
    shutil.rmtree(base, ignore_errors=True)


def _deny(path: Path) -> None:
    """Make path unreadable to the run's user (root-owned mode 700 / 600, as host model folders often are)."""
    path.chmod(0o700 if path.is_dir() else 0o600) if os.geteuid() == 0 else path.chmod(0)


def _model_dir_private(base: Path) -> dict[str, str]:
    _deny(base / "target")
    return {}


def _parent_private(base: Path) -> dict[str, str]:
    private = base / "private"
    private.mkdir()
    kimi_target(private / "model").chmod(0o755)
    _deny(private)
    return {"MODEL_PATH": str(private / "model")}


def _draft_private(base: Path) -> dict[str, str]:
    _deny(base / "draft")
    return {}


def _config_private(base: Path) -> dict[str, str]:
    _deny(base / "target" / "config.json")
    return {}


def _draft_config_private(base: Path) -> dict[str, str]:
    _deny(base / "draft" / "config.json")
    return {}


PERMISSION_CASES: list[tuple[str, list[str], Callable[[Path], dict[str, str]], str, list[str]]] = [
    # id, args, arrange, the path named, more text expected
    ("model-dir-700", ["eagle3", "--dry-run"], _model_dir_private, "target", ["MODEL_PATH="]),
    ("model-parent-700", ["baseline", "--dry-run"], _parent_private, "private", ["MODEL_PATH="]),
    ("draft-dir-700", ["eagle3", "--dry-run"], _draft_private, "draft", ["DRAFT_MODEL_PATH="]),
    ("config-600", ["baseline", "--dry-run"], _config_private, "target/config.json", ["MODEL_PATH="]),
    ("draft-config-600", ["eagle3", "--dry-run"], _draft_config_private, "draft/config.json", ["DRAFT_MODEL_PATH="]),
]


@pytest.mark.parametrize(
    ("args", "arrange", "named", "expected"), [c[1:] for c in PERMISSION_CASES], ids=[c[0] for c in PERMISSION_CASES]
)
def test_a_path_the_user_cannot_read_is_one_line(unprivileged, args, arrange, named, expected):
    env = {**unprivileged["env"], **arrange(unprivileged["base"])}
    proc = unprivileged["run"](args, env)
    assert_usage_error(proc, f"uid {unprivileged['uid']} cannot read {unprivileged['base'] / named}", *expected)
    assert len(stderr_lines(proc)) == 1  # one line: which path, which uid, what to change
    assert "chmod" in proc.stderr and "--user" in proc.stderr


def test_a_cache_directory_the_user_cannot_enter(unprivileged, tmp_path):
    base = unprivileged["base"]
    bin_dir = base / "bin"
    fake_nvidia_smi(bin_dir, [(RTX_PRO, "12.0")])
    bin_dir.chmod(0o755)
    private = base / "private-cache"
    private.mkdir()
    _deny(private)
    env = {**unprivileged["env"], "SM120_CACHE_DIR": str(private / "sglang"), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    proc = unprivileged["run"](["baseline"], env)
    assert_usage_error(proc, f"is not writable by uid {unprivileged['uid']}", f"cannot enter {private}", "--user")


def _deep(n: int) -> str:
    return "[" * n + "]" * n


CONFIG_CASES: list[tuple[str, Callable[[Path], None], list[str]]] = [
    ("config-is-a-directory", lambda d: (d / "config.json").mkdir(), ["config.json is a directory"]),
    ("config-is-a-list", lambda d: (d / "config.json").write_text("[1, 2]"), ["not a JSON object (a list)"]),
    ("config-is-a-string", lambda d: (d / "config.json").write_text('"x"'), ["not a JSON object (a str)"]),
    ("config-is-null", lambda d: (d / "config.json").write_text("null"), ["not a JSON object"]),
    ("config-nested-deeply", lambda d: (d / "config.json").write_text(_deep(200_000)), ["nested too deeply"]),
    ("config-not-utf8", lambda d: (d / "config.json").write_bytes(b'{"a": "\xff"}'), ["is not UTF-8"]),
    ("config-truncated", lambda d: (d / "config.json").write_text('{"architectures": ['), ["is not JSON"]),
    ("config-is-a-fifo", lambda d: os.mkfifo(d / "config.json"), ["is not a regular file"]),
    ("config-missing", lambda d: None, ["has no config.json"]),
]


@pytest.mark.parametrize("role", ["MODEL_PATH", "DRAFT_MODEL_PATH"])
@pytest.mark.parametrize(("arrange", "expected"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_a_config_json_that_cannot_be_a_config(setup, tmp_path, role, arrange, expected):
    model = tmp_path / "bad-model"
    model.mkdir()
    arrange(model)
    proc = run_entrypoint(["eagle3", "--dry-run"], {**setup["env"], role: str(model)}, timeout=60)
    assert_usage_error(proc, f"{role}=", *expected)


def test_odd_quantization_configs_do_not_break_the_checks(setup, tmp_path):
    odd = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "hidden_size": 7168,
        "quantization_config": {"quant_algo": "MIXED_PRECISION", "quantized_layers": ["not", "a", "table"]},
    }
    model = write_model(tmp_path / "odd", odd, {"hf_quant_config.json": _deep(100_000)})
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "MODEL_PATH": str(model)})
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------------------------------
# 2. Abbreviations, from every layer; SGLang's reading against the entrypoint's
# --------------------------------------------------------------------------------------------------

ABBREVIATION_CASES: list[tuple[str, list[str], dict[str, str], list[str]]] = [
    ("extra-args-tp", [], {"EXTRA_ARGS": "--tp 4"}, ["--tp '4' (in EXTRA_ARGS)", "abbreviation of --tp-size"]),
    ("after-dashes-node-r", ["--", "--node-r", "1"], {}, ["--node-r '1' (after --)", "abbreviation of --node-rank"]),
    ("inline-value", ["--", "--tp=4"], {}, ["--tp '4' (after --)", "--tp-size"]),
    ("model-prefix", ["--", "--model-p", "/x"], {}, ["--model-p", "--model-path"]),
    ("ambiguous", ["--", "--speculative-num", "3"], {}, ["abbreviation of 2 options", "--speculative-num-steps"]),
    ("port", ["--", "--po", "31000"], {}, ["--po '31000' (after --)", "--port"]),
    ("nnodes", [], {"EXTRA_ARGS": "--nnode 2"}, ["(in EXTRA_ARGS)", "--nnodes"]),
    ("flag", [], {"EXTRA_ARGS": "--enable-torch-symm"}, ["--enable-torch-symm (in EXTRA_ARGS)"]),
    ("dist-addr", ["--", "--dist-init", "h:1"], {}, ["--dist-init-addr"]),
    ("quantization", ["--", "--quant", "fp8"], {}, ["--quantization"]),
]


@pytest.mark.parametrize("with_sglang", [True, False], ids=["sglang", "no-sglang"])
@pytest.mark.parametrize(
    ("args", "changes", "expected"), [c[1:] for c in ABBREVIATION_CASES], ids=[c[0] for c in ABBREVIATION_CASES]
)
def test_abbreviations_are_refused(setup, with_sglang, args, changes, expected):
    env = {**setup["env"], **changes}
    if not with_sglang:  # the options the entrypoint relies on are known without SGLang too
        env.pop("PYTHONPATH")
    starts = [["--dry-run"], []] if "EXTRA_ARGS" in changes else [["--dry-run"]]
    for dry_run in starts:  # without --dry-run: refused before the GPU checks, which need the real TP size
        proc = run_entrypoint(["eagle3", *dry_run, *args], env)
        assert_usage_error(proc, *expected)
    assert not Path(env["FAKE_SGLANG_RECORD"]).exists()


def test_an_abbreviation_in_the_presets_is_refused_naming_them(setup, tmp_path):
    modes = {
        "baseline": {"summary": "s", "args": ["--speculative-algo", "EAGLE3"], "draft": False},
    }
    plan = synthetic_plan(tmp_path / "abbrev-plan.json", modes=modes)
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "SM120_PLAN": str(plan)})
    assert_usage_error(proc, "(preset baseline)", "abbreviation of --speculative-algorithm")


def test_an_abbreviation_in_a_runtime_rule_is_refused_naming_it(setup, tmp_path):
    rules = [{"name": "r", "when": ["always"], "env": {}, "args": ["--moe-runner", "triton"], "reason": "x"}]
    plan = synthetic_plan(tmp_path / "rule-plan.json", runtime=rules)
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "SM120_PLAN": str(plan)})
    assert_usage_error(proc, "(rule r)", "abbreviation of --moe-runner-backend")


def _alias(site: Path, option: str, alias: str) -> None:
    """Give an option of the stand-in SGLang one more spelling that the entrypoint does not know."""
    path = site / "sglang/srt/server_args.py"
    text = path.read_text()
    assert f'"{option}"' in text
    path.write_text(text.replace(f'"{option}"', f'"{option}", "{alias}"', 1))


READING_CASES: list[tuple[str, str, str, list[str], dict[str, str], list[str]]] = [
    # id, option, unknown alias, args, env, expected
    (
        "tp-over-variable",
        "--tp-size",
        "--tp-degree",
        ["--", "--tp-degree", "4"],
        {"TP_SIZE": "8"},
        ["SGLang 9.9.9 reads --tp-size as 4, the entrypoint checked TP_SIZE='8'"],
    ),
    (
        "tp-unseen",
        "--tp-size",
        "--tp-degree",
        ["--", "--tp-degree", "4"],
        {},
        ["reads --tp-size as 4, the entrypoint checked no --tp-size (SGLang's default 1)"],
    ),
    (
        "node-rank",
        "--node-rank",
        "--rank-of-node",
        ["--", "--rank-of-node", "1"],
        {},
        ["reads --node-rank as 1"],
    ),
    (
        "a-rule-flag",
        "--enable-torch-symm-mem",
        "--symm",
        ["--", "--symm"],
        {},
        ["reads --enable-torch-symm-mem as True"],
    ),
    (
        "speculative-steps",
        "--speculative-num-steps",
        "--spec-steps",
        ["--", "--spec-steps", "9"],
        {},
        ["reads --speculative-num-steps as 9, the entrypoint checked --speculative-num-steps '2' (preset eagle3)"],
    ),
]


@pytest.mark.parametrize(
    ("option", "alias", "args", "changes", "expected"),
    [c[1:] for c in READING_CASES],
    ids=[c[0] for c in READING_CASES],
)
def test_sglang_must_read_what_the_entrypoint_checked(setup, option, alias, args, changes, expected):
    _alias(setup["site"], option, alias)
    proc = run_entrypoint(["eagle3", "--dry-run", *args], {**setup["env"], **changes})
    assert_usage_error(proc, *expected, "write SGLang's options in full")


UNKNOWN_CASES = [
    ("typo", ["--", "--prot", "31000"], ["does not accept", "perhaps you meant --port"]),
    ("typo-inline", ["--", "--tp-sze=4"], ["perhaps you meant --tp-size"]),
    ("single-dash", ["--", "-tp", "4"], ["does not accept"]),
]


@pytest.mark.parametrize(("args", "expected"), [c[1:] for c in UNKNOWN_CASES], ids=[c[0] for c in UNKNOWN_CASES])
def test_unknown_options_get_a_suggestion(setup, args, expected):
    proc = run_entrypoint(["baseline", "--dry-run", *args], setup["env"])
    assert_usage_error(proc, *expected)


def test_full_spellings_and_known_aliases_still_pass(setup):
    args = ["--", "--tensor-parallel-size", "2", "--model", setup["env"]["MODEL_PATH"], "--mem-fraction-static", "0.8"]
    proc = run_entrypoint(["baseline", "--dry-run", *args], setup["env"])
    assert proc.returncode == 0, proc.stderr
    assert "accepted by SGLang 9.9.9's own parser" in proc.stdout


# --------------------------------------------------------------------------------------------------
# 3. Values that parse but cannot work
# --------------------------------------------------------------------------------------------------

NUMBER_CASES: list[tuple[str, dict[str, str], list[str], list[str]]] = [
    ("port-arabic-indic", {"PORT": "٣٠٠٠٠"}, [], ["PORT='٣٠٠٠٠' is not an integer"]),
    ("port-plus", {"PORT": "+30000"}, [], ["PORT='+30000' is not an integer"]),
    ("port-leading-space", {"PORT": " 30000"}, [], ["PORT=' 30000' is not an integer"]),
    ("port-trailing-space", {"PORT": "30000 "}, [], ["PORT='30000 ' is not an integer"]),
    ("port-underscore", {"PORT": "30_000"}, [], ["PORT='30_000'"]),
    ("port-hex", {"PORT": "0x7530"}, [], ["PORT='0x7530'"]),
    ("port-exponent", {"PORT": "3e4"}, [], ["PORT='3e4'"]),
    ("port-fullwidth", {"PORT": "３００００"}, [], ["PORT="]),
    ("port-leading-zero", {"PORT": "030000"}, [], ["PORT='030000' is not an integer", "leading zeros"]),
    ("tp-leading-zero", {"TP_SIZE": "08"}, [], ["TP_SIZE='08'"]),
    ("tp-devanagari", {"TP_SIZE": "८"}, [], ["TP_SIZE='८' is not an integer"]),
    ("nnodes-plus", {"NNODES": "+2", "DIST_INIT_ADDR": "h:5000"}, [], ["NNODES='+2'"]),
    ("node-rank-space", {"NODE_RANK": "0 "}, [], ["NODE_RANK='0 '"]),
    ("steps-fullwidth", {"SPEC_NUM_STEPS": "２"}, [], ["SPEC_NUM_STEPS="]),
    ("extra-args-digits", {"EXTRA_ARGS": "--tp-size ٤"}, [], ["--tp-size '٤' (in EXTRA_ARGS)"]),
    ("after-dashes-plus", {}, ["--", "--port", "+31000"], ["--port '+31000' (after --)"]),
    ("dist-addr-digits", {"NNODES": "2", "DIST_INIT_ADDR": "10.0.0.1:٥٠٠٠"}, [], ["DIST_INIT_ADDR="]),
    ("host-octet-too-big", {"HOST": "256.0.0.1"}, [], ["HOST='256.0.0.1' is not a host name or address"]),
    ("host-five-octets", {"HOST": "1.2.3.4.5"}, [], ["HOST='1.2.3.4.5'"]),
    ("host-bad-ipv6", {"HOST": "::g"}, [], ["HOST='::g'"]),
    ("host-other-digits", {"HOST": "١٢٧.0.0.1"}, [], ["HOST="]),
    ("float-nan", {}, ["--", "--mem-fraction-static", "nan"], ["--mem-fraction-static 'nan' (after --)"]),
    ("float-inf", {}, ["--", "--mem-fraction-static", "inf"], ["invalid float"]),
    ("float-digits", {}, ["--", "--mem-fraction-static", "٠.٨"], ["invalid float"]),
    ("float-underscore", {}, ["--", "--mem-fraction-static", "0_8"], ["invalid float"]),
]


@pytest.mark.parametrize(
    ("changes", "args", "expected"), [c[1:] for c in NUMBER_CASES], ids=[c[0] for c in NUMBER_CASES]
)
def test_numbers_must_be_plain_ascii_decimals(setup, changes, args, expected):
    proc = run_entrypoint(["eagle3", "--dry-run", *args], {**setup["env"], **changes})
    assert_usage_error(proc, *expected)


def test_a_tilde_path_is_not_expanded_behind_sglangs_back(setup, tmp_path):
    home = tmp_path / "home"
    kimi_target(home / "model")
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "HOME": str(home), "MODEL_PATH": "~/model"})
    assert_usage_error(proc, "MODEL_PATH='~/model': no such directory", "~ is not expanded")


ODD_NAMES = [
    ("newline", "model\nwith newline"),
    ("carriage-return", "model\rcr"),
    ("tab", "tab\there"),
    ("quote", 'it\'s "quoted"'),
    ("dollar", "$HOME `x` $(y)"),
    ("unicode", "modèle ☃"),
    ("leading-dash-inside", "x -- --tp-size 9"),
]


def _bash_words(line: str) -> list[str]:
    out = subprocess.run(
        ["bash", "-c", 'eval "set -- $1"; printf "%s\\0" "$@"', "_", line],
        capture_output=True,
        check=True,
    ).stdout
    return out.decode().split("\0")[:-1]


@pytest.mark.parametrize("name", [n[1] for n in ODD_NAMES], ids=[n[0] for n in ODD_NAMES])
def test_dry_runs_last_line_is_the_whole_command_whatever_the_paths_hold(setup, tmp_path, name):
    target = kimi_target(tmp_path / name / "target", architecture="DeepseekV3ForCausalLM")
    draft = eagle3_draft(tmp_path / name / "draft")
    env = {**setup["env"], "MODEL_PATH": str(target), "DRAFT_MODEL_PATH": str(draft), "TP_SIZE": "2"}
    proc = run_entrypoint(["eagle3", "--dry-run"], env)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.rstrip("\n").split("\n")[-1]
    words = _bash_words(last)  # what a shell makes of it: the exact argument vector, paths included
    argv = words[words.index("sglang.launch_server") + 1 :]
    assert argv[argv.index("--model-path") + 1] == str(target)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(draft)
    assert argv[argv.index("--tp-size") + 1] == "2"
    record = json.dumps(words)
    assert "\n" not in last and record  # one line


def test_an_error_about_a_path_with_a_newline_stays_within_three_lines(setup, tmp_path):
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "MODEL_PATH": str(tmp_path / "a\nb\nc\nd")})
    assert_usage_error(proc, "no such directory")


# Mistakes around the arguments themselves: each one line, naming the token, with the closest valid one.
MISC_CASES: list[tuple[str, list[str], dict[str, str], list[str]]] = [
    ("mode-typo", ["eagle", "--dry-run"], {}, ["unknown mode 'eagle'; perhaps you meant eagle3"]),
    ("mode-case", ["BASELINE", "--dry-run"], {}, ["unknown mode 'BASELINE'"]),
    ("option-typo", ["eagle3", "--dryrun"], {}, ["option '--dryrun'", "perhaps you meant --dry-run"]),
    ("second-dashes", ["eagle3", "--dry-run", "--", "--", "--tp-size", "2"], {}, ["a second '--'"]),
    ("dashes-in-extra-args", ["eagle3", "--dry-run"], {"EXTRA_ARGS": "-- --tp-size 2"}, ["EXTRA_ARGS: a second '--'"]),
    ("value-first", ["eagle3", "--dry-run", "--", "2"], {}, ["after --: '2' is not an option"]),
    ("no-value", ["eagle3", "--dry-run", "--", "--tp-size"], {}, ["--tp-size (after --): --tp-size needs a value"]),
    ("long-path", ["eagle3", "--dry-run"], {"MODEL_PATH": "/" + "x" * 5000}, ["MODEL_PATH=", "cannot be read"]),
    ("device-path", ["eagle3", "--dry-run"], {"MODEL_PATH": "/dev/null"}, ["is a file, not a directory"]),
]


@pytest.mark.parametrize(("args", "changes", "expected"), [c[1:] for c in MISC_CASES], ids=[c[0] for c in MISC_CASES])
def test_argument_mistakes_are_one_line_with_the_closest(setup, args, changes, expected):
    proc = run_entrypoint(args, {**setup["env"], **changes})
    assert_usage_error(proc, *expected)


@pytest.mark.parametrize("visible", ["٠", "0,١", "GPU\t0"], ids=["arabic-indic", "mixed", "control"])
def test_cuda_visible_devices_must_be_ascii(setup, visible):
    proc = run_entrypoint(["baseline"], {**setup["env"], "CUDA_VISIBLE_DEVICES": visible})
    assert_usage_error(proc, "CUDA_VISIBLE_DEVICES=", "ASCII GPU indices or UUIDs")
    assert not Path(setup["env"]["FAKE_SGLANG_RECORD"]).exists()


# --------------------------------------------------------------------------------------------------
# 4. Numbers beyond what Python takes
# --------------------------------------------------------------------------------------------------

NUMBERS: list[tuple[str, dict[str, str], list[str], list[str]]] = [
    ("tp-5000-digits", {"TP_SIZE": BIG}, [], [f"TP_SIZE='{HEAD}", "out of range", "at most 9 digits"]),
    ("port-5000-digits", {"PORT": BIG}, [], [f"PORT='{HEAD}", "out of range", "1 to 65535"]),
    ("nnodes-5000-digits", {"NNODES": BIG, "DIST_INIT_ADDR": "h:5000"}, [], [f"NNODES='{HEAD}", "out of range"]),
    ("node-rank-5000-digits", {"NODE_RANK": BIG}, [], [f"NODE_RANK='{HEAD}", "out of range"]),
    ("steps-5000-digits", {"SPEC_NUM_STEPS": BIG}, [], [f"SPEC_NUM_STEPS='{HEAD}", "out of range"]),
    ("topk-5000-digits", {"SPEC_EAGLE_TOPK": BIG}, [], [f"SPEC_EAGLE_TOPK='{HEAD}", "out of range"]),
    ("draft-5000-digits", {"SPEC_NUM_DRAFT_TOKENS": BIG}, [], [f"SPEC_NUM_DRAFT_TOKENS='{HEAD}"]),
    ("tp-10-digits", {"TP_SIZE": "1234567890"}, [], ["TP_SIZE='1234567890' is out of range"]),
    ("extra-args-port", {"EXTRA_ARGS": f"--port {BIG}"}, [], [f"--port '{HEAD}", "(in EXTRA_ARGS)", "out of range"]),
    ("after-dashes-tp", {}, ["--", "--tp-size", BIG], [f"--tp-size '{HEAD}", "(after --)", "out of range"]),
    ("after-dashes-pp", {}, ["--", "--pp-size", BIG], [f"--pp-size '{HEAD}", "out of range"]),
    ("dist-port-5000", {"NNODES": "2", "TP_SIZE": "2", "DIST_INIT_ADDR": f"h:{BIG}"}, [], ["DIST_INIT_ADDR='h:1000"]),
    ("float-5000-digits", {}, ["--", "--mem-fraction-static", BIG], ["--mem-fraction-static", "invalid float"]),
]


@pytest.mark.parametrize(("changes", "args", "expected"), [c[1:] for c in NUMBERS], ids=[c[0] for c in NUMBERS])
def test_numbers_past_ints_digit_limit_are_one_line(setup, changes, args, expected):
    proc = run_entrypoint(["eagle3", "--dry-run", *args], {**setup["env"], **changes})
    assert_refused(proc, *expected)


CONFIG_NUMBERS = [
    ("target-hidden-size", "MODEL_PATH", '{"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": %s}'),
    ("target-nested", "MODEL_PATH", '{"architectures": ["DeepseekV3ForCausalLM"], "text_config": {"x": [%s]}}'),
    ("draft-hidden-size", "DRAFT_MODEL_PATH", '{"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": %s}'),
    ("draft-negative", "DRAFT_MODEL_PATH", '{"architectures": ["LlamaForCausalLMEagle3"], "vocab_size": -%s}'),
]


@pytest.mark.parametrize(("role", "text"), [c[1:] for c in CONFIG_NUMBERS], ids=[c[0] for c in CONFIG_NUMBERS])
def test_a_config_json_number_past_the_limit_is_one_line(setup, tmp_path, role, text):
    model = tmp_path / "odd-model"
    model.mkdir()
    (model / "config.json").write_text(text.replace("%s", BIG))
    proc = run_entrypoint(["eagle3", "--dry-run"], {**setup["env"], role: str(model)})
    assert_refused(proc, f"{role}=", "config.json is not a model's config", "a number of 5001 digits")


def test_a_plan_number_past_the_limit_is_one_line(setup, tmp_path):
    plan = tmp_path / "big-plan.json"
    plan.write_text(synthetic_plan(tmp_path / "p.json").read_text().replace('"port": 30000', f'"port": {BIG}'))
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "SM120_PLAN": str(plan)})
    assert_refused(proc, "SM120_PLAN=", "not a plan", "a number of 5001 digits")


# --------------------------------------------------------------------------------------------------
# 5. Addresses that parse but cannot work
# --------------------------------------------------------------------------------------------------

TWO_NODES = {"NNODES": "2", "TP_SIZE": "2"}
ADDRESSES: list[tuple[str, dict[str, str], list[str]]] = [
    ("host-bracketed-v6", {"HOST": "[::1]"}, ["HOST='[::1]'", "in brackets cannot be bound", "e.g. ::1"]),
    ("host-bracketed-any", {"HOST": "[::]"}, ["HOST='[::]'", "brackets"]),
    ("host-bracketed-v4", {"HOST": "[0.0.0.0]"}, ["HOST='[0.0.0.0]' is not a host name or address"]),
    ("host-open-bracket", {"HOST": "[::1"}, ["HOST='[::1'"]),
    ("host-close-bracket", {"HOST": "::1]"}, ["HOST='::1]'"]),
    ("host-bracket-in-name", {"HOST": "a[b]"}, ["HOST='a[b]'"]),
    ("host-bracketed-zone", {"HOST": "[fe80::1%eth0]"}, ["HOST='[fe80::1%eth0]'", "brackets"]),
    ("host-after-dashes", {"EXTRA_ARGS": "--host [::1]"}, ["--host '[::1]' (in EXTRA_ARGS)"]),
    ("dist-octet-300", {**TWO_NODES, "DIST_INIT_ADDR": "300.1.1.1:5000"}, ["'300.1.1.1' is not a host name"]),
    ("dist-octet-256", {**TWO_NODES, "DIST_INIT_ADDR": "10.0.0.256:5000"}, ["DIST_INIT_ADDR='10.0.0.256:5000'"]),
    ("dist-five-parts", {**TWO_NODES, "DIST_INIT_ADDR": "1.2.3.4.5:5000"}, ["'1.2.3.4.5'"]),
    ("dist-octet-zero-lead", {**TWO_NODES, "DIST_INIT_ADDR": "010.0.0.1:5000"}, ["'010.0.0.1'", "no leading zeros"]),
    ("dist-port-zero-lead", {**TWO_NODES, "DIST_INIT_ADDR": "10.0.0.1:05000"}, ["the port '05000' is not a port"]),
    ("dist-port-zero", {**TWO_NODES, "DIST_INIT_ADDR": "10.0.0.1:0"}, ["the port '0'"]),
    ("dist-port-65536", {**TWO_NODES, "DIST_INIT_ADDR": "10.0.0.1:65536"}, ["the port '65536'"]),
    ("dist-port-plus", {**TWO_NODES, "DIST_INIT_ADDR": "h:+5000"}, ["the port '+5000'"]),
    ("dist-port-digits", {**TWO_NODES, "DIST_INIT_ADDR": "h:٥٠٠٠"}, ["DIST_INIT_ADDR='h:٥٠٠٠'"]),
    ("dist-no-port", {**TWO_NODES, "DIST_INIT_ADDR": "10.0.0.1"}, ["DIST_INIT_ADDR='10.0.0.1' is not host:port"]),
    ("dist-no-host", {**TWO_NODES, "DIST_INIT_ADDR": ":5000"}, ["DIST_INIT_ADDR=':5000'", "no host"]),
    ("dist-bad-v6", {**TWO_NODES, "DIST_INIT_ADDR": "[::g]:5000"}, ["'::g' is not an IPv6 address"]),
    ("dist-v4-in-brackets", {**TWO_NODES, "DIST_INIT_ADDR": "[10.0.0.1]:5000"}, ["[address]:port"]),
    ("dist-v6-unbracketed", {**TWO_NODES, "DIST_INIT_ADDR": "fd00::1:5000"}, ["in brackets, [address]:port"]),
    ("dist-v6-no-port", {**TWO_NODES, "DIST_INIT_ADDR": "[fd00::1]"}, ["DIST_INIT_ADDR='[fd00::1]'"]),
    ("dist-v6-empty-port", {**TWO_NODES, "DIST_INIT_ADDR": "[fd00::1]:"}, ["the port ''"]),
    ("dist-name-dash-first", {**TWO_NODES, "DIST_INIT_ADDR": "-x:5000"}, ["'-x' is not a host name"]),
    ("dist-name-double-dot", {**TWO_NODES, "DIST_INIT_ADDR": "a..b:5000"}, ["'a..b'"]),
    ("dist-space", {**TWO_NODES, "DIST_INIT_ADDR": "a b:5000"}, ["'a b'"]),
    ("port-empty", {"PORT": ""}, ["PORT='' is empty", "HEALTHCHECK", "unset PORT"]),
    ("port-blank", {"PORT": "  "}, ["PORT='  ' is empty", "HEALTHCHECK"]),
]


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in ADDRESSES], ids=[c[0] for c in ADDRESSES])
def test_addresses_that_cannot_work_are_one_line(setup, changes, expected):
    proc = run_entrypoint(["eagle3", "--dry-run"], {**setup["env"], **changes})
    assert_refused(proc, *expected)


WORKING = [
    ("lws-leader-name", {**TWO_NODES, "DIST_INIT_ADDR": "sglang-0.sglang.default:5000"}, "--dist-init-addr"),
    ("fqdn", {**TWO_NODES, "DIST_INIT_ADDR": "sglang-0.sglang.default.svc.cluster.local:29500"}, "--dist-init-addr"),
    ("short-name", {**TWO_NODES, "DIST_INIT_ADDR": "leader:5000"}, "--dist-init-addr"),
    ("compose-name", {**TWO_NODES, "DIST_INIT_ADDR": "node_0:5000"}, "--dist-init-addr"),
    ("ipv4", {**TWO_NODES, "DIST_INIT_ADDR": "10.0.0.1:5000"}, "--dist-init-addr"),
    ("ipv6", {**TWO_NODES, "DIST_INIT_ADDR": "[fd00::1]:65535"}, "--dist-init-addr"),
    ("host-ipv6", {"HOST": "::1"}, "--host"),
    ("host-ipv6-any", {"HOST": "::"}, "--host"),
    ("host-zone", {"HOST": "fe80::1%eth0"}, "--host"),
    ("host-name", {"HOST": "localhost"}, "--host"),
    ("port-unset", {}, "--port"),
]


@pytest.mark.parametrize(("changes", "option"), [c[1:] for c in WORKING], ids=[c[0] for c in WORKING])
def test_host_names_and_good_addresses_keep_working(setup, changes, option):
    env = {**setup["env"], **changes}
    env.pop("PORT", None)
    line = dry_run_line(run_entrypoint(["eagle3", "--dry-run"], env))
    words = line.split()
    value = words[words.index(option) + 1].strip("'")
    expected = {"--dist-init-addr": changes.get("DIST_INIT_ADDR"), "--host": changes.get("HOST"), "--port": "30000"}
    assert value == expected[option], line


# --------------------------------------------------------------------------------------------------
# 6. A FIFO where a file is read; a full stdout (`--dry-run > /dev/full`): one line, exit 1, not Python's
#    "Exception ignored" and 120
# --------------------------------------------------------------------------------------------------

FIFOS = [
    ("sglang-config", lambda fifo: (["--", "--config", str(fifo)], {}), ["--config", "a FIFO, not a YAML file"]),
    ("sm120-plan", lambda fifo: ([], {"SM120_PLAN": str(fifo)}), ["SM120_PLAN=", "not a regular file"]),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in FIFOS], ids=[c[0] for c in FIFOS])
def test_a_fifo_where_a_file_is_read_does_not_hang(setup, tmp_path, make, expected):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    args, changes = make(fifo)
    proc = run_entrypoint(["baseline", "--dry-run", *args], {**setup["env"], **changes}, timeout=60)
    assert_refused(proc, *expected)


FULL_STDOUT = [
    ("dry-run", ["baseline", "--dry-run"]),
    ("help", ["--help"]),
    ("sglang-help", ["baseline", "--dry-run", "--", "--help"]),
]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [c[1] for c in FULL_STDOUT], ids=[c[0] for c in FULL_STDOUT])
def test_a_full_stdout_is_one_line(setup, args, unbuffered):
    env = {**setup["env"], **({"PYTHONUNBUFFERED": "1"} if unbuffered else {})}
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, str(ENTRYPOINT), *args],
            stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
    lines = stderr_lines(proc)
    assert proc.returncode == 1, proc.stderr
    assert lines[-1] == "entrypoint: error: cannot write to standard output: No space left on device", proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert len([line for line in lines if line.startswith("entrypoint: error")]) == 1, proc.stderr
