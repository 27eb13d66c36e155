"""What the machine offers, asked before any rank starts, and the request checked against it.

`Machine` is what torch (and the installed SGLang) answer; `TorchMachine` asks them. `plan()` turns the request
and the answers into the world size and the communicator's capability, or one line: exit 2 for a mistake in the
request (a TP larger than the GPUs, a TP the communicator has no limit for), 1 for what the machine cannot do
(no GPU, one GPU, no P2P between two of the GPUs, no SGLang communicator to measure).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from . import errors
from .cli import Options


class Machine(Protocol):
    def gpus(self) -> list[str]: ...  # the visible GPUs' names, in CUDA's order
    def capability(self, index: int) -> tuple[int, int]: ...
    def can_access_peer(self, a: int, b: int) -> bool: ...
    def limits(self) -> Mapping[int, Mapping[int, int]]: ...  # SGLang's size table: capability -> ws -> bytes
    def sglang_version(self) -> str: ...


@dataclass(frozen=True)
class Plan:
    world_size: int
    gpus: list[str]  # of the ranks, in rank order
    capability: tuple[int, int]  # the GPUs' own
    answered: int  # what the communicator is told (the GPUs' major unless --capability)
    builtin: int  # SGLang's limit for (answered, world_size), bytes
    sglang: str


def plan(options: Options, machine: Machine) -> Plan:
    names = machine.gpus()
    if not names:
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
    sizes_for = table.get(answered)
    if sizes_for is None:
        known = ", ".join(str(c) for c in sorted(table)) or "none"
        raise (errors.usage if options.capability is not None else errors.machine)(
            f"SGLang {machine.sglang_version()}'s symmetric-memory all-reduce has no size table for capability "
            f"{answered} (it has {known}): the communicator would be off",
            "the image's torch-symm-mem-sm120 patch adds capability 12",
        )
    supported = sorted(sizes_for)
    if options.tp is not None:
        world_size = options.tp
        if world_size not in sizes_for:
            raise errors.usage(
                f"--tp {world_size}: SGLang's communicator supports world sizes "
                f"{', '.join(map(str, supported))} on capability {answered}"
            )
    else:
        fitting = [w for w in supported if w <= len(names)]
        if not fitting:
            raise errors.machine(
                f"{len(names)} GPUs are visible; SGLang's communicator needs {supported[0]} or more "
                f"(world sizes {', '.join(map(str, supported))})"
            )
        world_size = fitting[-1]
    missing = _first_without_p2p(range(world_size), machine.can_access_peer)
    if missing is not None:
        a, b = missing
        raise errors.machine(
            f"GPU {a} cannot access GPU {b}'s memory (no peer-to-peer): two-shot all-reduce cannot run here",
            "SGLang's patched communicator turns itself off on such GPUs (RTX 5090; P2P blocked by IOMMU/ACS)",
            "and every all-reduce goes to NCCL: there is no limit to set",
        )
    others = {machine.capability(i) for i in range(1, world_size)} - {capability}
    if others:
        raise errors.machine(f"the GPUs differ in compute capability ({capability} and {sorted(others)[0]})")
    return Plan(
        world_size=world_size,
        gpus=names[:world_size],
        capability=capability,
        answered=answered,
        builtin=sizes_for[world_size],
        sglang=machine.sglang_version(),
    )


def _first_without_p2p(devices: Sequence[int] | range, can: Callable[[int, int], bool]) -> tuple[int, int] | None:
    for a in devices:
        for b in devices:
            if a != b and not can(a, b):
                return a, b
    return None


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
        if not cuda.is_available():
            return []
        return [cuda.get_device_name(i) for i in range(cuda.device_count())]

    def capability(self, index: int) -> tuple[int, int]:
        return tuple(self._torch.cuda.get_device_capability(index))  # type: ignore[return-value]

    def can_access_peer(self, a: int, b: int) -> bool:
        return bool(self._torch.cuda.can_device_access_peer(a, b))

    def limits(self) -> Mapping[int, Mapping[int, int]]:
        return self._table

    def sglang_version(self) -> str:
        return self._version
