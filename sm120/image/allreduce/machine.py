"""What the machine offers (`TorchMachine`: torch's and the installed SGLang's answers), asked before any rank starts,
and the request checked against it (`plan`): exit 2 for a mistake in the request, 1 for what the machine cannot do."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from . import errors


@dataclass(frozen=True)
class Plan:  # its fields' names are the JSON's (--json)
    sglang: str
    world_size: int
    gpus: list[str]  # of the ranks, in rank order
    capability: tuple[int, int]  # the GPUs' own
    answered_capability: int  # what the communicator is told (the GPUs' major unless --capability)
    builtin_limit: int  # SGLang's limit for (answered_capability, world_size), bytes


def plan(options: argparse.Namespace, machine: TorchMachine) -> Plan:
    """`machine`: TorchMachine, or a stand-in with its methods (the tests')."""
    if not (names := machine.gpus()):
        raise errors.machine(
            "no GPU is visible here (torch sees none)",
            "in Docker: docker run --gpus all --ipc=host IMAGE allreduce-sweep; on the host nvidia-smi must list them",
        )
    if len(names) == 1:
        raise errors.machine(
            f"one GPU is visible ({names[0]}): an all-reduce needs two or more",
            "give it more GPUs (docker run --gpus all, or --gpus '\"device=0,1\"'; CUDA_VISIBLE_DEVICES)",
        )
    if options.tp is not None and options.tp > len(names):
        raise errors.usage(f"--tp {options.tp}: only {len(names)} GPUs are visible; use --tp {len(names)} or less")
    capability = machine.capability(0)
    answered = options.capability if options.capability is not None else capability[0]
    table = machine.limits()
    if (sizes_for := table.get(answered)) is None:
        known = ", ".join(str(c) for c in sorted(table)) or "none"
        raise (errors.usage if options.capability is not None else errors.machine)(
            f"SGLang {machine.sglang_version()}'s symmetric-memory all-reduce has no size table for capability "
            f"{answered} (it has {known}): the communicator would be off",
            "the image's torch-symm-mem-sm120 patch adds capability 12",
        )
    supported = sorted(sizes_for)
    listed = ", ".join(map(str, supported))
    if options.tp is not None and options.tp not in sizes_for:
        raise errors.usage(
            f"--tp {options.tp}: SGLang's communicator supports world sizes {listed} on capability {answered}"
        )
    if not (fitting := [w for w in supported if w <= len(names)]):
        raise errors.machine(
            f"{len(names)} GPUs are visible; SGLang's communicator needs {supported[0]} or more (world sizes {listed})"
        )
    world_size = options.tp or fitting[-1]
    for a, b in itertools.permutations(range(world_size), 2):
        if not machine.can_access_peer(a, b):
            raise errors.machine(
                f"GPU {a} cannot access GPU {b}'s memory (no peer-to-peer): two-shot all-reduce cannot run here",
                "SGLang's patched communicator turns itself off on such GPUs (RTX 5090; P2P blocked by IOMMU/ACS)",
                "and every all-reduce goes to NCCL: there is no limit to set",
            )
    if others := {machine.capability(i) for i in range(1, world_size)} - {capability}:
        raise errors.machine(f"the GPUs differ in compute capability ({capability} and {sorted(others)[0]})")
    return Plan(machine.sglang_version(), world_size, names[:world_size], capability, answered, sizes_for[world_size])


class TorchMachine:
    """The answers of torch and of the installed SGLang (imported here: their absence is one line, exit 1)."""

    def __init__(self) -> None:
        try:
            import torch
        except ImportError as exc:
            raise errors.machine(f"torch cannot be imported here ({exc}): run the sweep in the image") from None
        self._torch = torch
        try:
            import sglang
            from sglang.srt.distributed.device_communicators import all_reduce_utils, torch_symm_mem
        except Exception as exc:  # an import error, or what an SGLang module raises while importing
            raise errors.machine(
                f"SGLang's symmetric-memory communicator cannot be imported ({type(exc).__name__}: {exc})"
            ) from None
        self._version = getattr(sglang, "__version__", "?")
        self._table = all_reduce_utils.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES
        if not hasattr(torch_symm_mem, "TorchSymmMemCommunicator"):
            raise errors.machine(f"SGLang {self._version} has no TorchSymmMemCommunicator")

    def gpus(self) -> list[str]:
        cuda = self._torch.cuda
        return [cuda.get_device_name(i) for i in range(cuda.device_count() if cuda.is_available() else 0)]

    def capability(self, index: int) -> tuple[int, int]:
        return tuple(self._torch.cuda.get_device_capability(index))  # type: ignore[return-value]

    def can_access_peer(self, a: int, b: int) -> bool:
        return bool(self._torch.cuda.can_device_access_peer(a, b))

    def limits(self) -> Mapping[int, Mapping[int, int]]:  # SGLang's size table: capability -> world size -> bytes
        return self._table

    def sglang_version(self) -> str:
        return self._version
