"""Kubernetes manifests that serve the image: a kustomization around deploy/kubernetes/.

deploy/kubernetes/base is a LeaderWorkerSet for several machines (one group of NODES pods, the leader serving HTTP);
deploy/kubernetes/single a StatefulSet of one pod for one machine, which needs no LeaderWorkerSet controller. Each
holds the leader's Service, a NetworkPolicy and the entrypoint's variables. components/<mode> sets the image's
argument; components/api-key and components/admin-api-key mount a key's Secret on the leader. `kustomization` adds
what comes from the plan (the image and tag, the port, the probes, the JIT cache directory, the image's uid) and what
the user chooses (nodes, GPUs per node, mode, models, NCCL, requests, placement, the keys' Secrets), as kustomize's
own `images`, `configMapGenerator` and JSON patches; `write` puts it beside a copy of the bases and the components,
so the directory is complete on its own (`kubectl apply -k DIR`, or a GitOps repository). The names and positions
it patches are read from the bases and the components, not repeated here.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sm120.build import image_ref
from sm120.errors import UsageError, suggest
from sm120.plan import ROOT
from sm120.plan.plan_types import Plan

SOURCE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATION = "kustomization.yaml"
MARK = "# Written by `build.py deploy kubernetes`"
GPU_RESOURCE = "nvidia.com/gpu"
LWS_GROUP, LWS_VERSION, LWS_KIND = "leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"
HTTP_PORT_NAME = "http"  # the leader's probes, the Service and the NetworkPolicy name the port (the bases)
MODELS_VOLUME = "models"
CACHE_CLAIM = "cache"
API_KEY_COMPONENT = "api-key"  # components/api-key: not a mode (components/<mode> are the others)
ADMIN_KEY_COMPONENT = "admin-api-key"  # components/admin-api-key: not a mode either
KEY_COMPONENTS = (API_KEY_COMPONENT, ADMIN_KEY_COMPONENT)  # in the order their volumes follow the base's
NETWORK_POLICY_KIND = "NetworkPolicy"
# Requests when the user gives none: one busy scheduler process per GPU plus the tokenizer and the detokenizer, and
# 8Gi of host memory per GPU (estimates, not measured: T4). The bases hold the values for 8 GPUs.
CPU_PER_GPU, CPU_MORE = 1, 2
MEMORY_GIB_PER_GPU = 8
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # DNS-1123
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_IFNAME = re.compile(r"[A-Za-z0-9_.:-]+")  # one Linux interface name (gloo takes no NCCL-style prefix list)
_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY = re.compile(r"[1-9][0-9]*(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_CPU = re.compile(r"[1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*|[1-9][0-9]*m")  # 10, 9.5, 0.5, 500m; never 0
_SECRET_KEY = re.compile(r"(?!\.$|\.\.)[-._A-Za-z0-9]+")  # a Secret's key (IsConfigMapKey): not '.', not '..*'
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")  # a label key's name part, <= 63
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # a label value, <= 63, may be empty
SECRET_NAME = "a Secret name (DNS-1123: lower-case letters, digits, '-', and '.' between them)"
SECRET_KEY = "a key of a Secret: letters, digits, '-', '_', '.' (not '.', not starting with '..')"


@dataclass(frozen=True)
class Request:
    """What the user chooses (build.py deploy kubernetes's options)."""

    nodes: int
    gpus: int
    mode: str
    model_path: str
    draft_model_path: str | None = None
    registry: str | None = None
    namespace: str | None = None
    models_pvc: str | None = None
    models_host_path: str | None = None
    nccl_socket_ifname: str | None = None
    infiniband: bool = False
    rdma_resource: str | None = None
    cache_size: str | None = None
    api_key_secret: str | None = None
    api_key_secret_key: str | None = None
    admin_api_key_secret: str | None = None
    admin_api_key_secret_key: str | None = None
    cpu_request: str | None = None
    memory_request: str | None = None
    shm_size: str | None = None
    node_selector: Sequence[str] = ()  # KEY=VALUE each
    tolerations: Sequence[str] = ()  # KEY[=VALUE][:EFFECT] each, as `kubectl taint` writes a taint
    network_policy: bool = True


# ---------------------------------------------------------------------------------------------------------------
# The workloads: a LeaderWorkerSet for several nodes (base/), a StatefulSet for one (single/)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """Where a workload's pod templates and claim templates are, as JSON pointers (the leader's pod first)."""

    directory: str  # below deploy/kubernetes
    group: str
    version: str
    kind: str
    pods: tuple[str, ...]  # each pod template (its metadata and spec below it), the leader's first
    claims: str  # volumeClaimTemplates

    @property
    def leader(self) -> str:
        return self.pods[0]

    def target(self, name: str) -> dict[str, str]:
        group = {"group": self.group} if self.group else {}
        return {**group, "version": self.version, "kind": self.kind, "name": name}


GROUP = Workload(
    "base",
    LWS_GROUP,
    LWS_VERSION,
    LWS_KIND,
    ("/spec/leaderWorkerTemplate/leaderTemplate", "/spec/leaderWorkerTemplate/workerTemplate"),
    "/spec/leaderWorkerTemplate/volumeClaimTemplates",
)
SINGLE = Workload("single", "apps", "v1", "StatefulSet", ("/spec/template",), "/spec/volumeClaimTemplates")
WORKLOADS = (GROUP, SINGLE)
COPIED = (*(w.directory for w in WORKLOADS), "components")  # what `write` copies next to the kustomization


def workload_for(nodes: int) -> Workload:
    """One node: the StatefulSet (no LWS controller needed); several: the LeaderWorkerSet."""
    return SINGLE if nodes == 1 else GROUP


def _at(doc: Any, pointer: str) -> Any:
    """The value at a JSON pointer (RFC 6901)."""
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc


@dataclass(frozen=True)
class Base:
    """The names and positions in a workload's base (base/ or single/) that the kustomization patches. The bases'
    shape (one container per pod template, the same image and volumes in each, the leader's Service, one
    configMapGenerator) is the repository's, proven by rendering every workload in T0
    (tests/unit/test_kubernetes.py); the patches' `test` operations guard each position when kustomize applies them."""

    workload: Workload
    name: str  # the LeaderWorkerSet's or the StatefulSet's
    service_name: str  # the leader's Service (ClusterIP; not a headless one)
    network_policy: str
    configmap: str
    image: str
    models_volume: int  # index of the models volume in each template
    shm_volume: int  # index of the /dev/shm volume (emptyDir in memory) in each template
    volumes: int  # how many volumes each template has (a component's volume comes after them)
    cache_claim: int  # index of the cache claim in volumeClaimTemplates
    container: int = 0  # index of the SGLang container in each template

    @classmethod
    def read(cls, workload: Workload = GROUP, source: Path = SOURCE) -> Base:
        where = source / workload.directory
        kustomization = yaml.safe_load((where / KUSTOMIZATION).read_text())
        docs = [d for name in kustomization["resources"] for d in yaml.safe_load_all((where / name).read_text()) if d]
        kinds = {d["kind"]: d for d in docs if d["kind"] != "Service" or d["spec"].get("clusterIP") != "None"}
        resource = kinds[workload.kind]
        pod = _at(resource, workload.leader)["spec"]
        volumes = pod["volumes"]
        return cls(
            workload=workload,
            name=resource["metadata"]["name"],
            service_name=kinds["Service"]["metadata"]["name"],
            network_policy=kinds[NETWORK_POLICY_KIND]["metadata"]["name"],
            configmap=kustomization["configMapGenerator"][0]["name"],
            image=pod["containers"][0]["image"],
            models_volume=[v["name"] for v in volumes].index(MODELS_VOLUME),
            shm_volume=next(i for i, v in enumerate(volumes) if (v.get("emptyDir") or {}).get("medium") == "Memory"),
            volumes=len(volumes),
            cache_claim=[c["metadata"]["name"] for c in _at(resource, workload.claims)].index(CACHE_CLAIM),
        )


# ---------------------------------------------------------------------------------------------------------------
# The keys' components
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyComponent:
    """The Secret volume components/<name> appends to the leader's volumes, as written there for a workload: the
    volume's name, the Secret's name and key that the options replace, and the *_FILE variable it sets."""

    name: str
    volume: str
    secret: str
    key: str
    variable: str

    @classmethod
    def read(cls, name: str = API_KEY_COMPONENT, workload: Workload = GROUP, source: Path = SOURCE) -> KeyComponent:
        path = source / "components" / name / KUSTOMIZATION
        patches = yaml.safe_load(path.read_text())["patches"]
        ops = [op for p in patches if p["target"]["kind"] == workload.kind for op in yaml.safe_load(p["patch"])]
        added = {op["path"]: op["value"] for op in ops if op["op"] == "add"}
        pod = f"{workload.leader}/spec"
        volume, variable = added[f"{pod}/volumes/-"], added[f"{pod}/containers/0/env/-"]["name"]
        secret = volume["secret"]
        return cls(name, volume["name"], secret["secretName"], secret["items"][0]["key"], variable)


# ---------------------------------------------------------------------------------------------------------------
# The user's choices, checked
# ---------------------------------------------------------------------------------------------------------------


def check(plan: Plan, request: Request, source: Path = SOURCE) -> None:
    """Every choice that would make a manifest the cluster refuses, or a pod that cannot start: one line each."""
    modes = plan.entrypoint.modes
    if request.mode not in modes:
        raise UsageError(
            f"--mode {request.mode!r} is not a mode of SGLang {plan.sglang_version}'s image "
            f"(modes: {', '.join(sorted(modes))}{suggest(request.mode, modes)})"
        )
    if modes[request.mode].draft and not request.draft_model_path:
        raise UsageError(
            f"--mode {request.mode} needs --draft-model-path: the EAGLE-3 drafter's directory, e.g. "
            "/models/Kimi-K2.5-eagle3"
        )
    if not modes[request.mode].draft and request.draft_model_path:
        drafting = ", ".join(sorted(m for m, spec in modes.items() if spec.draft)) or "none"
        raise UsageError(
            f"--draft-model-path {request.draft_model_path!r}: mode {request.mode} uses no drafter "
            f"(modes with one: {drafting})"
        )
    for option, path in (("--model-path", request.model_path), ("--draft-model-path", request.draft_model_path)):
        if path is None:
            continue
        if "\n" in path or not (path.startswith("/") or _REPO_ID.fullmatch(path)):
            raise UsageError(
                f"{option} {path!r} is neither an absolute path in the container (e.g. /models/Kimi-K2.5-NVFP4) "
                "nor a Hugging Face repo id (org/name)"
            )
    _match("--namespace", request.namespace, _DNS_LABEL, "a DNS label: lower-case letters, digits and '-'", 63)
    _match("--models-pvc", request.models_pvc, _DNS_SUBDOMAIN, "a claim name: lower-case letters, digits, '-', '.'")
    if request.models_host_path is not None and not request.models_host_path.startswith("/"):
        raise UsageError(f"--models-host-path {request.models_host_path!r} is not an absolute path on the nodes")
    _match("--nccl-socket-ifname", request.nccl_socket_ifname, _IFNAME, "one network interface, e.g. eth0 or net1", 15)
    _match("--rdma-resource", request.rdma_resource, _RESOURCE, "a resource name such as rdma/ib (domain/name)")
    if request.rdma_resource and not request.infiniband:
        raise UsageError(f"--rdma-resource {request.rdma_resource}: only with --infiniband (NCCL uses sockets without)")
    if request.nodes == 1:
        between = [
            option
            for option, value in (
                ("--nccl-socket-ifname", request.nccl_socket_ifname),
                ("--infiniband", request.infiniband),
                ("--rdma-resource", request.rdma_resource),
            )
            if value
        ]
        if between:
            raise UsageError(
                f"{between[0]}: only with --nodes 2 or more (it is NCCL's network between nodes; one node's GPUs "
                "talk over P2P or shared memory)"
            )
    _match("--cache-size", request.cache_size, _QUANTITY, "a storage size such as 50Gi or 200G")
    if request.registry is not None:
        image_ref.check_registry(request.registry)  # the check `build --registry` makes
    _match("--cpu-request", request.cpu_request, _CPU, "a CPU quantity such as 10, 9.5 or 500m (not 0)")
    _match("--memory-request", request.memory_request, _QUANTITY, "a memory size such as 64Gi or 80G")
    _match("--shm-size", request.shm_size, _QUANTITY, "a memory size such as 16Gi")
    node_selector(request)
    tolerations(request)
    for option, secret, key in (
        ("--api-key-secret", request.api_key_secret, request.api_key_secret_key),
        ("--admin-api-key-secret", request.admin_api_key_secret, request.admin_api_key_secret_key),
    ):
        _match(option, secret, _DNS_SUBDOMAIN, SECRET_NAME)
        _match(f"{option}-key", key, _SECRET_KEY, SECRET_KEY)
        if key is not None and not secret:
            raise UsageError(f"{option}-key {key!r}: only with {option} (the Secret holding it)")
    chosen = {c.name: (secret, key) for c, secret, key in secrets_for(request, GROUP, source)}
    api, admin = chosen.get(API_KEY_COMPONENT), chosen.get(ADMIN_KEY_COMPONENT)
    if api is not None and api == admin:
        raise UsageError(
            f"--admin-api-key-secret {admin[0]}: its key {admin[1]!r} is the API key's (--api-key-secret "
            f"{api[0]}): every API-key holder could use the admin routes; give the admin key a key of its own"
        )


def _match(option: str, value: str | None, pattern: re.Pattern[str], allowed: str, longest: int = 253) -> None:
    if value is not None and (not pattern.fullmatch(value) or len(value) > longest):
        raise UsageError(f"{option} {value!r} is not {allowed}")


def _label_key(option: str, text: str, key: str) -> None:
    """A label or taint key: an optional DNS-1123 prefix and '/', then a name of at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    good_prefix = not slash or (_DNS_SUBDOMAIN.fullmatch(prefix) is not None and len(prefix) <= 253)
    if not _LABEL_NAME.fullmatch(name) or len(name) > 63 or not good_prefix:
        raise UsageError(
            f"{option} {text!r}: {key!r} is not a label key (an optional DNS prefix and '/', then letters, digits, "
            "'-', '_', '.', at most 63, e.g. nvidia.com/gpu.product)"
        )


def _label_value(option: str, text: str, value: str) -> None:
    if not _LABEL_VALUE.fullmatch(value) or len(value) > 63:
        raise UsageError(
            f"{option} {text!r}: {value!r} is not a label value (letters, digits, '-', '_', '.', at most 63, "
            "starting and ending with a letter or digit)"
        )


def node_selector(request: Request) -> dict[str, str]:
    """--node-selector KEY=VALUE ... as the pods' nodeSelector."""
    out: dict[str, str] = {}
    for text in request.node_selector:
        key, eq, value = text.partition("=")
        if not eq:
            raise UsageError(f"--node-selector {text!r} is not KEY=VALUE (e.g. nvidia.com/gpu.present=true)")
        _label_key("--node-selector", text, key)
        _label_value("--node-selector", text, value)
        if key in out:
            raise UsageError(f"--node-selector {text!r}: {key} is given twice (a node has one value for a label)")
        out[key] = value
    return out


def tolerations(request: Request) -> list[dict[str, str]]:
    """--toleration KEY[=VALUE][:EFFECT] ... as the pods' tolerations: with a value, Equal; without, Exists; without
    an effect, every effect of that taint."""
    out: list[dict[str, str]] = []
    for text in request.tolerations:
        rest, colon, effect = text.rpartition(":") if ":" in text else (text, "", "")
        if colon and effect not in TAINT_EFFECTS:
            raise UsageError(
                f"--toleration {text!r}: the effect {effect!r} is none of {', '.join(TAINT_EFFECTS)}"
                f"{suggest(effect, TAINT_EFFECTS)}"
            )
        key, eq, value = rest.partition("=")
        _label_key("--toleration", text, key)
        toleration = {"key": key, "operator": "Equal" if eq else "Exists"}
        if eq:
            _label_value("--toleration", text, value)
            toleration["value"] = value
        if effect:
            toleration["effect"] = effect
        if toleration in out:
            raise UsageError(f"--toleration {text!r} is given twice")
        out.append(toleration)
    return out


def requests(request: Request) -> dict[str, str]:
    """The container's CPU and memory requests: the user's, or GPUs + 2 cores and 8Gi per GPU."""
    return {
        "cpu": request.cpu_request or str(CPU_PER_GPU * request.gpus + CPU_MORE),
        "memory": request.memory_request or f"{MEMORY_GIB_PER_GPU * request.gpus}Gi",
    }


def image_reference(plan: Plan, registry: str | None) -> tuple[str, str]:
    """The plan's first tag, with the registry prefix as `build.py build --registry` pushes it: (name, tag)."""
    name, _, tag = image_ref.tags_for(plan, registry, [])[0].rpartition(":")
    return name, tag


# ---------------------------------------------------------------------------------------------------------------
# The patches
# ---------------------------------------------------------------------------------------------------------------


def _esc(key: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def probes(plan: Plan) -> dict[str, dict[str, Any]]:
    """The leader's probes, from the plan's (build.toml [tracks."X".probe], what the image's HEALTHCHECK asks): a
    startup probe that allows the start period, then a readiness probe that gives up after `retries` failures. No
    liveness probe: a busy server answering late must not be killed."""
    probe = plan.probe
    timing = {"periodSeconds": probe.interval_s, "timeoutSeconds": probe.timeout_s}
    return {
        "startupProbe": {
            "httpGet": {"path": probe.route, "port": HTTP_PORT_NAME},
            **timing,
            "failureThreshold": math.ceil(probe.start_period_s / probe.interval_s),
        },
        "readinessProbe": {
            "httpGet": {"path": probe.route, "port": HTTP_PORT_NAME},
            **timing,
            "failureThreshold": probe.retries,
        },
    }


def workload_patch(plan: Plan, request: Request, base: Base) -> list[dict[str, Any]]:
    """JSON patch operations on the LeaderWorkerSet or the StatefulSet; `test` guards every position taken from the
    base."""
    workload = base.workload
    ops: list[dict[str, Any]] = []
    if workload is GROUP:
        ops.append({"op": "replace", "path": "/spec/leaderWorkerTemplate/size", "value": request.nodes})
    claim = f"{workload.claims}/{base.cache_claim}"
    if request.cache_size:
        ops += [
            {"op": "test", "path": f"{claim}/metadata/name", "value": CACHE_CLAIM},
            {"op": "replace", "path": f"{claim}/spec/resources/requests/storage", "value": request.cache_size},
        ]
    selector, tolerate = node_selector(request), tolerations(request)
    for template in workload.pods:
        pod = f"{template}/spec"
        container = f"{pod}/containers/{base.container}"
        volume = f"{pod}/volumes/{base.models_volume}"
        shm = f"{pod}/volumes/{base.shm_volume}"
        ops += [
            {"op": "test", "path": f"{container}/image", "value": base.image},
            {"op": "replace", "path": f"{container}/resources/limits/{_esc(GPU_RESOURCE)}", "value": request.gpus},
            # `replace`, not `add`: the base holds both requests (a JSON patch's replace fails where there is none).
            *(
                {"op": "replace", "path": f"{container}/resources/requests/{name}", "value": value}
                for name, value in requests(request).items()
            ),
            # The image's user by number: runAsNonRoot cannot check a user name.
            {"op": "add", "path": f"{pod}/securityContext/runAsUser", "value": plan.image.uid},
            # The cache claim's files become the pod's group's, so the image's user can write them.
            {"op": "add", "path": f"{pod}/securityContext/fsGroup", "value": plan.image.uid},
            {
                "op": "add",
                "path": f"{container}/volumeMounts/-",
                "value": {"name": CACHE_CLAIM, "mountPath": plan.image.cache_dir},
            },
        ]
        if request.shm_size:
            ops += [
                {"op": "test", "path": f"{shm}/emptyDir/medium", "value": "Memory"},
                {"op": "replace", "path": f"{shm}/emptyDir/sizeLimit", "value": request.shm_size},
            ]
        models = _models_volume(request)
        if models is not None:
            ops += [
                {"op": "test", "path": f"{volume}/name", "value": MODELS_VOLUME},
                {"op": "replace", "path": volume, "value": models},
            ]
        if selector:
            ops.append({"op": "add", "path": f"{pod}/nodeSelector", "value": selector})
        if tolerate:
            ops.append({"op": "add", "path": f"{pod}/tolerations", "value": tolerate})
        if template == workload.leader:
            ops.append(
                {
                    "op": "add",
                    "path": f"{container}/ports",
                    "value": [{"name": HTTP_PORT_NAME, "containerPort": plan.image.port, "protocol": "TCP"}],
                }
            )
            ops += [
                {"op": "add", "path": f"{container}/{name}", "value": value} for name, value in probes(plan).items()
            ]
        if request.infiniband:
            ops.append({"op": "add", "path": f"{container}/securityContext/capabilities/add", "value": ["IPC_LOCK"]})
        if request.rdma_resource:
            ops.append({"op": "add", "path": f"{container}/resources/limits/{_esc(request.rdma_resource)}", "value": 1})
    return ops


def _models_volume(request: Request) -> dict[str, Any] | None:
    """The models volume the user chose, or None for the base's (the claim `models`, read-only)."""
    if request.models_host_path:
        return {"name": MODELS_VOLUME, "hostPath": {"path": request.models_host_path, "type": "Directory"}}
    if request.models_pvc:
        return {"name": MODELS_VOLUME, "persistentVolumeClaim": {"claimName": request.models_pvc, "readOnly": True}}
    return None


def secrets_for(request: Request, workload: Workload, source: Path = SOURCE) -> list[tuple[KeyComponent, str, str]]:
    """(the component, the Secret, its key) for each key the leader gets, in KEY_COMPONENTS' order: the order their
    volumes follow the base's."""
    chosen = {
        API_KEY_COMPONENT: (request.api_key_secret, request.api_key_secret_key),
        ADMIN_KEY_COMPONENT: (request.admin_api_key_secret, request.admin_api_key_secret_key),
    }
    out = []
    for name in KEY_COMPONENTS:
        secret, key = chosen[name]
        if secret:
            component = KeyComponent.read(name, workload, source)
            out.append((component, secret, key or component.key))
    return out


def keys_patch(secrets: list[tuple[KeyComponent, str, str]], base: Base) -> list[dict[str, Any]]:
    """The user's Secret names and keys in the volumes the key components append to the leader's (after the base's:
    kustomize applies a kustomization's components, in order, before its own patches)."""
    ops: list[dict[str, Any]] = []
    for i, (component, name, key) in enumerate(secrets):
        volume = f"{base.workload.leader}/spec/volumes/{base.volumes + i}"
        ops += [
            {"op": "test", "path": f"{volume}/name", "value": component.volume},
            {"op": "test", "path": f"{volume}/secret/secretName", "value": component.secret},
            {"op": "replace", "path": f"{volume}/secret/secretName", "value": name},
            {"op": "replace", "path": f"{volume}/secret/items/0/key", "value": key},
        ]
    return ops


def service_patch(plan: Plan) -> list[dict[str, Any]]:
    port = {"name": HTTP_PORT_NAME, "port": plan.image.port, "targetPort": HTTP_PORT_NAME, "protocol": "TCP"}
    return [{"op": "add", "path": "/spec/ports", "value": [port]}]


def variables(plan: Plan, request: Request) -> dict[str, str]:
    """The entrypoint's variables (and NCCL's) merged into the base's ConfigMap."""
    env = {"MODEL_PATH": request.model_path}
    if request.draft_model_path:
        env["DRAFT_MODEL_PATH"] = request.draft_model_path
    # SGLang's --tp-size is the whole group's; the entrypoint runs TP_SIZE / NNODES GPUs on each node.
    env["TP_SIZE"] = str(request.nodes * request.gpus)
    # The port the leader's probes and the Service use; the image's HEALTHCHECK reads PORT too.
    env["PORT"] = str(plan.image.port)
    if request.nccl_socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = request.nccl_socket_ifname
        env["GLOO_SOCKET_IFNAME"] = request.nccl_socket_ifname
    if request.infiniband:
        env["NCCL_IB_DISABLE"] = "0"
    return env


def kustomization(plan: Plan, request: Request, command: Sequence[str], base: Base | None = None) -> str:
    """kustomization.yaml's text: the workload's base and the mode's component, with the plan's values and the
    user's."""
    check(plan, request)
    workload = workload_for(request.nodes)
    base = base or Base.read(workload)
    secrets = secrets_for(request, workload)
    name, tag = image_reference(plan, request.registry)
    service_target = {"version": "v1", "kind": "Service", "name": base.service_name}
    data: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    if request.namespace:
        data["namespace"] = request.namespace
    patches: list[dict[str, Any]] = [
        {
            "target": workload.target(base.name),
            "patch": _ops_text(workload_patch(plan, request, base) + keys_patch(secrets, base)),
        },
        {"target": service_target, "patch": _ops_text(service_patch(plan))},
    ]
    if not request.network_policy:
        patches.append({"patch": _delete_text("networking.k8s.io/v1", NETWORK_POLICY_KIND, base.network_policy)})
    data |= {
        "resources": [workload.directory],
        "components": [f"components/{request.mode}"] + [f"components/{c.name}" for c, _, _ in secrets],
        "images": [{"name": base.image, "newName": name, "newTag": tag}],
        "configMapGenerator": [
            {
                "name": base.configmap,
                "behavior": "merge",
                "literals": [f"{k}={v}" for k, v in variables(plan, request).items()],
            }
        ],
        "patches": patches,
    }
    key_lines = "".join(
        f"# The leader's {component.variable} is a Secret's; create it first: {create_secret(request, secret, key)}\n"
        for component, secret, key in secrets
    )
    what = (
        f"{request.nodes} nodes x {request.gpus} GPUs (TP {request.nodes * request.gpus}), a LeaderWorkerSet"
        if workload is GROUP
        else f"1 node x {request.gpus} GPUs (TP {request.gpus}), a StatefulSet (no LeaderWorkerSet needed)"
    )
    header = (
        f"{MARK} from the plan (SGLang {plan.sglang_version}, profile {plan.profile}):\n"
        f"#   {' '.join(command)}\n"
        f"# {what}, mode {request.mode}, image {name}:{tag}.\n"
        f"{key_lines}"
        "# Apply: kubectl apply -k THIS-DIRECTORY. Change a value by running the command again (base/, single/ and\n"
        "# components/ here are copies of deploy/kubernetes/, replaced each time), or edit the literals below (the\n"
        "# entrypoint's variables, docs/configuration.md) and apply again. docs/kubernetes.md explains each.\n"
    )
    return header + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120)


def create_secret(request: Request, secret: str, key: str) -> str:
    """The command that makes a key's Secret, from a FILE that holds the key on one line."""
    namespace = f" -n {request.namespace}" if request.namespace else ""
    return f"kubectl create secret generic {secret}{namespace} --from-file={key}=FILE"


def _ops_text(ops: list[dict[str, Any]]) -> str:
    return "".join(f"- {json.dumps(op)}\n" for op in ops)


def _delete_text(api_version: str, kind: str, name: str) -> str:
    """A strategic-merge patch that removes one resource of the base."""
    return f"$patch: delete\napiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the patches) as literal blocks, lists indented under their key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:  # type: ignore[override]
        return super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def write(out: Path, text: str, source: Path = SOURCE) -> None:
    """kustomization.yaml in `out`, beside copies of the bases and the components (replaced, never merged)."""
    existing = out / KUSTOMIZATION
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a directory")
    if out.is_dir() and any(out.iterdir()):
        ours = existing.is_file() and existing.read_text(errors="replace").startswith(MARK)
        if not ours:
            raise UsageError(
                f"--out {out}: holds files build.py deploy kubernetes did not write; choose a new or empty directory"
            )
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in COPIED:
            target = out / name
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            shutil.copytree(source / name, target)
        existing.write_text(text)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
