"""T0: EAGLE-3 per track (issue 21). Each track's draft tree comes from build.toml ([tracks."X".presets.eagle3]):
0.5.9 passes the reference run's 2/4/16, 0.5.23 leaves the tree to SGLang and the dry run says so; the tree is
set whole or not at all (SGLang asserts otherwise); every EAGLE-3 drafter class the installed SGLang registers is
accepted (the MLA drafter Eagle3DeepseekV2ForCausalLM included), and where it lacks one build.toml knows, the
error names the tracks and images that have it. Real plans of both tracks, the stand-in SGLang."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120.image.entrypoint import spec
from sm120.verify import startup
from tests.entrypoint_helpers import (
    clean_env,
    eagle3_draft,
    fake_sglang,
    kimi_target,
    real_plan,
    run_entrypoint,
    stderr_lines,
    write_model,
)

KIMI = startup.family("kimi-k25-nvfp4-mla/eagle3")  # the T2.5 start-up check's MLA drafter, here on the host


def mla_draft(directory):
    return write_model(directory, KIMI.draft["config.json"])


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("plans")
    return {v: str(real_plan(root / f"{v}.json", v)) for v in ("0.5.9", "0.5.23")}


def _env(tmp_path, plan: str, *, mla: bool, version: str, **extra: str) -> dict[str, str]:
    """The entrypoint with a track's real plan and a stand-in SGLang of that release: the MLA drafter class is
    registered from 0.5.12 on, as in SGLang; `mla` picks the MLA drafter (else a Llama-style one)."""
    registers_mla = tuple(int(p) for p in version.split(".")) >= (0, 5, 12)
    site = fake_sglang(tmp_path / "site", version=version, kimi_hooks=True, mla_drafter=registers_mla)
    draft = mla_draft(tmp_path / "mla") if mla else eagle3_draft(tmp_path / "llama")
    return clean_env(
        SM120_PLAN=plan,
        PYTHONPATH=str(site),
        MODEL_PATH=str(kimi_target(tmp_path / "target")),
        DRAFT_MODEL_PATH=str(draft),
        TP_SIZE="8",
        **extra,
    )


def _argv(stdout: str) -> list[str]:
    return stdout.strip().splitlines()[-1].split()


def _comment(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("# draft tree: ")]
    return line


def test_the_mla_drafter_is_accepted_where_sglang_registers_it(tmp_path, plans):
    proc = run_entrypoint(["eagle3", "--dry-run"], _env(tmp_path, plans["0.5.23"], mla=True, version="0.5.23"))
    assert proc.returncode == 0, proc.stderr
    argv = _argv(proc.stdout)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(tmp_path / "mla")
    # SGLang's draft tree: none of the three options is passed.
    assert not {"--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"} & set(argv)
    assert "SGLang's own choice" in _comment(proc.stdout)


def test_a_track_without_the_mla_drafter_names_the_track_that_has_it(tmp_path, plans):
    proc = run_entrypoint(["eagle3", "--dry-run"], _env(tmp_path, plans["0.5.9"], mla=True, version="0.5.9"))
    assert proc.returncode == 2, proc.stderr
    lines = stderr_lines(proc)
    assert len(lines) <= 3 and "Traceback" not in proc.stderr
    text = " ".join(lines)
    assert "SGLang 0.5.9 has no drafter class Eagle3DeepseekV2ForCausalLM" in text and "from 0.5.12" in text
    elsewhere = spec.from_plan(json.loads(Path(plans["0.5.9"]).read_text())).drafters["Eagle3DeepseekV2ForCausalLM"]
    assert "0.5.23" in elsewhere.tracks  # every track from 0.5.12 on (build.toml [eagle3_drafters])
    assert f"use the image of track {', '.join(elsewhere.tracks)} ({', '.join(elsewhere.images)})" in text
    assert "LlamaForCausalLMEagle3" in text  # what this image's SGLang does have


def test_an_unknown_drafter_class_lists_the_ones_sglang_has(tmp_path, plans):
    env = _env(tmp_path, plans["0.5.23"], mla=False, version="0.5.23")
    eagle3_draft(tmp_path / "llama", architecture="QwenForCausalLMEagle3")
    proc = run_entrypoint(["eagle3", "--dry-run"], env)
    assert proc.returncode == 2
    text = " ".join(stderr_lines(proc))
    assert "has no drafter class QwenForCausalLMEagle3" in text
    assert "its EAGLE-3 drafters: Eagle3DeepseekV2ForCausalLM, LlamaForCausalLMEagle3" in text


@pytest.mark.parametrize(
    ("version", "extra", "tree", "said"),
    [
        ("0.5.9", {}, ["2", "4", "16"], "steps 2, top-k 4, draft tokens 16: the reference run's"),
        # one variable over the presets: the other two still come from them, and the comment names the variable
        ("0.5.9", {"SPEC_EAGLE_TOPK": "8"}, ["2", "8", "16"], "(set by SPEC_EAGLE_TOPK, preset eagle3)"),
        ("0.5.23", {}, [None, None, None], "SGLang's own choice"),
        (
            "0.5.23",
            {"SPEC_NUM_STEPS": "3", "SPEC_EAGLE_TOPK": "1", "SPEC_NUM_DRAFT_TOKENS": "4"},
            ["3", "1", "4"],
            "(set by SPEC_EAGLE_TOPK, SPEC_NUM_DRAFT_TOKENS, SPEC_NUM_STEPS)",
        ),
    ],
    ids=["reference", "one-override", "sglang-chooses", "whole-tree-given"],
)
def test_the_draft_tree_per_track(tmp_path, plans, version, extra, tree, said):
    proc = run_entrypoint(["eagle3", "--dry-run"], _env(tmp_path, plans[version], mla=False, version=version, **extra))
    assert proc.returncode == 0, proc.stderr
    argv = _argv(proc.stdout)
    found = [
        argv[argv.index(o) + 1] if o in argv else None
        for o in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
    ]
    assert found == tree
    assert said in _comment(proc.stdout)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"SPEC_EAGLE_TOPK": "4"}, "SPEC_NUM_STEPS, SPEC_NUM_DRAFT_TOKENS are not set"),
        ({"SPEC_NUM_STEPS": "3", "SPEC_EAGLE_TOPK": "1"}, "SPEC_NUM_DRAFT_TOKENS is not set"),
        ({"EXTRA_ARGS": "--speculative-num-steps 3"}, "--speculative-num-steps '3' (in EXTRA_ARGS)"),
    ],
    ids=["topk-alone", "no-draft-tokens", "steps-in-extra-args"],
)
def test_part_of_the_tree_is_refused_where_sglang_chooses_it(tmp_path, plans, extra, named):
    env = _env(tmp_path, plans["0.5.23"], mla=False, version="0.5.23", **extra)
    proc = run_entrypoint(["eagle3", "--dry-run"], env)
    assert proc.returncode == 2, proc.stdout
    lines = stderr_lines(proc)
    assert len(lines) <= 3 and "Traceback" not in proc.stderr
    text = " ".join(lines)
    assert named in text and "all three" in text


@pytest.mark.parametrize(
    ("version", "said"),
    [("0.5.9", "Draft tree: steps 2, top-k 4, draft tokens 16"), ("0.5.23", "Draft tree: SGLang's own choice")],
)
def test_help_says_which_draft_tree_applies_and_why(tmp_path, plans, version, said):
    proc = run_entrypoint(["--help"], clean_env(SM120_PLAN=plans[version]))
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert said in text
    if version == "0.5.23":
        assert "_auto_choose_speculative_params" in text and "SGLang's choice; all three or none" in text
