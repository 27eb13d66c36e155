"""T0: the Kubernetes manifests (deploy/kubernetes, `build.py deploy kubernetes`) for 2 and 3 nodes, both modes.

Rendered with kubectl's own kustomize (what `kubectl apply -k` sends), each resource is checked against
Kubernetes' schemas (kubernetes-validate, strict: unknown fields refused) and the LeaderWorkerSet against LWS's
(deploy/kubernetes/schema, written from lws v0.10.0, its pod templates against Kubernetes' own); every pod's
environment, made the way LWS and the kubelet make it, is given to the entrypoint's --dry-run, whose command must
name the node count, the pod's rank and the leader's DNS name. With --api-key-secret the leader's Secret file,
written as the kubelet writes it, reaches the entrypoint, which shows the key masked. No cluster: what only a
cluster proves is T4.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from referencing import Registry, Resource

from sm120 import config as cfg
from sm120 import kubernetes
from sm120 import plan as planmod
from sm120.commands.build import tags_for
from sm120.image.entrypoint import key_file
from sm120.verify import startup
from tests.entrypoint_helpers import fake_sglang, real_plan, run_entrypoint
from tests.helpers import ROOT, run_build_py
from tests.kubernetes_pods import (
    MODELS,
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
)

CONFIG = cfg.load()
PLAN = planmod.resolve(CONFIG)
MODES = sorted(PLAN.entrypoint.modes)
NODES = [2, 3]
GPUS = 8
REGISTRY = "registry.example.com/team"
NAMESPACE = "serving"
LWS_SCHEMA = ROOT / "deploy" / "kubernetes" / "schema" / "leaderworkerset-v1.schema.json"
# Kubernetes versions to validate against: LWS's oldest (its installation docs: >= 1.26) and the one lws v0.10.0's
# CRD embeds its pod templates from (k8s.io/api v0.36.3 in its go.mod).
KUBERNETES = ["1.26", "1.36"]
LWS_EMBEDS = "1.36"


def options(nodes: int, mode: str, *extra: str) -> list[str]:
    opts = ["--nodes", str(nodes), "--gpus", str(GPUS), "--mode", mode, "--model-path", MODELS["MODEL_PATH"]]
    if PLAN.entrypoint.modes[mode].draft:
        opts += ["--draft-model-path", MODELS["DRAFT_MODEL_PATH"]]
    return [*opts, "--registry", REGISTRY, "--namespace", NAMESPACE, *extra]


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


def kubernetes_definitions(version: str) -> dict[str, Any]:
    return kubernetes_validate.utils.schema_contents(
        f"kubernetes-json-schema/v{version}.0-local-strict/_definitions.json", version
    )


def lws_validator(version: str = LWS_EMBEDS) -> jsonschema.Draft202012Validator:
    schema = json.loads(LWS_SCHEMA.read_text())
    registry = Resource.from_contents(kubernetes_definitions(version)) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


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


# Each rendering is validated as written and with the API key's Secret (--api-key-secret; its fixture below).
RENDERINGS = pytest.mark.parametrize("rendering", ["rendered", "rendered_with_key"], ids=["no-key", "api-key"])


@RENDERINGS
@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_every_resource_validates_against_kubernetes_schemas(request, rendering, nodes, mode, version):
    docs = request.getfixturevalue(rendering)[nodes, mode]
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "LeaderWorkerSet", "Service"]
    for doc in core_documents(docs):
        kubernetes_validate.validate(doc, version, strict=True)


@RENDERINGS
@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_the_leaderworkerset_validates_against_the_lws_schema(request, rendering, nodes, mode):
    lws_validator().validate(one(request.getfixturevalue(rendering)[nodes, mode], "LeaderWorkerSet"))


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


def healthcheck() -> tuple[str, int]:
    """The image's HEALTHCHECK: the path it asks for and its start period in seconds (Dockerfile)."""
    text = (ROOT / "Dockerfile").read_text()
    check = text[text.index("\nHEALTHCHECK ") :].split("\nENTRYPOINT", 1)[0]
    path = re.search(r"http://127\.0\.0\.1:%s(/[\w/]*)'", check)
    period = re.search(r"--start-period=(\d+)m\b", check)
    assert path and period, f"cannot read the HEALTHCHECK: {check}"
    return path.group(1), int(period.group(1)) * 60


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
        assert volumes[shm]["emptyDir"] == {"medium": "Memory"}
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
    path, start_period = healthcheck()
    ports = {p["name"]: p["containerPort"] for p in leader["ports"]}
    for probe in ("startupProbe", "readinessProbe"):
        get = leader[probe]["httpGet"]
        assert get["path"] == path
        assert ports[get["port"]] == PLAN.image.port
        assert probe not in worker
    startup_probe = leader["startupProbe"]
    # At least the time the image's own HEALTHCHECK allows for the model load.
    assert startup_probe["periodSeconds"] * startup_probe["failureThreshold"] >= start_period
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
    return {
        "volume": models_volume(tmp / "models-volume"),
        "SM120_PLAN": str(real_plan(tmp / "plan.json", PLAN.sglang_version)),
        "PYTHONPATH": str(fake_sglang(tmp / "site", version=PLAN.sglang_version, kimi_hooks=True)),
        "SM120_CACHE_DIR": str(tmp / "cache"),
    }


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
    docs = rendered[nodes, mode]
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
            assert argv[-2:] == [key_file.OPTION, key_file.MASK], argv
            assert key_file.read(env[key_file.VARIABLE]).value == API_KEY  # the file the entrypoint was given
        else:
            assert key_file.OPTION not in argv and key_file.VARIABLE not in env
        assert startup.option_value(argv, "--node-rank") == str(index)


@pytest.mark.parametrize(("nodes", "mode"), CASES)
def test_without_the_option_nothing_of_a_key_and_the_leader_warns(rendered, image_like, nodes, mode):
    docs = rendered[nodes, mode]
    assert key_file.VARIABLE not in json.dumps(docs)
    lws = one(docs, "LeaderWorkerSet")
    for index in range(nodes):
        assert key_parts(template(lws, index)) == ([], [], [])
        proc = run_entrypoint(
            [*container(template(lws, index))["args"], "--dry-run"], image_env(docs, index, image_like)
        )
        assert proc.returncode == 0, proc.stderr
        assert key_file.OPTION not in shlex.split(proc.stdout.strip().splitlines()[-1])
        # HOST is 0.0.0.0 in a pod: the leader says it serves without a key; the workers serve no API.
        assert (NO_KEY_WARNING in proc.stderr) == (index == 0), (index, proc.stderr)


def test_the_api_key_options_reach_the_header_and_the_output(tmp_path):
    out = tmp_path / "out"
    proc = run_build_py("deploy", "kubernetes", *options(2, MODES[0], *with_key()), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    create = f"kubectl create secret generic {SECRET} -n {NAMESPACE} --from-file={SECRET_KEY}=FILE"
    assert create in proc.stdout
    text = (out / "kustomization.yaml").read_text()
    assert create in text and "components/api-key" in text
    # The header's command writes the same directory again, the key's Secret included.
    header = text.splitlines()[1]
    assert f"--api-key-secret {SECRET} --api-key-secret-key {SECRET_KEY}" in header
    docs = kustomize(out)
    again = run_build_py(*shlex.split(header.removeprefix("#   python3 build.py ")))
    assert again.returncode == 0, again.stderr
    assert kustomize(out) == docs
    # The Secret's own key by default: the one components/api-key names.
    docs = render(tmp_path / "default-key", *options(2, MODES[0], "--api-key-secret", SECRET))
    ((volume,), _, _) = key_parts(template(one(docs, "LeaderWorkerSet"), 0))
    assert volume["secret"]["items"][0]["key"] == kubernetes.ApiKeyComponent.read().key


def test_the_api_key_component_is_not_a_mode():
    assert kubernetes.API_KEY_COMPONENT not in kubernetes.modes_with_components()
    assert (kubernetes.SOURCE / "components" / kubernetes.API_KEY_COMPONENT / "kustomization.yaml").is_file()


# ---------------------------------------------------------------------------------------------------------------
# The command: options, every mode, bad input
# ---------------------------------------------------------------------------------------------------------------


def test_every_mode_of_every_track_has_its_component():
    for track in CONFIG.tracks:
        plan = planmod.resolve(CONFIG, sglang=track)
        assert set(plan.entrypoint.modes) <= kubernetes.modes_with_components()


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
    for doc in core_documents(docs):
        kubernetes_validate.validate(doc, LWS_EMBEDS, strict=True)
    lws = one(docs, "LeaderWorkerSet")
    lws_validator().validate(lws)
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
    header = (out / "kustomization.yaml").read_text().splitlines()[1]
    assert "--nodes 3" in header and f"--mode {MODES[-1]}" in header
    # The header's command writes the same directory again.
    again = run_build_py(*shlex.split(header.removeprefix("#   python3 build.py ")))
    assert again.returncode == 0, again.stderr
    assert kustomize(out) == docs


def bad(tmp_path: Path, *args: str) -> str:
    proc = run_build_py("deploy", "kubernetes", *args)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 3 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


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
    ("registry", ["--mode", "baseline", "--registry", "ghcr.io/my org"], ["--registry 'ghcr.io/my org'"]),
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
]


@pytest.mark.parametrize(("args", "expected"), [pytest.param(a, e, id=i) for i, a, e in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, expected):
    merged = dict(zip(BASE_ARGS[::2], BASE_ARGS[1::2], strict=True))
    rest: list[str] = []
    it = iter(args)
    for a in it:
        value = next(it)
        if a in merged:
            merged[a] = value
        else:
            rest += [a, value]
    argv = [x for kv in merged.items() for x in kv] + rest + ["--out", str(tmp_path / "out")]
    err = bad(tmp_path, *argv)
    for text in expected:
        assert text in err, (text, err)
    assert not (tmp_path / "out").exists(), "nothing is written on bad input"


def test_out_that_is_not_ours(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "kustomization.yaml").write_text("resources: [app.yaml]\n")
    err = bad(tmp_path, *BASE_ARGS, "--mode", "baseline", "--out", str(foreign))
    assert "did not write" in err
    assert (foreign / "kustomization.yaml").read_text() == "resources: [app.yaml]\n"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert "not a directory" in bad(tmp_path, *BASE_ARGS, "--mode", "baseline", "--out", str(a_file))
