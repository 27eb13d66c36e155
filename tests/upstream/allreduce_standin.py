"""A stand-in for the GPU under SGLang's real TorchSymmMemCommunicator, for the sweep's T1 orchestration tests.

`communicator(group, device)` builds the track's own (patched or published) communicator, as the sweep's worker
does, in a real process of a real gloo group; only what needs a GPU is replaced: torch.cuda's device calls (the
capability is answered by the sweep itself, with --capability), symmetric memory's allocation and rendezvous (a
CPU buffer, no multicast) and the two-shot kernel, which becomes a gloo all-reduce of the buffer over the
communicator's group: a real sum across the processes. The P2P check's all_gather_object runs for real.

SM120_STANDIN_FAILURE=<rank>:<raise|signal|hang> makes that rank's rendezvous fail the way it can on a GPU.
"""

from __future__ import annotations

import os
import signal
import time
import types
from typing import Any
from unittest import mock


def communicator(group: Any, device: Any) -> Any:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm
    from sglang.srt.distributed.device_communicators import torch_symm_mem as m

    rank = dist.get_rank(group)
    failure = os.environ.get("SM120_STANDIN_FAILURE", "")
    calls: list[str] = []

    def rendezvous(buffer: Any, group_name: str) -> Any:
        calls.append("rendezvous")
        if failure == f"{rank}:raise":
            raise RuntimeError("stand-in rendezvous failed")
        if failure == f"{rank}:signal":  # what a rendezvous between GPUs without P2P can do
            os.kill(os.getpid(), signal.SIGFPE)
        if failure == f"{rank}:hang":
            time.sleep(3600)
        return types.SimpleNamespace(multicast_ptr=0)

    def two_shot(buffer: Any, op: str, group_name: str) -> None:
        assert op == "sum"
        calls.append("two_shot")
        dist.all_reduce(buffer, group=group)

    def multimem(buffer: Any, op: str, group_name: str) -> None:
        raise AssertionError("multimem_all_reduce_ called: capability 12 must take two-shot")

    ops = types.SimpleNamespace(two_shot_all_reduce_=two_shot, multimem_all_reduce_=multimem)
    for patch in (  # for the life of this rank's process
        mock.patch.object(m, "torch_symm_mem_available", True),
        mock.patch.object(torch.cuda, "set_device", lambda d: None),
        mock.patch.object(torch.cuda, "can_device_access_peer", lambda a, b: True),
        mock.patch.object(symm, "empty", lambda n, device=None, dtype=None: torch.zeros(n, dtype=dtype)),
        mock.patch.object(symm, "rendezvous", rendezvous),
        mock.patch.object(torch.ops, "symm_mem", ops, create=True),
    ):
        patch.start()
    comm = m.TorchSymmMemCommunicator(group=group, device=torch.device("cpu", rank))  # distinct indices, as GPUs
    comm.device = torch.device("cpu")  # the tensors' device, for should_torch_symm_mem_allreduce
    comm.standin_calls = calls
    return comm
