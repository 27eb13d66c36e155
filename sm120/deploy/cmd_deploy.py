"""`build.py deploy kubernetes`: manifests that serve the image on Kubernetes: a LeaderWorkerSet over several
machines, or a StatefulSet on one (--nodes 1: no LeaderWorkerSet controller needed). Writes DIR/kustomization.yaml
(the plan's image, port, probes, cache directory and uid; your nodes, GPUs, mode, models, requests and placement)
beside copies of deploy/kubernetes/base, single and components; then `kubectl apply -k DIR`. docs/kubernetes.md.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from sm120.arguments import add_config_args, positive_int
from sm120.deploy import kubernetes
from sm120.plan import resolve


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("deploy", help="write deployment manifests (Kubernetes)", description=__doc__)
    targets = p.add_subparsers(dest="target", metavar="TARGET", required=True)
    k = targets.add_parser(
        "kubernetes",
        help="a LeaderWorkerSet over several machines, a StatefulSet on one (kustomize)",
        description=__doc__,
    )
    add_config_args(k)
    k.add_argument("--nodes", type=positive_int, required=True, metavar="N", help="machines (pods); 1: a StatefulSet")
    k.add_argument("--gpus", type=positive_int, required=True, metavar="G", help="GPUs per machine (TP = N x G)")
    k.add_argument("--mode", required=True, metavar="MODE", help="the image's mode, one of build.toml [modes]")
    k.add_argument("--model-path", required=True, metavar="PATH", help="MODEL_PATH, e.g. /models/Kimi-K2.5-NVFP4")
    k.add_argument("--draft-model-path", metavar="PATH", help="DRAFT_MODEL_PATH (the modes with a drafter)")
    k.add_argument("--registry", metavar="PREFIX", help="prefix the plan's tag, e.g. ghcr.io/OWNER")
    k.add_argument("--namespace", metavar="NS", help="namespace of every resource (default: kubectl's current)")
    models = k.add_mutually_exclusive_group()
    models.add_argument("--models-pvc", metavar="CLAIM", help="read-only claim with the weights (default: models)")
    models.add_argument("--models-host-path", metavar="DIR", help="the weights in this directory of every node")
    k.add_argument("--nccl-socket-ifname", metavar="IFACE", help="NCCL's and gloo's interface (default: eth0)")
    k.add_argument("--infiniband", action="store_true", help="NCCL over InfiniBand/RoCE (default: TCP sockets)")
    k.add_argument("--rdma-resource", metavar="NAME", help="with --infiniband: the RDMA device resource, e.g. rdma/ib")
    k.add_argument("--cache-size", metavar="SIZE", help="each pod's JIT cache claim (default: 50Gi)")
    k.add_argument("--api-key-secret", metavar="NAME", help="the leader's API key from this Secret (default: no key)")
    k.add_argument("--api-key-secret-key", metavar="KEY", help="the Secret's key that holds it (default: api-key)")
    k.add_argument("--admin-api-key-secret", metavar="NAME", help="the leader's admin API key from this Secret")
    k.add_argument(
        "--admin-api-key-secret-key", metavar="KEY", help="the Secret's key that holds it (default: admin-api-key)"
    )
    k.add_argument("--cpu-request", metavar="CPU", help="CPU requested per pod (default: GPUs + 2)")
    k.add_argument("--memory-request", metavar="SIZE", help="memory requested per pod (default: 8Gi per GPU)")
    k.add_argument("--shm-size", metavar="SIZE", help="the /dev/shm volume's sizeLimit (default: 16Gi)")
    k.add_argument(
        "--node-selector", action="append", default=[], metavar="KEY=VALUE", help="a node label the pods need (repeat)"
    )
    k.add_argument(
        "--toleration", action="append", default=[], metavar="KEY[=VALUE][:EFFECT]", help="a taint the pods tolerate"
    )
    k.add_argument(
        "--no-network-policy", dest="network_policy", action="store_false", help="leave the NetworkPolicy out"
    )
    # Last: command_line writes the options in this order, --out at the end.
    k.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory to write (new, or one of ours)")
    k.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plan = resolve.load_plan(args.config, profile=args.profile, sglang=args.sglang)
    kubernetes.write(args.out, kubernetes.kustomization(plan, args, command_line(args)))
    print(f"wrote {args.out}: {kubernetes.summary(args, *kubernetes.image_reference(plan, args.registry))}")
    for component, secret, key in kubernetes.secrets_for(args, kubernetes.workload_for(args.nodes)):
        print(
            f"{component.variable}'s Secret first: {kubernetes.create_secret(args, secret, key)} "
            "(FILE: the key on one line)"
        )
    print(f"apply: kubectl apply -k {shlex.quote(str(args.out))}")
    return 0


def command_line(args: argparse.Namespace) -> list[str]:
    """The command that writes this kustomization again (in its header), quoted for a shell: the options in the
    order `register` declares them, the ones left at their default left out."""
    words = ["python3", "build.py", "deploy", "kubernetes"]
    for dest, value in vars(args).items():
        if dest == "network_policy":  # on by default: written only when turned off
            dest, value = "no_network_policy", not value
        if dest in ("command", "target", "func") or value in (None, False):
            continue
        flag = "--" + dest.replace("_", "-")
        for item in value if isinstance(value, list) else [value]:  # repeated options, each as given
            words += [flag] if item is True else [flag, shlex.quote(str(item))]
    return words
