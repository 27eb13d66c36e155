"""T1: the entrypoint's commands against the real SGLang releases of the tracks (CPU-only venvs, no GPU).

For each track: `<venv python> docker/entrypoint.py MODE --dry-run` with the track's real plan, TP_SIZE=8, a
Kimi-K2.5-like NVFP4 target and an LlamaForCausalLMEagle3 draft (config.json only). The command must be
accepted by that release's own parser (`ServerArgs.add_cli_args`), once inside the entrypoint and once
more here, parsing the printed last line independently. Run against the release as the image ships it
(`build.py patches apply`, first on PYTHONPATH) and as published on PyPI (the venv alone), where the rules
that need a patch must stay out and the unpatched 0.5.9 must refuse Kimi-K2.5 with EAGLE-3 in seconds.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from sm120.image.entrypoint import key_file
from sm120.image.entrypoint.sglang_source import InstalledSGLang
from sm120.patches import patching
from sm120.plan import config as cfg
from tests.entrypoint_helpers import (
    clean_env,
    eagle3_draft,
    kimi_target,
    real_plan,
    run_entrypoint,
    stderr_lines,
)
from tests.upstream.parsing import parse_commands

CONFIG = cfg.load()
TRACKS = sorted(CONFIG.tracks, key=Version)
TIMEOUT_S = 600  # importing SGLang's server_args takes 10-40 s on a small CPU machine


@pytest.fixture
def env(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    version = request.node.callspec.params["sglang_python"]
    return clean_env(
        SM120_PLAN=str(real_plan(tmp_path / "plan.json", version)),
        MODEL_PATH=str(kimi_target(tmp_path / "Kimi-K2.5-NVFP4", nvfp4=True)),
        DRAFT_MODEL_PATH=str(eagle3_draft(tmp_path / "Kimi-K2.5-eagle3")),
        TP_SIZE="8",
    )


def sglang_args(stdout: str) -> list[str]:
    words = shlex.split(stdout.strip().splitlines()[-1])
    return words[words.index("sglang.launch_server") + 1 :]


OPTIONS = [
    "--model-path",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--tp-size",
    "--host",
    "--port",
    "--moe-runner-backend",
    "--enable-torch-symm-mem",
    "--quantization",
]


def parse_independently(run_snippet, python: Path, args: list[str], pythonpath=()) -> dict:
    return parse_commands(run_snippet, python, [args], OPTIONS, pythonpath)[0]


def ok(proc, version: str) -> None:
    assert proc.returncode == 0, proc.stderr
    assert f"# the command is accepted by SGLang {version}'s own parser" in proc.stdout, proc.stdout


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_eagle3_as_the_image_ships_it(sglang_python, env, patched_tree, run_snippet, request):
    """The issue's "done when": MODEL_PATH, DRAFT_MODEL_PATH, TP_SIZE=8, eagle3 --dry-run, accepted by SGLang."""
    version = request.node.callspec.params["sglang_python"]
    site = patched_tree(version)
    proc = run_entrypoint(
        ["eagle3", "--dry-run"], {**env, "PYTHONPATH": str(site)}, python=sglang_python, timeout=TIMEOUT_S
    )
    ok(proc, version)
    args = sglang_args(proc.stdout)
    parsed = parse_independently(run_snippet, sglang_python, args, pythonpath=[site])
    assert parsed["version"] == version
    assert parsed["--speculative-algorithm"] == "EAGLE3"
    # The track's draft tree (build.toml [tracks."X".presets.eagle3]): 0.5.9 the reference run's 2/4/16; where the
    # track leaves it to SGLang (0.5.23) none of the three reaches SGLang's parser, so SGLang chooses it.
    presets = CONFIG.tracks[version].presets["eagle3"]
    tree = (presets.spec_num_steps, presets.spec_eagle_topk, presets.spec_num_draft_tokens)
    assert (
        parsed["--speculative-num-steps"],
        parsed["--speculative-eagle-topk"],
        parsed["--speculative-num-draft-tokens"],
    ) == tree
    assert parsed["--tp-size"] == 8 and parsed["--host"] == "0.0.0.0" and parsed["--port"] == 30000
    assert parsed["--model-path"] == env["MODEL_PATH"]
    assert parsed["--speculative-draft-model-path"] == env["DRAFT_MODEL_PATH"]
    # The patched release has the torch-symm-mem-sm120 change: the rule applies (TP 8, one node).
    assert parsed["--enable-torch-symm-mem"] is True
    # The NVFP4 rules (0.5.9: the quantization; 0.5.23: the MoE runner) as build.toml writes them; DeepGEMM's JIT
    # is turned off on 0.5.9 only.
    nvfp4 = [a for r in CONFIG.tracks[version].runtime if "nvfp4" in r.conditions for a in r.args]

    def wanted(option: str, default: str | None) -> str | None:
        return nvfp4[nvfp4.index(option) + 1] if option in nvfp4 else default

    assert parsed["--moe-runner-backend"] == wanted("--moe-runner-backend", "auto")
    if "--quantization" in nvfp4:
        assert parsed["--quantization"] == wanted("--quantization", None)
    assert ("SGLANG_ENABLE_JIT_DEEPGEMM=0" in proc.stdout.splitlines()[-1]) == (version == "0.5.9")


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_eagle3_with_the_mla_drafter(sglang_python, env, patched_tree, run_snippet, tmp_path, request):
    """The MLA EAGLE-3 drafter (Eagle3DeepseekV2ForCausalLM, upstream's Kimi-K2.5 recipe): where the release registers
    it, the command passes that release's parser with SGLang's own draft tree; where it does not (0.5.9), exit 2
    naming the track that has it. The drafter's config.json is the T2.5 start-up check's."""
    from sm120.verify import startup
    from tests.entrypoint_helpers import write_model

    version = request.node.callspec.params["sglang_python"]
    site = patched_tree(version)
    draft = write_model(tmp_path / "mla-drafter", startup.family("kimi-k25-nvfp4-mla/eagle3").draft["config.json"])
    run_env = {**env, "PYTHONPATH": str(site), "DRAFT_MODEL_PATH": str(draft)}
    proc = run_entrypoint(["eagle3", "--dry-run"], run_env, python=sglang_python, timeout=TIMEOUT_S)
    if not InstalledSGLang(site / "sglang").registered("Eagle3DeepseekV2ForCausalLM"):
        assert proc.returncode == 2, proc.stdout
        assert "use the image of track" in " ".join(stderr_lines(proc)) and len(stderr_lines(proc)) <= 3
        return
    ok(proc, version)
    parsed = parse_independently(run_snippet, sglang_python, sglang_args(proc.stdout), pythonpath=[site])
    assert parsed["--speculative-draft-model-path"] == str(draft)
    presets = CONFIG.tracks[version].presets["eagle3"]
    assert parsed["--speculative-num-steps"] == presets.spec_num_steps
    assert parsed["--speculative-eagle-topk"] == presets.spec_eagle_topk


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_baseline_on_the_published_release(sglang_python, env, run_snippet, request):
    version = request.node.callspec.params["sglang_python"]
    proc = run_entrypoint(["baseline", "--dry-run"], env, python=sglang_python, timeout=TIMEOUT_S)
    ok(proc, version)
    args = sglang_args(proc.stdout)
    assert "--speculative-algorithm" not in args
    # No release up to 0.5.23 has the capability-12 change: the rule that needs it stays out, and says why.
    assert "--enable-torch-symm-mem" not in args
    assert "lacks the torch-symm-mem-sm120 change" in proc.stderr
    parsed = parse_independently(run_snippet, sglang_python, args)
    assert parsed["--tp-size"] == 8 and parsed["--speculative-algorithm"] is None


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_kimi_eagle3_on_the_published_release(sglang_python, env, request):
    """Published 0.5.9's KimiK25 lacks the EAGLE-3 hooks (the seeds' crash after an 8-minute load): exit 2 now."""
    version = request.node.callspec.params["sglang_python"]
    site = Path(
        next(p for p in sglang_python.parent.parent.glob("lib/python*/site-packages") if (p / "sglang").is_dir())
    )
    has_hooks = patching.upstream_has(CONFIG.patches["kimi-k25-eagle3-delegation"], site)
    if version == "0.5.9":
        assert not has_hooks  # upstream added them in 0.5.10rc0 (sgl-project/sglang PR #19689)
    proc = run_entrypoint(["eagle3", "--dry-run"], env, python=sglang_python, timeout=TIMEOUT_S)
    if has_hooks:
        ok(proc, version)
    else:
        assert proc.returncode == 2 and len(stderr_lines(proc)) <= 3
        assert f"SGLang {version}'s KimiK25ForConditionalGeneration lacks get_embed_and_head" in proc.stderr


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_unknown_option_is_caught_by_the_real_parser(sglang_python, env, request):
    version = request.node.callspec.params["sglang_python"]
    proc = run_entrypoint(
        ["baseline", "--dry-run", "--", "--no-such-option", "1"], env, python=sglang_python, timeout=TIMEOUT_S
    )
    assert proc.returncode == 2 and len(stderr_lines(proc)) <= 3 and "Traceback" not in proc.stderr
    assert f"SGLang {version} does not accept --no-such-option '1' (after --)" in proc.stderr
    assert "unrecognized arguments" in proc.stderr


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_bad_choice_in_extra_args_is_caught(sglang_python, env, request):
    version = request.node.callspec.params["sglang_python"]
    proc = run_entrypoint(
        ["baseline", "--dry-run"],
        {**env, "EXTRA_ARGS": "--moe-runner-backend fastest"},
        python=sglang_python,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"SGLang {version} does not accept --moe-runner-backend 'fastest' (in EXTRA_ARGS)" in proc.stderr


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_left_out_flags_are_real_options(sglang_python, env, request):
    """What build.toml leaves out is an option SGLang knows: passed by the user, it parses (with a warning)."""
    version = request.node.callspec.params["sglang_python"]
    flags = [a for entry in CONFIG.tracks[version].left_out for a in entry.args]
    proc = run_entrypoint(["baseline", "--dry-run", "--", *flags], env, python=sglang_python, timeout=TIMEOUT_S)
    ok(proc, version)
    assert all(f in sglang_args(proc.stdout) for f in flags)
    assert "is passed as you asked, but:" in proc.stderr


# Issue 15: what the real parsers would take but the checks would not see, or values that parse but cannot work.
# Only the cases that need a real release (each one that reaches the parser imports SGLang: seconds); the rest
# are T0 (tests/unit/test_entrypoint_bad_input.py) and T2 (sm120/verify/suite/test_entrypoint.py).
# id, tracks, entrypoint arguments, environment changes (CONFIG_FILE: a --config YAML written first), expected
NEWEST = TRACKS[-1]
BAD_INPUT: list[tuple[str, list[str], list[str], dict[str, str], list[str]]] = [
    # caught before the parser, from the installed server_args.py (0.5.9) or the options relied on (0.5.23)
    ("abbreviation", TRACKS, [], {"EXTRA_ARGS": "--tp 4"}, ["--tp '4' (in EXTRA_ARGS): --tp is an abbreviation of"]),
    # 0.5.23 builds its options from dataclass fields: the real parser refuses the abbreviation
    ("abbreviation-by-the-parser", [NEWEST], ["--", "--mem-fraction=0.8"], {}, ["--mem-fraction-static"]),
    # (numbers SGLang's own parser reads, e.g. --mem-fraction-static nan: T2, the image's 0.5.9)
    # a --config YAML is merged into the command: what it sets is compared, and its keys are not abbreviations
    (
        "config-sets-tp",
        TRACKS,
        ["--", "--config", "CONFIG_FILE"],
        {"CONFIG_FILE": "tp-size: 4\n", "TP_SIZE": ""},
        ["reads --tp-size as 4, the entrypoint checked no --tp-size"],
    ),
    ("config-abbreviates", [NEWEST], ["--", "--config", "CONFIG_FILE"], {"CONFIG_FILE": "tp: 4\n"}, ["--tp"]),
]
BAD_INPUT_RUNS = [pytest.param(track, *case[2:], id=f"{case[0]}-{track}") for case in BAD_INPUT for track in case[1]]


@pytest.mark.parametrize(("sglang_python", "args", "changes", "expected"), BAD_INPUT_RUNS, indirect=["sglang_python"])
def test_bad_input_against_the_real_parser(sglang_python, env, tmp_path, args, changes, expected):
    changes = dict(changes)
    config_text = changes.pop("CONFIG_FILE", None)
    if config_text is not None:
        config = tmp_path / "server.yaml"
        config.write_text(config_text)
        args = [str(config) if a == "CONFIG_FILE" else a for a in args]
    proc = run_entrypoint(["baseline", "--dry-run", *args], {**env, **changes}, python=sglang_python, timeout=TIMEOUT_S)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert 1 <= len(stderr_lines(proc)) <= 3 and "Traceback" not in proc.stderr
    for text in expected:
        assert text in proc.stderr, (text, proc.stderr)


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_the_installed_option_list_is_read_from_server_args(sglang_python):
    """The list abbreviations are refused against, read from the installed files without importing SGLang."""
    site = next(p for p in sglang_python.parent.parent.glob("lib/python*/site-packages") if (p / "sglang").is_dir())
    options = InstalledSGLang(site / "sglang").options()
    if Version(str(sglang_python.parent.parent.parent.name)) < Version("0.5.10"):
        assert {"--model-path", "--tp-size", "--node-rank", "--speculative-algorithm", "--config"} <= options
        assert len(options) > 250
    else:  # options made from ServerArgs' dataclass fields: the entrypoint falls back to the ones it relies on
        text = (site / "sglang/srt/server_args.py").read_text()
        assert options == frozenset() and "add_cli_args_from_dataclass" in text


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_the_installed_quantization_list_is_read_from_its_registry(sglang_python):
    """Issue 24: the quant_method check reads QUANTIZATION_METHODS' names from the installed files (the
    BASE_QUANTIZATION_METHODS literal and its updates) without importing SGLang: the names checkpoints use."""
    site = next(p for p in sglang_python.parent.parent.glob("lib/python*/site-packages") if (p / "sglang").is_dir())
    names = InstalledSGLang(site / "sglang").quantization_methods()
    assert {"fp8", "modelopt", "modelopt_fp4", "compressed-tensors", "awq", "gptq", "mxfp4"} <= names
    assert "fp6_magic" not in names


# Issue 29: API_KEY_FILE. The entrypoint's parser check parses `--api-key ********`; the launcher hands the real
# key to SGLang in-process as `--api-key=KEY`, which each release's own parser must read back exactly (a key
# that starts with '-' included); and SGLang's own auth rule leaves /health open for the HEALTHCHECK.
API_KEY = "-t1-k3y-0123456789abcdef"  # a leading '-' would be an option to argparse, were it not `--api-key=`

LAUNCHED_PARSE = """
import argparse, json, os, sys
from sglang.srt.server_args import ServerArgs

parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
ns = parser.parse_args(sys.argv[1:])
known = parser._option_string_actions
with open(os.environ["PROBE_OUT"], "w") as out:  # a file: the launcher masks the key on stdout and stderr
    json.dump({"api_key": ns.api_key, "model_path": ns.model_path, "tp_size": getattr(ns, known["--tp-size"].dest),
               "options": [o for o in ("--tokenizer-worker-num", "--grpc-port", "--admin-api-key") if o in known]}, out)
print("server_args", vars(ns))  # as SGLang logs them at start-up
"""


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_api_key_file_reaches_the_real_parser_in_process(sglang_python, env, tmp_path, request):
    version = request.node.callspec.params["sglang_python"]
    key = tmp_path / "api_key"
    key.write_text(API_KEY + "\n")
    proc = run_entrypoint(
        ["baseline", "--dry-run"], {**env, "API_KEY_FILE": str(key)}, python=sglang_python, timeout=TIMEOUT_S
    )
    ok(proc, version)  # the entrypoint's own check: the release's parser takes `--api-key ********`
    args = sglang_args(proc.stdout)
    assert args[-2:] == ["--api-key", key_file.MASK] and API_KEY not in proc.stdout + proc.stderr

    (tmp_path / "launched_parse.py").write_text(LAUNCHED_PARSE)
    out = tmp_path / "parsed.json"
    run = subprocess.run(
        [str(sglang_python), str(key_file.LAUNCHER), "-m", "launched_parse", *args[:-2]],
        cwd=tmp_path,
        env={**env, "API_KEY_FILE": str(key), "PROBE_OUT": str(out), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    parsed = json.loads(out.read_text())
    assert parsed["api_key"] == API_KEY and parsed["tp_size"] == 8 and parsed["model_path"] == env["MODEL_PATH"]
    assert f"'api_key': '{key_file.MASK}'" in run.stdout and API_KEY not in run.stdout + run.stderr
    # The options the entrypoint names in its refusals are this release's own.
    assert "--tokenizer-worker-num" in parsed["options"] and "--admin-api-key" in parsed["options"]


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_sglang_leaves_health_open_behind_an_api_key(sglang_python, run_snippet):
    """srt/utils/auth.py's decide_request_auth (both releases): what the HEALTHCHECK and bench's probe rely on."""
    code = """
    from sglang.srt.utils.auth import AuthLevel, decide_request_auth

    def allowed(path, header=None):
        return decide_request_auth(method="GET", path=path, authorization_header=header, api_key="sekrit-key-1",
                                   admin_api_key=None, auth_level=AuthLevel.NORMAL).allowed

    emit({p: allowed(p) for p in ("/health", "/health_generate", "/metrics", "/generate", "/server_info")}
         | {"bearer": allowed("/generate", "Bearer sekrit-key-1"), "other": allowed("/generate", "Bearer nope")})
    """
    result = run_snippet(sglang_python, code, stubs=False)
    assert result == {
        "/health": True,
        "/health_generate": True,
        "/metrics": True,
        "/generate": False,
        "/server_info": False,
        "bearer": True,
        "other": False,
    }
