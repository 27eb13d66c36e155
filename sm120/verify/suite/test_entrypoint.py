"""The entrypoint in the image: both modes' `--dry-run` print the SGLang command, checked by the image's own
SGLang parser; bad input exits 2 with a message, no traceback. Runs the image's ENTRYPOINT as configured
(tini, the venv's Python, entrypoint.py) with stand-in model directories (config.json only)."""

from __future__ import annotations

import json
import shlex

import pytest

from sm120.image.entrypoint.spec import PLAN_JSON_PATH
from sm120.verify import docker_env, model_configs, startup
from sm120.verify.suite.conftest import entrypoint, plan_of_image

MODELS = "/tmp/sm120-verify/models"
TARGET, DRAFT = f"{MODELS}/target", f"{MODELS}/draft"


@pytest.fixture(scope="module")
def models(box, image_uid, tmp_path_factory) -> dict[str, str]:
    """A Kimi-K2.5-like target and an EAGLE-3 drafter (the unit tests' stand-ins), copied into the container."""
    local = tmp_path_factory.mktemp("models")
    model_configs.kimi_target(local / "target")
    model_configs.eagle3_draft(local / "draft")
    files = {
        f"sm120-verify/models/{d}/config.json": (local / d / "config.json").read_text() for d in ("target", "draft")
    }
    docker_env.copy_in(box, files, "/tmp", uid=image_uid)
    return {"MODEL_PATH": TARGET, "DRAFT_MODEL_PATH": DRAFT}


@pytest.fixture(scope="module")
def baked_plan(root_host) -> dict:
    return json.loads(root_host.file(PLAN_JSON_PATH).content_string)


def _command(stdout: str) -> list[str]:
    """SGLang's arguments in the last line of `--dry-run` (which must be a python -m sglang.launch_server line)."""
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    assert lines, "--dry-run printed nothing"
    return startup.split_command(shlex.split(lines[-1]))[1]


_value = startup.option_value


def _modes() -> list[str]:
    """The image's own modes (its plan.json): every mode it serves is dry-run."""
    plan = plan_of_image()
    return list(plan.entrypoint.modes) if plan else []


@pytest.mark.parametrize("mode", _modes())
def test_dry_run_prints_the_sglang_command(mode: str, box, image, expect, models, baked_plan):
    preset = baked_plan["entrypoint"]["modes"][mode]
    env = dict(models) if preset["draft"] else {"MODEL_PATH": models["MODEL_PATH"]}
    rc, stdout, stderr = entrypoint(box, image, [mode, "--dry-run"], env)
    assert rc == 0, f"{mode} --dry-run exited {rc}: {stderr.strip()[-500:]}"
    assert f"accepted by SGLang {expect.sglang}'s own parser" in stdout, (
        f"the command was not checked by the image's SGLang {expect.sglang} parser: {stdout.strip()[:400]}"
    )
    argv = _command(stdout)
    assert _value(argv, "--model-path") == TARGET
    assert _value(argv, "--port") in (None, str(expect.port))
    if preset["draft"]:
        assert _value(argv, "--speculative-algorithm") == "EAGLE3"
        assert _value(argv, "--speculative-draft-model-path") == DRAFT
        for key, option in [
            ("spec_num_steps", "--speculative-num-steps"),
            ("spec_eagle_topk", "--speculative-eagle-topk"),
            ("spec_num_draft_tokens", "--speculative-num-draft-tokens"),
        ]:
            # the track's draft tree; none (SGLang chooses it) means the option is not passed at all
            want = None if preset[key] is None else str(preset[key])
            assert _value(argv, option) == want, f"{option}: {_value(argv, option)} vs preset {preset}"
        assert "# draft tree: " in stdout and preset["draft_tree_reason"].split(":")[0] in stdout, stdout[:600]
    else:
        assert "--speculative-algorithm" not in argv


@pytest.mark.parametrize(
    "args, env, says",
    [
        (["no-such-mode"], {}, "unknown mode"),
        (["eagle3", "--dry-run"], {"MODEL_PATH": TARGET}, "DRAFT_MODEL_PATH"),
    ],
    ids=["unknown-mode", "eagle3-without-draft"],
)
def test_bad_input_exits_2_with_one_message(args, env, says, box, image, models):
    rc, _stdout, stderr = entrypoint(box, image, args, env)
    assert rc == 2, f"{args} exited {rc}: {stderr.strip()[-300:]}"
    assert says in stderr, f"{args}: the message does not mention {says!r}: {stderr.strip()[-300:]}"
    assert "Traceback" not in stderr


PRIVATE = "/tmp/sm120-verify/private"  # root-owned, mode 700: a host model folder as it often is


@pytest.fixture(scope="module")
def odd_models(box, models, root_host) -> dict[str, str]:
    """Model paths the image's user cannot use: a root-owned mode-700 folder, a config.json that is a folder."""
    root_host.check_output(
        f"mkdir -p {PRIVATE}/model /tmp/sm120-verify/dir-config/config.json && cp {TARGET}/config.json "
        f"{PRIVATE}/model/ && chown -R root:root {PRIVATE} && chmod 700 {PRIVATE}"
    )
    return {"private": f"{PRIVATE}/model", "dir-config": "/tmp/sm120-verify/dir-config"}


# Issue 15's classes in the image: run as its non-root user, checked by its own SGLang's parser.
ODD_INPUT = [
    ("root-owned-700", ["baseline", "--dry-run"], {"MODEL_PATH": "private"}, ["cannot read", "chmod", "--user"]),
    ("config-is-a-dir", ["baseline", "--dry-run"], {"MODEL_PATH": "dir-config"}, ["config.json is a directory"]),
    ("abbreviation", ["baseline", "--dry-run"], {"EXTRA_ARGS": "--tp 4"}, ["abbreviation of --tp-size"]),
    ("abbreviation-after", ["baseline", "--dry-run", "--", "--node-r", "1"], {}, ["--node-rank"]),
    ("port-plus", ["baseline", "--dry-run"], {"PORT": "+30000"}, ["PORT='+30000' is not an integer"]),
    ("port-other-digits", ["baseline", "--dry-run"], {"PORT": "٣٠٠٠٠"}, ["is not an integer"]),
    ("float-nan", ["baseline", "--dry-run", "--", "--mem-fraction-static", "nan"], {}, ["invalid float"]),
]


@pytest.mark.parametrize("args, env, says", [c[1:] for c in ODD_INPUT], ids=[c[0] for c in ODD_INPUT])
def test_bad_input_is_refused_in_the_image(args, env, says, box, image, models, odd_models, image_uid):
    env = {**models, **{k: odd_models.get(v, v) for k, v in env.items()}}
    rc, _stdout, stderr = entrypoint(box, image, args, env)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert rc == 2, f"{args} {env} exited {rc}: {stderr.strip()[-300:]}"
    assert 1 <= len(lines) <= 3 and lines[0].startswith("entrypoint: error: "), stderr
    assert "Traceback" not in stderr
    for text in says:
        assert text in stderr, f"{args}: the message does not mention {text!r}: {stderr.strip()[-300:]}"
    if "chmod" in says:
        assert f"uid {image_uid} cannot read {PRIVATE}" in stderr


def test_allreduce_sweep_is_a_mode_of_the_image(box, image):
    """`IMAGE allreduce-sweep`: the sweep with the image's torch and SGLang (its --help; without a GPU, as here,
    one line and exit 1, after importing SGLang's communicator)."""
    rc, stdout, stderr = entrypoint(box, image, ["allreduce-sweep", "--help"], {})
    assert rc == 0 and "SM120_SYMM_MEM_MAX_SIZES" in stdout, f"allreduce-sweep --help exited {rc}: {stderr[-300:]}"
    rc, stdout, stderr = entrypoint(box, image, ["allreduce-sweep", "--tp", "2"], {})
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert rc == 1 and lines and lines[0] == "allreduce-sweep: error: no GPU is visible here (torch sees none)", (
        f"allreduce-sweep without a GPU exited {rc}: {stderr.strip()[-400:]}"
    )
    assert len(lines) <= 3 and "Traceback" not in stderr


# Issue 24's classes in the image: numbers past int()'s digit limit, addresses, an empty PORT (what the image's
# HEALTHCHECK reads), checked by the image's entrypoint with its own SGLang; a node-0 name as Kubernetes gives it.
BIG = "1" + "0" * 5000
ROUND3 = [
    ("tp-5000-digits", {"TP_SIZE": BIG}, ["TP_SIZE='1000", "out of range"]),
    ("host-bracketed", {"HOST": "[::1]"}, ["HOST='[::1]'", "in brackets cannot be bound"]),
    ("dist-octet", {"NNODES": "2", "TP_SIZE": "2", "DIST_INIT_ADDR": "300.1.1.1:5000"}, ["'300.1.1.1'"]),
    ("dist-port-zero", {"NNODES": "2", "TP_SIZE": "2", "DIST_INIT_ADDR": "h:05000"}, ["the port '05000'"]),
    ("port-empty", {"PORT": ""}, ["PORT='' is empty", "HEALTHCHECK"]),
    # A near-miss variable (a typo) and a key in a plain variable: refused before anything loads, value unshown.
    ("typo-tp-size", {"TP_SZIE": "8"}, ["TP_SZIE is not a variable this image reads", "resembles TP_SIZE"]),
    ("typo-model-paths", {"MODEL_PATHS": "/x"}, ["MODEL_PATHS", "resembles MODEL_PATH"]),
    ("key-in-a-variable", {"API_KEY": "k3y-in-plain-sight"}, ["API_KEY", "API_KEY_FILE"]),
]

# What a container normally carries (Docker's, NVIDIA's, CUDA's, NCCL's, Hugging Face's, SGLang's own, Python's,
# locale) passes the image's variable check, whatever else is set.
CARRIED = {
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "NCCL_DEBUG": "INFO",
    "HF_TOKEN": "hf_x",
    "HF_HUB_OFFLINE": "1",
    "SGLANG_ENABLE_TORCH_COMPILE": "0",
    "PYTHONFAULTHANDLER": "1",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
}


def test_variables_a_container_carries_pass_in_the_image(box, image, models):
    rc, _stdout, stderr = entrypoint(box, image, ["baseline", "--dry-run"], {**models, **CARRIED})
    assert rc == 0, stderr.strip()[-600:]


@pytest.mark.parametrize("env, says", [c[1:] for c in ROUND3], ids=[c[0] for c in ROUND3])
def test_bad_listen_and_node_values_are_refused_in_the_image(env, says, box, image, models):
    rc, _stdout, stderr = entrypoint(box, image, ["baseline", "--dry-run"], {**models, **env})
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert rc == 2, f"{env} exited {rc}: {stderr.strip()[-300:]}"
    assert 1 <= len(lines) <= 3 and lines[0].startswith("entrypoint: error: "), stderr[-600:]
    assert "Traceback" not in stderr and "internal error" not in stderr
    for text in says:
        assert text in stderr, f"the message does not mention {text!r}: {stderr.strip()[-300:]}"
    assert "k3y-in-plain-sight" not in stderr + _stdout


def test_a_kubernetes_node0_name_passes_in_the_image(box, image, models):
    env = {**models, "NNODES": "2", "TP_SIZE": "2", "DIST_INIT_ADDR": "sglang-0.sglang.default:5000"}
    rc, stdout, stderr = entrypoint(box, image, ["baseline", "--dry-run"], env)
    assert rc == 0, stderr.strip()[-600:]
    args = _command(stdout)
    assert startup.option_value(args, "--dist-init-addr") == "sglang-0.sglang.default:5000"


def test_brackets_are_what_the_images_server_cannot_bind(py):
    """Why a bracketed HOST is refused: uvicorn's asyncio server resolves the host with getaddrinfo, which takes
    127.0.0.1 but not [127.0.0.1] (in the image's Python, with its uvicorn's own loop call)."""
    found = py(
        "import asyncio, socket\n"
        "async def bind(host):\n"
        "    try:\n"
        "        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, host=host, port=0)\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        "    server.close()\n"
        "    return 'bound'\n"
        "import uvicorn\n"
        "report({h: asyncio.run(bind(h)) for h in ('127.0.0.1', '[127.0.0.1]')})\n"
    )
    assert found == {"127.0.0.1": "bound", "[127.0.0.1]": "gaierror"}, found


# Issue 29: API_KEY_FILE in the image, as its non-root user: the key shown masked, checked by the image's own
# SGLang parser; a root-owned mode-600 secret (as a host file often is) names the uid, owner and mode.
KEYS = "/tmp/sm120-verify/keys"
KEY = "verify-k3y-0123456789abcdef"


@pytest.fixture(scope="module")
def key_files(box, image_uid, root_host) -> dict[str, str]:
    docker_env.copy_in(box, {"sm120-verify/keys/api-key": KEY + "\n"}, "/tmp", uid=image_uid)
    root_host.check_output(f"cp {KEYS}/api-key {KEYS}/root-600 && chown root:root {KEYS}/root-600")
    root_host.check_output(f"chmod 600 {KEYS}/root-600")
    return {"readable": f"{KEYS}/api-key", "root-600": f"{KEYS}/root-600"}


def test_api_key_file_is_masked_in_the_dry_run(box, image, expect, models, key_files):
    rc, stdout, stderr = entrypoint(
        box, image, ["eagle3", "--dry-run"], {**models, "API_KEY_FILE": key_files["readable"]}
    )
    assert rc == 0, stderr.strip()[-500:]
    assert f"accepted by SGLang {expect.sglang}'s own parser" in stdout, stdout.strip()[-400:]
    argv = _command(stdout)
    assert argv[-2:] == ["--api-key", "********"], argv
    assert KEY not in stdout + stderr


def test_an_unreadable_api_key_file_names_uid_owner_and_mode(box, image, models, key_files, image_uid):
    rc, stdout, stderr = entrypoint(
        box, image, ["baseline", "--dry-run"], {**models, "API_KEY_FILE": key_files["root-600"]}
    )
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert rc == 2 and 1 <= len(lines) <= 3, stderr
    assert (
        f"API_KEY_FILE='{key_files['root-600']}': uid {image_uid} cannot read it (owner uid 0, mode 0600)" in lines[0]
    )
    assert KEY not in stdout + stderr and "Traceback" not in stderr


# Issue 29, a real start (not --dry-run): the entrypoint hands SGLang's command to _with_api_key.py, which gives the
# image's real sglang.launch_server the key as its last argument while the process's command line and environment
# hold none of it. A stand-in nvidia-smi (one sm_120 card) passes the entrypoint's GPU check; SGLang then stops on
# its own (there is no GPU). A sitecustomize on PYTHONPATH records, at that process's exit, what it held: booleans,
# never the key.
WATCH = """
import atexit, json, os, sys


def _sm120_watch():
    path, out = os.environ.get("API_KEY_FILE"), os.environ.get("KEY_WATCH_OUT")
    if not path or not out or not any(a.startswith("--api-key=") for a in sys.argv):
        return
    with open(path) as f:
        key = f.read().splitlines()[0]
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read().decode(errors="replace")
    found = {  # sys.argv as SGLang's module left it (runpy puts argv[0] back when the module returns or raises)
        "program": os.path.basename(sys.argv[0]),
        "last_argument": sys.argv[-1] == "--api-key=" + key,
        "sglang_ran": "sglang.srt.server_args" in sys.modules,
        "in_cmdline": key in cmdline,
        "in_environ": any(key in v for v in os.environ.values()),
        # _with_api_key.py's HideKeys middleware on SGLang's app: /server_info answers without the keys. Without a
        # GPU the app's module loads on 0.5.23; 0.5.9's stops at sgl_kernel (no libcuda), SGLang's own start with it.
        "app_loaded": "sglang.srt.entrypoints.http_server" in sys.modules,
        "keys_hidden": any(
            getattr(m.cls, "__name__", "") == "HideKeys"
            for m in getattr(getattr(sys.modules.get("sglang.srt.entrypoints.http_server"), "app", None),
                             "user_middleware", [])
        ),
    }
    with open(out, "a") as f:  # one line per process (SGLang may start more with the same arguments)
        f.write(json.dumps(found) + "\\n")


atexit.register(_sm120_watch)
"""
STANDIN_SMI = "#!/bin/sh\necho '0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0'\n"


def test_a_real_start_hands_the_key_to_sglang_only_inside_its_process(box, image, models, key_files, image_uid):
    work = "/tmp/sm120-verify/start"
    files = {"sm120-verify/start/bin/nvidia-smi": STANDIN_SMI, "sm120-verify/start/py/sitecustomize.py": WATCH}
    docker_env.copy_in(box, files, "/tmp", uid=image_uid)
    box.exec_run(["chmod", "755", f"{work}/bin/nvidia-smi"], user="root")
    env = {
        "MODEL_PATH": models["MODEL_PATH"],
        "API_KEY_FILE": key_files["readable"],
        "PATH": f"{work}/bin:{image.env.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": f"{work}/py",
        "SM120_NVML_LIBRARY": f"{work}/no-libnvidia-ml.so.1",
        "KEY_WATCH_OUT": f"{work}/watch.json",
    }
    rc, stdout, stderr = entrypoint(box, image, ["baseline"], env)
    assert KEY not in stdout + stderr, "the key was printed"
    exec_lines = [line for line in stderr.splitlines() if line.startswith("[entrypoint] exec ")]
    assert exec_lines, f"the entrypoint did not start SGLang (exit {rc}): {stderr.strip()[-500:]}"
    assert "_with_api_key.py -m sglang.launch_server" in exec_lines[-1], exec_lines[-1]
    assert rc != 0, "SGLang started without a GPU?"
    result = box.exec_run(["cat", f"{work}/watch.json"], user="root")
    assert result.exit_code == 0, f"SGLang's process recorded nothing (exit {rc}): {stderr.strip()[-500:]}"
    found = [json.loads(line) for line in result.output.decode().splitlines()]
    started = [p for p in found if p["program"] in ("-m", "launch_server.py")]  # not the parser checks (-c, a file)
    assert started and all(p["last_argument"] and p["sglang_ran"] for p in started), (
        f"SGLang's launch_server did not run with the key: {found}"
    )
    loaded = [p for p in started if p["app_loaded"]]
    assert all(p["keys_hidden"] for p in loaded), f"SGLang's app answers /server_info with the keys: {found}"
    if loaded:
        assert "the keys are not hidden" not in stderr, stderr.strip()[-300:]
    assert not any(p["in_cmdline"] or p["in_environ"] for p in found), f"a command line or environment held it: {found}"
