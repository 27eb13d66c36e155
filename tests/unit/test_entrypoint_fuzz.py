"""T0 fuzz: hypothesis drives the entrypoint's environment and arguments and checks the contract.

Every run of `entrypoint.py [MODE] --dry-run [-- ARGS]` with the stand-in SGLang either
- exits 0 with a last stdout line that is a command SGLang's parser accepts (parsed here again, independently
  of the entrypoint's own check, from what a shell makes of that line), or
- exits 2 with one to three lines on stderr, the first `entrypoint: error: ...`, and no traceback.

Issue 24 adds numbers (past int()'s 4300 digits, out of range, leading zeros) and addresses (bracketed hosts,
octets, node-0 addresses as Kubernetes names them), and checks on every exit 0 that the host, the node-0
address and the numbers can work (judged here, not by the entrypoint).

Bounded: 100 examples by default (SM120_FUZZ_EXAMPLES changes it), derandomized so CI runs are repeatable
(SM120_FUZZ_RANDOM=1 explores new inputs);
about 12-20 s on 2 cores. Each example is one entrypoint process (and its parser child).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.entrypoint_helpers import (
    ENTRYPOINT,
    clean_env,
    eagle3_draft,
    fake_sglang,
    kimi_target,
    stderr_lines,
    synthetic_plan,
    write_model,
)

EXAMPLES = int(os.environ.get("SM120_FUZZ_EXAMPLES", "100"))

TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)
BIG = "1" + "0" * 5000  # past CPython's 4300-digit int() limit (issue 24)
NUMBERS = st.one_of(
    st.integers(-3, 70000).map(str),
    st.sampled_from(["1", "2", "8", "0", "+1", " 2", "2 ", "1_0", "0x2", "٣", "２", "1e1", "nan", "", " "]),
    st.sampled_from([BIG, "-" + BIG, "1234567890", "99999999999999999999", "00", "08", "65536", "1e309"]),
    st.integers(0, 4400).map(lambda n: "7" * n),  # any length, up to past the limit
    TEXT,
)
# Addresses (issue 24): bracketed forms, octets, ports with leading zeros, names as Kubernetes gives them.
HOSTS = st.sampled_from(
    ["[::1]", "[::]", "[0.0.0.0]", "::1]", "[::1", "a[b]", "fe80::1%eth0", "256.1.1.1", "010.0.0.1", "::", "h-1.x"]
)
DIST_ADDRS = st.one_of(
    st.sampled_from(
        [
            "300.1.1.1:5000",
            "10.0.0.256:5000",
            "010.0.0.1:5000",
            "10.0.0.1:05000",
            "10.0.0.1:65536",
            "[::g]:5000",
            "[fd00::1]",
            "fd00::1:5000",
            "[10.0.0.1]:5000",
            "sglang-0.sglang.default:5000",
            "[fd00::1]:5000",
            ":5000",
            "h:" + BIG,
        ]
    ),
    st.tuples(HOSTS, NUMBERS).map(lambda t: f"{t[0]}:{t[1]}"),
)
OPTIONS = [
    "--tp-size",
    "--tp",
    "--tensor-parallel-size",
    "--pp-size",
    "--port",
    "--po",
    "--host",
    "--nnodes",
    "--node-rank",
    "--node-r",
    "--dist-init-addr",
    "--model-path",
    "--model",
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-num",
    "--enable-torch-symm-mem",
    "--enable-flashinfer-allreduce-fusion",
    "--moe-runner-backend",
    "--mem-fraction-static",
    "--quantization",
    "--no-such-option",
    "-x",
]
VALUES = st.one_of(
    NUMBERS,
    st.sampled_from(["EAGLE3", "EAGLE", "NEXTN", "triton", "flashinfer_cutlass", "0.8", "h:5000", "-1", "x y"]),
    HOSTS,
    DIST_ADDRS,
)
TOKENS = st.lists(st.one_of(st.sampled_from(OPTIONS), VALUES), max_size=6)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("fuzz")
    site = fake_sglang(base / "site", version="9.9.9")
    paths = {
        "target": str(kimi_target(base / "target", architecture="DeepseekV3ForCausalLM")),
        "draft": str(eagle3_draft(base / "draft")),
        "missing": str(base / "missing"),
        "file": str(write_model(base / "m", {"a": 1}) / "config.json"),
        "list-config": str(write_model(base / "list", {})),
        "repo": "org/name",
        "tilde": "~/target",
        "relative": "target",
        "newline": str(kimi_target(base / "new\nline", architecture="DeepseekV3ForCausalLM")),
        "wrong-draft": str(eagle3_draft(base / "eagle1", architecture="LlamaForCausalLMEagle")),
    }
    (Path(paths["list-config"]) / "config.json").write_text("[]")
    env = clean_env(SM120_PLAN=str(synthetic_plan(base / "plan.json")), PYTHONPATH=str(site))
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):  # the stand-in prints on import, as SGLang does
        exec((site / "sglang/srt/server_args.py").read_text(), namespace)
    return {"paths": paths, "env": env, "server_args": namespace["ServerArgs"], "cwd": base}


def _paths(world: dict) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(sorted(world["paths"].values())), TEXT)


GOOD = {
    "TP_SIZE": ["1", "2", "8"],
    "PORT": ["30000", "8080"],
    "HOST": ["0.0.0.0", "::"],
    "NNODES": ["1"],
    "NODE_RANK": ["0"],
    "DIST_INIT_ADDR": ["10.0.0.1:5000", "sglang-0.sglang.default:5000", "[fd00::1]:5000"],
    "SPEC_NUM_STEPS": ["1", "2", "3"],
    "SPEC_EAGLE_TOPK": ["1", "4"],
    "SPEC_NUM_DRAFT_TOKENS": ["4", "8", "16"],
    "EXTRA_ARGS": ["--mem-fraction-static 0.8", "--moe-runner-backend triton", "--enable-torch-symm-mem"],
    "SKIP_RUNTIME_RULES": ["all", "symm"],
}
AFTER_GOOD = [["--mem-fraction-static", "0.85"], ["--tp-size", "2"], ["--port", "31000"], []]


@st.composite
def requests(draw: st.DrawFn, world: dict) -> tuple[list[str], dict[str, str]]:
    """Mostly plausible requests with one or two things wrong: both halves of the contract get exercised."""
    junk = {
        "MODEL_PATH": _paths(world),
        "DRAFT_MODEL_PATH": _paths(world),
        "HOST": st.one_of(st.sampled_from(["127.0.0.1", "bad host", "::1", ""]), HOSTS, TEXT),
        "DIST_INIT_ADDR": st.one_of(st.sampled_from(["h:0", "h:x", "[::1]:5", "h:٥"]), DIST_ADDRS, TEXT),
        "EXTRA_ARGS": st.one_of(TOKENS.map(shlex.join), TEXT),
        "SKIP_RUNTIME_RULES": st.sampled_from(["nope", "all,nope", " "]),
    }
    env = {"MODEL_PATH": world["paths"]["target"], "DRAFT_MODEL_PATH": world["paths"]["draft"]}
    for name in ("MODEL_PATH", "DRAFT_MODEL_PATH", *GOOD):
        roll = draw(st.integers(0, 9))
        if roll >= 7:  # unset, or a value from anywhere
            if roll == 7:
                env.pop(name, None)
            else:
                env[name] = draw(junk.get(name, NUMBERS))
        elif roll >= 4 and name in GOOD:
            env[name] = draw(st.sampled_from(GOOD[name]))
    mode = draw(st.sampled_from([["baseline"], ["eagle3"], ["eagle3"], [], ["eagle4"], ["--bogus"]]))
    after = draw(
        st.one_of(
            st.sampled_from(AFTER_GOOD).map(lambda t: ["--", *t] if t else []),
            TOKENS.map(lambda t: ["--", *t]),
        )
    )
    return [*mode, "--dry-run", *after], env


def _shell_words(line: str) -> list[str]:
    if "$'" not in line:
        return shlex.split(line)
    out = subprocess.run(
        ["bash", "-c", 'eval "set -- $1"; printf "%s\\0" "$@"', "_", line], capture_output=True, check=True
    ).stdout
    return out.decode().split("\0")[:-1]


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Refused(message)


def test_the_entrypoint_keeps_its_contract_on_any_input(world):
    outcomes: Counter[int] = Counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=timedelta(seconds=30),
        derandomize=not os.environ.get("SM120_FUZZ_RANDOM"),
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(requests(world))
    def check(request: tuple[list[str], dict[str, str]]) -> None:
        args, changes = request
        proc = _run(args, {**world["env"], **changes}, world["cwd"])
        event(f"exit {proc.returncode}")
        outcomes[proc.returncode] += 1
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode in (0, 2), (args, changes, proc.returncode, proc.stderr)
        if proc.returncode == 2:
            lines = stderr_lines(proc)
            assert 1 <= len(lines) <= 3, (args, changes, proc.stderr)
            assert lines[0].startswith("entrypoint: error: "), proc.stderr
            return
        assert "accepted by SGLang 9.9.9's own parser" in proc.stdout, proc.stdout
        words = _shell_words(proc.stdout.rstrip("\n").split("\n")[-1])
        argv = words[words.index("sglang.launch_server") + 1 :]
        parser = _Parser(allow_abbrev=False)
        world["server_args"].add_cli_args(parser)
        try:
            parsed = parser.parse_args(argv)
        except _Refused as exc:
            pytest.fail(f"exit 0, but SGLang's parser refuses {argv}: {exc}")
        _addresses_and_numbers_can_work(parsed, argv)

    check()
    print(f"fuzz outcomes: {dict(outcomes)}")
    # Both halves of the contract were exercised: commands that start, and mistakes.
    assert outcomes[0] >= EXAMPLES // 20 and outcomes[2] >= EXAMPLES // 4, dict(outcomes)


def _addresses_and_numbers_can_work(parsed: argparse.Namespace, argv: list[str]) -> None:
    """What exit 0 promises, judged here independently of the entrypoint (issue 24): the host is one uvicorn can
    bind (no brackets; digits-and-dots an IPv4 address), the node-0 address one SGLang can split, the numbers
    short, the port as the HEALTHCHECK reads it."""
    host = parsed.host
    assert "[" not in host and "]" not in host, argv
    if re.fullmatch(r"[0-9.]+", host) or ":" in host:
        ipaddress.ip_address(host)
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "port", "nnodes", "node_rank"):
        assert len(str(getattr(parsed, name))) <= 9, (name, argv)
    assert 1 <= parsed.port <= 65535, argv
    addr = parsed.dist_init_addr
    if addr is None:
        return
    if addr.startswith("["):
        inner, _, port = addr[1:].partition("]:")
        ipaddress.IPv6Address(inner)
    else:
        name, _, port = addr.rpartition(":")
        assert name and ":" not in name and "[" not in name, argv
        if re.fullmatch(r"[0-9.]+", name):
            ipaddress.IPv4Address(name)  # octets 0-255, four of them, no leading zeros
    assert re.fullmatch(r"[1-9][0-9]{0,4}", port) and int(port) <= 65535, argv


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The entrypoint as the image runs it, from the fuzz directory (so relative paths resolve there)."""
    return subprocess.run(
        [sys.executable, str(ENTRYPOINT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
