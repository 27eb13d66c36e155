"""T0: the entrypoint as the image runs it (a separate process): modes, --dry-run, --help, pass-through,
every bad input (exit 2, at most three lines on stderr, no traceback), and the presets of the real plan."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from sm120.image.entrypoint.spec import PLAN_JSON_PATH
from tests.entrypoint_helpers import (
    clean_env,
    eagle3_draft,
    kimi_target,
    real_plan,
    run_entrypoint,
    stderr_lines,
    synthetic_plan,
)


@pytest.fixture
def models(tmp_path: Path) -> dict[str, Path]:
    return {"target": kimi_target(tmp_path / "target"), "draft": eagle3_draft(tmp_path / "draft")}


@pytest.fixture
def env(tmp_path: Path, models: dict[str, Path]) -> dict[str, str]:
    plan = synthetic_plan(tmp_path / "plan.json")
    return clean_env(SM120_PLAN=str(plan), MODEL_PATH=str(models["target"]), DRAFT_MODEL_PATH=str(models["draft"]))


def command_of(stdout: str) -> list[str]:
    """The last line of --dry-run's stdout, split; the SGLang arguments after `-m sglang.launch_server`."""
    words = shlex.split(stdout.strip().splitlines()[-1])
    return words[words.index("sglang.launch_server") + 1 :]


def env_prefix(stdout: str) -> dict[str, str]:
    words = shlex.split(stdout.strip().splitlines()[-1])
    return dict(w.split("=", 1) for w in words[: words.index("-m") - 1])


def values(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == option]


# --------------------------------------------------------------------------------------------------
# Modes and --dry-run
# --------------------------------------------------------------------------------------------------


def test_eagle3_dry_run_prints_the_command_last(env):
    proc = run_entrypoint(["eagle3", "--dry-run"], {**env, "TP_SIZE": "8"})
    assert proc.returncode == 0, proc.stderr
    argv = command_of(proc.stdout)
    assert values(argv, "--speculative-algorithm") == ["EAGLE3"]
    assert values(argv, "--speculative-num-steps") == ["2"]
    assert values(argv, "--speculative-eagle-topk") == ["4"]
    assert values(argv, "--speculative-num-draft-tokens") == ["16"]
    assert values(argv, "--model-path") == [env["MODEL_PATH"]]
    assert values(argv, "--speculative-draft-model-path") == [env["DRAFT_MODEL_PATH"]]
    assert values(argv, "--tp-size") == ["8"]
    assert values(argv, "--host") == ["0.0.0.0"] and values(argv, "--port") == ["30000"]
    assert "--moe-runner-backend" in argv  # the target is NVFP4: the synthetic nvfp4 rule applies
    assert env_prefix(proc.stdout) == {"SM120_TEST_ENV": "1"}
    # The executable is this interpreter, started as a module.
    words = shlex.split(proc.stdout.strip().splitlines()[-1])
    assert words[words.index("-m") - 1] == sys.executable


def test_no_argument_means_baseline(env):
    proc = run_entrypoint(["--dry-run"], env)
    assert proc.returncode == 0, proc.stderr
    argv = command_of(proc.stdout)
    assert "--speculative-algorithm" not in argv and "--speculative-draft-model-path" not in argv
    assert "DRAFT_MODEL_PATH is ignored in baseline mode" in proc.stderr
    assert "# mode baseline" in proc.stdout


def test_dry_run_says_when_sglang_is_not_there_to_check(env):
    proc = run_entrypoint(["eagle3", "--dry-run"], env)
    assert proc.returncode == 0
    assert "NOT checked by SGLang's parser" in proc.stdout  # in the dry-run output
    assert "NOT checked by SGLang's parser" in proc.stderr  # and as a note on stderr
    assert "not run by --dry-run: the GPU, /dev/shm and JIT-cache checks" in proc.stdout


def test_dry_run_never_probes_gpus(env, tmp_path):
    # An nvidia-smi that would fail loudly: --dry-run must not call it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "called"
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\ntouch {marker}\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    proc = run_entrypoint(["eagle3", "--dry-run"], {**env, "PATH": f"{bin_dir}:{env['PATH']}", "TP_SIZE": "64"})
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()


def test_left_out_flags_are_logged_with_the_reason(env):
    proc = run_entrypoint(["eagle3", "--dry-run"], env)
    assert "left out --enable-flashinfer-allreduce-fusion: does nothing on sm_120" in proc.stderr
    assert "--enable-flashinfer-allreduce-fusion" not in command_of(proc.stdout)


def test_a_left_out_flag_the_user_passes_is_kept_with_a_warning(env):
    proc = run_entrypoint(["eagle3", "--dry-run", "--", "--enable-flashinfer-allreduce-fusion"], env)
    assert proc.returncode == 0
    assert command_of(proc.stdout).count("--enable-flashinfer-allreduce-fusion") == 1
    assert "warning: --enable-flashinfer-allreduce-fusion (after --) is passed as you asked, but: does nothing" in (
        proc.stderr
    )


def test_sglang_help_after_double_dash_needs_no_model(tmp_path):
    env = clean_env(SM120_PLAN=str(synthetic_plan(tmp_path / "plan.json")))
    proc = run_entrypoint(["--dry-run", "--", "--help"], env)
    assert proc.returncode == 0
    assert command_of(proc.stdout) == ["--help"]


def test_help_lists_modes_variables_and_rules(env):
    proc = run_entrypoint(["--help"], env)
    assert proc.returncode == 0 and proc.stderr == ""
    for text in (
        "baseline",
        "eagle3",
        "--speculative-num-steps 2",
        "MODEL_PATH",
        "DRAFT_MODEL_PATH",
        "TP_SIZE",
        "SPEC_EAGLE_TOPK",
        "EXTRA_ARGS",
        "NNODES",
        "DIST_INIT_ADDR",
        "SKIP_RUNTIME_RULES",
        "--dry-run",
        "env-rule",
        "nvfp4-rule",
        "symm",
        "left out",
    ):
        assert text in proc.stdout, text


def test_help_works_without_a_plan():
    proc = run_entrypoint(["--help"], clean_env(SM120_PLAN="/nonexistent/plan.json"))
    assert proc.returncode == 0
    assert "cannot be read" in proc.stdout and "MODEL_PATH" in proc.stdout


# --------------------------------------------------------------------------------------------------
# A program on PATH is run as it is
# --------------------------------------------------------------------------------------------------


def test_a_program_on_path_runs_as_it_is_without_a_plan():
    env = clean_env(SM120_PLAN="/nonexistent/plan.json")
    proc = run_entrypoint(["sh", "-c", 'echo "ran: $0 $1"; exit 7', "--dry-run", "--"], env)
    assert proc.returncode == 7  # the program's own status
    assert proc.stdout == "ran: --dry-run --\n"  # its arguments untouched, `--` and options included
    assert proc.stderr == ""


def test_a_program_by_path(tmp_path):
    script = tmp_path / "hello"
    script.write_text("#!/bin/sh\necho hello from $0\n")
    script.chmod(0o755)
    proc = run_entrypoint([str(script)], clean_env())
    assert proc.returncode == 0 and proc.stdout == f"hello from {script}\n"


# --------------------------------------------------------------------------------------------------
# Bad input: exit 2, at most three lines on stderr naming what to change, no traceback
# --------------------------------------------------------------------------------------------------

BAD = [
    # (id, args, environment changes (None removes), what stderr must say)
    ("unknown-mode", ["turbo"], {}, ["unknown mode 'turbo'", "baseline, eagle3"]),
    ("unknown-option", ["eagle3", "--verbose"], {}, ["unknown entrypoint option '--verbose'", "after --"]),
    ("sglang-option-without-dashes", ["--tp-size", "8"], {}, ["unknown entrypoint option '--tp-size'", "-- --tp-size"]),
    ("two-modes", ["baseline", "eagle3"], {}, ["two modes given"]),
    ("stray-argument", ["eagle3", "--dry-run", "x"], {}, ["unexpected argument 'x'"]),
    ("no-model", ["--dry-run"], {"MODEL_PATH": None}, ["MODEL_PATH is not set"]),
    ("empty-model", ["--dry-run"], {"MODEL_PATH": "  "}, ["MODEL_PATH is not set"]),
    ("eagle3-without-draft", ["eagle3", "--dry-run"], {"DRAFT_MODEL_PATH": None}, ["eagle3 needs DRAFT_MODEL_PATH"]),
    ("missing-model-dir", ["--dry-run"], {"MODEL_PATH": "/models/nope"}, ["MODEL_PATH='/models/nope'", "no such"]),
    ("missing-draft-dir", ["eagle3", "--dry-run"], {"DRAFT_MODEL_PATH": "/models/d"}, ["DRAFT_MODEL_PATH='/models/d'"]),
    (
        "steps-not-int",
        ["eagle3", "--dry-run"],
        {"SPEC_NUM_STEPS": "two"},
        ["SPEC_NUM_STEPS='two' is not an integer", "an integer >= 1"],
    ),
    ("steps-float", ["eagle3", "--dry-run"], {"SPEC_NUM_STEPS": "2.5"}, ["SPEC_NUM_STEPS='2.5' is not an integer"]),
    (
        "steps-zero",
        ["eagle3", "--dry-run"],
        {"SPEC_NUM_STEPS": "0"},
        ["SPEC_NUM_STEPS='0' is out of range", "an integer >= 1"],
    ),
    ("topk-negative", ["eagle3", "--dry-run"], {"SPEC_EAGLE_TOPK": "-1"}, ["SPEC_EAGLE_TOPK='-1' is out of range"]),
    ("topk-word", ["eagle3", "--dry-run"], {"SPEC_EAGLE_TOPK": "four"}, ["SPEC_EAGLE_TOPK='four' is not an integer"]),
    (
        "draft-tokens-one",
        ["eagle3", "--dry-run"],
        {"SPEC_NUM_DRAFT_TOKENS": "1"},
        ["SPEC_NUM_DRAFT_TOKENS='1' is out of range", "an integer >= 2"],
    ),
    (
        "draft-tokens-too-many",
        ["eagle3", "--dry-run"],
        {"SPEC_NUM_DRAFT_TOKENS": "22"},
        ["SPEC_NUM_DRAFT_TOKENS='22' is out of range for steps 2 and top-k 4", "allowed: 2 to 21"],
    ),
    ("port-word", ["--dry-run"], {"PORT": "http"}, ["PORT='http' is not an integer", "from 1 to 65535"]),
    ("port-high", ["--dry-run"], {"PORT": "70000"}, ["PORT='70000' is out of range", "from 1 to 65535"]),
    ("port-zero", ["--dry-run"], {"PORT": "0"}, ["PORT='0' is out of range"]),
    ("tp-word", ["--dry-run"], {"TP_SIZE": "eight"}, ["TP_SIZE='eight' is not an integer", "an integer >= 1"]),
    ("tp-zero", ["--dry-run"], {"TP_SIZE": "0"}, ["TP_SIZE='0' is out of range"]),
    ("tp-after-dashes", ["--dry-run", "--", "--tp-size", "x"], {}, ["--tp-size 'x' (after --) is not an integer"]),
    ("tp-no-value", ["--dry-run", "--", "--tp-size"], {}, ["--tp-size needs a value"]),
    (
        "extra-args-quote",
        ["--dry-run"],
        {"EXTRA_ARGS": "--chat-template 'unclosed"},
        ["EXTRA_ARGS=", "cannot be split like a shell line", "No closing quotation"],
    ),
    ("extra-args-stray", ["--dry-run"], {"EXTRA_ARGS": "8 --tp-size"}, ["EXTRA_ARGS: '8' is not an option"]),
    ("dashes-stray", ["--dry-run", "--", "stray"], {}, ["after --: 'stray' is not an option"]),
    ("extra-args-bad-int", ["--dry-run"], {"EXTRA_ARGS": "--port=abc"}, ["--port 'abc' (in EXTRA_ARGS)"]),
    ("host", ["--dry-run"], {"HOST": "my host"}, ["HOST='my host' is not a host name or address"]),
    ("nnodes-without-addr", ["--dry-run"], {"NNODES": "2", "TP_SIZE": "8"}, ["NNODES=2 needs DIST_INIT_ADDR"]),
    (
        "node-rank",
        ["--dry-run"],
        {"NNODES": "2", "NODE_RANK": "2", "DIST_INIT_ADDR": "10.0.0.1:5000"},
        ["NODE_RANK='2' is out of range", "0 to 1"],
    ),
    (
        "dist-addr",
        ["--dry-run"],
        {"NNODES": "2", "DIST_INIT_ADDR": "10.0.0.1"},
        ["DIST_INIT_ADDR='10.0.0.1' is not host:port"],
    ),
    (
        "tp-over-nodes",
        ["--dry-run"],
        {"NNODES": "2", "TP_SIZE": "3", "DIST_INIT_ADDR": "h:1"},
        ["TP_SIZE='3' does not divide over 2 nodes"],
    ),
    ("skip-unknown-rule", ["--dry-run"], {"SKIP_RUNTIME_RULES": "symm,nope"}, ["no rule named 'nope'", "env-rule"]),
    (
        "plan-missing",
        ["--dry-run"],
        {"SM120_PLAN": "/nonexistent/plan.json"},
        ["SM120_PLAN='/nonexistent/plan.json'", "no such file"],
    ),
]


@pytest.mark.parametrize(("args", "changes", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_exits_2_in_at_most_three_lines(env, args, changes, expected):
    run_env = dict(env)
    for key, value in changes.items():
        if value is None:
            run_env.pop(key, None)
        else:
            run_env[key] = value
    proc = run_entrypoint(args, run_env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = stderr_lines(proc)
    assert 1 <= len(lines) <= 3, proc.stderr
    assert lines[0].startswith("entrypoint: error: ")
    assert "Traceback" not in proc.stderr
    for text in expected:
        assert text in proc.stderr, (text, proc.stderr)
    assert proc.stdout == ""


MODEL_MISTAKES = [
    ("model-is-a-file", "target", None, ["is a file, not a directory"]),
    ("no-config-json", "target", {}, ["has no config.json"]),
    ("config-not-json", "target", "{not json", ["config.json is not JSON"]),
    ("config-not-object", "target", "[1, 2]", ["config.json is not a JSON object"]),
    (
        "draft-plain-llama",
        "draft",
        {"architectures": ["LlamaForCausalLM"], "hidden_size": 7168},
        ["architecture LlamaForCausalLM is not an EAGLE-3 drafter", "LlamaForCausalLMEagle3"],
    ),
    (
        "draft-eagle2",
        "draft",
        {"architectures": ["LlamaForCausalLMEagle"], "hidden_size": 7168},
        ["is an EAGLE-1/2 drafter"],
    ),
    ("draft-no-architectures", "draft", {"hidden_size": 7168}, ["config.json has no architectures"]),
    (
        "draft-for-another-model",
        "draft",
        {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096},
        ["takes hidden states of size 4096", "hidden_size is 7168"],
    ),
]


@pytest.mark.parametrize(
    ("which", "content", "expected"), [m[1:] for m in MODEL_MISTAKES], ids=[m[0] for m in MODEL_MISTAKES]
)
def test_model_directory_mistakes_exit_2(env, tmp_path, which, content, expected):
    path = tmp_path / f"bad-{which}"
    if content is None:
        path.write_text("weights")
    else:
        path.mkdir()
        if content != {}:
            (path / "config.json").write_text(content if isinstance(content, str) else json.dumps(content))
    key = "MODEL_PATH" if which == "target" else "DRAFT_MODEL_PATH"
    proc = run_entrypoint(["eagle3", "--dry-run"], {**env, key: str(path)})
    assert proc.returncode == 2, proc.stderr
    assert len(stderr_lines(proc)) <= 3 and "Traceback" not in proc.stderr
    assert f"{key}='{path}'" in proc.stderr
    for text in expected:
        assert text in proc.stderr, (text, proc.stderr)


def test_a_hugging_face_repo_id_is_left_to_sglang(env):
    proc = run_entrypoint(["--dry-run"], {**env, "MODEL_PATH": "moonshotai/Kimi-K2.5"})
    assert proc.returncode == 0, proc.stderr
    assert "a Hugging Face repo id" in proc.stderr
    assert values(command_of(proc.stdout), "--model-path") == ["moonshotai/Kimi-K2.5"]


def test_draft_with_another_vocabulary_is_a_warning(env, tmp_path):
    draft = eagle3_draft(tmp_path / "d2", vocab_size=128256)
    proc = run_entrypoint(["eagle3", "--dry-run"], {**env, "DRAFT_MODEL_PATH": str(draft)})
    assert proc.returncode == 0
    assert "warning: the drafter's vocab_size 128256 differs from the target's 163840" in proc.stderr


def test_draft_with_target_hidden_size_key(env, tmp_path):
    # Drafters smaller than the target say what they take in `target_hidden_size`.
    draft = eagle3_draft(tmp_path / "d3", hidden_size=4096, target_hidden_size=7168)
    assert run_entrypoint(["eagle3", "--dry-run"], {**env, "DRAFT_MODEL_PATH": str(draft)}).returncode == 0
    draft = eagle3_draft(tmp_path / "d4", hidden_size=7168, target_hidden_size=5120)
    proc = run_entrypoint(["eagle3", "--dry-run"], {**env, "DRAFT_MODEL_PATH": str(draft)})
    assert proc.returncode == 2 and "size 5120 (target_hidden_size)" in proc.stderr


def test_broken_plan_names_the_key(env, tmp_path):
    bad = tmp_path / "bad-plan.json"
    bad.write_text('{"entrypoint": {"modes": {}}}')
    proc = run_entrypoint(["--dry-run"], {**env, "SM120_PLAN": str(bad)})
    assert proc.returncode == 2 and "entrypoint.sglang_version is missing" in proc.stderr
    plan = json.loads(Path(env["SM120_PLAN"]).read_text())
    bad.write_text(json.dumps({**plan, "entrypoint": {**plan["entrypoint"], "modes": {}}}))
    proc = run_entrypoint(["--dry-run"], {**env, "SM120_PLAN": str(bad)})
    assert proc.returncode == 2 and "entrypoint.modes is empty" in proc.stderr
    bad.write_text("{")
    proc = run_entrypoint(["--dry-run"], {**env, "SM120_PLAN": str(bad)})
    assert proc.returncode == 2 and "not JSON" in proc.stderr and len(stderr_lines(proc)) <= 3


def test_the_image_plan_missing_is_an_image_error(env):
    # Without SM120_PLAN the entrypoint reads the image's plan.json: absent here, so a broken image (1).
    run_env = {k: v for k, v in env.items() if k != "SM120_PLAN"}
    if Path(PLAN_JSON_PATH).exists():
        pytest.skip(f"this machine has an image plan at {PLAN_JSON_PATH}")
    proc = run_entrypoint(["--dry-run"], run_env)
    assert proc.returncode == 1
    assert f"the image's plan {PLAN_JSON_PATH}: no such file" in proc.stderr


# --------------------------------------------------------------------------------------------------
# The real plan (build.py plan --json) of each track
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_real_plan_presets(tmp_path, models, version):
    plan = real_plan(tmp_path / "plan.json", version)
    env = clean_env(SM120_PLAN=str(plan), MODEL_PATH=str(models["target"]), DRAFT_MODEL_PATH=str(models["draft"]))
    proc = run_entrypoint(["eagle3", "--dry-run"], {**env, "TP_SIZE": "8"})
    assert proc.returncode == 0, proc.stderr
    argv = command_of(proc.stdout)
    assert argv[argv.index("--speculative-algorithm") :][:2] == ["--speculative-algorithm", "EAGLE3"]
    tree = [values(argv, o) for o in ("--speculative-num-steps", "--speculative-eagle-topk")]
    tree.append(values(argv, "--speculative-num-draft-tokens"))
    (comment,) = [line for line in proc.stdout.splitlines() if line.startswith("# draft tree: ")]
    # 0.5.9: the reference run's EAGLE-3 settings (docs/reference-run.md): steps 2, top-k 4, draft tokens 16
    if version == "0.5.9":
        assert tree == [["2"], ["4"], ["16"]]
        assert comment.startswith("# draft tree: steps 2, top-k 4, draft tokens 16: the reference run's")
    else:  # 0.5.23 chooses the tree itself (3/1/4 for Kimi-K2.5): nothing is passed, and the dry run says why
        assert tree == [[], [], []]
        assert comment.startswith("# draft tree: SGLang's own choice") and "_auto_choose_speculative_params" in comment
    assert "--enable-flashinfer-allreduce-fusion" not in argv
    # No SGLang here to read the patch from: the torch-symm-mem rule applies, marked unverified.
    assert "--enable-torch-symm-mem" in argv
    assert "torch-symm-mem-sm120 change is not verified" in proc.stderr
    prefix = env_prefix(proc.stdout)
    if version == "0.5.9":
        assert prefix == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}
        assert "--moe-runner-backend" not in argv
    else:  # 0.5.23: the NVFP4 target gets the cutlass MoE backend; DeepGEMM is left to SGLang; the symm-mem
        # rule keeps the patch's size limits (SGLang >= 0.5.16 would raise every buffer to 512 MiB)
        assert prefix == {"SGLANG_OPT_USE_INKLING_CUSTOM_AR": "0"}
        assert values(argv, "--moe-runner-backend") == ["flashinfer_cutlass"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_real_plan_tp1_and_bf16(tmp_path, version):
    plan = real_plan(tmp_path / "plan.json", version)
    target = kimi_target(tmp_path / "bf16", nvfp4=False)
    proc = run_entrypoint(["--dry-run"], clean_env(SM120_PLAN=str(plan), MODEL_PATH=str(target)))
    assert proc.returncode == 0, proc.stderr
    argv = command_of(proc.stdout)
    assert "--enable-torch-symm-mem" not in argv and "--moe-runner-backend" not in argv
    skipped = r"rule torch-symm-mem \([^)]*--enable-torch-symm-mem\) not applied: tp>1 does not hold"
    assert re.search(skipped, proc.stderr)


def test_multi_node_options(env):
    proc = run_entrypoint(
        ["--dry-run"], {**env, "NNODES": "2", "NODE_RANK": "1", "DIST_INIT_ADDR": "10.0.0.1:5000", "TP_SIZE": "16"}
    )
    assert proc.returncode == 0, proc.stderr
    argv = command_of(proc.stdout)
    assert values(argv, "--nnodes") == ["2"] and values(argv, "--node-rank") == ["1"]
    assert values(argv, "--dist-init-addr") == ["10.0.0.1:5000"]
    # torch symmetric memory is one node only
    assert "--enable-torch-symm-mem" not in argv and "single-node does not hold" in proc.stderr


def test_port_as_an_option_warns_about_the_healthcheck(env):
    proc = run_entrypoint(["--dry-run", "--", "--port", "8000"], env)
    assert proc.returncode == 0
    assert "the image's HEALTHCHECK reads PORT; set PORT=8000 instead of --port" in proc.stderr
    proc = run_entrypoint(["--dry-run"], {**env, "PORT": "8000"})
    assert proc.returncode == 0 and "HEALTHCHECK" not in proc.stderr
    assert values(command_of(proc.stdout), "--port") == ["8000"]
