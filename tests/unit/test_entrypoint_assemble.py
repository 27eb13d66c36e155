"""T0: how the entrypoint assembles SGLang's command: precedence preset < environment < args after `--`,
aliases, the runtime rules (conditions, patch checks, overrides, SKIP_RUNTIME_RULES) and the left-out flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120.image.entrypoint import assemble, errors, models, options, rules, sglang_source
from sm120.image.entrypoint import presets as presets_mod
from tests.entrypoint_helpers import (
    SYMM_MEM_CHECKS,
    eagle3_draft,
    fake_sglang,
    kimi_target,
    synthetic_plan,
    write_model,
)

UsageError = errors.UsageError


@pytest.fixture
def presets(tmp_path: Path):
    """The entrypoint's spec of a synthetic plan."""
    return presets_mod.load({"SM120_PLAN": str(synthetic_plan(tmp_path / "plan.json"))}).spec


def build(presets, mode: str, environ: dict[str, str], args: list[str] | None = None):
    log = errors.Log()
    cmd = assemble.build(presets, mode, environ, args or [], log)
    return cmd, log


def occurrences(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] if i + 1 < len(argv) else "" for i, a in enumerate(argv) if a == option]


# --------------------------------------------------------------------------------------------------
# Precedence: preset < environment < arguments after --
# --------------------------------------------------------------------------------------------------


def test_preset_only(presets):
    cmd, _ = build(presets, "eagle3", {})
    assert cmd.value("--speculative-num-steps") == "2"
    assert cmd.last("--speculative-num-steps").source == "preset eagle3"


def test_environment_beats_preset(presets):
    cmd, _ = build(presets, "eagle3", {"SPEC_NUM_STEPS": "3"})
    assert occurrences(cmd.argv(), "--speculative-num-steps") == ["3"]
    assert cmd.last("--speculative-num-steps").source == "SPEC_NUM_STEPS"


def test_extra_args_beat_variables(presets):
    cmd, _ = build(presets, "eagle3", {"SPEC_NUM_STEPS": "3", "EXTRA_ARGS": "--speculative-num-steps 4"})
    assert occurrences(cmd.argv(), "--speculative-num-steps") == ["4"]


def test_args_after_dashes_beat_everything(presets):
    env = {"SPEC_NUM_STEPS": "3", "EXTRA_ARGS": "--speculative-num-steps 4"}
    cmd, _ = build(presets, "eagle3", env, ["--speculative-num-steps", "5"])
    assert occurrences(cmd.argv(), "--speculative-num-steps") == ["5"]
    assert cmd.last("--speculative-num-steps").label() == "--speculative-num-steps '5' (after --)"


def test_arguments_after_dashes_are_passed_as_they_are(presets):
    user = ["--mem-fraction-static", "0.85", "--chat-template=/x y.jinja", "--enable-metrics", "--max-running", "-1"]
    cmd, _ = build(presets, "baseline", {"MODEL_PATH": "/m"}, user)
    assert cmd.argv()[-len(user) :] == user


def test_equals_form_and_aliases_replace_the_preset(presets):
    cmd, _ = build(presets, "eagle3", {"TP_SIZE": "8"}, ["--tensor-parallel-size=4", "--speculative-draft-model", "/d"])
    argv = cmd.argv()
    assert "--tp-size" not in argv and "--tensor-parallel-size=4" in argv
    assert cmd.value("--tp-size") == "4"
    assert cmd.value("--speculative-draft-model-path") == "/d"


def test_environment_variables_map_to_options(presets):
    env = {
        "MODEL_PATH": "/models/t",
        "DRAFT_MODEL_PATH": "/models/d",
        "TP_SIZE": "8",
        "HOST": "::",
        "PORT": "8000",
        "SPEC_NUM_STEPS": "3",
        "SPEC_EAGLE_TOPK": "1",
        "SPEC_NUM_DRAFT_TOKENS": "4",
        "NNODES": "2",
        "NODE_RANK": "1",
        "DIST_INIT_ADDR": "10.0.0.1:5000",
    }
    cmd, _ = build(presets, "eagle3", env)
    got = {i.option: (i.value, i.source) for i in cmd.items()}
    assert got["--model-path"] == ("/models/t", "MODEL_PATH")
    assert got["--speculative-draft-model-path"] == ("/models/d", "DRAFT_MODEL_PATH")
    assert got["--tp-size"] == ("8", "TP_SIZE")
    assert got["--host"] == ("::", "HOST") and got["--port"] == ("8000", "PORT")
    assert got["--speculative-eagle-topk"] == ("1", "SPEC_EAGLE_TOPK")
    assert got["--nnodes"] == ("2", "NNODES") and got["--node-rank"] == ("1", "NODE_RANK")
    assert got["--dist-init-addr"] == ("10.0.0.1:5000", "DIST_INIT_ADDR")
    # The generated options come first, the model first of all.
    assert cmd.argv()[:2] == ["--model-path", "/models/t"]


def test_defaults_of_the_container(presets):
    cmd, _ = build(presets, "baseline", {})
    assert cmd.value("--host") == "0.0.0.0"  # SGLang's 127.0.0.1 is unreachable from outside a container
    assert cmd.value("--port") == "30000"  # the image's port, from the plan


def test_empty_variables_count_as_unset(presets):
    cmd, _ = build(presets, "eagle3", {"SPEC_NUM_STEPS": "", "TP_SIZE": "  ", "EXTRA_ARGS": ""})
    assert cmd.value("--speculative-num-steps") == "2" and not cmd.has("--tp-size") and cmd.extra == []


def test_spec_variables_are_ignored_in_baseline(presets):
    cmd, log = build(presets, "baseline", {"SPEC_NUM_STEPS": "3", "DRAFT_MODEL_PATH": "/d"})
    assert not cmd.has("--speculative-num-steps") and not cmd.has("--speculative-draft-model-path")
    assert "SPEC_NUM_STEPS is ignored in baseline mode" in log.lines()


def test_extra_args_are_shell_split(presets):
    cmd, _ = build(presets, "baseline", {"EXTRA_ARGS": "--chat-template 'my template.jinja' --enable-metrics"})
    assert cmd.argv()[-3:] == ["--chat-template", "my template.jinja", "--enable-metrics"]


def test_negative_numbers_are_values_not_options():
    items = options.group(["--max-running-requests", "-1", "--temperature", "-0.5e-3", "--flag"], options.USER)
    assert [i.tokens for i in items] == [["--max-running-requests", "-1"], ["--temperature", "-0.5e-3"], ["--flag"]]


# --------------------------------------------------------------------------------------------------
# Effective values and their checks
# --------------------------------------------------------------------------------------------------


def effective(presets, mode, environ, args=None):
    cmd, log = build(presets, mode, {"MODEL_PATH": "/m", "DRAFT_MODEL_PATH": "/d", **environ}, args)
    return assemble.effective(cmd, presets, mode, log), cmd, log


def test_effective_values_come_from_the_winning_layer(presets):
    values, _, _ = effective(presets, "eagle3", {"TP_SIZE": "8"}, ["--tp-size", "4", "--pp-size", "2"])
    assert (values.tp, values.pp, values.nnodes, values.speculative) == (4, 2, 1, "EAGLE3")
    assert values.gpus_per_node == 8


def test_gpus_per_node_over_several_nodes(presets):
    values, _, _ = effective(presets, "baseline", {"TP_SIZE": "16", "NNODES": "2", "DIST_INIT_ADDR": "[::1]:5000"})
    assert values.gpus_per_node == 8


@pytest.mark.parametrize(
    ("steps", "topk", "tokens", "ok"),
    [(2, 4, 16, True), (2, 4, 21, True), (2, 4, 22, False), (1, 4, 5, True), (1, 4, 6, False), (3, 2, 11, True)],
)
def test_draft_token_limit_follows_the_tree(presets, steps, topk, tokens, ok):
    env = {"SPEC_NUM_STEPS": str(steps), "SPEC_EAGLE_TOPK": str(topk), "SPEC_NUM_DRAFT_TOKENS": str(tokens)}
    if ok:
        effective(presets, "eagle3", env)
    else:
        with pytest.raises(UsageError, match="is out of range for steps"):
            effective(presets, "eagle3", env)


def test_topk_one_notes_what_sglang_does(presets):
    _, _, log = effective(presets, "eagle3", {"SPEC_EAGLE_TOPK": "1", "SPEC_NUM_STEPS": "3"})
    assert any("SGLang sets the draft tokens to steps + 1 = 4" in line for line in log.lines())


def test_bad_value_from_the_user_names_the_argument(presets):
    with pytest.raises(UsageError) as info:
        effective(presets, "baseline", {}, ["--port", "99999"])
    assert info.value.lines == ["--port '99999' (after --) is out of range", "allowed: an integer from 1 to 65535"]


# --------------------------------------------------------------------------------------------------
# Runtime rules and left-out flags
# --------------------------------------------------------------------------------------------------


def apply(presets, tmp_path, environ=None, args=None, *, nvfp4=True, installed=None, mode="baseline"):
    environ = {"MODEL_PATH": str(kimi_target(tmp_path / "t", nvfp4=nvfp4)), **(environ or {})}
    cmd, log = build(presets, mode, environ, args)
    values = assemble.effective(cmd, presets, mode, log)
    target = models.open_model(values.model)
    applied = rules.apply(presets, cmd, values, models.quantization(target), True, installed, environ, log)
    return applied, cmd, log


def test_always_rule_sets_the_environment(presets, tmp_path):
    applied, cmd, log = apply(presets, tmp_path, nvfp4=False)
    assert applied == ["env-rule"] and cmd.env == {"SM120_TEST_ENV": "1"}
    assert any(line.startswith("sm_120 rule env-rule (SM120_TEST_ENV=1) applied: r1") for line in log.lines())


def test_the_users_variable_wins_over_a_rule(presets, tmp_path):
    _, cmd, log = apply(presets, tmp_path, {"SM120_TEST_ENV": "7"}, nvfp4=False)
    assert cmd.env == {}
    assert any("SM120_TEST_ENV='7' from the environment is kept" in line for line in log.lines())


def test_nvfp4_rule_follows_the_checkpoint(presets, tmp_path):
    applied, cmd, _ = apply(presets, tmp_path, nvfp4=True)
    assert "nvfp4-rule" in applied and cmd.value("--moe-runner-backend") == "flashinfer_cutlass"
    applied, cmd, _ = apply(presets, tmp_path / "bf16", nvfp4=False)
    assert "nvfp4-rule" not in applied and not cmd.has("--moe-runner-backend")


def test_nvfp4_rule_follows_an_explicit_quantization(presets, tmp_path):
    applied, _, _ = apply(presets, tmp_path, args=["--quantization", "modelopt_fp4"], nvfp4=False)
    assert "nvfp4-rule" in applied


def test_the_users_option_replaces_a_rules_option(presets, tmp_path):
    _, cmd, log = apply(presets, tmp_path, args=["--moe-runner-backend", "triton"])
    assert occurrences(cmd.argv(), "--moe-runner-backend") == ["triton"]
    assert any("--moe-runner-backend is yours (--moe-runner-backend 'triton' (after --))" in x for x in log.lines())


def test_skip_runtime_rules(presets, tmp_path):
    applied, cmd, log = apply(presets, tmp_path, {"SKIP_RUNTIME_RULES": "nvfp4-rule, env-rule"})
    assert applied == [] and cmd.env == {} and not cmd.has("--moe-runner-backend")
    assert any("sm_120 rule env-rule (SM120_TEST_ENV=1) skipped: SKIP_RUNTIME_RULES" in x for x in log.lines())
    applied, _, _ = apply(presets, tmp_path / "all", {"SKIP_RUNTIME_RULES": "all", "TP_SIZE": "8"})
    assert applied == []


def test_tp_and_node_conditions(presets, tmp_path):
    applied, cmd, _ = apply(presets, tmp_path, {"TP_SIZE": "8"}, nvfp4=False)
    assert "symm" in applied and cmd.has("--enable-torch-symm-mem")
    applied, _, log = apply(presets, tmp_path / "1", {"TP_SIZE": "1"}, nvfp4=False)
    assert "symm" not in applied and any("tp>1 does not hold" in line for line in log.lines())
    multi = {"TP_SIZE": "16", "NNODES": "2", "DIST_INIT_ADDR": "h:5"}
    applied, _, log = apply(presets, tmp_path / "2", multi, nvfp4=False)
    assert "symm" not in applied and any("single-node does not hold" in line for line in log.lines())


def test_a_flag_the_user_passes_is_not_doubled(presets, tmp_path):
    _, cmd, _ = apply(presets, tmp_path, {"TP_SIZE": "8"}, ["--enable-torch-symm-mem"], nvfp4=False)
    assert cmd.argv().count("--enable-torch-symm-mem") == 1


def test_rule_needing_a_patch_follows_the_installed_source(presets, tmp_path):
    unpatched = sglang_source.locate([str(fake_sglang(tmp_path / "a", symm_mem_12=False))])
    applied, cmd, log = apply(presets, tmp_path / "u", {"TP_SIZE": "8"}, nvfp4=False, installed=unpatched)
    assert "symm" not in applied and not cmd.has("--enable-torch-symm-mem")
    assert any("lacks the torch-symm-mem-sm120 change" in line for line in log.lines())
    patched = sglang_source.locate([str(fake_sglang(tmp_path / "b", symm_mem_12=True))])
    applied, cmd, _ = apply(presets, tmp_path / "p", {"TP_SIZE": "8"}, nvfp4=False, installed=patched)
    assert "symm" in applied and cmd.has("--enable-torch-symm-mem")


def test_unknown_nvfp4_for_a_repo_id(presets):
    cmd, log = build(presets, "baseline", {"MODEL_PATH": "org/model"})
    values = assemble.effective(cmd, presets, "baseline", log)
    target = models.open_model(values.model)
    applied = rules.apply(presets, cmd, values, models.quantization(target), target.path is not None, None, {}, log)
    assert "nvfp4-rule" not in applied
    assert any("cannot tell whether the target is NVFP4" in line for line in log.lines())


def test_plan_with_an_unknown_condition_is_refused(tmp_path):
    bad = [{"name": "x", "when": ["tp>2"], "env": {"A": "1"}, "args": [], "reason": "r"}]
    plan = synthetic_plan(tmp_path / "p.json", runtime=bad)
    with pytest.raises(UsageError, match=r"runtime\[0\].when has 'tp>2'"):
        presets_mod.load({"SM120_PLAN": str(plan)})


def test_requires_checks_come_from_the_plan(presets):
    (symm,) = [r for r in presets.runtime if r.name == "symm"]
    assert symm.requires.patch == "torch-symm-mem-sm120"
    assert [(c.path, c.patterns) for c in symm.requires.checks] == [(c["path"], c["patterns"]) for c in SYMM_MEM_CHECKS]


def test_models_helpers_agree_with_the_fixture(tmp_path):
    # eagle3_draft/kimi_target describe the same hidden size: the pair check accepts them.
    target = models.open_model(options.Item(["--model-path", str(kimi_target(tmp_path / "t"))], "MODEL_PATH"))
    draft = models.open_model(options.Item(["--x", str(eagle3_draft(tmp_path / "d"))], "DRAFT_MODEL_PATH"))
    assert models.check_pair(target, draft) == []
    other = write_model(tmp_path / "o", {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 5120})
    with pytest.raises(UsageError):
        models.check_pair(target, models.open_model(options.Item(["--x", str(other)], "DRAFT_MODEL_PATH")))
