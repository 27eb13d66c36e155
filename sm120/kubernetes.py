"""Kubernetes manifests for serving on several machines: a kustomization around deploy/kubernetes/.

deploy/kubernetes/base is a LeaderWorkerSet (one group of NODES pods, the leader serving HTTP), the leader's
Service and the entrypoint's variables; components/<mode> sets the image's argument, components/api-key mounts
an API key's Secret on the leader. `kustomization` adds what comes from the plan (the image and tag, the port, the
JIT cache directory, the image's uid) and what the user chooses (nodes, GPUs per node, mode, models, NCCL, the
key's Secret), as kustomize's own `images`, `configMapGenerator` and JSON patches; `write` puts it beside a copy
of the base and the components, so the directory is complete on its own (`kubectl apply -k DIR`, or a GitOps
repository). The names it patches are read from the base and the components, not repeated here.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import CheckFailed, UsageError, suggest
from .plan_types import Plan

SOURCE = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
# What `write` copies next to the kustomization (the schema under deploy/kubernetes is for the tests).
COPIED = ("base", "components")
KUSTOMIZATION = "kustomization.yaml"
MARK = "# Written by `build.py deploy kubernetes`"
GPU_RESOURCE = "nvidia.com/gpu"
TEMPLATES = ("leaderTemplate", "workerTemplate")
LEADER = "leaderTemplate"
LWS_GROUP, LWS_VERSION, LWS_KIND = "leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"
HTTP_PORT_NAME = "http"  # the leader's probes and the Service name the port (deploy/kubernetes/base)
MODELS_VOLUME = "models"
CACHE_CLAIM = "cache"
API_KEY_COMPONENT = "api-key"  # components/api-key: not a mode (components/<mode> are the others)

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # DNS-1123
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_IFNAME = re.compile(r"[A-Za-z0-9_.:-]+")  # one Linux interface name (gloo takes no NCCL-style prefix list)
_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY = re.compile(r"[1-9][0-9]*(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_REGISTRY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*")
_SECRET_KEY = re.compile(r"(?!\.$|\.\.)[-._A-Za-z0-9]+")  # a Secret's key (IsConfigMapKey): not '.', not '..*'


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


@dataclass(frozen=True)
class Base:
    """The names and positions in deploy/kubernetes/base that the kustomization patches."""

    lws_name: str
    service_name: str
    configmap: str
    image: str
    container: int  # index of the SGLang container in each template
    models_volume: int  # index of the models volume in each template
    volumes: int  # how many volumes each template has (a component's volume comes after them)
    cache_claim: int  # index of the cache claim in volumeClaimTemplates

    @classmethod
    def read(cls, source: Path = SOURCE) -> Base:
        docs = _load_resources(source / "base")
        lws = _one(docs, "LeaderWorkerSet", source)
        service = _one(docs, "Service", source)
        kustomization = yaml.safe_load((source / "base" / KUSTOMIZATION).read_text())
        generators = kustomization.get("configMapGenerator") or []
        if len(generators) != 1:
            raise CheckFailed(f"{source}/base: expected one configMapGenerator (the entrypoint's variables)")
        template = lws["spec"]["leaderWorkerTemplate"]
        containers = {t: template[t]["spec"]["containers"] for t in TEMPLATES}
        images = {c["image"] for cs in containers.values() for c in cs}
        if any(len(cs) != 1 for cs in containers.values()) or len(images) != 1:
            raise CheckFailed(f"{source}/base: each pod template must hold one container, the same image in both")
        volumes = {t: [v["name"] for v in template[t]["spec"]["volumes"]] for t in TEMPLATES}
        if len({tuple(v) for v in volumes.values()}) != 1 or MODELS_VOLUME not in volumes[LEADER]:
            raise CheckFailed(f"{source}/base: both pod templates need the same volumes, {MODELS_VOLUME!r} among them")
        claims = [c["metadata"]["name"] for c in template.get("volumeClaimTemplates") or []]
        if CACHE_CLAIM not in claims:
            raise CheckFailed(f"{source}/base: volumeClaimTemplates has no {CACHE_CLAIM!r} (the JIT cache)")
        return cls(
            lws_name=lws["metadata"]["name"],
            service_name=service["metadata"]["name"],
            configmap=generators[0]["name"],
            image=images.pop(),
            container=0,
            models_volume=volumes[LEADER].index(MODELS_VOLUME),
            volumes=len(volumes[LEADER]),
            cache_claim=claims.index(CACHE_CLAIM),
        )


def _load_resources(directory: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / KUSTOMIZATION).read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization.get("resources") or []:
        docs.extend(d for d in yaml.safe_load_all((directory / name).read_text()) if d)
    return docs


def _one(docs: list[dict[str, Any]], kind: str, source: Path) -> dict[str, Any]:
    found = [d for d in docs if d.get("kind") == kind]
    if len(found) != 1:
        raise CheckFailed(f"{source}/base: expected one {kind}, found {len(found)}")
    return found[0]


@dataclass(frozen=True)
class ApiKeyComponent:
    """The Secret volume components/api-key appends to the leader's volumes, as written there: the name of the
    volume, and the Secret's name and key that --api-key-secret and --api-key-secret-key replace."""

    volume: str
    secret: str
    key: str

    @classmethod
    def read(cls, source: Path = SOURCE) -> ApiKeyComponent:
        path = source / "components" / API_KEY_COMPONENT / KUSTOMIZATION
        ops = [op for p in yaml.safe_load(path.read_text()).get("patches") or [] for op in yaml.safe_load(p["patch"])]
        where = f"/spec/leaderWorkerTemplate/{LEADER}/spec/volumes/-"
        found = [op["value"] for op in ops if op.get("op") == "add" and op.get("path") == where]
        secrets = [v for v in found if len((v.get("secret") or {}).get("items") or []) == 1]
        if len(found) != 1 or len(secrets) != 1:
            raise CheckFailed(f"{path}: expected one volume added to the leader, a Secret with one item")
        volume = secrets[0]
        return cls(volume["name"], volume["secret"]["secretName"], volume["secret"]["items"][0]["key"])


def modes_with_components(source: Path = SOURCE) -> set[str]:
    found = {p.parent.name for p in (source / "components").glob(f"*/{KUSTOMIZATION}")}
    return found - {API_KEY_COMPONENT}


def check(plan: Plan, request: Request, source: Path = SOURCE) -> None:
    """Every choice that would make a manifest the cluster refuses, or a pod that cannot start: one line each."""
    modes = plan.entrypoint.modes
    if request.mode not in modes:
        raise UsageError(
            f"--mode {request.mode!r} is not a mode of SGLang {plan.sglang_version}'s image "
            f"(modes: {', '.join(sorted(modes))}{suggest(request.mode, modes)})"
        )
    if request.mode not in modes_with_components(source):
        raise CheckFailed(
            f"{source}/components/{request.mode} is missing: every mode of build.toml [modes] needs its component"
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
    if request.models_pvc and request.models_host_path:
        raise UsageError("--models-pvc and --models-host-path: choose one (where the weights are)")
    if request.models_host_path is not None and not request.models_host_path.startswith("/"):
        raise UsageError(f"--models-host-path {request.models_host_path!r} is not an absolute path on the nodes")
    _match("--nccl-socket-ifname", request.nccl_socket_ifname, _IFNAME, "one network interface, e.g. eth0 or net1", 15)
    _match("--rdma-resource", request.rdma_resource, _RESOURCE, "a resource name such as rdma/ib (domain/name)")
    if request.rdma_resource and not request.infiniband:
        raise UsageError(f"--rdma-resource {request.rdma_resource}: only with --infiniband (NCCL uses sockets without)")
    _match("--cache-size", request.cache_size, _QUANTITY, "a storage size such as 50Gi or 200G")
    _match("--registry", request.registry, _REGISTRY, "a registry prefix such as ghcr.io/OWNER")
    _match(
        "--api-key-secret",
        request.api_key_secret,
        _DNS_SUBDOMAIN,
        "a Secret name (DNS-1123: lower-case letters, digits, '-', and '.' between them)",
    )
    _match(
        "--api-key-secret-key",
        request.api_key_secret_key,
        _SECRET_KEY,
        "a key of a Secret: letters, digits, '-', '_', '.' (not '.', not starting with '..')",
    )
    if request.api_key_secret_key is not None and not request.api_key_secret:
        raise UsageError(
            f"--api-key-secret-key {request.api_key_secret_key!r}: only with --api-key-secret (the Secret holding it)"
        )


def _match(option: str, value: str | None, pattern: re.Pattern[str], allowed: str, longest: int = 253) -> None:
    if value is not None and (not pattern.fullmatch(value) or len(value) > longest):
        raise UsageError(f"{option} {value!r} is not {allowed}")


def image_reference(plan: Plan, registry: str | None) -> tuple[str, str]:
    """The plan's first tag, with the registry prefix as `build.py build --registry` pushes it (commands.build
    tags_for; tests/unit/test_kubernetes.py keeps the two equal): (name, tag)."""
    prefix = f"{registry.rstrip('/')}/" if registry else ""
    name, _, tag = (prefix + plan.tags[0]).rpartition(":")
    if not name or "/" in tag:
        raise CheckFailed(f"the plan's tag {plan.tags[0]!r} has no :TAG part")
    return name, tag


def _esc(key: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def lws_patch(plan: Plan, request: Request, base: Base) -> list[dict[str, Any]]:
    """JSON patch operations on the LeaderWorkerSet; `test` guards every position taken from the base."""
    group = "/spec/leaderWorkerTemplate"
    ops: list[dict[str, Any]] = [{"op": "replace", "path": f"{group}/size", "value": request.nodes}]
    claim = f"{group}/volumeClaimTemplates/{base.cache_claim}"
    if request.cache_size:
        ops += [
            {"op": "test", "path": f"{claim}/metadata/name", "value": CACHE_CLAIM},
            {"op": "replace", "path": f"{claim}/spec/resources/requests/storage", "value": request.cache_size},
        ]
    for template in TEMPLATES:
        pod = f"{group}/{template}/spec"
        container = f"{pod}/containers/{base.container}"
        volume = f"{pod}/volumes/{base.models_volume}"
        ops += [
            {"op": "test", "path": f"{container}/image", "value": base.image},
            {"op": "replace", "path": f"{container}/resources/limits/{_esc(GPU_RESOURCE)}", "value": request.gpus},
            # The image's user by number: runAsNonRoot cannot check a user name (the image's USER is one).
            {"op": "add", "path": f"{pod}/securityContext/runAsUser", "value": plan.image.uid},
            # The cache claim's files become the pod's group's, so the image's user can write them.
            {"op": "add", "path": f"{pod}/securityContext/fsGroup", "value": plan.image.uid},
            {
                "op": "add",
                "path": f"{container}/volumeMounts/-",
                "value": {"name": CACHE_CLAIM, "mountPath": plan.image.cache_dir},
            },
        ]
        models = _models_volume(request)
        if models is not None:
            ops += [
                {"op": "test", "path": f"{volume}/name", "value": MODELS_VOLUME},
                {"op": "replace", "path": volume, "value": models},
            ]
        if template == LEADER:
            ops.append(
                {
                    "op": "add",
                    "path": f"{container}/ports",
                    "value": [{"name": HTTP_PORT_NAME, "containerPort": plan.image.port, "protocol": "TCP"}],
                }
            )
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


def api_key_secret(request: Request, component: ApiKeyComponent) -> tuple[str, str] | None:
    """The Secret that holds the leader's API key and its key in it, or None: no key."""
    if not request.api_key_secret:
        return None
    return request.api_key_secret, request.api_key_secret_key or component.key


def api_key_patch(secret: tuple[str, str] | None, base: Base, component: ApiKeyComponent) -> list[dict[str, Any]]:
    """The user's Secret name and key in the volume components/api-key appends to the leader's (after the base's:
    kustomize applies a kustomization's components before its own patches)."""
    if secret is None:
        return []
    name, key = secret
    volume = f"/spec/leaderWorkerTemplate/{LEADER}/spec/volumes/{base.volumes}"
    return [
        {"op": "test", "path": f"{volume}/name", "value": component.volume},
        {"op": "test", "path": f"{volume}/secret/secretName", "value": component.secret},
        {"op": "replace", "path": f"{volume}/secret/secretName", "value": name},
        {"op": "replace", "path": f"{volume}/secret/items/0/key", "value": key},
    ]


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
    """kustomization.yaml's text: the base and the mode's component, with the plan's values and the user's."""
    base = base or Base.read()
    check(plan, request)
    component = ApiKeyComponent.read()
    secret = api_key_secret(request, component)
    name, tag = image_reference(plan, request.registry)
    lws_target = {"group": LWS_GROUP, "version": LWS_VERSION, "kind": LWS_KIND, "name": base.lws_name}
    service_target = {"version": "v1", "kind": "Service", "name": base.service_name}
    data: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    if request.namespace:
        data["namespace"] = request.namespace
    data |= {
        "resources": ["base"],
        "components": [f"components/{request.mode}"] + ([f"components/{API_KEY_COMPONENT}"] if secret else []),
        "images": [{"name": base.image, "newName": name, "newTag": tag}],
        "configMapGenerator": [
            {
                "name": base.configmap,
                "behavior": "merge",
                "literals": [f"{k}={v}" for k, v in variables(plan, request).items()],
            }
        ],
        "patches": [
            {
                "target": lws_target,
                "patch": _ops_text(lws_patch(plan, request, base) + api_key_patch(secret, base, component)),
            },
            {"target": service_target, "patch": _ops_text(service_patch(plan))},
        ],
    }
    key_line = (
        f"# The leader's API key is a Secret's; create it first: {create_secret(request, secret)}\n" if secret else ""
    )
    header = (
        f"{MARK} from the plan (SGLang {plan.sglang_version}, profile {plan.profile}):\n"
        f"#   {' '.join(command)}\n"
        f"# {request.nodes} nodes x {request.gpus} GPUs (TP {request.nodes * request.gpus}), mode {request.mode}, "
        f"image {name}:{tag}.\n"
        f"{key_line}"
        "# Apply: kubectl apply -k THIS-DIRECTORY. Change a value by running the command again (base/ and\n"
        "# components/ here are copies of deploy/kubernetes/, replaced each time), or edit the literals below (the\n"
        "# entrypoint's variables, README: Running the image) and apply again. docs/kubernetes.md explains each.\n"
    )
    return header + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120)


def create_secret(request: Request, secret: tuple[str, str]) -> str:
    """The command that makes the Secret --api-key-secret names, from a FILE that holds the key on one line."""
    name, key = secret
    namespace = f" -n {request.namespace}" if request.namespace else ""
    return f"kubectl create secret generic {name}{namespace} --from-file={key}=FILE"


def _ops_text(ops: list[dict[str, Any]]) -> str:
    return "".join(f"- {json.dumps(op)}\n" for op in ops)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the patches) as literal blocks, lists indented under their key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:  # type: ignore[override]
        return super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def write(out: Path, text: str, source: Path = SOURCE) -> None:
    """kustomization.yaml in `out`, beside copies of the base and the components (replaced, never merged)."""
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
