"""T0: the Kubernetes manifests (deploy/kubernetes, `build.py deploy kubernetes`) for 2 and 3 nodes (a
LeaderWorkerSet) and for 1 (a StatefulSet, no LWS), both modes.

Rendered with kubectl's own kustomize (what `kubectl apply -k` sends), each resource is checked against
Kubernetes' schemas (kubernetes-validate, strict: unknown fields refused) and the LeaderWorkerSet against LWS's
(deploy/kubernetes/schema, written from lws v0.10.0, its pod templates against Kubernetes' own); every pod's
environment, made the way LWS and the kubelet make it, is given to the entrypoint's --dry-run, whose command must
name the node count, the pod's rank and the leader's DNS name. With --api-key-secret and --admin-api-key-secret the
leader's Secret files, written as the kubelet writes them, reach the entrypoint, which shows the keys masked. The
requests, the /dev/shm limit, the node selector and tolerations, the NetworkPolicy and the probes (the plan's) are
checked as rendered. No cluster: what only a cluster proves is T4.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from referencing import Registry, Resource

from sm120.build.image_ref import tags_for
from sm120.deploy import kubernetes
from sm120.image.entrypoint import key_file
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.verify import startup
from tests.entrypoint_helpers import fake_sglang, run_entrypoint
from tests.helpers import ROOT, run_build_py, run_cli
from tests.kubernetes_pods import (
    MODELS,
    build_py,
    container,
    entrypoint_env,
    expand,
    kustomize,
    models_volume,
    mount_path,
    one,
    pod_env,
    render,
    template,
    workload,
)

CONFIG = cfg.load()
PLAN = planmod.resolve(CONFIG)
MODES = sorted(PLAN.entrypoint.modes)
ALL_MODES = {mode for track in CONFIG.tracks for mode in planmod.resolve(CONFIG, sglang=track).entrypoint.modes}
NODES = [2, 3]
GPUS = 8
REGISTRY = "registry.example.com/team"
NAMESPACE = "serving"
LWS_SCHEMA = ROOT / "deploy" / "kubernetes" / "schema" / "leaderworkerset-v1.schema.json"
# Kubernetes versions to validate against: LWS's oldest (its installation docs: >= 1.26) and the one lws v0.10.0's
# CRD embeds its pod templates from (k8s.io/api v0.36.3 in its go.mod).
KUBERNETES = ["1.26", "1.36"]
LWS_EMBEDS = "1.36"
HTTP_PORT = kubernetes.HTTP_PORT_NAME
KUSTOMIZATION = kubernetes.KUSTOMIZATION


def options(nodes: int, mode: str, *extra: str) -> list[str]:
    opts = ["--nodes", str(nodes), "--gpus", str(GPUS), "--mode", mode, "--model-path", MODELS["MODEL_PATH"]]
    if PLAN.entrypoint.modes[mode].draft:
        opts += ["--draft-model-path", MODELS["DRAFT_MODEL_PATH"]]
    return [*opts, "--registry", REGISTRY, "--namespace", NAMESPACE, *extra]


def deploy(capsys, out: Path, *opts: str) -> str:
    """`build.py deploy kubernetes OPTS --out OUT` (its main, in this process): what it prints."""
    rc, stdout, err = run_cli(capsys, "deploy", "kubernetes", *opts, "--out", str(out))
    assert rc == 0, err
    return stdout


def header_command(out: Path) -> list[str]:
    """The command kustomization.yaml's header says writes it, as a shell splits it."""
    words = shlex.split((out / KUSTOMIZATION).read_text().splitlines()[1].removeprefix("#"))
    assert words[:4] == ["python3", "build.py", "deploy", "kubernetes"], words
    return words


def assert_header_writes_it_again(capsys, out: Path) -> None:
    """Run the header's command: kustomization.yaml comes out the same, byte for byte (the copies are the bases')."""
    text = (out / KUSTOMIZATION).read_text()
    rc, _, err = run_cli(capsys, *header_command(out)[2:])
    assert rc == 0, err
    assert (out / KUSTOMIZATION).read_text() == text


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[tuple[int, str], list[dict[str, Any]]]:
    out = {}
    for nodes in NODES:
        for mode in MODES:
            out[nodes, mode] = render(tmp_path_factory.mktemp(f"k8s-{nodes}-{mode}"), *options(nodes, mode))
    return out


CASES = [pytest.param(n, m, id=f"{n}nodes-{m}") for n in NODES for m in MODES]


# ---------------------------------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------------------------------


@functools.cache
def lws_validator(version: str = LWS_EMBEDS) -> jsonschema.Draft202012Validator:
    """LWS's schema, its pod templates against Kubernetes' definitions of `version`: built once."""
    definitions = kubernetes_validate.utils.schema_contents(
        f"kubernetes-json-schema/v{version}.0-local-strict/_definitions.json", version
    )
    registry = Resource.from_contents(definitions) @ Registry()
    return jsonschema.Draft202012Validator(json.loads(LWS_SCHEMA.read_text()), registry=registry)


@pytest.fixture(scope="module", autouse=True)
def schemas_read_once():
    """kubernetes-validate reads a kind's schema and the definitions (1.6 MB of JSON) from disk on every call: here
    each file once (the validation itself is the library's, unchanged)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            kubernetes_validate.utils, "schema_contents", functools.cache(kubernetes_validate.utils.schema_contents)
        )
        yield


def core_documents(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every resource Kubernetes' own schema describes: the documents, the LWS's pod templates (as PodTemplates) and
    its claim templates (as PersistentVolumeClaims)."""
    out = [d for d in docs if d["kind"] != "LeaderWorkerSet"]
    spec = one(docs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        out.append({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": key}, "template": spec[key]})
    for claim in spec.get("volumeClaimTemplates") or []:
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim})
    return out


def validate_all(docs: list[dict[str, Any]], versions=tuple(KUBERNETES)) -> None:
    """Every resource against Kubernetes' schemas (strict), a LeaderWorkerSet against LWS's too."""
    lws = [d for d in docs if d["kind"] == "LeaderWorkerSet"]
    for doc in core_documents(docs) if lws else docs:
        for version in versions:
            kubernetes_validate.validate(doc, version, strict=True)
    for doc in lws:
        lws_validator().validate(doc)


# Each rendering is validated as written and with the API key's Secret (--api-key-secret; its fixture below).
@pytest.mark.parametrize("rendering", ["rendered", "rendered_with_key"], ids=["no-key", "api-key"])
@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_every_resource_validates_against_kubernetes_and_lws_schemas(request, rendering, nodes, mode):
    docs = request.getfixturevalue(rendering)[nodes, mode]
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "LeaderWorkerSet", "NetworkPolicy", "Service"]
    validate_all(docs)


BROKEN = {
    "restart policy": (("spec", "leaderWorkerTemplate", "restartPolicy"), "RecreateGroupOnFailure"),
    "size 0": (("spec", "leaderWorkerTemplate", "size"), 0),
    "size as text": (("spec", "leaderWorkerTemplate", "size"), "2"),
    "unknown field": (("spec", "leaderWorkerTemplate", "sizes"), 2),
    "startup policy": (("spec", "startupPolicy"), "AllAtOnce"),
    "name not DNS-1035": (("metadata", "name"), "SGLang.leader"),
    "subdomain policy": (("spec", "networkConfig", "subdomainPolicy"), "PerPod"),
    "template metadata": (("spec", "leaderWorkerTemplate", "leaderTemplate", "metadata"), {"uid": "x"}),
    "container field": (("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0, "imagee"), "x"),
    "claim field": (("spec", "leaderWorkerTemplate", "volumeClaimTemplates", 0, "spec", "size"), "50Gi"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_lws_schema_refuses_what_lws_refuses(rendered, case):
    """The schema is not vacuous: each of these is refused (by the CRD's schema, its webhook, or strict fields)."""
    path, value = BROKEN[case]
    lws = copy.deepcopy(one(rendered[2, MODES[0]], "LeaderWorkerSet"))
    node = lws
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        lws_validator().validate(lws)


def test_kubernetes_validate_refuses_an_unknown_container_field(rendered):
    pod = copy.deepcopy(core_documents(rendered[2, MODES[0]])[-3])
    assert pod["kind"] == "PodTemplate"
    pod["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, LWS_EMBEDS, strict=True)


# ---------------------------------------------------------------------------------------------------------------
# What the manifests say
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_the_image_its_entrypoint_and_the_mode(rendered, nodes, mode):
    lws = one(rendered[nodes, mode], "LeaderWorkerSet")
    for index in (0, 1):
        c = container(template(lws, index))
        # The tag `build.py build --registry` pushes.
        assert c["image"] == tags_for(PLAN, REGISTRY, [])[0]
        # The image's ENTRYPOINT (tini, the entrypoint): never a command of our own; the mode is its argument.
        assert "command" not in c
        assert c["args"] == [mode]


@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_group_gpus_volumes_and_the_plans_values(rendered, nodes, mode):
    docs = rendered[nodes, mode]
    lws = one(docs, "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == nodes and lws["spec"]["replicas"] == 1
    assert group["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"
    assert lws["metadata"]["namespace"] == NAMESPACE
    claims = {c["metadata"]["name"]: c for c in group["volumeClaimTemplates"]}
    for index in (0, 1):
        pod = template(lws, index)
        c = container(pod)
        assert c["resources"]["limits"]["nvidia.com/gpu"] == GPUS
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        shm = next(n for n, v in volumes.items() if mount_path(pod, n) == "/dev/shm")
        assert volumes[shm]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
        assert c["resources"]["requests"] == {"cpu": str(GPUS + 2), "memory": f"{8 * GPUS}Gi"}
        assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
        models_mount = next(m for m in c["volumeMounts"] if m["name"] == "models")
        assert models_mount["readOnly"] is True
        assert all(MODELS[k].startswith(models_mount["mountPath"] + "/") for k in MODELS)
        # The JIT cache: the plan's directory, on a claim of each pod's own.
        assert mount_path(pod, "cache") == PLAN.image.cache_dir and "cache" in claims and "cache" not in volumes
        security = pod["spec"]["securityContext"]
        assert security["runAsUser"] == security["fsGroup"] == PLAN.image.uid and security["runAsNonRoot"]
        env = pod_env(docs, index)
        assert env["TP_SIZE"] == str(nodes * GPUS) and env["PORT"] == str(PLAN.image.port)
        assert {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_DISABLE"} <= set(env)


@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_probes_on_the_leader_only_with_the_images_path_and_port(rendered, nodes, mode):
    docs = rendered[nodes, mode]
    lws = one(docs, "LeaderWorkerSet")
    leader, worker = container(template(lws, 0)), container(template(lws, 1))
    probe = PLAN.probe  # the image's HEALTHCHECK asks the same (tests/unit/test_probes.py)
    ports = {p["name"]: p["containerPort"] for p in leader["ports"]}
    for name in ("startupProbe", "readinessProbe"):
        get = leader[name]["httpGet"]
        assert get["path"] == probe.route
        assert ports[get["port"]] == PLAN.image.port
        assert (leader[name]["timeoutSeconds"], leader[name]["periodSeconds"]) == (probe.timeout_s, probe.interval_s)
        assert leader[name]["timeoutSeconds"] > probe.sglang_timeout_s, "gives up before SGLang's /health answers"
        assert name not in worker
    startup_probe = leader["startupProbe"]
    # At least the time the image's own HEALTHCHECK allows for the model load.
    assert startup_probe["periodSeconds"] * startup_probe["failureThreshold"] >= probe.start_period_s
    assert leader["readinessProbe"]["failureThreshold"] == probe.retries
    assert "livenessProbe" not in leader and "ports" not in worker
    # Otherwise the two pods are the same.
    trimmed = {k: v for k, v in leader.items() if k not in ("startupProbe", "readinessProbe", "ports")}
    assert trimmed == worker
    leader_pod, worker_pod = ({k: v for k, v in template(lws, i)["spec"].items() if k != "containers"} for i in (0, 1))
    assert leader_pod == worker_pod


@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_the_service_selects_the_leader(rendered, nodes, mode):
    docs = rendered[nodes, mode]
    lws, service = one(docs, "LeaderWorkerSet"), one(docs, "Service")
    name = lws["metadata"]["name"]
    # LWS makes a headless Service of the LeaderWorkerSet's own name (the pods' DNS): ours must not take it.
    assert service["metadata"]["name"] != name
    # The labels LWS puts on a group's pods (lws v0.10.0: SetNameLabelKey on all, WorkerIndexLabelKey per pod).
    labels = {i: {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/worker-index": str(i)}
              for i in range(nodes)}  # fmt: skip
    selector = service["spec"]["selector"]
    chosen = [i for i, pod in labels.items() if all(pod.get(k) == v for k, v in selector.items())]
    assert chosen == [0]
    (port,) = service["spec"]["ports"]
    assert port["port"] == PLAN.image.port
    assert port["targetPort"] in {p["name"] for p in container(template(lws, 0))["ports"]}


# ---------------------------------------------------------------------------------------------------------------
# Each pod's command: the entrypoint's --dry-run on the environment LWS and the kubelet make
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image_like(tmp_path_factory) -> dict[str, Any]:
    """The default track's plan.json, a stand-in SGLang of its version, the models volume and a cache directory:
    what the image and its mounts give the entrypoint."""
    tmp = tmp_path_factory.mktemp("image-like")
    (tmp / "cache").mkdir()
    site = fake_sglang(tmp / "site", version=PLAN.sglang_version, kimi_hooks=True)
    with_admin_option(site)
    # As the image build writes /etc/sglang-sm120/plan.json (tests.entrypoint_helpers.real_plan, in this process).
    (tmp / "plan.json").write_text(build_py("plan", "--json", "--sglang", PLAN.sglang_version, "--profile", "offline"))
    return {
        "volume": models_volume(tmp / "models-volume"),
        "SM120_PLAN": str(tmp / "plan.json"),
        "PYTHONPATH": str(site),
        "SM120_CACHE_DIR": str(tmp / "cache"),
    }


def with_admin_option(site: Path) -> None:
    """The stand-in SGLang's parser with --admin-api-key, as 0.5.9's and 0.5.23's have it (the same addition as
    tests/unit/test_entrypoint_admin_key.py's; tests/upstream/test_entrypoint_parser.py reads the real ones)."""
    path = site / "sglang" / "srt" / "server_args.py"
    anchor = '        parser.add_argument("--tokenizer-worker-num", type=int, default=1)\n'
    text = path.read_text()
    assert anchor in text
    path.write_text(text.replace(anchor, anchor + '        parser.add_argument("--admin-api-key")\n'))


def image_env(docs: list[dict[str, Any]], index: int, image_like: dict[str, Any], **secrets: Any) -> dict[str, str]:
    image = {k: v for k, v in image_like.items() if k != "volume"}
    return entrypoint_env(docs, index, image_like["volume"], **secrets, **image)


def dist_init_port(docs: list[dict[str, Any]]) -> int:
    """The rendezvous port the manifests write after $(LWS_LEADER_ADDRESS)."""
    lws = one(docs, "LeaderWorkerSet")
    (value,) = [e["value"] for e in container(template(lws, 1))["env"] if e["name"] == "DIST_INIT_ADDR"]
    match = re.fullmatch(r"\$\(LWS_LEADER_ADDRESS\):([0-9]+)", value)
    assert match, value
    port = int(match.group(1))
    assert 1 <= port <= 65535 and port != PLAN.image.port
    return port


@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_every_pods_dry_run_names_its_rank_and_the_leader(rendered, image_like, nodes, mode):
    """Without --api-key-secret: nothing of a key in the manifests or the command, and the leader warns."""
    docs = rendered[nodes, mode]
    assert key_file.VARIABLE not in json.dumps(docs)
    lws = one(docs, "LeaderWorkerSet")
    # What LWS injects for group 0 in our namespace: a DNS name, not an IP address (the entrypoint must take it).
    leader = f"{lws['metadata']['name']}-0.{lws['metadata']['name']}.{NAMESPACE}"
    for index in range(nodes):
        args = container(template(lws, index))["args"]
        proc = run_entrypoint([*args, "--dry-run"], image_env(docs, index, image_like))
        assert proc.returncode == 0, (index, proc.stderr)
        assert f"accepted by SGLang {PLAN.sglang_version}'s own parser" in proc.stdout
        _, argv = startup.split_command(shlex.split(proc.stdout.strip().splitlines()[-1]))
        assert startup.option_value(argv, "--nnodes") == str(nodes)
        assert startup.option_value(argv, "--node-rank") == str(index)
        assert startup.option_value(argv, "--dist-init-addr") == f"{leader}:{dist_init_port(docs)}"
        assert startup.option_value(argv, "--tp-size") == str(nodes * GPUS)
        assert startup.option_value(argv, "--port") == str(PLAN.image.port)
        assert startup.option_value(argv, "--model-path") == str(image_like["volume"] / "Kimi-K2.5-NVFP4")
        if PLAN.entrypoint.modes[mode].draft:
            assert startup.option_value(argv, "--speculative-draft-model-path") == str(
                image_like["volume"] / "Kimi-K2.5-eagle3"
            )
        # torch symmetric memory maps peers' memory through CUDA IPC: one node only, so not here.
        assert "--enable-torch-symm-mem" not in argv
        assert key_parts(template(lws, index)) == ([], [], []) and key_file.OPTION not in argv
        # HOST is 0.0.0.0 in a pod: the leader says it serves without a key; the workers serve no API.
        assert (NO_KEY_WARNING in proc.stderr) == (index == 0), (index, proc.stderr)


def test_pipeline_parallel_over_the_nodes_from_the_literals(rendered, image_like):
    """docs/kubernetes.md: for 3 x 8 GPUs (TP 24 divides no Kimi-K2.5 head count) the literals can say PP instead."""
    docs = copy.deepcopy(rendered[3, MODES[0]])
    one(docs, "ConfigMap")["data"].update({"TP_SIZE": "8", "EXTRA_ARGS": "--pp-size 3"})
    lws = one(docs, "LeaderWorkerSet")
    for index in range(3):
        args = container(template(lws, index))["args"]
        proc = run_entrypoint([*args, "--dry-run"], image_env(docs, index, image_like))
        assert proc.returncode == 0, proc.stderr
        _, argv = startup.split_command(shlex.split(proc.stdout.strip().splitlines()[-1]))
        got = [startup.option_value(argv, o) for o in ("--tp-size", "--pp-size", "--nnodes", "--node-rank")]
        assert got == ["8", "3", "3", str(index)]


def test_a_pod_outside_lws_stops_with_a_clear_error(rendered, image_like):
    """Applied without LWS's webhook the variables stay unexpanded: the entrypoint refuses them in one line."""
    docs = rendered[2, MODES[0]]
    lws = one(docs, "LeaderWorkerSet")
    c = container(template(lws, 1))
    env = image_env(docs, 1, image_like)
    for entry in c["env"]:
        env[entry["name"]] = entry["value"]  # no LWS: $(LWS_...) is left as written
    proc = run_entrypoint([*c["args"], "--dry-run"], env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "NNODES='$(LWS_GROUP_SIZE)'" in proc.stderr


def test_expansion_follows_kubernetes_rules():
    env = {"A": "x", "B": "$(A)"}
    assert expand("$(A):20000", env) == "x:20000"
    assert expand("$(MISSING)/$(A)", env) == "$(MISSING)/x"
    assert expand("$$(A) $$ $x $(", env) == "$(A) $ $x $("
    assert expand("$(B)", env) == "$(A)"  # values are not expanded twice


def test_lws_variables_come_first_and_win(rendered):
    """LWS's variables are prepended (and replace same-named ones), so `$(LWS_...)` in our env expands."""
    docs = copy.deepcopy(rendered[3, MODES[0]])
    lws = one(docs, "LeaderWorkerSet")
    container(template(lws, 2))["env"].insert(0, {"name": "LWS_WORKER_INDEX", "value": "7"})
    env = pod_env(docs, 2)
    assert env["LWS_WORKER_INDEX"] == env["NODE_RANK"] == "2" and env["NNODES"] == "3"


# ---------------------------------------------------------------------------------------------------------------
# The API key: a Secret mounted as a file on the leader (--api-key-secret; components/api-key)
# ---------------------------------------------------------------------------------------------------------------

SECRET, SECRET_KEY = "sglang-key", "token"
API_KEY = "k8s-test-key-3f9a1c7e5b2d4a60"  # what the Secret holds in the tests (never a real key)
NO_KEY_WARNING = "with no API key"  # the entrypoint's warning (sm120/image/entrypoint/api_key.py)


def with_key(*extra: str) -> list[str]:
    return ["--api-key-secret", SECRET, "--api-key-secret-key", SECRET_KEY, *extra]


@pytest.fixture(scope="module")
def rendered_with_key(tmp_path_factory) -> dict[tuple[int, str], list[dict[str, Any]]]:
    out = {}
    for nodes in NODES:
        for mode in MODES:
            directory = tmp_path_factory.mktemp(f"k8s-key-{nodes}-{mode}")
            out[nodes, mode] = render(directory, *options(nodes, mode, *with_key()))
    return out


def key_parts(pod: dict[str, Any]) -> tuple[list[dict], list[dict], list[dict]]:
    """The pod's Secret volumes, their mounts in the container and its API_KEY_FILE entries."""
    c = container(pod)
    volumes = [v for v in pod["spec"]["volumes"] if "secret" in v]
    names = {v["name"] for v in volumes}
    mounts = [m for m in c.get("volumeMounts") or [] if m["name"] in names]
    env = [e for e in c.get("env") or [] if e["name"] == key_file.VARIABLE]
    return volumes, mounts, env


def without_key(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod template with its Secret volumes, their mounts and API_KEY_FILE taken out."""
    pod = copy.deepcopy(pod)
    volumes, mounts, env = key_parts(pod)
    c = container(pod)
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v not in volumes]
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m not in mounts]
    c["env"] = [e for e in c["env"] if e not in env]
    return pod


@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_the_key_is_a_read_only_secret_file_on_the_leader_alone(rendered, rendered_with_key, nodes, mode):
    docs, plain = rendered_with_key[nodes, mode], rendered[nodes, mode]
    lws, plain_lws = one(docs, "LeaderWorkerSet"), one(plain, "LeaderWorkerSet")
    leader = template(lws, 0)
    (volume,), (mount,), (env,) = key_parts(leader)
    secret = volume["secret"]
    (item,) = secret["items"]
    assert secret["secretName"] == SECRET and item["key"] == SECRET_KEY
    assert not secret.get("optional"), "a missing Secret must stop the pod, not serve without a key"
    assert mount["readOnly"] is True and "subPath" not in mount
    assert env == {"name": key_file.VARIABLE, "value": f"{mount['mountPath']}/{item['path']}"}
    # Root's file, the group the pod's fsGroup (the image's uid, as the process's supplementary group): the
    # owner and that group read it, no one else does.
    mode_bits = item.get("mode", secret.get("defaultMode", 0o644))
    assert mode_bits & 0o440 == 0o440 and mode_bits & 0o007 == 0, oct(mode_bits)
    security = leader["spec"]["securityContext"]
    assert security["fsGroup"] == security["runAsUser"] == PLAN.image.uid
    # The key changes nothing else: the same probes, port, mounts and pod as without it; the workers (no API,
    # SGLang's stand-in health server only) and the ConfigMap and Service are those rendered without the option.
    assert without_key(leader) == template(plain_lws, 0)
    for index in range(1, nodes):
        assert template(lws, index) == template(plain_lws, index)
        assert key_parts(template(lws, index)) == ([], [], [])
    assert [d for d in docs if d["kind"] != "LeaderWorkerSet"] == [d for d in plain if d["kind"] != "LeaderWorkerSet"]


@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_the_leaders_dry_run_takes_the_key_from_the_secret_and_masks_it(
    rendered_with_key, image_like, tmp_path, nodes, mode
):
    """The leader's alone; with no admin key the entrypoint adds one nobody knows (masked too), closing the admin
    routes."""
    docs = rendered_with_key[nodes, mode]
    lws = one(docs, "LeaderWorkerSet")
    secrets = {SECRET: {SECRET_KEY: API_KEY + "\n"}}  # as `--from-file` stores a file from `openssl rand > FILE`
    for index in range(nodes):
        env = image_env(docs, index, image_like, secrets=secrets, secrets_dir=tmp_path)
        proc = run_entrypoint([*container(template(lws, index))["args"], "--dry-run"], env)
        assert proc.returncode == 0, (index, proc.stderr)
        assert API_KEY not in proc.stdout + proc.stderr
        assert NO_KEY_WARNING not in proc.stderr
        assert f"accepted by SGLang {PLAN.sglang_version}'s own parser" in proc.stdout
        _, argv = startup.split_command(shlex.split(proc.stdout.strip().splitlines()[-1]))
        if index == 0:
            assert argv[-4:] == [key_file.ADMIN_OPTION, key_file.MASK, key_file.OPTION, key_file.MASK], argv
            assert key_file.read(env[key_file.VARIABLE]).value == API_KEY  # the file the entrypoint was given
            assert "admin routes closed" in proc.stderr
        else:
            assert key_file.OPTION not in argv and key_file.VARIABLE not in env
        assert startup.option_value(argv, "--node-rank") == str(index)


def test_the_api_key_options_reach_the_header_and_the_output(capsys, tmp_path):
    out = tmp_path / "out"
    printed = deploy(capsys, out, *options(2, MODES[0], *with_key()))
    create = f"kubectl create secret generic {SECRET} -n {NAMESPACE} --from-file={SECRET_KEY}=FILE"
    assert create in printed
    text = (out / KUSTOMIZATION).read_text()
    assert create in text and "components/api-key" in text
    # The header's command writes the same directory again, the key's Secret included.
    assert f"--api-key-secret {SECRET} --api-key-secret-key {SECRET_KEY}" in text.splitlines()[1]
    assert_header_writes_it_again(capsys, out)
    # The Secret's own key by default: the one components/api-key names.
    docs = render(tmp_path / "default-key", *options(2, MODES[0], "--api-key-secret", SECRET))
    ((volume,), _, _) = key_parts(template(one(docs, "LeaderWorkerSet"), 0))
    assert volume["secret"]["items"][0]["key"] == kubernetes.KeyComponent.read().key


def test_the_key_components_are_not_modes():
    for name in kubernetes.KEY_COMPONENTS:
        assert name not in ALL_MODES
        assert (kubernetes.SOURCE / "components" / name / KUSTOMIZATION).is_file()
        # Each component mounts its Secret on the leader of both workloads, and sets the same variable in both.
        read = [kubernetes.KeyComponent.read(name, w) for w in kubernetes.WORKLOADS]
        assert len(set(read)) == 1, read


# ---------------------------------------------------------------------------------------------------------------
# The admin API key: a second Secret on the leader (--admin-api-key-secret; components/admin-api-key)
# ---------------------------------------------------------------------------------------------------------------

ADMIN_SECRET, ADMIN_SECRET_KEY = "sglang-admin", "admin"
ADMIN_API_KEY = "k8s-admin-key-8e1d0c3b7a6f5e42"  # what the admin Secret holds in the tests
KEY_VARIABLES = (key_file.VARIABLE, key_file.ADMIN_VARIABLE)
# Both workloads: the LeaderWorkerSet (2 nodes) and the StatefulSet (1 node).
WORKLOAD_CASES = [pytest.param(n, m, id=f"{n}nodes-{m}") for n in (1, 2) for m in MODES]


def with_admin(*extra: str) -> list[str]:
    return ["--admin-api-key-secret", ADMIN_SECRET, "--admin-api-key-secret-key", ADMIN_SECRET_KEY, *extra]


@pytest.fixture(scope="module")
def rendered_with_keys(tmp_path_factory) -> dict[tuple[int, str, str], list[dict[str, Any]]]:
    """(nodes, mode, which keys) -> the manifests: "both" (API and admin key), "admin" (the admin key alone)."""
    out = {}
    for nodes in (1, 2):
        for mode in MODES:
            for which, extra in (("both", [*with_key(), *with_admin()]), ("admin", with_admin())):
                directory = tmp_path_factory.mktemp(f"k8s-{which}-{nodes}-{mode}")
                out[nodes, mode, which] = render(directory, *options(nodes, mode, *extra))
    return out


def secret_files(pod: dict[str, Any]) -> dict[str, tuple[dict, dict, dict]]:
    """Each key variable of the pod's container -> (its Secret volume, the volume's mount, its env entry)."""
    c = container(pod)
    out = {}
    for entry in c.get("env") or []:
        if entry["name"] not in KEY_VARIABLES:
            continue
        (mount,) = [m for m in c["volumeMounts"] if entry["value"].startswith(m["mountPath"] + "/")]
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
        out[entry["name"]] = (volume, mount, entry)
    return out


@pytest.mark.parametrize(("nodes", "mode"), WORKLOAD_CASES)
def test_both_keys_are_read_only_secret_files_on_the_leader_alone(rendered_with_keys, nodes, mode):
    docs = rendered_with_keys[nodes, mode, "both"]
    validate_all(docs)
    lws = workload(docs)
    leader = template(lws, 0)
    files = secret_files(leader)
    assert sorted(files) == sorted(KEY_VARIABLES)
    wanted = {key_file.VARIABLE: (SECRET, SECRET_KEY), key_file.ADMIN_VARIABLE: (ADMIN_SECRET, ADMIN_SECRET_KEY)}
    for variable, (volume, mount, entry) in files.items():
        secret = volume["secret"]
        (item,) = secret["items"]
        assert (secret["secretName"], item["key"]) == wanted[variable]
        assert not secret.get("optional") and mount["readOnly"] is True and "subPath" not in mount
        assert entry["value"] == f"{mount['mountPath']}/{item['path']}"
        mode_bits = item.get("mode", secret.get("defaultMode", 0o644))
        assert mode_bits & 0o440 == 0o440 and mode_bits & 0o007 == 0, oct(mode_bits)
    assert files[key_file.VARIABLE][1]["mountPath"] != files[key_file.ADMIN_VARIABLE][1]["mountPath"]
    for index in range(1, nodes):
        assert secret_files(template(lws, index)) == {}
        assert not [v for v in template(lws, index)["spec"]["volumes"] if "secret" in v]


@pytest.mark.parametrize(("nodes", "mode"), WORKLOAD_CASES)
def test_the_leaders_dry_run_masks_both_keys(rendered_with_keys, image_like, tmp_path, nodes, mode):
    docs = rendered_with_keys[nodes, mode, "both"]
    secrets = {SECRET: {SECRET_KEY: API_KEY + "\n"}, ADMIN_SECRET: {ADMIN_SECRET_KEY: ADMIN_API_KEY + "\n"}}
    lws = workload(docs)
    for index in range(nodes):
        env = image_env(docs, index, image_like, secrets=secrets, secrets_dir=tmp_path / f"both-{index}")
        proc = run_entrypoint([*container(template(lws, index))["args"], "--dry-run"], env)
        assert proc.returncode == 0, (index, proc.stderr)
        assert API_KEY not in proc.stdout + proc.stderr and ADMIN_API_KEY not in proc.stdout + proc.stderr
        _, argv = startup.split_command(shlex.split(proc.stdout.strip().splitlines()[-1]))
        if index == 0:
            assert argv[-4:] == [key_file.ADMIN_OPTION, key_file.MASK, key_file.OPTION, key_file.MASK], argv
            assert key_file.read(env[key_file.ADMIN_VARIABLE]).value == ADMIN_API_KEY
            assert "admin routes closed" not in proc.stderr
        else:
            assert key_file.ADMIN_OPTION not in argv and key_file.ADMIN_VARIABLE not in env


@pytest.mark.parametrize(("nodes", "mode"), WORKLOAD_CASES)
def test_the_admin_key_alone_opens_no_api_key(rendered_with_keys, image_like, tmp_path, nodes, mode):
    """SGLang then serves its ordinary routes without a key (the leader warns) and its admin routes with this one."""
    docs = rendered_with_keys[nodes, mode, "admin"]
    validate_all(docs, versions=(LWS_EMBEDS,))
    leader = template(workload(docs), 0)
    assert sorted(secret_files(leader)) == [key_file.ADMIN_VARIABLE]
    env = image_env(
        docs, 0, image_like, secrets={ADMIN_SECRET: {ADMIN_SECRET_KEY: ADMIN_API_KEY}}, secrets_dir=tmp_path
    )
    proc = run_entrypoint([*container(leader)["args"], "--dry-run"], env)
    assert proc.returncode == 0, proc.stderr
    _, argv = startup.split_command(shlex.split(proc.stdout.strip().splitlines()[-1]))
    assert argv[-2:] == [key_file.ADMIN_OPTION, key_file.MASK] and key_file.OPTION not in argv
    assert NO_KEY_WARNING in proc.stderr


# ---------------------------------------------------------------------------------------------------------------
# Requests, /dev/shm, placement: each input reaches every pod template of both workloads
# ---------------------------------------------------------------------------------------------------------------

DEFAULT_REQUESTS = {"cpu": str(GPUS + 2), "memory": f"{8 * GPUS}Gi"}
PLACEMENT = [
    # (id, options, requests, /dev/shm sizeLimit, nodeSelector, tolerations)
    ("defaults", [], DEFAULT_REQUESTS, "16Gi", None, None),
    ("requests", ["--cpu-request", "24", "--memory-request", "200Gi"], {"cpu": "24", "memory": "200Gi"}, "16Gi",
     None, None),
    ("millicores", ["--cpu-request", "9500m"], {**DEFAULT_REQUESTS, "cpu": "9500m"}, "16Gi", None, None),
    ("fraction", ["--cpu-request", "0.5", "--memory-request", "80G"], {"cpu": "0.5", "memory": "80G"}, "16Gi", None,
     None),
    ("shm", ["--shm-size", "32Gi"], DEFAULT_REQUESTS, "32Gi", None, None),
    (
        "selector",
        ["--node-selector", "nvidia.com/gpu.product=NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
         "--node-selector", "pool=llm", "--node-selector", "spare="],
        DEFAULT_REQUESTS,
        "16Gi",
        {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "pool": "llm", "spare": ""},
        None,
    ),
    (
        "tolerations",
        ["--toleration", "nvidia.com/gpu:NoSchedule", "--toleration", "dedicated=llm:NoExecute",
         "--toleration", "spot", "--toleration", "team=ml"],
        DEFAULT_REQUESTS,
        "16Gi",
        None,
        [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoExecute"},
            {"key": "spot", "operator": "Exists"},
            {"key": "team", "operator": "Equal", "value": "ml"},
        ],
    ),
]  # fmt: skip


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize(
    ("extra", "wanted_requests", "shm", "selector", "tolerate"),
    [pytest.param(*case[1:], id=case[0]) for case in PLACEMENT],
)
def test_requests_shm_and_placement_reach_every_pod(
    capsys, tmp_path, nodes, extra, wanted_requests, shm, selector, tolerate
):
    docs = render(tmp_path / "out", *options(nodes, MODES[0], *extra))
    validate_all(docs, versions=(LWS_EMBEDS,))
    lws = workload(docs)
    for index in range(nodes):
        pod = template(lws, index)
        c = container(pod)
        assert c["resources"]["requests"] == wanted_requests
        assert c["resources"]["limits"] == {"nvidia.com/gpu": GPUS}, "no CPU or memory limit"
        (volume,) = [v for v in pod["spec"]["volumes"] if mount_path(pod, v["name"]) == "/dev/shm"]
        assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": shm}
        assert pod["spec"].get("nodeSelector") == selector
        assert pod["spec"].get("tolerations") == tolerate
    # The header's command writes the same directory again, repeated options included.
    assert_header_writes_it_again(capsys, tmp_path / "out")


def test_default_requests_follow_the_gpus(tmp_path):
    for gpus in (1, 4):
        opts = ["--nodes", "1", "--gpus", str(gpus), "--mode", "baseline", "--model-path", MODELS["MODEL_PATH"]]
        docs = render(tmp_path / f"gpus-{gpus}", *opts)
        requested = container(template(workload(docs), 0))["resources"]["requests"]
        assert requested == {"cpu": str(gpus + 2), "memory": f"{8 * gpus}Gi"}


# ---------------------------------------------------------------------------------------------------------------
# The NetworkPolicy: clients to the serving port only, the group's members to each other
# ---------------------------------------------------------------------------------------------------------------


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def pod_labels(docs: list[dict[str, Any]], index: int) -> dict[str, str]:
    """The labels a pod gets: its template's, and for a LeaderWorkerSet LWS's own (lws v0.10.0: the set's name and
    the worker index on every pod)."""
    lws = workload(docs)
    labels = dict((template(lws, index).get("metadata") or {}).get("labels") or {})
    if lws["kind"] == "LeaderWorkerSet":
        labels |= {
            "leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
            "leaderworkerset.sigs.k8s.io/worker-index": str(index),
        }
    return labels


def admitted_ports(docs: list[dict[str, Any]], index: int, rule: dict[str, Any]) -> set[int] | str:
    """The ports of pod `index` a rule admits: the numbers its named ports resolve to there, or "all TCP"."""
    ports = rule["ports"]
    if ports == [{"protocol": "TCP"}]:
        return "all TCP"
    named = {p["name"]: p["containerPort"] for p in container(template(workload(docs), index)).get("ports") or []}
    assert all(p["protocol"] == "TCP" for p in ports), ports
    return {named[p["port"]] for p in ports if p["port"] in named}


@pytest.mark.parametrize("nodes", [1, 2, 3])
def test_the_network_policy_admits_clients_to_the_port_and_the_group_to_each_other(rendered, tmp_path, nodes):
    docs = rendered[nodes, MODES[0]] if nodes > 1 else render(tmp_path / "one", *options(1, MODES[0]))
    policy = one(docs, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == NAMESPACE
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"], "egress stays open (downloads, DNS)"
    # It selects every pod of the server.
    assert all(selects(spec["podSelector"], pod_labels(docs, i)) for i in range(nodes))
    clients = [r for r in spec["ingress"] if "from" not in r]
    members = [r for r in spec["ingress"] if "from" in r]
    # Clients, from anywhere: the plan's port on the leader, nothing on the workers (no port named http there).
    (client_rule,) = clients
    assert admitted_ports(docs, 0, client_rule) == {PLAN.image.port}
    assert all(admitted_ports(docs, i, client_rule) == set() for i in range(1, nodes))
    # The group's members: every TCP port of each other (NCCL's and gloo's ports are ephemeral); none on one node.
    if nodes == 1:
        assert members == []
    else:
        (member_rule,) = members
        (peer,) = member_rule["from"]
        assert set(peer) == {"podSelector"}, "the group's own pods, in this namespace only"
        assert all(selects(peer["podSelector"], pod_labels(docs, i)) for i in range(nodes))
        assert admitted_ports(docs, 1, member_rule) == "all TCP"
        # What the pods dial each other on is among it: the rendezvous on the leader.
        assert dist_init_port(docs) > 0


@pytest.mark.parametrize("nodes", [1, 2])
def test_no_network_policy_leaves_only_it_out(rendered, tmp_path, nodes):
    plain = rendered[2, MODES[0]] if nodes == 2 else render(tmp_path / "plain", *options(1, MODES[0]))
    docs = render(tmp_path / "out", *options(nodes, MODES[0], "--no-network-policy"))
    assert [d for d in docs if d["kind"] == "NetworkPolicy"] == []
    assert docs == [d for d in plain if d["kind"] != "NetworkPolicy"]
    header = (tmp_path / "out" / "kustomization.yaml").read_text().splitlines()[1]
    assert header.rstrip().endswith(f"--no-network-policy --out {tmp_path / 'out'}")


# ---------------------------------------------------------------------------------------------------------------
# One machine: a StatefulSet, no LeaderWorkerSet controller
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered_single(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    return {mode: render(tmp_path_factory.mktemp(f"k8s-single-{mode}"), *options(1, mode)) for mode in MODES}


@pytest.mark.parametrize("mode", MODES)
def test_one_node_is_a_statefulset_that_validates(rendered_single, mode):
    docs = rendered_single[mode]
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "NetworkPolicy", "Service", "Service", "StatefulSet"]
    assert "LeaderWorkerSet" not in json.dumps(docs) and "LWS_" not in json.dumps(docs), "nothing of LWS"
    validate_all(docs)


@pytest.mark.parametrize("mode", MODES)
def test_the_one_pod_is_the_group_leaders_without_the_group(rendered_single, rendered, mode):
    """The StatefulSet's pod is the LeaderWorkerSet leader's (same GPUs): the same container, probes, volumes,
    security and requests, without LWS's variables; one pod, its own cache claim."""
    docs, group = rendered_single[mode], rendered[2, mode]
    sts, lws = one(docs, "StatefulSet"), one(group, "LeaderWorkerSet")
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["volumeClaimTemplates"] == lws["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"]
    pod, leader = copy.deepcopy(template(sts, 0)), copy.deepcopy(template(lws, 0))
    for p, docs_of in ((pod, docs), (leader, group)):
        c = container(p)
        (ref,) = c["envFrom"]
        assert ref["configMapRef"]["name"] == one(docs_of, "ConfigMap")["metadata"]["name"]
        ref["configMapRef"]["name"] = "sglang-env"  # the names carry each content's hash
        p.pop("metadata", None)
    assert container(pod).pop("env") == []
    assert [e["name"] for e in container(leader).pop("env")] == ["NNODES", "NODE_RANK", "DIST_INIT_ADDR"]
    assert pod == leader
    env = pod_env(docs, 0)
    assert env["TP_SIZE"] == str(GPUS) and env["PORT"] == str(PLAN.image.port)
    assert not {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_DISABLE"} & set(env), "no network between nodes"


@pytest.mark.parametrize("mode", MODES)
def test_the_services_select_the_one_pod(rendered_single, mode):
    docs = rendered_single[mode]
    sts = one(docs, "StatefulSet")
    labels = template(sts, 0)["metadata"]["labels"]
    assert all(sts["spec"]["selector"]["matchLabels"][k] == labels[k] for k in sts["spec"]["selector"]["matchLabels"])
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    headless = services.pop(sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    (api,) = services.values()
    for service in (headless, api):
        assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    (port,) = api["spec"]["ports"]
    assert port["port"] == PLAN.image.port and port["targetPort"] == HTTP_PORT
    assert api["metadata"]["name"] == "sglang-leader", "the same name as with a LeaderWorkerSet"


@pytest.mark.parametrize("mode", MODES)
def test_the_one_pods_dry_run_serves_on_one_node(rendered_single, image_like, mode):
    docs = rendered_single[mode]
    args = container(template(workload(docs), 0))["args"]
    assert args == [mode]
    proc = run_entrypoint([*args, "--dry-run"], image_env(docs, 0, image_like))
    assert proc.returncode == 0, proc.stderr
    assert f"accepted by SGLang {PLAN.sglang_version}'s own parser" in proc.stdout
    _, argv = startup.split_command(shlex.split(proc.stdout.strip().splitlines()[-1]))
    assert startup.option_value(argv, "--tp-size") == str(GPUS)
    assert startup.option_value(argv, "--port") == str(PLAN.image.port)
    assert "--node-rank" not in argv and "--dist-init-addr" not in argv
    assert startup.option_value(argv, "--nnodes") in (None, "1")
    assert NO_KEY_WARNING in proc.stderr


def test_one_node_output_names_the_statefulset(capsys, tmp_path):
    out = tmp_path / "out"
    printed = deploy(capsys, out, *options(1, MODES[0], *with_key(), *with_admin()))
    assert "a StatefulSet" in printed
    for secret, key in ((SECRET, SECRET_KEY), (ADMIN_SECRET, ADMIN_SECRET_KEY)):
        create = f"kubectl create secret generic {secret} -n {NAMESPACE} --from-file={key}=FILE"
        assert create in printed and create in (out / KUSTOMIZATION).read_text()


# ---------------------------------------------------------------------------------------------------------------
# The command: options, every mode, bad input
# ---------------------------------------------------------------------------------------------------------------


def test_every_mode_of_every_track_has_its_component():
    """components/<mode> for each mode of build.toml (`--mode` names it); the others are the keys'."""
    components = {path.parent.name for path in (kubernetes.SOURCE / "components").glob(f"*/{KUSTOMIZATION}")}
    assert components == ALL_MODES | set(kubernetes.KEY_COMPONENTS)


def test_the_choices_reach_the_manifests(tmp_path):
    docs = render(
        tmp_path / "out",
        *options(2, MODES[0]),
        "--models-host-path",
        "/srv/models",
        "--nccl-socket-ifname",
        "net1",
        "--infiniband",
        "--rdma-resource",
        "rdma/ib",
        "--cache-size",
        "200Gi",
        "--sglang",
        sorted(CONFIG.tracks)[-1],
    )
    validate_all(docs, versions=(LWS_EMBEDS,))
    lws = one(docs, "LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
        "storage": "200Gi"
    }
    for index in (0, 1):
        pod = template(lws, index)
        c = container(pod)
        models = next(v for v in pod["spec"]["volumes"] if v["name"] == "models")
        assert models == {"name": "models", "hostPath": {"path": "/srv/models", "type": "Directory"}}
        assert c["resources"]["limits"] == {"nvidia.com/gpu": GPUS, "rdma/ib": 1}
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        env = pod_env(docs, index)
        assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"], env["NCCL_IB_DISABLE"]) == ("net1", "net1", "0")
    newest = planmod.resolve(CONFIG, sglang=sorted(CONFIG.tracks)[-1])
    assert container(template(lws, 0))["image"] == tags_for(newest, REGISTRY, [])[0]


def test_without_registry_or_namespace_and_another_claim(tmp_path):
    opts = ["--nodes", "2", "--gpus", "4", "--mode", MODES[0], "--model-path", MODELS["MODEL_PATH"]]
    if PLAN.entrypoint.modes[MODES[0]].draft:
        opts += ["--draft-model-path", MODELS["DRAFT_MODEL_PATH"]]
    docs = render(tmp_path / "out", *opts, "--models-pvc", "kimi-weights")
    assert all("namespace" not in d["metadata"] for d in docs)
    lws = one(docs, "LeaderWorkerSet")
    assert container(template(lws, 0))["image"] == tags_for(PLAN, None, [])[0]
    assert pod_env(docs, 0)["LWS_LEADER_ADDRESS"].endswith(".default")
    for index in (0, 1):
        (models,) = [v for v in template(lws, index)["spec"]["volumes"] if v["name"] == "models"]
        assert models["persistentVolumeClaim"] == {"claimName": "kimi-weights", "readOnly": True}
        assert container(template(lws, index))["resources"]["limits"] == {"nvidia.com/gpu": 4}


def test_writing_again_replaces_the_copies_and_keeps_the_directory_applicable(tmp_path):
    out = tmp_path / "out"
    render(out, *options(2, MODES[0]))
    (out / "base" / "stale.yaml").write_text("kind: Stale\n")
    docs = render(out, *options(3, MODES[-1]))
    assert not (out / "base" / "stale.yaml").exists()
    assert one(docs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["size"] == 3
    command = header_command(out)
    assert "--nodes 3" in shlex.join(command) and f"--mode {MODES[-1]}" in shlex.join(command)
    # The header's command, run as a process the way it is written, writes the same directory again.
    again = run_build_py(*command[2:])
    assert again.returncode == 0, again.stderr
    assert f"apply: kubectl apply -k {out}" in again.stdout
    assert kustomize(out) == docs


def refused(capsys, *args: str) -> str:
    """`build.py deploy kubernetes ARGS` (its main, in this process): exit 2 in one to three lines; its stderr."""
    rc, out, err = run_cli(capsys, "deploy", "kubernetes", *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and not out and 1 <= len(lines) <= 3, (rc, out, err)
    return err


BASE_ARGS = ["--nodes", "2", "--gpus", "8", "--model-path", "/models/m"]
BAD_INPUT = [
    ("unknown-mode", ["--mode", "eagle", "--draft-model-path", "/models/d"], ["'eagle' is not a mode", "'eagle3'"]),
    ("draft-missing", ["--mode", "eagle3"], ["--mode eagle3 needs --draft-model-path"]),
    ("draft-unused", ["--mode", "baseline", "--draft-model-path", "/models/d"], ["mode baseline uses no drafter"]),
    ("nodes-zero", ["--mode", "baseline", "--nodes", "0"], ["--nodes", "positive integer"]),
    ("gpus-word", ["--mode", "baseline", "--gpus", "eight"], ["--gpus", "'eight'"]),
    ("relative-model", ["--mode", "baseline", "--model-path", "models/a/b"], ["--model-path 'models/a/b'"]),
    ("namespace", ["--mode", "baseline", "--namespace", "Serving"], ["--namespace 'Serving' is not a DNS label"]),
    ("pvc-name", ["--mode", "baseline", "--models-pvc", "My_Models"], ["--models-pvc 'My_Models'"]),
    ("both-models", ["--mode", "baseline", "--models-pvc", "m", "--models-host-path", "/m"], ["not allowed with"]),
    ("host-path", ["--mode", "baseline", "--models-host-path", "srv/models"], ["not an absolute path"]),
    ("ifname", ["--mode", "baseline", "--nccl-socket-ifname", "eth0 eth1"], ["one network interface"]),
    ("rdma-alone", ["--mode", "baseline", "--rdma-resource", "rdma/ib"], ["only with --infiniband"]),
    ("cache-size", ["--mode", "baseline", "--cache-size", "lots"], ["--cache-size 'lots'"]),
    ("track", ["--mode", "baseline", "--sglang", "0.4.0"], ["0.4.0"]),
    ("pvc-dots", ["--mode", "baseline", "--models-pvc", "models..a"], ["--models-pvc 'models..a'"]),
    ("secret-name", ["--mode", "baseline", "--api-key-secret", "My_Key"], ["--api-key-secret 'My_Key'", "DNS-1123"]),
    ("secret-dots", ["--mode", "baseline", "--api-key-secret", "key..a"], ["--api-key-secret 'key..a'"]),
    ("secret-dash", ["--mode", "baseline", "--api-key-secret", "key-"], ["--api-key-secret 'key-'"]),
    ("secret-empty", ["--mode", "baseline", "--api-key-secret", ""], ["--api-key-secret ''"]),
    ("secret-long", ["--mode", "baseline", "--api-key-secret", "k" * 254], ["--api-key-secret 'kkk"]),
    ("secret-key", ["--mode", "baseline", "--api-key-secret", "k", "--api-key-secret-key", "a/b"], ["'a/b'"]),
    ("secret-key-dot", ["--mode", "baseline", "--api-key-secret", "k", "--api-key-secret-key", "."], ["'.'"]),
    ("secret-key-dotdot", ["--mode", "baseline", "--api-key-secret", "k", "--api-key-secret-key", "..k"], ["'..k'"]),
    ("secret-key-alone", ["--mode", "baseline", "--api-key-secret-key", "api-key"], ["only with --api-key-secret"]),
    ("admin-name", ["--mode", "baseline", "--admin-api-key-secret", "Admin_Key"], ["--admin-api-key-secret 'Admin_"]),
    ("admin-key", ["--mode", "baseline", "--admin-api-key-secret", "k", "--admin-api-key-secret-key", "a/"], ["'a/'"]),
    ("admin-key-alone", ["--mode", "baseline", "--admin-api-key-secret-key", "k"], ["only with --admin-api-key-sec"]),
    ("admin-is-api-key", ["--mode", "baseline", "--api-key-secret", "k", "--admin-api-key-secret", "k",
                          "--admin-api-key-secret-key", "api-key"], ["is the API key's", "admin routes"]),
    ("cpu-zero", ["--mode", "baseline", "--cpu-request", "0"], ["--cpu-request '0'", "CPU quantity"]),
    ("cpu-word", ["--mode", "baseline", "--cpu-request", "lots"], ["--cpu-request 'lots'"]),
    ("cpu-unit", ["--mode", "baseline", "--cpu-request", "8Gi"], ["--cpu-request '8Gi'"]),
    ("memory-unit", ["--mode", "baseline", "--memory-request", "64GB"], ["--memory-request '64GB'"]),
    ("shm-zero", ["--mode", "baseline", "--shm-size", "0"], ["--shm-size '0'"]),
    ("selector-no-value", ["--mode", "baseline", "--node-selector", "gpu"], ["--node-selector 'gpu' is not KEY=VALUE"]),
    ("selector-key", ["--mode", "baseline", "--node-selector", "bad key=1"], ["'bad key' is not a label key"]),
    ("selector-prefix", ["--mode", "baseline", "--node-selector", "Nvidia.com/gpu=1"], ["not a label key"]),
    ("selector-value", ["--mode", "baseline", "--node-selector", "gpu=a b"], ["'a b' is not a label value"]),
    ("selector-long", ["--mode", "baseline", "--node-selector", "gpu=" + "v" * 64], ["is not a label value"]),
    ("selector-twice", ["--mode", "baseline", "--node-selector", "a=1", "--node-selector", "a=2"], ["given twice"]),
    ("toleration-effect", ["--mode", "baseline", "--toleration", "gpu:NoSchedul"], ["'NoSchedul'", "'NoSchedule'"]),
    ("toleration-key", ["--mode", "baseline", "--toleration", "=x:NoSchedule"], ["'' is not a label key"]),
    ("toleration-value", ["--mode", "baseline", "--toleration", "k=a/b"], ["'a/b' is not a label value"]),
    ("toleration-twice", ["--mode", "baseline", "--toleration", "k", "--toleration", "k"], ["given twice"]),
    ("one-node-ifname", ["--mode", "baseline", "--nodes", "1", "--nccl-socket-ifname", "net1"], ["--nodes 2 or more"]),
]  # fmt: skip


@pytest.mark.parametrize(("args", "expected"), [pytest.param(a, e, id=i) for i, a, e in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, expected):
    err = refused(capsys, *BASE_ARGS, *args, "--out", str(tmp_path / "out"))  # the last of an option given twice
    for text in expected:
        assert text in err, (text, err)
    assert not (tmp_path / "out").exists(), "nothing is written on bad input"


def test_infiniband_on_one_node_is_refused(capsys, tmp_path):
    err = refused(capsys, *BASE_ARGS, "--nodes", "1", "--mode", "baseline", "--infiniband", "--out", str(tmp_path))
    assert "--infiniband: only with --nodes 2 or more" in err


def test_out_that_is_not_ours(capsys, tmp_path):
    """As a process: exit 2, one line, no traceback, and the directory left as it was."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / KUSTOMIZATION).write_text("resources: [app.yaml]\n")
    proc = run_build_py("deploy", "kubernetes", *BASE_ARGS, "--mode", "baseline", "--out", str(foreign))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"build.py deploy: error: --out {foreign}: ") and "did not write" in line, line
    assert (foreign / KUSTOMIZATION).read_text() == "resources: [app.yaml]\n"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert "not a directory" in refused(capsys, *BASE_ARGS, "--mode", "baseline", "--out", str(a_file))


# --registry: exactly the prefixes `build --registry` takes (one check, sm120/build/image_ref.py `check_registry`), so
# a manifest never names an image that build could not push. A refused prefix is the same one line from both
# commands; an accepted one reaches both outputs.
DEPLOY = ["deploy", "kubernetes", *BASE_ARGS, "--mode", "baseline"]
REGISTRIES_REFUSED = [
    ("upper-case", "GHCR.IO/Owner"),
    ("upper-case-namespace", "ghcr.io/Owner"),
    ("url", "https://ghcr.io/owner"),
    ("tag", "ghcr.io/owner:latest"),
    ("digest", "ghcr.io/owner@sha256:" + "a" * 64),
    ("space", "ghcr.io/my org"),
    ("empty", ""),
    ("slash", "/"),
]
REGISTRIES_TAKEN = [
    ("host", "ghcr.io/owner", "ghcr.io/owner/sglang-sm120:"),
    ("trailing-slash", "ghcr.io/owner/", "ghcr.io/owner/sglang-sm120:"),
    ("host-port", "localhost:5000", "localhost:5000/sglang-sm120:"),
    ("nested", "registry.example.com/team/sub", "registry.example.com/team/sub/sglang-sm120:"),
]


def one_line(rc: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, (rc, err[-1500:])
    return lines[0].split(": error: ", 1)[1]


@pytest.mark.parametrize("registry", [c[1] for c in REGISTRIES_REFUSED], ids=[c[0] for c in REGISTRIES_REFUSED])
def test_deploy_and_build_refuse_the_same_registry_in_the_same_words(capsys, tmp_path, registry):
    build = one_line(*run_cli(capsys, "build", "--print", "--registry", registry)[::2])
    deploy = one_line(*run_cli(capsys, *DEPLOY, "--registry", registry, "--out", str(tmp_path / "out"))[::2])
    assert build == deploy and build.startswith(f"--registry {registry!r}"), (build, deploy)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("registry", "shown"), [c[1:] for c in REGISTRIES_TAKEN], ids=[c[0] for c in REGISTRIES_TAKEN])
def test_deploy_and_build_take_the_same_registry(capsys, tmp_path, registry, shown):
    rc, out, err = run_cli(capsys, "build", "--print", "--registry", registry)
    assert rc == 0 and shown in out, err
    rc, out, err = run_cli(capsys, *DEPLOY, "--registry", registry, "--out", str(tmp_path / "out"))
    assert rc == 0 and f"image {shown}" in out, err
