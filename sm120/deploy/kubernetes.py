"""Kubernetes manifests that serve the image: kustomization.yaml around copies of deploy/kubernetes/ (base/: a
LeaderWorkerSet, single/: a StatefulSet; components/ the modes and the keys), adding the plan's values and the
user's as kustomize's own `images`, `configMapGenerator` and JSON patches (docs/kubernetes.md). The names and
positions it patches are read from the bases and the components, not repeated here.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
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
HTTP_PORT_NAME = "http"  # the leader's probes, the Service and the NetworkPolicy name the port (the bases)
MODELS_VOLUME, CACHE_CLAIM = "models", "cache"
# components/<name> that are not modes (components/<mode> are the others), in the order their volumes follow the base's
KEY_COMPONENTS = ("api-key", "admin-api-key")
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

# What the user chooses: build.py deploy kubernetes's options (sm120/deploy/cmd_deploy.py declares them).
Request = argparse.Namespace


@dataclass(frozen=True)
class Workload:
    """Where a workload's pod templates (the leader's first) and claim templates are, as JSON pointers."""

    directory: str  # below deploy/kubernetes
    kind: str
    pods: tuple[str, ...]
    claims: str


_LWS = "/spec/leaderWorkerTemplate"
GROUP = Workload(
    "base",
    "LeaderWorkerSet",
    (f"{_LWS}/leaderTemplate", f"{_LWS}/workerTemplate"),
    f"{_LWS}/volumeClaimTemplates",
)
SINGLE = Workload("single", "StatefulSet", ("/spec/template",), "/spec/volumeClaimTemplates")
WORKLOADS = (GROUP, SINGLE)


def workload_for(nodes: int) -> Workload:
    return SINGLE if nodes == 1 else GROUP


def _at(doc: Any, pointer: str) -> Any:
    for key in pointer.split("/")[1:]:  # a Workload's JSON pointers: object keys only, none escaped
        doc = doc[key]
    return doc


def read_base(workload: Workload) -> dict[str, Any]:
    """The names and positions in a workload's base that the kustomization patches. The bases' shape (one container
    per pod template, the same image and volumes in each, one configMapGenerator) is proven by rendering every
    workload in T0 (tests/unit/test_kubernetes.py); the patches' `test` operations guard each position."""
    where = SOURCE / workload.directory
    kustomization = yaml.safe_load((where / KUSTOMIZATION).read_text())
    docs = [d for name in kustomization["resources"] for d in yaml.safe_load_all((where / name).read_text()) if d]
    kinds = {d["kind"]: d for d in docs if d["kind"] != "Service" or d["spec"].get("clusterIP") != "None"}
    resource = kinds[workload.kind]
    pod = _at(resource, workload.pods[0])["spec"]
    volumes = pod["volumes"]
    group, version = resource["apiVersion"].split("/")
    return {
        "target": {"group": group, "version": version, "kind": workload.kind, "name": resource["metadata"]["name"]},
        "service": kinds["Service"]["metadata"]["name"],  # the leader's (ClusterIP; not the headless one)
        "network_policy": kinds["NetworkPolicy"]["metadata"]["name"],
        "configmap": kustomization["configMapGenerator"][0]["name"],
        "image": pod["containers"][0]["image"],
        # Indices in each pod template's volumes (a component's volume comes after all of them), in the claims.
        "models_volume": [v["name"] for v in volumes].index(MODELS_VOLUME),
        "shm_volume": next(i for i, v in enumerate(volumes) if (v.get("emptyDir") or {}).get("medium") == "Memory"),
        "volumes": len(volumes),
        "cache_claim": [c["metadata"]["name"] for c in _at(resource, workload.claims)].index(CACHE_CLAIM),
    }


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
    def read(cls, name: str = KEY_COMPONENTS[0], workload: Workload = GROUP) -> KeyComponent:
        patches = yaml.safe_load((SOURCE / "components" / name / KUSTOMIZATION).read_text())["patches"]
        ops = [op for p in patches if p["target"]["kind"] == workload.kind for op in yaml.safe_load(p["patch"])]
        added = {op["path"]: op["value"] for op in ops if op["op"] == "add"}
        pod = f"{workload.pods[0]}/spec"
        volume, variable = added[f"{pod}/volumes/-"], added[f"{pod}/containers/0/env/-"]["name"]
        secret = volume["secret"]
        return cls(name, volume["name"], secret["secretName"], secret["items"][0]["key"], variable)


def check(plan: Plan, request: Request) -> None:
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
        if path is not None and ("\n" in path or not (path.startswith("/") or _REPO_ID.fullmatch(path))):
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
    between = ("--nccl-socket-ifname", "--infiniband", "--rdma-resource")
    if request.nodes == 1 and (given := [o for o in between if getattr(request, o[2:].replace("-", "_"))]):
        raise UsageError(
            f"{given[0]}: only with --nodes 2 or more (it is NCCL's network between nodes; one node's GPUs "
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
    chosen = {c.name: (secret, key) for c, secret, key in secrets_for(request, GROUP)}
    api, admin = (chosen.get(name) for name in KEY_COMPONENTS)
    if api is not None and api == admin:
        raise UsageError(
            f"--admin-api-key-secret {admin[0]}: its key {admin[1]!r} is the API key's (--api-key-secret "
            f"{api[0]}): every API-key holder could use the admin routes; give the admin key a key of its own"
        )


def _match(option: str, value: str | None, pattern: re.Pattern[str], allowed: str, longest: int = 253) -> None:
    if value is not None and (not pattern.fullmatch(value) or len(value) > longest):
        raise UsageError(f"{option} {value!r} is not {allowed}")


def _label(option: str, text: str, key: str, value: str | None) -> None:
    """A label or taint key (an optional DNS-1123 prefix and '/', then a name of at most 63 characters) and value."""
    prefix, slash, name = key.rpartition("/")
    good_prefix = not slash or (_DNS_SUBDOMAIN.fullmatch(prefix) is not None and len(prefix) <= 253)
    if not _LABEL_NAME.fullmatch(name) or len(name) > 63 or not good_prefix:
        raise UsageError(
            f"{option} {text!r}: {key!r} is not a label key (an optional DNS prefix and '/', then letters, digits, "
            "'-', '_', '.', at most 63, e.g. nvidia.com/gpu.product)"
        )
    if value is not None and (not _LABEL_VALUE.fullmatch(value) or len(value) > 63):
        raise UsageError(
            f"{option} {text!r}: {value!r} is not a label value (letters, digits, '-', '_', '.', at most 63, "
            "starting and ending with a letter or digit)"
        )


def node_selector(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in request.node_selector:
        key, eq, value = text.partition("=")
        if not eq:
            raise UsageError(f"--node-selector {text!r} is not KEY=VALUE (e.g. nvidia.com/gpu.present=true)")
        _label("--node-selector", text, key, value)
        if key in out:
            raise UsageError(f"--node-selector {text!r}: {key} is given twice (a node has one value for a label)")
        out[key] = value
    return out


def tolerations(request: Request) -> list[dict[str, str]]:
    """--toleration KEY[=VALUE][:EFFECT] as tolerations: with a value Equal, else Exists; no effect: every effect."""
    out: list[dict[str, str]] = []
    for text in request.toleration:
        rest, colon, effect = text.rpartition(":") if ":" in text else (text, "", "")
        if colon and effect not in TAINT_EFFECTS:
            raise UsageError(
                f"--toleration {text!r}: the effect {effect!r} is none of {', '.join(TAINT_EFFECTS)}"
                f"{suggest(effect, TAINT_EFFECTS)}"
            )
        key, eq, value = rest.partition("=")
        _label("--toleration", text, key, value if eq else None)
        toleration = {"key": key, "operator": "Equal" if eq else "Exists"}
        toleration |= ({"value": value} if eq else {}) | ({"effect": effect} if effect else {})
        if toleration in out:
            raise UsageError(f"--toleration {text!r} is given twice")
        out.append(toleration)
    return out


def image_reference(plan: Plan, registry: str | None) -> tuple[str, str]:
    """The plan's first tag, with the registry prefix as `build.py build --registry` pushes it: (name, tag)."""
    name, _, tag = image_ref.tags_for(plan, registry, [])[0].rpartition(":")
    return name, tag


def probes(plan: Plan) -> dict[str, dict[str, Any]]:
    """The leader's probes, from the plan's (build.toml [tracks."X".probe], what the image's HEALTHCHECK asks): a
    startup probe that allows the start period, then a readiness probe that gives up after `retries` failures. No
    liveness probe: a busy server answering late must not be killed."""
    p = plan.probe
    get = {
        "httpGet": {"path": p.route, "port": HTTP_PORT_NAME},
        "periodSeconds": p.interval_s,
        "timeoutSeconds": p.timeout_s,
    }
    return {
        "startupProbe": {**get, "failureThreshold": math.ceil(p.start_period_s / p.interval_s)},
        "readinessProbe": {**get, "failureThreshold": p.retries},
    }


def workload_patch(
    plan: Plan, request: Request, workload: Workload, base: dict[str, Any], secrets: list[tuple[KeyComponent, str, str]]
) -> str:
    """The workload's JSON patch operations, one a line; `test` guards every position taken from the base."""
    ops: list[tuple[str, str, Any]] = []
    if workload is GROUP:
        ops.append(("replace", f"{_LWS}/size", request.nodes))
    claim = f"{workload.claims}/{base['cache_claim']}"
    if request.cache_size:
        ops += [
            ("test", f"{claim}/metadata/name", CACHE_CLAIM),
            ("replace", f"{claim}/spec/resources/requests/storage", request.cache_size),
        ]
    # The user's, or one busy scheduler process per GPU plus the tokenizer and the detokenizer, and 8Gi of host
    # memory per GPU (estimates, not measured: T4). The bases hold the values for 8 GPUs.
    cpu, memory = request.cpu_request or str(request.gpus + 2), request.memory_request or f"{8 * request.gpus}Gi"
    if request.models_host_path:
        models = {"name": MODELS_VOLUME, "hostPath": {"path": request.models_host_path, "type": "Directory"}}
    elif request.models_pvc:
        models = {"name": MODELS_VOLUME, "persistentVolumeClaim": {"claimName": request.models_pvc, "readOnly": True}}
    else:
        models = None  # the base's: the claim `models`, read-only
    selector, tolerate = node_selector(request), tolerations(request)
    for template in workload.pods:
        pod = f"{template}/spec"
        container = f"{pod}/containers/0"
        volume, shm = f"{pod}/volumes/{base['models_volume']}", f"{pod}/volumes/{base['shm_volume']}"
        ops += [
            ("test", f"{container}/image", base["image"]),
            ("replace", f"{container}/resources/limits/nvidia.com~1gpu", request.gpus),
            # `replace`, not `add`: the base holds both requests (a JSON patch's replace fails where there is none).
            ("replace", f"{container}/resources/requests/cpu", cpu),
            ("replace", f"{container}/resources/requests/memory", memory),
            # The image's user by number: runAsNonRoot cannot check a user name; the cache claim's files become the
            # pod's group's, so the image's user can write them.
            ("add", f"{pod}/securityContext/runAsUser", plan.image.uid),
            ("add", f"{pod}/securityContext/fsGroup", plan.image.uid),
            ("add", f"{container}/volumeMounts/-", {"name": CACHE_CLAIM, "mountPath": plan.image.cache_dir}),
        ]
        if request.shm_size:
            ops += [
                ("test", f"{shm}/emptyDir/medium", "Memory"),
                ("replace", f"{shm}/emptyDir/sizeLimit", request.shm_size),
            ]
        if models is not None:
            ops += [("test", f"{volume}/name", MODELS_VOLUME), ("replace", volume, models)]
        ops += [("add", f"{pod}/{name}", v) for name, v in (("nodeSelector", selector), ("tolerations", tolerate)) if v]
        if template == workload.pods[0]:
            port = {"name": HTTP_PORT_NAME, "containerPort": plan.image.port, "protocol": "TCP"}
            ops.append(("add", f"{container}/ports", [port]))
            ops += [("add", f"{container}/{name}", value) for name, value in probes(plan).items()]
        if request.infiniband:
            ops.append(("add", f"{container}/securityContext/capabilities/add", ["IPC_LOCK"]))
        if request.rdma_resource:
            ops.append(("add", f"{container}/resources/limits/{request.rdma_resource.replace('/', '~1')}", 1))
    # The user's Secret names and keys in the volumes the key components append to the leader's (after the base's:
    # kustomize applies a kustomization's components, in order, before its own patches).
    for i, (component, name, key) in enumerate(secrets):
        volume = f"{workload.pods[0]}/spec/volumes/{base['volumes'] + i}"
        ops += [
            ("test", f"{volume}/name", component.volume),
            ("test", f"{volume}/secret/secretName", component.secret),
            ("replace", f"{volume}/secret/secretName", name),
            ("replace", f"{volume}/secret/items/0/key", key),
        ]
    return _ops_text(ops)


def _ops_text(ops: list[tuple[str, str, Any]]) -> str:
    return "".join(f"- {json.dumps({'op': op, 'path': path, 'value': value})}\n" for op, path, value in ops)


def secrets_for(request: Request, workload: Workload) -> list[tuple[KeyComponent, str, str]]:
    """(the component, the Secret, its key) for each key the leader gets, in KEY_COMPONENTS' order: the order their
    volumes follow the base's. Checks the options first."""
    out = []
    for name in KEY_COMPONENTS:
        option = f"--{name}-secret"  # --api-key-secret, --admin-api-key-secret
        secret, key = (getattr(request, option[2:].replace("-", "_") + suffix) for suffix in ("", "_key"))
        _match(option, secret, _DNS_SUBDOMAIN, SECRET_NAME)
        _match(f"{option}-key", key, _SECRET_KEY, SECRET_KEY)
        if key is not None and not secret:
            raise UsageError(f"{option}-key {key!r}: only with {option} (the Secret holding it)")
        if secret:
            component = KeyComponent.read(name, workload)
            out.append((component, secret, key or component.key))
    return out


def variables(plan: Plan, request: Request) -> dict[str, str]:
    env = {"MODEL_PATH": request.model_path}
    if request.draft_model_path:
        env["DRAFT_MODEL_PATH"] = request.draft_model_path
    # SGLang's --tp-size is the whole group's; the entrypoint runs TP_SIZE / NNODES GPUs on each node. PORT: the one
    # the leader's probes and the Service use; the image's HEALTHCHECK reads it too.
    env |= {"TP_SIZE": str(request.nodes * request.gpus), "PORT": str(plan.image.port)}
    if request.nccl_socket_ifname:
        env |= {"NCCL_SOCKET_IFNAME": request.nccl_socket_ifname, "GLOO_SOCKET_IFNAME": request.nccl_socket_ifname}
    if request.infiniband:
        env["NCCL_IB_DISABLE"] = "0"
    return env


def kustomization(plan: Plan, request: Request, command: list[str]) -> str:
    """kustomization.yaml's text: the workload's base and the mode's component, the plan's values and the user's."""
    check(plan, request)
    workload = workload_for(request.nodes)
    base = read_base(workload)
    secrets = secrets_for(request, workload)
    name, tag = image_reference(plan, request.registry)
    literals = [f"{k}={v}" for k, v in variables(plan, request).items()]
    service_port = {"name": HTTP_PORT_NAME, "port": plan.image.port, "targetPort": HTTP_PORT_NAME, "protocol": "TCP"}
    patches: list[dict[str, Any]] = [
        {"target": base["target"], "patch": workload_patch(plan, request, workload, base, secrets)},
        {
            "target": {"version": "v1", "kind": "Service", "name": base["service"]},
            "patch": _ops_text([("add", "/spec/ports", [service_port])]),
        },
    ]
    if not request.network_policy:  # a strategic-merge patch that removes the base's NetworkPolicy
        delete: dict[str, Any] = {"$patch": "delete", "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy"}
        delete["metadata"] = {"name": base["network_policy"]}
        patches.append({"patch": yaml.safe_dump(delete, sort_keys=False)})
    data = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        **({"namespace": request.namespace} if request.namespace else {}),
        "resources": [workload.directory],
        "components": [f"components/{request.mode}"] + [f"components/{c.name}" for c, _, _ in secrets],
        "images": [{"name": base["image"], "newName": name, "newTag": tag}],
        "configMapGenerator": [{"name": base["configmap"], "behavior": "merge", "literals": literals}],
        "patches": patches,
    }
    key_lines = "".join(
        f"# The leader's {component.variable} is a Secret's; create it first: {create_secret(request, secret, key)}\n"
        for component, secret, key in secrets
    )
    header = (
        f"{MARK} from the plan (SGLang {plan.sglang_version}, profile {plan.profile}):\n"
        f"#   {' '.join(command)}\n"
        f"# {summary(request, name, tag, why=True)}.\n"
        f"{key_lines}"
        "# Apply: kubectl apply -k THIS-DIRECTORY. Change a value by running the command again (base/, single/ and\n"
        "# components/ here are copies of deploy/kubernetes/, replaced each time), or edit the literals below (the\n"
        "# entrypoint's variables, docs/configuration.md) and apply again. docs/kubernetes.md explains each.\n"
    )
    return header + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120)


def summary(request: Request, name: str, tag: str, *, why: bool = False) -> str:
    """'2 nodes x 8 GPUs (TP 16), a LeaderWorkerSet, mode M, image NAME:TAG' (`why`: why a StatefulSet)."""
    kind = workload_for(request.nodes).kind + (" (no LeaderWorkerSet needed)" if why and request.nodes == 1 else "")
    nodes = f"{request.nodes} node{'s' if request.nodes > 1 else ''} x {request.gpus} GPUs"
    return f"{nodes} (TP {request.nodes * request.gpus}), a {kind}, mode {request.mode}, image {name}:{tag}"


def create_secret(request: Request, secret: str, key: str) -> str:
    namespace = f" -n {request.namespace}" if request.namespace else ""
    return f"kubectl create secret generic {secret}{namespace} --from-file={key}=FILE"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the patches) as literal blocks, lists indented under their key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:  # type: ignore[override]
        return super().increase_indent(flow, False)


_Dumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None),
)


def write(out: Path, text: str) -> None:
    """kustomization.yaml in `out`, beside copies of the bases and the components (replaced, never merged)."""
    existing = out / KUSTOMIZATION
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a directory")
    ours = existing.is_file() and existing.read_text(errors="replace").startswith(MARK)
    if out.is_dir() and any(out.iterdir()) and not ours:
        raise UsageError(
            f"--out {out}: holds files build.py deploy kubernetes did not write; choose a new or empty directory"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in (*(w.directory for w in WORKLOADS), "components"):
            target = out / name
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            shutil.copytree(SOURCE / name, target)
        existing.write_text(text)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
