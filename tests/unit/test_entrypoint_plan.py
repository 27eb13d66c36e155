"""T0: the entrypoint's part of build.toml and of the plan: mode presets, runtime rules (names, conditions, the
patch a rule needs -> that patch's upstream_check in the plan), left-out flags; and bad rules are refused, as are
presets the entrypoint would refuse at every start (abbreviations, a word first, a second '--')."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sm120.errors import UsageError
from sm120.image.entrypoint import spec
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.plan import resources as res
from tests.helpers import run_cli, write_config
from tests.unit.test_cli import assert_usage

ROOT = Path(__file__).resolve().parents[2]
MACHINE = res.Resources(cpus=2, memory_bytes=24 * 1024**3, source="test")


def entry(version: str, config: cfg.Config | None = None) -> dict:
    """The plan's `entrypoint` as the image's plan.json holds it."""
    config = config or cfg.load(ROOT / "build.toml")
    return planmod.resolve(config, profile="offline", sglang=version, machine=MACHINE).to_dict()["entrypoint"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_entrypoint_reads_what_the_plan_holds(version):
    plan = planmod.resolve(cfg.load(ROOT / "build.toml"), profile="offline", sglang=version, machine=MACHINE)
    presets = spec.from_plan(json.loads(json.dumps(plan.to_dict())))  # as plan.json holds it
    assert presets == plan.entrypoint  # the same classes on both sides: read back, field for field
    assert presets.sglang_version == version and presets.cuda_archs == ["12.0"]
    eagle3 = presets.modes["eagle3"]
    # Each track's draft tree (build.toml [tracks."X".presets.eagle3]): 0.5.9 the reference run's, 0.5.23 SGLang's.
    assert eagle3.draft_tree == {"0.5.9": (2, 4, 16), "0.5.23": None}[version] and eagle3.draft_tree_reason
    assert eagle3.args == ["--speculative-algorithm", "EAGLE3"] and eagle3.draft
    assert presets.modes["baseline"].args == [] and not presets.modes["baseline"].draft


def test_rules_of_the_tracks():
    old = {r["name"]: r for r in entry("0.5.9")["runtime"]}
    new = {r["name"]: r for r in entry("0.5.23")["runtime"]}
    assert old["no-jit-deepgemm"]["env"] == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}
    assert "no-jit-deepgemm" not in new  # 0.5.23 probes deep_gemm's sm_120 kernels itself
    assert new["nvfp4-moe-cutlass"]["args"] == ["--moe-runner-backend", "flashinfer_cutlass"]
    assert new["nvfp4-moe-cutlass"]["when"] == ["nvfp4"]
    for rules in (old, new):
        symm = rules["torch-symm-mem"]
        assert symm["args"] == ["--enable-torch-symm-mem"] and symm["when"] == ["tp>1", "single-node"]
        # The rule carries the patch's own upstream_check: the entrypoint finds the change in the installed files.
        patch = cfg.load(ROOT / "build.toml").patches["torch-symm-mem-sm120"]
        assert symm["requires"] == {
            "patch": "torch-symm-mem-sm120",
            "checks": [c.model_dump() for c in patch.upstream_checks],
        }
    for version in ("0.5.9", "0.5.23"):
        assert [lo["args"] for lo in entry(version)["left_out"]] == [["--enable-flashinfer-allreduce-fusion"]]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('name = "no-jit-deepgemm"\n', "", "name"),
        ('name = "torch-symm-mem"\nwhen = ["tp>1", "single-node"]', 'name = "torch-symm-mem"\nwhen = ["tp>2"]', "when"),
        ('env = { SGLANG_ENABLE_JIT_DEEPGEMM = "0" }\n', "", "sets neither env nor args"),
        ('name = "no-jit-deepgemm"', 'name = "No Deepgemm"', "name"),
    ],
)
def test_bad_rules_are_refused_by_the_config(tmp_path, old, new, message):
    path = write_config(tmp_path, edit=lambda s: s.replace(old, new, 1))
    with pytest.raises(UsageError, match=message):
        cfg.load(path)


def test_rule_args_start_with_an_option(tmp_path):
    path = write_config(
        tmp_path, edit=lambda s: s.replace('args = ["--enable-torch-symm-mem"]', 'args = ["enable-torch-symm-mem"]', 1)
    )
    with pytest.raises(UsageError, match="is not an SGLang option"):
        cfg.load(path)


def test_rule_needing_an_unknown_patch(tmp_path):
    path = write_config(
        tmp_path, edit=lambda s: s.replace('requires_patch = "torch-symm-mem-sm120"', 'requires_patch = "x"', 1)
    )
    with pytest.raises(UsageError, match="unknown patch 'x'"):
        entry("0.5.9", cfg.load(path))


def test_rule_needing_a_patch_without_upstream_check(tmp_path):
    path = write_config(
        tmp_path,
        edit=lambda s: s.replace(
            'requires_patch = "torch-symm-mem-sm120"', 'requires_patch = "flash-attn-kernel-subset"', 1
        ),
    )
    with pytest.raises(UsageError, match="has no upstream_check"):
        entry("0.5.9", cfg.load(path))


def test_two_rules_with_one_name(tmp_path):
    path = write_config(tmp_path, edit=lambda s: s.replace('name = "torch-symm-mem"', 'name = "no-jit-deepgemm"', 1))
    with pytest.raises(UsageError, match=re.escape("two runtime rules of track 0.5.9 are named 'no-jit-deepgemm'")):
        entry("0.5.9", cfg.load(path))


def _spec_data() -> dict:
    return json.loads(json.dumps(entry("0.5.9")))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda e: e.update(extra=1), "entrypoint has the unknown key 'extra'"),
        (lambda e: e.update(port=True), "entrypoint.port is a boolean, not an integer"),
        (lambda e: e.update(port=3.0e4), "entrypoint.port is float, not an integer"),
        (lambda e: e.update(cuda_archs="12.0"), "entrypoint.cuda_archs is a string, not a list"),
        (lambda e: e.update(sglang_version=None), "entrypoint.sglang_version is null, not a string"),
        (lambda e: e.pop("left_out"), "entrypoint.left_out is missing"),
        (lambda e: e["modes"]["eagle3"].update(spec_eagle_topk=0), "entrypoint.modes.eagle3.spec_eagle_topk is 0"),
        (lambda e: e["runtime"][0].update(when=["tp>2"]), r"entrypoint.runtime\[0\].when has 'tp>2'"),
        (lambda e: e["runtime"][0]["env"].update(X=1), r"entrypoint.runtime\[0\].env.X is an integer, not a string"),
    ],
)
def test_the_spec_reader_refuses_what_the_plan_cannot_write(edit, message):
    """`spec.decode` is strict both ways: no coercion, no unknown keys, the classes' own checks (conditions, bounds)."""
    data = _spec_data()
    edit(data)
    with pytest.raises(spec.SpecError, match=message):
        spec.from_plan({"entrypoint": data})


def test_the_spec_reader_lets_nullable_keys_be_left_out():
    data = _spec_data()
    del data["modes"]["baseline"]["spec_num_steps"]
    for rule in data["runtime"]:
        rule.pop("requires")
    read = spec.from_plan(data)  # the `entrypoint` object alone is accepted too
    assert read.modes["baseline"].spec_num_steps is None and all(r.requires is None for r in read.runtime)


def test_the_conditions_mean_what_build_toml_says():
    facts = spec.RuleFacts(tp=8, nnodes=1, nvfp4=None)
    assert {name: judge(facts) for name, judge in spec.CONDITIONS.items()} == {
        "always": True,
        "nvfp4": None,  # cannot tell: the rule is not applied, and the log says why
        "tp>1": True,
        "single-node": True,
    }


# --------------------------------------------------------------------------------------------------
# Presets that cannot start
# --------------------------------------------------------------------------------------------------


EAGLE3_ARGS = 'args = ["--speculative-algorithm", "EAGLE3"]'
PRESETS: list[tuple[str, str, str, list[str]]] = [
    (
        "mode-abbreviation",
        EAGLE3_ARGS,
        'args = ["--speculative-algo", "EAGLE3"]',
        ["modes.eagle3.args", "--speculative-algo is an abbreviation of --speculative-algorithm"],
    ),
    (
        "mode-tp-abbreviation",
        EAGLE3_ARGS,
        'args = ["--speculative-algorithm", "EAGLE3", "--tp", "4"]',
        ["--tp is an abbreviation of --tp-size"],
    ),
    (
        "mode-ambiguous",
        EAGLE3_ARGS,
        'args = ["--speculative-algorithm", "EAGLE3", "--speculative-num", "4"]',
        ["--speculative-num is an abbreviation of 2 options"],
    ),
    (
        "mode-inline-value",
        EAGLE3_ARGS,
        'args = ["--speculative-algorithm=EAGLE3", "--po=8000"]',
        ["--po is an abbreviation of --port"],
    ),
    (
        "mode-word-first",
        EAGLE3_ARGS,
        'args = ["EAGLE3", "--speculative-algorithm", "EAGLE3"]',
        ["'EAGLE3' is not an option"],
    ),
    ("mode-second-dashes", EAGLE3_ARGS, 'args = ["--speculative-algorithm", "EAGLE3", "--", "--x"]', ["a second '--'"]),
    (
        "baseline-abbreviation",
        "args = []",
        'args = ["--mem-frac", "0.8", "--host", "0.0.0.0", "--nnode", "1"]',
        ["modes.baseline.args", "--nnode"],
    ),
    (
        "rule-abbreviation",
        'args = ["--quantization", "modelopt_fp4"]',
        'args = ["--quant", "modelopt_fp4"]',
        ["runtime.", "(rule nvfp4-quantization)", "--quant is an abbreviation of --quantization"],
    ),
    (
        "rule-second-dashes",
        'args = ["--enable-torch-symm-mem"]',
        'args = ["--enable-torch-symm-mem", "--", "x"]',
        ["runtime.", "a second '--'"],
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in PRESETS], ids=[c[0] for c in PRESETS])
def test_presets_the_entrypoint_would_refuse_are_refused_by_plan(capsys, tmp_path, old, new, expected):
    config = write_config(tmp_path, edit=lambda text: text.replace(old, new, 1))
    assert new in config.read_text()
    rc, _, err = run_cli(capsys, "plan", "--config", str(config))
    assert_usage(rc, err, "the entrypoint would refuse it at every start", *expected)


def test_presets_the_entrypoint_takes_still_plan(capsys, tmp_path):
    """Full spellings, aliases and options the entrypoint does not rely on pass (the image's own SGLang parser
    judges an unknown option at start: its option list is not known at plan time)."""
    new = 'args = ["--speculative-algorithm", "EAGLE3", "--mem-fraction-static", "0.8", "--model", "x", "--no-such"]'
    config = write_config(tmp_path, edit=lambda text: text.replace(EAGLE3_ARGS, new, 1))
    rc, _, err = run_cli(capsys, "plan", "--config", str(config))
    assert rc == 0, err


class _Rule:
    def __init__(self, name: str, args: list[str]) -> None:
        self.name, self.args = name, args


def test_check_mode_args_takes_a_modes_args_and_its_tracks_rules():
    """The function config validation calls per (track, mode): where modes live in build.toml may change."""
    rules = [_Rule("ok", ["--enable-torch-symm-mem"]), _Rule("bad", ["--moe-runner", "triton"])]
    cfg.check_mode_args("build.toml", "eagle3", ["--speculative-algorithm", "EAGLE3"], rules[:1])
    with pytest.raises(UsageError, match=r"build.toml: tracks\.x\.runtime\.1\.args \(rule bad\): .*--moe-runner"):
        cfg.check_mode_args("build.toml", "eagle3", [], rules, rules_key="tracks.x.runtime")
    with pytest.raises(UsageError, match=r"build.toml: tracks\.x\.modes\.eagle3\.args: .*--speculative-draft"):
        cfg.check_mode_args("build.toml", "eagle3", ["--speculative-draft", "x"], mode_key="tracks.x.modes.eagle3")
