"""T0: the entrypoint's exit-2 contract for issue 24's classes, as tables of cases.

1. numbers past CPython's 4300-digit int() limit (variables, EXTRA_ARGS, after `--`, config.json, the plan);
2. addresses that parse but cannot work: bracketed HOST forms uvicorn cannot bind, DIST_INIT_ADDR read like
   SGLang reads it (IPv4 octets, the port, [IPv6]) while host names keep working, an empty PORT (the
   HEALTHCHECK would probe port 80);
and what is worth a line before a ten-minute load: TP that does not divide the attention heads, an unknown
quant_method, the port already taken (only when starting), a repo-id-looking path that is a mounted model,
the same GPU twice (by --dry-run too), a FIFO where a file is read, a full stdout (exit 1).
Each refused case: exit 2, one to three lines on stderr, the first naming the value, no traceback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.entrypoint_helpers import (
    ENTRYPOINT,
    eagle3_draft,
    kimi_target,
    run_entrypoint,
    standin_run,
    stderr_lines,
    synthetic_plan,
    write_model,
)
from tests.helpers import unshare_or_skip
from tests.unit.test_entrypoint_bad_input import assert_usage_error

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
    return standin_run(tmp_path)


# --------------------------------------------------------------------------------------------------
# 1. Numbers beyond what Python takes
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
# 2. Addresses that parse but cannot work
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
# Worth a clear line before a ten-minute load
# --------------------------------------------------------------------------------------------------


def _target(path: Path, heads: int, **extra) -> str:
    text = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_attention_heads": heads}
    return str(write_model(path, {**text, **extra}))


HEADS = [
    ("tp3-of-64", 64, "3", {}, ["TP 3 does not divide the target's 64 attention heads", "allowed TP sizes"]),
    ("tp6-of-64", 64, "6", {}, ["TP 6 does not divide the target's 64 attention heads"]),
    ("tp8-of-12", 12, "8", {}, ["TP 8 does not divide the target's 12 attention heads"]),
    ("tp2-of-7", 7, "2", {}, ["TP 2 does not divide the target's 7"]),
]


@pytest.mark.parametrize(("heads", "tp", "extra", "expected"), [c[1:] for c in HEADS], ids=[c[0] for c in HEADS])
def test_tp_that_does_not_divide_the_attention_heads(setup, tmp_path, heads, tp, extra, expected):
    env = {**setup["env"], "MODEL_PATH": _target(tmp_path / "t", heads), "TP_SIZE": tp, **extra}
    assert_refused(run_entrypoint(["baseline", "--dry-run"], env), *expected)


def test_tp_heads_of_the_drafter_and_the_ones_that_fit(setup, tmp_path):
    env = {**setup["env"], "MODEL_PATH": _target(tmp_path / "t", 64), "TP_SIZE": "8"}
    assert run_entrypoint(["eagle3", "--dry-run"], env).returncode == 0
    draft = eagle3_draft(tmp_path / "d", num_attention_heads=12)
    assert_refused(
        run_entrypoint(["eagle3", "--dry-run"], {**env, "DRAFT_MODEL_PATH": str(draft)}),
        "TP 8 does not divide the drafter's 12 attention heads",
    )
    # DP attention splits the heads over TP / DP ranks instead: left to SGLang.
    dp = {**env, "TP_SIZE": "6", "EXTRA_ARGS": "--enable-dp-attention --dp-size 6"}
    proc = run_entrypoint(["baseline", "--dry-run"], dp)
    assert "does not divide" not in proc.stderr


def _quantization_list(site: Path, names: list[str]) -> None:
    path = site / "sglang" / "srt" / "layers" / "quantization" / "__init__.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = ", ".join(f'"{n}": object' for n in names)
    path.write_text(f"BASE_QUANTIZATION_METHODS = {{{entries}}}\nBASE_QUANTIZATION_METHODS.update({{'mxfp4': 1}})\n")


QUANT = [
    ("unknown", "fp6_magic", 2, ["quant_method 'fp6_magic' is no quantization SGLang 9.9.9 knows"]),
    ("upper-case-known", "FP8", 0, []),
    ("known", "fp8", 0, []),
    ("from-update", "mxfp4", 0, []),
    ("modelopt-nvfp4", "modelopt", 0, []),
]


@pytest.mark.parametrize(("method", "rc", "expected"), [c[1:] for c in QUANT], ids=[c[0] for c in QUANT])
def test_an_unknown_quant_method_is_refused_against_the_installed_list(setup, tmp_path, method, rc, expected):
    _quantization_list(setup["site"], ["fp8", "modelopt", "modelopt_fp4", "compressed-tensors"])
    quant = {"quant_method": method, **({"quant_algo": "NVFP4"} if method == "modelopt" else {})}
    target = write_model(tmp_path / "q", {"architectures": ["DeepseekV3ForCausalLM"], "quantization_config": quant})
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "MODEL_PATH": str(target)})
    if rc == 2:
        assert_refused(proc, "MODEL_PATH=", *expected)
    else:
        assert proc.returncode == 0, proc.stderr


def test_an_unknown_quant_method_passes_where_the_list_cannot_be_read(setup, tmp_path):
    quant = {"quant_method": "fp6_magic"}  # the stand-in SGLang has no quantization list
    target = write_model(tmp_path / "q", {"architectures": ["DeepseekV3ForCausalLM"], "quantization_config": quant})
    assert run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "MODEL_PATH": str(target)}).returncode == 0


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_the_port_already_taken_is_found_when_starting(setup, taken_port):
    env = {**setup["env"], "HOST": "127.0.0.1", "PORT": str(taken_port)}
    proc = run_entrypoint(["baseline"], env)
    assert_refused(proc, f"PORT='{taken_port}'", f"port {taken_port} on 127.0.0.1 is already in use")
    assert not Path(env["FAKE_SGLANG_RECORD"]).exists(), "SGLang must not be started"
    # --dry-run touches no socket: the same request is a command there.
    assert run_entrypoint(["baseline", "--dry-run"], env).returncode == 0


LISTEN = [
    ("not-an-address-here", {"HOST": "192.0.2.123"}, ["192.0.2.123 is not an address of this container"]),
    ("name-that-does-not-resolve", {"HOST": "no-such-host.invalid"}, ["'no-such-host.invalid' does not resolve"]),
]


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in LISTEN], ids=[c[0] for c in LISTEN])
def test_a_host_sglang_cannot_listen_on_is_found_when_starting(setup, changes, expected):
    proc = run_entrypoint(["baseline"], {**setup["env"], **changes})
    assert_refused(proc, *expected)


def test_a_free_port_still_starts(setup):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**setup["env"], "HOST": "127.0.0.1", "PORT": str(port)}
    proc = run_entrypoint(["baseline"], env)
    assert proc.returncode == 0, proc.stderr
    assert Path(env["FAKE_SGLANG_RECORD"]).exists()


GPUS_TWICE = [
    ("same-index", "0,0", "GPU 0 twice"),
    ("leading-zero", "1,01", "GPU 01 twice"),
    ("uuid", "GPU-a,gpu-A", "twice"),
]


@pytest.mark.parametrize(("visible", "expected"), [c[1:] for c in GPUS_TWICE], ids=[c[0] for c in GPUS_TWICE])
def test_the_same_gpu_twice_in_cuda_visible_devices(setup, visible, expected):
    proc = run_entrypoint(["baseline"], {**setup["env"], "CUDA_VISIBLE_DEVICES": visible, "TP_SIZE": "2"})
    assert_refused(proc, f"CUDA_VISIBLE_DEVICES={visible!r}", expected)


# Compose's `check` service runs --dry-run: what CUDA_VISIBLE_DEVICES says as a string is checked there too (the
# GPUs themselves only when starting).
GPUS_TWICE_DRY_RUN = [
    ("same-index", "0,0", ["GPU 0 twice"]),
    ("same-uuid", "GPU-abc,GPU-abc", ["GPU GPU-abc twice"]),
    ("uuid-case", "GPU-abc,gpu-ABC", ["twice"]),
    ("leading-zero", "1,01", ["GPU 01 twice"]),
    ("spaces", "0, 1,0", ["GPU 0 twice"]),
    ("not-ascii", "0,١", ["not GPU indices or UUIDs"]),
    ("control-character", "0,\x1b1", ["not GPU indices or UUIDs"]),
    ("index-past-9-digits", "0," + BIG, ["not a GPU index", HEAD]),
]


@pytest.mark.parametrize(
    ("visible", "expected"), [c[1:] for c in GPUS_TWICE_DRY_RUN], ids=[c[0] for c in GPUS_TWICE_DRY_RUN]
)
def test_cuda_visible_devices_is_checked_by_dry_run(setup, visible, expected):
    proc = run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "CUDA_VISIBLE_DEVICES": visible})
    assert_refused(proc, "CUDA_VISIBLE_DEVICES", *expected)
    assert proc.stdout == ""


@pytest.mark.parametrize("visible", ["0,1", "GPU-abc,GPU-def", "", "-1", "NoDevFiles"])
def test_dry_run_needs_no_gpu_from_cuda_visible_devices(setup, visible):
    """A dry run checks the string, not the GPUs: none visible (-1, empty) is for the start to say."""
    line = dry_run_line(run_entrypoint(["baseline", "--dry-run"], {**setup["env"], "CUDA_VISIBLE_DEVICES": visible}))
    assert "sglang.launch_server" in line


def test_a_gpu_index_past_the_digit_limit(setup):
    proc = run_entrypoint(["baseline"], {**setup["env"], "CUDA_VISIBLE_DEVICES": BIG})
    assert_refused(proc, "CUDA_VISIBLE_DEVICES", "not a GPU index")


def test_a_repo_id_looking_path_that_is_a_mounted_model(setup, tmp_path):
    """MODEL_PATH=org/name would be downloaded from Hugging Face while /models/org/name is mounted: refused, naming
    the directory. A real bind mount in a mount namespace of its own (unshare), as `-v /models:/models` makes."""
    unshare = unshare_or_skip()
    models, point = tmp_path / "host-models", tmp_path / "models"
    kimi_target(models / "org" / "name", architecture="DeepseekV3ForCausalLM")
    point.mkdir()
    env = {**setup["env"], "MODEL_PATH": "org/name"}
    script = 'mount --bind "$1" "$2" && exec "$3" "$4" baseline --dry-run'
    proc = subprocess.run(
        [*unshare, "sh", "-c", script, "sh", str(models), str(point), sys.executable, str(ENTRYPOINT)],
        capture_output=True, text=True, env=env, cwd=tmp_path / "host-models" / "org", timeout=120, check=False,
    )  # fmt: skip
    assert_refused(proc, "MODEL_PATH='org/name'", "read as a Hugging Face repo id", f"{point}/org/name")
    # Without the mount it is a repo id SGLang downloads, as before.
    assert run_entrypoint(["baseline", "--dry-run"], env).returncode == 0


def test_mounted_dirs_reads_the_mount_table(tmp_path):
    from sm120.image.entrypoint import models

    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "23 22 0:5 / /proc rw - proc proc rw\n"
        "24 22 8:1 /srv/models /models ro - ext4 /dev/sda1 rw\n"
        "25 22 8:1 /srv/x /mnt/with\\040space rw - ext4 /dev/sda1 rw\n"
        "26 22 0:6 / /dev/shm rw - tmpfs shm rw\n"
    )
    assert models.mounted_dirs(str(table)) == [Path("/models"), Path("/mnt/with space")]
    assert models.mounted_dirs(str(tmp_path / "none")) == []


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


# --------------------------------------------------------------------------------------------------
# A full stdout (`--dry-run > /dev/full`): one line, exit 1, not Python's "Exception ignored" and 120
# --------------------------------------------------------------------------------------------------

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
