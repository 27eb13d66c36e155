"""T0: the entrypoint with a stand-in `sglang` package (tests/entrypoint_helpers.fake_sglang) on PYTHONPATH:
the parser check's mechanics (a child interpreter, no GPU, exit 2 naming the source), the checks read from
SGLang's files, and the start path to the exec (GPUs faked with nvidia-smi). T1 does the same against the
real SGLang releases (tests/upstream/test_entrypoint_parser.py)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.entrypoint_helpers import (
    ENTRYPOINT,
    RTX_PRO,
    eagle3_draft,
    fake_sglang,
    kimi_target,
    run_entrypoint,
    standin_run,
    stderr_lines,
)


@pytest.fixture
def setup(tmp_path: Path):
    """Environment for a run with the stand-in SGLang: models, plan, GPUs (fake nvidia-smi), cache, records."""
    return standin_run(tmp_path, FAKE_SGLANG_PROBE=str(tmp_path / "probe.txt"))


def last_line_args(stdout: str) -> list[str]:
    words = shlex.split(stdout.strip().splitlines()[-1])
    return words[words.index("sglang.launch_server") + 1 :]


# --------------------------------------------------------------------------------------------------
# The parser check
# --------------------------------------------------------------------------------------------------


def test_dry_run_is_checked_by_sglangs_parser_without_a_gpu(setup):
    proc = run_entrypoint(["eagle3", "--dry-run"], {**setup["env"], "TP_SIZE": "8"})
    assert proc.returncode == 0, proc.stderr
    assert "# the command is accepted by SGLang 9.9.9's own parser" in proc.stdout
    assert "noise from importing" not in proc.stdout + proc.stderr  # the child's output stays out
    assert (setup["tmp"] / "probe.txt").read_text() == ""  # CUDA_VISIBLE_DEVICES="" in the parser's interpreter
    assert not (setup["tmp"] / "server.json").exists()  # nothing started
    assert "--speculative-algorithm" in last_line_args(proc.stdout)


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--", "--no-such-option"], {}, ["does not accept --no-such-option (after --)", "unrecognized arguments"]),
        (
            [],
            {"EXTRA_ARGS": "--moe-runner-backend fast"},
            ["--moe-runner-backend 'fast' (in EXTRA_ARGS)", "invalid choice: 'fast'"],
        ),
        (["--", "--mem-fraction-static", "lots"], {}, ["--mem-fraction-static 'lots' (after --)", "invalid float"]),
        (["--", "--speculative-algorithm", "MEDUSA"], {}, ["--speculative-algorithm 'MEDUSA' (after --)"]),
    ],
)
def test_what_sglang_rejects_exits_2_naming_the_source(setup, args, env, expected):
    proc = run_entrypoint(["eagle3", "--dry-run", *args], {**setup["env"], **env})
    assert proc.returncode == 2, proc.stderr
    lines = stderr_lines(proc)
    assert len(lines) <= 3 and "Traceback" not in proc.stderr and proc.stdout == ""
    assert lines[0].startswith("entrypoint: error: SGLang 9.9.9 does not accept")
    for text in expected:
        assert text in proc.stderr, (text, proc.stderr)


def test_an_abbreviation_is_refused_before_the_checks(setup):
    proc = run_entrypoint(["baseline", "--dry-run", "--", "--tp", "4"], {**setup["env"], "TP_SIZE": "8"})
    assert proc.returncode == 2
    assert "--tp '4' (after --): --tp is an abbreviation of --tp-size" in proc.stderr
    assert "spell SGLang 9.9.9's options in full, e.g. --tp-size 4" in proc.stderr


def test_version_mismatch_is_a_warning(setup, tmp_path):
    site = fake_sglang(tmp_path / "other", version="0.5.9")
    proc = run_entrypoint(["--dry-run"], {**setup["env"], "PYTHONPATH": str(site)})
    assert proc.returncode == 0
    assert "warning: the installed SGLang is 0.5.9, the presets are for 9.9.9" in proc.stderr


def test_a_broken_sglang_is_not_checked_but_said(setup):
    (setup["site"] / "sglang/srt/server_args.py").write_text("raise RuntimeError('cannot import')\n")
    proc = run_entrypoint(["--dry-run"], setup["env"])
    assert proc.returncode == 0
    assert "SGLang's parser could not be loaded (RuntimeError: cannot import)" in proc.stdout
    assert "NOT checked" in proc.stdout


# --------------------------------------------------------------------------------------------------
# Checks read from SGLang's files
# --------------------------------------------------------------------------------------------------


def test_a_drafter_class_the_installed_sglang_lacks(setup, tmp_path):
    draft = eagle3_draft(tmp_path / "kimi-drafter", architecture="Eagle3DeepseekV2ForCausalLM")
    proc = run_entrypoint(["eagle3", "--dry-run"], {**setup["env"], "DRAFT_MODEL_PATH": str(draft)})
    assert proc.returncode == 2 and len(stderr_lines(proc)) <= 3
    assert "SGLang 9.9.9 has no drafter class Eagle3DeepseekV2ForCausalLM" in proc.stderr
    assert "its EAGLE-3 drafters: LlamaForCausalLMEagle3" in proc.stderr


def test_a_target_without_eagle3_hooks_fails_in_seconds(setup, tmp_path):
    # The reference run's crash (docs/reference-run.md): unpatched KimiK25 lacks the hooks; found here, not after a
    # load.
    target = kimi_target(tmp_path / "kimi")
    proc = run_entrypoint(["eagle3", "--dry-run"], {**setup["env"], "MODEL_PATH": str(target)})
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 3
    assert "KimiK25ForConditionalGeneration lacks get_embed_and_head, set_eagle3_layers_to_capture" in proc.stderr
    # baseline does not need them
    assert run_entrypoint(["--dry-run"], {**setup["env"], "MODEL_PATH": str(target)}).returncode == 0
    # with the delegation (the kimi-k25-eagle3-delegation patch) it passes
    site = fake_sglang(tmp_path / "patched", version="9.9.9", kimi_hooks=True)
    ok = run_entrypoint(["eagle3", "--dry-run"], {**setup["env"], "MODEL_PATH": str(target), "PYTHONPATH": str(site)})
    assert ok.returncode == 0, ok.stderr


def test_symm_mem_rule_follows_the_installed_patch(setup, tmp_path):
    env = {**setup["env"], "TP_SIZE": "8"}
    proc = run_entrypoint(["--dry-run"], env)
    assert "--enable-torch-symm-mem" not in last_line_args(proc.stdout)
    assert "lacks the torch-symm-mem-sm120 change" in proc.stderr
    site = fake_sglang(tmp_path / "patched", version="9.9.9", symm_mem_12=True)
    proc = run_entrypoint(["--dry-run"], {**env, "PYTHONPATH": str(site)})
    assert "--enable-torch-symm-mem" in last_line_args(proc.stdout)


# --------------------------------------------------------------------------------------------------
# Starting: preflight, then exec (the process becomes SGLang)
# --------------------------------------------------------------------------------------------------


def test_start_execs_sglang_with_the_dry_run_command(setup):
    env = {**setup["env"], "TP_SIZE": "8"}
    dry = run_entrypoint(["eagle3", "--dry-run"], env)
    proc = subprocess.Popen(
        [sys.executable, str(ENTRYPOINT), "eagle3"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    record = json.loads((setup["tmp"] / "server.json").read_text())
    assert record["pid"] == proc.pid  # exec: the entrypoint's process became the server
    assert record["argv"] == last_line_args(dry.stdout)
    assert record["env"]["SM120_TEST_ENV"] == "1"  # the runtime rule's environment
    assert record["env"]["CUDA_VISIBLE_DEVICES"] is None  # hidden only from the parser check
    assert f"GPUs: 8 visible ({RTX_PRO}); 8 used on this node" in err
    assert "[entrypoint] exec SM120_TEST_ENV=1 " in err
    assert out == ""


def test_the_users_variable_reaches_sglang(setup):
    proc = run_entrypoint(["baseline"], {**setup["env"], "SM120_TEST_ENV": "7"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads((setup["tmp"] / "server.json").read_text())["env"]["SM120_TEST_ENV"] == "7"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TP_SIZE": "16"}, ["TP_SIZE='16' needs 16 GPUs on this node, 8 visible"]),
        ({"PATH": "/usr/bin:/bin"}, ["no NVIDIA GPU is visible", "--gpus all"]),
        (
            {"SM120_CACHE_DIR": "/dev/null/cache"},
            ["the JIT cache directory /dev/null/cache is not writable", "named volume"],
        ),
    ],
)
def test_start_refuses_before_sglang(setup, env, expected):
    run_env = {**setup["env"], **env}
    if "PATH" in env:
        run_env["PYTHONPATH"] = setup["env"]["PYTHONPATH"]
    proc = run_entrypoint(["baseline"], run_env)
    assert proc.returncode == 2, proc.stderr
    assert len(stderr_lines(proc)) <= 3 and "Traceback" not in proc.stderr
    for text in expected:
        assert text in proc.stderr, (text, proc.stderr)
    assert not (setup["tmp"] / "server.json").exists()
    assert not (setup["tmp"] / "probe.txt").exists()  # refused before SGLang's parser (seconds to import)


def test_small_shm_warns_but_starts(setup):
    # The real /dev/shm decides here: a warning only where it is small; the server starts either way.
    proc = run_entrypoint(["baseline"], {**setup["env"], "TP_SIZE": "8"})
    assert proc.returncode == 0, proc.stderr
    size = os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize if Path("/dev/shm").is_dir() else 0
    assert ("/dev/shm is" in proc.stderr) == (size < (1 << 30))
