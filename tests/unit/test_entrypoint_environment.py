"""T0: the container's environment against the variables the image reads (issue 33 item 3, "no silent typo").

A variable the image does not read whose name is a near miss of one it reads (another case, an underscore more or
less, a letter missing, extra, changed or swapped; a longer name difflib finds as close; a name in one of the image's
own namespaces) exits 2 in one line naming both, before anything loads, --dry-run included; a key in a variable
(API_KEY=..., SGLANG_API_KEY=...) exits 2 naming the file variable to use, never the value. What a container normally
carries (Docker's, NVIDIA's, CUDA's, NCCL's, Hugging Face's, SGLang's own SGLANG_*, Python's, the locale, Kubernetes'
service variables, LWS_*, torch's, Triton's, OpenMP's, the Dockerfile's runtime ENV, compose.yaml's and the Kubernetes
base's variables) is never refused. The set of variables read is environment.read_by_image, built from where each is
defined: a literal environ read in the entrypoint's sources that it lacks fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from sm120.image.entrypoint import environment
from sm120.image.entrypoint import spec as spec_mod
from sm120.image.entrypoint.assemble import VARIABLES
from sm120.image.entrypoint.preflight import CACHE_VARIABLES
from tests.entrypoint_helpers import ROOT, run_entrypoint, standin_run, stderr_lines, synthetic_plan

VALUE = "v4lue-that-is-never-shown"


@pytest.fixture
def run(tmp_path: Path) -> dict:
    return standin_run(tmp_path, TP_SIZE="8")


@pytest.fixture(scope="module")
def known(tmp_path_factory) -> frozenset[str]:
    plan = synthetic_plan(tmp_path_factory.mktemp("plan") / "plan.json")
    return environment.read_by_image(spec_mod.from_plan(json.loads(plan.read_text())))


# --------------------------------------------------------------------------------------------------
# Near misses: each exits 2 in one line naming the variable and the one it resembles
# --------------------------------------------------------------------------------------------------

NEAR_MISSES = [
    # (the variable set, the one it resembles)
    ("TP_SZIE", "TP_SIZE"),  # two letters swapped
    ("MODEL_PATHS", "MODEL_PATH"),  # a letter extra
    ("MODLE_PATH", "MODEL_PATH"),
    ("MODEL_PAT", "MODEL_PATH"),  # a letter missing
    ("MODELPATH", "MODEL_PATH"),  # an underscore missing
    ("MODEL__PATH", "MODEL_PATH"),  # an underscore extra
    ("MODEL-PATH", "MODEL_PATH"),  # a hyphen for the underscore
    ("model_path", "MODEL_PATH"),  # another case
    ("Tp_Size", "TP_SIZE"),
    ("TPSIZE", "TP_SIZE"),
    ("PP_SIZE", "TP_SIZE"),  # a letter changed: no PP_SIZE here (EXTRA_ARGS takes --pp-size)
    ("PROT", "PORT"),
    ("PORTS", "PORT"),
    ("HOTS", "HOST"),
    ("HOSTS", "HOST"),
    ("NNODE", "NNODES"),
    ("NODES", "NNODES"),
    ("NODE_RNAK", "NODE_RANK"),
    ("DIST_INIT_ADDRESS", "DIST_INIT_ADDR"),  # difflib: a longer name this close
    ("DRAFT_MODEL_PATHS", "DRAFT_MODEL_PATH"),
    ("DRAFT_MODEL", "DRAFT_MODEL_PATH"),  # the image's namespace DRAFT_
    ("DRAFT_PATH", "DRAFT_MODEL_PATH"),
    ("SPEC_NUM_STEP", "SPEC_NUM_STEPS"),
    ("SPEC_EAGLE_TOP_K", "SPEC_EAGLE_TOPK"),
    ("SPEC_TOPK", "SPEC_EAGLE_TOPK"),  # the image's namespace SPEC_
    ("SPEC_NUM_DRAFT_TOKEN", "SPEC_NUM_DRAFT_TOKENS"),
    ("spec_num_draft_tokens", "SPEC_NUM_DRAFT_TOKENS"),
    ("EXTRA_ARG", "EXTRA_ARGS"),
    ("EXTRAARGS", "EXTRA_ARGS"),
    ("SKIP_RUNTIME_RULE", "SKIP_RUNTIME_RULES"),
    ("API_KEY_FIEL", "API_KEY_FILE"),
    ("APIKEY_FILE", "API_KEY_FILE"),
    ("API_KEY_FILES", "API_KEY_FILE"),
    ("ADMIN_API_KEYFILE", "ADMIN_API_KEY_FILE"),
    ("SM120_PLANS", "SM120_PLAN"),
    ("SM120_CACHEDIR", "SM120_CACHE_DIR"),
    ("SM120_SYMM_MEM_MAX_SIZE", "SM120_SYMM_MEM_MAX_SIZES"),
    ("SM120_NVML_LIB", "SM120_NVML_LIBRARY"),  # the image's namespace SM120_
    ("sm120_plan", "SM120_PLAN"),
    ("cuda_visible_devices", "CUDA_VISIBLE_DEVICES"),  # CUDA_* passes; cuda_* in lower case is a near miss
]


@pytest.mark.parametrize(("name", "resembled"), NEAR_MISSES, ids=[n for n, _ in NEAR_MISSES])
def test_a_near_miss_exits_2_in_one_line_naming_both(run, name, resembled):
    proc = run_entrypoint(["eagle3", "--dry-run"], {**run["env"], name: VALUE})
    assert proc.returncode == 2, proc.stderr
    lines = stderr_lines(proc)
    assert len(lines) == 1 and lines[0].startswith(f"entrypoint: error: {name} is not a variable this image reads")
    assert f"it resembles {resembled} " in lines[0], lines[0]
    assert VALUE not in proc.stderr + proc.stdout and proc.stdout == ""
    assert not Path(run["env"]["FAKE_SGLANG_RECORD"]).exists()


def test_a_typo_is_refused_before_anything_loads_even_starting(run):
    """Not a dry run: refused before the GPU checks, the parser check, the model checks (MODEL_PATH is unset: the
    typo is named, not 'MODEL_PATH is not set')."""
    env = {k: v for k, v in run["env"].items() if k != "MODEL_PATH"}
    proc = run_entrypoint(["baseline"], {**env, "MODEL_PATHS": str(run["tmp"] / "target"), "TP_SIZE": "99"})
    assert proc.returncode == 2
    assert stderr_lines(proc) == [
        "entrypoint: error: MODEL_PATHS is not a variable this image reads; it resembles MODEL_PATH (a typo? "
        "--help lists the variables)"
    ]


# --------------------------------------------------------------------------------------------------
# A key in a variable: exit 2, the file variable named, never the value
# --------------------------------------------------------------------------------------------------

KEYS_IN_VARIABLES = [
    ("API_KEY", "API_KEY_FILE"),
    ("api_key", "API_KEY_FILE"),
    ("APIKEY", "API_KEY_FILE"),
    ("API-KEY", "API_KEY_FILE"),
    ("API_KEYS", "API_KEY_FILE"),
    ("SGLANG_API_KEY", "API_KEY_FILE"),  # SGLang's namespace passes, but its server reads no key from a variable
    ("ADMIN_API_KEY", "ADMIN_API_KEY_FILE"),
    ("admin_api_key", "ADMIN_API_KEY_FILE"),
    ("SGLANG_ADMIN_API_KEY", "ADMIN_API_KEY_FILE"),
]


@pytest.mark.parametrize(("name", "file_variable"), KEYS_IN_VARIABLES, ids=[n for n, _ in KEYS_IN_VARIABLES])
def test_a_key_in_a_variable_is_refused_naming_the_file_variable_never_the_value(run, name, file_variable):
    proc = run_entrypoint(["baseline", "--dry-run"], {**run["env"], name: VALUE})
    assert proc.returncode == 2, proc.stderr
    (line,) = stderr_lines(proc)
    assert line.startswith(f"entrypoint: error: {name} holds a key in a variable") and f"set {file_variable} " in line
    assert VALUE not in proc.stderr + proc.stdout


def test_a_key_in_a_variable_is_not_shown_by_a_later_message_either(run):
    """Its value is a secret from the start: a message that would quote it (here: a bad TP_SIZE holding the same
    text) shows the mask."""
    proc = run_entrypoint(["baseline", "--dry-run"], {**run["env"], "TP_SIZE": VALUE, "SGLANG_API_KEY": VALUE})
    assert proc.returncode == 2 and VALUE not in proc.stderr + proc.stdout, proc.stderr


# --------------------------------------------------------------------------------------------------
# What a container carries: never refused
# --------------------------------------------------------------------------------------------------

MUST_PASS = [
    # Docker, a shell, podman, the locale
    *("HOSTNAME", "HOME", "PATH", "TERM", "PWD", "OLDPWD", "SHLVL", "USER", "_", "container", "TZ", "TMPDIR"),
    *("TINI_SUBREAPER", "TINI_VERBOSITY"),  # tini, PID 1 (the T2 suite runs the entrypoint with TINI_SUBREAPER)
    *("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES"),
    *("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"),
    # NVIDIA's container toolkit and the CUDA base image
    *("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA", "NVIDIA_PRODUCT_NAME"),
    *("NVARCH", "NV_CUDA_CUDART_VERSION", "NV_CUDA_LIB_VERSION", "NV_LIBNCCL_PACKAGE", "CUDA_VERSION"),
    # CUDA, NCCL, gloo
    *("CUDA_HOME", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS"),
    *("CUDA_VISIBLE_DEVICE", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_P2P_LEVEL"),
    "GLOO_SOCKET_IFNAME",
    # Hugging Face
    *("HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER", "HUGGINGFACE_HUB_CACHE"),
    *("HUGGING_FACE_HUB_TOKEN", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE", "TOKENIZERS_PARALLELISM"),
    # SGLang's own, those close to the image's included (SGLang's namespace is SGLang's)
    *("SGLANG_ENABLE_JIT_DEEPGEMM", "SGLANG_OPT_USE_INKLING_CUSTOM_AR", "SGLANG_CACHE_DIR", "SGLANG_CACHE_DIRS"),
    *("SGLANG_JIT_CACHE_DIR", "SGLANG_TORCH_PROFILER_DIR", "SGLANG_HOST_IP", "SGLANG_PORT", "SGLANG_TP_SIZE"),
    *("SGLANG_MODEL_PATH", "SGL_ENABLE_JIT_DEEPGEMM"),
    # Python
    *("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONFAULTHANDLER"),
    *("VIRTUAL_ENV", "DEBIAN_FRONTEND", "PIP_INDEX_URL"),
    # Kubernetes: service variables, the API server's, LeaderWorkerSet's, the downward API's usual names
    *("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_PORT_HTTPS", "KUBERNETES_PORT"),
    *("KUBERNETES_PORT_443_TCP", "KUBERNETES_PORT_443_TCP_ADDR", "KUBERNETES_PORT_443_TCP_PROTO"),
    *("SGLANG_LEADER_SERVICE_HOST", "SGLANG_LEADER_SERVICE_PORT", "SGLANG_LEADER_PORT_30000_TCP_PORT"),
    *("MODEL_SERVICE_HOST", "MODEL_PORT", "MODEL_PORT_8080_TCP", "HOST_PORT", "SPEC_PORT", "DRAFT_SERVICE_PORT_HTTP"),
    *("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "LWS_NAME"),
    *("NODE_NAME", "NODE_IP", "POD_NAME", "POD_IP", "POD_NAMESPACE", "HOST_IP"),
    # torch, Triton, OpenMP, the JIT caches the image's ENV sets
    *("TORCH_CUDA_ARCH_LIST", "TORCHINDUCTOR_CACHE_DIR", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTORCH_CUDA_ALLOC_CONF"),
    *("TRITON_CACHE_DIR", "TRITON_PTXAS_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS"),
    *("FLASHINFER_CUBINS_REPOSITORY", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR", "XDG_CACHE_HOME"),
    # torch.distributed's launchers; another program's key (not one the image would take)
    *("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "OPENAI_API_KEY"),
    # the image's own variables
    *(v.name for v in VARIABLES),
    "SM120_PLAN",
    "SM120_SYMM_MEM_MAX_SIZES",
]


@pytest.mark.parametrize("name", MUST_PASS)
def test_what_a_container_carries_is_never_refused(known, name):
    assert environment.problem(name, known) is None


class _Loader(yaml.SafeLoader):
    """YAML with Compose's tags (`!reset`, `!override`) read as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def load_yaml(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=_Loader)  # a SafeLoader with one more constructor


def dockerfile_runtime_env() -> set[str]:
    """The names the Dockerfile's runtime stage sets with ENV (continuation lines included)."""
    text = (ROOT / "Dockerfile").read_text()
    stage = text[text.index(" AS runtime") :]
    names: set[str] = set()
    for block in re.findall(r"^ENV (.*?)(?<!\\)$", stage, re.M | re.S):
        names |= set(re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", block))
    return names


def test_the_dockerfile_runtime_env_compose_and_kubernetes_variables_pass(known):
    docker = dockerfile_runtime_env()
    assert {"PATH", "VIRTUAL_ENV", "PYTHONUNBUFFERED", "HF_HOME", "SM120_CACHE_DIR"} <= docker, docker
    compose = set(load_yaml(ROOT / "compose.yaml")["services"]["sglang"]["environment"])
    kustomization = load_yaml(ROOT / "deploy/kubernetes/base/kustomization.yaml")
    literals = {line.split("=", 1)[0] for gen in kustomization["configMapGenerator"] for line in gen["literals"]}
    for name in sorted(docker | compose | literals):
        assert environment.problem(name, known) is None, name


def test_all_of_them_at_once_start_a_dry_run(run):
    env = {name: "1" for name in MUST_PASS if name not in ("PATH", "HOME", "MODEL_PATH", "DRAFT_MODEL_PATH")}
    for name in [v.name for v in VARIABLES] + ["SM120_PLAN", "SM120_SYMM_MEM_MAX_SIZES", "CUDA_VISIBLE_DEVICES"]:
        env.pop(name, None)  # their values are checked for what they are: the test's own are kept
    env.pop("PYTHONPATH")
    env.update({name: "C.UTF-8" for name in env if name.startswith("LC_")}, TMPDIR=str(run["tmp"]))
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR"):
        env[name] = str(run["tmp"] / "cache")
    proc = run_entrypoint(["eagle3", "--dry-run"], {**env, **run["env"]})
    assert proc.returncode == 0, proc.stderr


def test_a_name_that_resembles_nothing_of_ours_passes(known):
    for name in ("MY_APP_SETTING", "FAKE_SGLANG_RECORD", "WANDB_API_TOKEN", "JAVA_HOME", "X"):
        assert environment.problem(name, known) is None, name


# --------------------------------------------------------------------------------------------------
# Where the check runs, and the one list of variables
# --------------------------------------------------------------------------------------------------


def test_help_and_a_program_are_not_checked(run):
    env = {**run["env"], "TP_SZIE": "8"}
    assert run_entrypoint(["--help"], env).returncode == 0
    assert run_entrypoint(["true"], env).returncode == 0


def test_sglangs_own_help_is_not_checked(run):
    proc = run_entrypoint(["baseline", "--dry-run", "--", "--help"], {**run["env"], "TP_SZIE": "8"})
    assert proc.returncode == 0, proc.stderr


def test_the_variables_read_come_from_where_each_is_defined(known):
    assert {v.name for v in VARIABLES} <= known
    assert {v.name for v in CACHE_VARIABLES} <= known
    assert {"API_KEY_FILE", "ADMIN_API_KEY_FILE", "SM120_PLAN", "SM120_NVML_LIBRARY", "CUDA_VISIBLE_DEVICES"} <= known
    assert {"SM120_SYMM_MEM_MAX_SIZES", "SM120_TEST_ENV"} <= known  # the patch's; the (synthetic) plan's rule
    assert "SM120_ADMIN_ROUTES" not in known  # the entrypoint's word to its launcher, never the user's


def test_every_variable_the_sources_read_by_name_is_known_or_passes(known):
    """A variable read by a literal name (environ["X"], environ.get("X"), os.environ...) in the entrypoint's sources
    that read_by_image lacks would be refused as a typo of itself, or pass unchecked: neither is allowed."""
    read = re.compile(r"""environ(?:\.get\(|\[|\.pop\()\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")
    sources = [*sorted((ROOT / "sm120" / "image" / "entrypoint").glob("*.py")), ROOT / "docker" / "entrypoint.py"]
    assert len(sources) > 10
    names = {name for path in sources for name in read.findall(path.read_text())}
    assert {"PORT", "EXTRA_ARGS"} <= names, "the scan finds nothing"
    missing = sorted(n for n in names if n not in known and not environment.passes(n))
    assert not missing, f"read by the entrypoint, not in environment.read_by_image: {missing}"
