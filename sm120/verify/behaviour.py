"""How the patches show in behaviour: the same snippets run in a T1 venv of each release and in the image (verify's
suite). Each calls `emit(obj)`; `SNIPPET_PRELUDE` (formatted with `pythonpath`, `stubs`, `stubs_file`) defines it,
puts `pythonpath` first on sys.path and, with `stubs`, installs the sgl_kernel stand-in (`SGL_KERNEL_STANDIN`, loaded
by path) before the first `import sglang`."""

from __future__ import annotations

from pathlib import Path

SGL_KERNEL_STANDIN = Path(__file__).with_name("sgl_kernel_standin.py")

SNIPPET_PRELUDE = """
import json as _json, os as _os, sys as _sys
for _p in reversed({pythonpath!r}):
    _sys.path.insert(0, _p)
if {stubs!r}:
    import importlib.util as _ilu
    _spec = _ilu.spec_from_file_location("sm120_upstream_stubs", {stubs_file!r})
    sm120_upstream_stubs = _ilu.module_from_spec(_spec)
    _sys.modules["sm120_upstream_stubs"] = sm120_upstream_stubs
    _spec.loader.exec_module(sm120_upstream_stubs)
    sm120_upstream_stubs.install()

def emit(obj):
    with open(_os.environ["SM120_RESULT"], "w") as _f:
        _json.dump(obj, _f)
"""


KIMI_SNIPPET = """
import torch.nn as nn
import sglang
from sglang.srt.models import kimi_k25

class StandInLanguageModel:
    '''Records the calls the EAGLE-3 code paths make on the DeepSeek-V3 language model.'''
    def __init__(self):
        self.calls = []
    def get_embed_and_head(self):
        self.calls.append(["get_embed_and_head"])
        return ("EMBED", "HEAD")
    def set_embed_and_head(self, embed, head):
        self.calls.append(["set_embed_and_head", embed, head])
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.calls.append(["set_eagle3_layers_to_capture", layer_ids])

cls = kimi_k25.KimiK25ForConditionalGeneration
model = cls.__new__(cls)          # no weights, no GPU: only the wrapper object
nn.Module.__init__(model)
lm = StandInLanguageModel()
model.language_model = lm
out = {"file": kimi_k25.__file__, "version": sglang.__version__}
try:
    got = model.get_embed_and_head()                      # eagle_worker.py
    model.set_embed_and_head("E2", "H2")                  # eagle_worker.py, draft model sharing
    model.set_eagle3_layers_to_capture([1, 29, 57])       # model_runner.py, positional layer ids
    model.set_eagle3_layers_to_capture()                  # cuda_graph_runner.py / model_runner.py, default
    out.update(ok=True, got=list(got), calls=lm.calls)
except AttributeError as exc:
    out.update(ok=False, error=str(exc))
emit(out)
"""


def assert_kimi_delegates(out: dict) -> None:
    """KIMI_SNIPPET's result: each hook reached the stand-in language model with its arguments, in order."""
    assert out.get("ok"), f"KimiK25ForConditionalGeneration lacks the EAGLE-3 hooks: {out.get('error')}"
    assert out["got"] == ["EMBED", "HEAD"]
    assert out["calls"] == [
        ["get_embed_and_head"],
        ["set_embed_and_head", "E2", "H2"],
        ["set_eagle3_layers_to_capture", [1, 29, 57]],
        ["set_eagle3_layers_to_capture", None],
    ]


# The torch-symm-mem-sm120 patch's override of the per-world-size limit (read when the communicator is built).
MAX_SIZES_ENV = "SM120_SYMM_MEM_MAX_SIZES"
# Values it must refuse (a warning, and the built-in limit kept): SYMM_SNIPPET builds one scenario for each.
BAD_MAX_SIZES = {
    "no_world_size": "16MiB",
    "equals": "8=16MiB",
    "bytes": "8:1048576",
    "gib": "8:1GiB",
    "below_4k": "8:2KiB",
    "above_512m": "8:1024MiB",
    "zero": "8:0MiB",
    "negative": "8:-16MiB",
    "fraction": "8:1.5MiB",
    "other_digits": "8:\u0661\u0666MiB",
    "twice": "8:16MiB,8:4MiB",
    "empty_entry": "2:1MiB,,8:4MiB",
    "huge_number": "8:" + "9" * 5000 + "MiB",
}

SYMM_SNIPPET = (
    f"MAX_SIZES_ENV = {MAX_SIZES_ENV!r}\nBAD_MAX_SIZES = {BAD_MAX_SIZES!a}\n"
    + """
import logging, os, types
from unittest import mock
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm
import sglang
from sglang.srt.distributed.device_communicators import torch_symm_mem as m

MiB = 1024 * 1024
messages = []

class Collect(logging.Handler):
    def emit(self, record):
        messages.append(record.levelname + ": " + record.getMessage())

log = logging.getLogger(m.__name__)
log.addHandler(Collect())
log.setLevel(logging.INFO)

def scenario(cc, ws, *, p2p=True, multicast=0, same_index=False, max_sizes=None):
    '''Build the communicator as rank 0 of `ws` ranks on a GPU of capability `cc`, with the driver, the
    process group and torch's symmetric memory replaced by stand-ins (this machine has no GPU);
    `max_sizes`: the value of SM120_SYMM_MEM_MAX_SIZES (unset when None).'''
    messages.clear()
    calls = []
    def all_gather_object(out, obj, group=None):
        calls.append("all_gather_object")
        out[:] = [0] * ws if same_index else list(range(ws))
    def rendezvous(buffer, group_name):
        calls.append("rendezvous")
        return types.SimpleNamespace(multicast_ptr=multicast)
    def empty(n, device=None, dtype=None):
        return torch.zeros(n, dtype=dtype)
    def kernel(name):
        def run(buf, op, group_name):
            calls.append(name)
            buf.mul_(ws)  # every rank holds the same values: their sum is ws times them
        return run
    ops = types.SimpleNamespace(two_shot_all_reduce_=kernel("two_shot"), multimem_all_reduce_=kernel("multimem"))
    # 0.5.17+ reads the server's runtime context when sizing the Inkling buffer; there is no server here.
    exec_ctx = types.SimpleNamespace(comm=types.SimpleNamespace(enable_scattered_sconv=False))
    result = {}
    environ = {k: v for k, v in os.environ.items() if k != MAX_SIZES_ENV}
    if max_sizes is not None:
        environ[MAX_SIZES_ENV] = max_sizes
    with mock.patch.dict(os.environ, environ, clear=True), \\
         mock.patch.object(m, "get_exec", lambda: exec_ctx, create=True), \\
         mock.patch.object(m, "torch_symm_mem_available", True), \\
         mock.patch.object(torch.cuda, "set_device", lambda d: None), \\
         mock.patch.object(torch.cuda, "get_device_capability", lambda d=None: (cc, 0)), \\
         mock.patch.object(torch.cuda, "can_device_access_peer", lambda a, b: p2p), \\
         mock.patch.object(dist, "get_world_size", lambda group=None: ws), \\
         mock.patch.object(dist, "all_gather_object", all_gather_object), \\
         mock.patch.object(symm, "empty", empty), \\
         mock.patch.object(symm, "rendezvous", rendezvous), \\
         mock.patch.object(torch.ops, "symm_mem", ops, create=True):
        try:
            comm = m.TorchSymmMemCommunicator(types.SimpleNamespace(group_name="tp"), torch.device("cuda:0"))
        except Exception as exc:
            return {"error": type(exc).__name__ + ": " + str(exc), "calls": calls, "log": list(messages)}
        result.update(disabled=comm.disabled, max_size=getattr(comm, "max_size", None))
        if not comm.disabled:
            comm.device = torch.device("cpu")  # the stand-in buffer lives on the CPU
            small = torch.full((4, 7168), 0.5, dtype=torch.bfloat16)
            big = torch.empty(comm.max_size // 2, dtype=torch.bfloat16)  # exactly max_size bytes
            result["small_takes_symm_mem"] = bool(comm.should_torch_symm_mem_allreduce(small))
            result["limit_sized_goes_to_nccl"] = not comm.should_torch_symm_mem_allreduce(big)
            out = comm.all_reduce(small)
            result["reduced_ok"] = bool(torch.all(out == 0.5 * ws))
    result.update(calls=calls, log=list(messages))
    return result

out = {"file": m.__file__, "version": sglang.__version__, "scenarios": {}}
cases = {
    "cc12_ws8_p2p": dict(cc=12, ws=8),
    "cc12_ws2_p2p": dict(cc=12, ws=2),
    "cc12_ws4_p2p": dict(cc=12, ws=4),
    "cc12_ws6_p2p": dict(cc=12, ws=6),
    "cc12_ws8_no_p2p": dict(cc=12, ws=8, p2p=False),
    "cc12_ws8_same_index": dict(cc=12, ws=8, same_index=True),
    "cc12_ws3": dict(cc=12, ws=3),
    "cc11_ws8": dict(cc=11, ws=8),
    "cc9_ws8_no_multicast": dict(cc=9, ws=8),
    "cc9_ws8_multicast": dict(cc=9, ws=8, multicast=0x1000),
    # SM120_SYMM_MEM_MAX_SIZES: honoured for its world sizes, ignored for others, a bad value falls back
    "cc12_ws2_override": dict(cc=12, ws=2, max_sizes="2:512KiB"),
    "cc12_ws8_override_list": dict(cc=12, ws=8, max_sizes=" 2:512K, 8:32M "),
    "cc12_ws4_override_other": dict(cc=12, ws=4, max_sizes="2:512KiB,8:1MiB"),
    "cc9_ws2_override": dict(cc=9, ws=2, max_sizes="2:4MiB"),
}
for name, value in BAD_MAX_SIZES.items():
    cases["cc12_ws8_bad_" + name] = dict(cc=12, ws=8, max_sizes=value)
for name, kwargs in cases.items():
    out["scenarios"][name] = scenario(**kwargs)
emit(out)
"""
)


def assert_symm_sm120(out: dict) -> None:
    """SYMM_SNIPPET's result (run with INKLING_OFF): capability 12 with P2P takes torch's symmetric memory below
    the patch's 8 MiB limit at 8 ranks (two-shot), is off before the rendezvous without P2P, and sm_90 with
    multicast keeps multimem. The T1 tests check each scenario in finer detail."""
    s = out["scenarios"]["cc12_ws8_p2p"]
    assert "error" not in s, f"capability 12, 8 ranks with P2P: {s['error']}"
    assert s["disabled"] is False, f"capability 12 with P2P turns the communicator off: {s['log']}"
    assert s["max_size"] == 8 * 2**20
    assert s["calls"] == ["all_gather_object", "rendezvous", "two_shot"]
    assert s["reduced_ok"] and s["small_takes_symm_mem"] and s["limit_sized_goes_to_nccl"]
    off = out["scenarios"]["cc12_ws8_no_p2p"]
    assert off["disabled"] is True and "rendezvous" not in off["calls"], "without P2P it must be off before rendezvous"
    assert out["scenarios"]["cc9_ws8_multicast"]["calls"][-1] == "multimem", "sm_90 with multicast must keep multimem"
    o = out["scenarios"]["cc12_ws2_override"]
    assert (o.get("disabled"), o.get("max_size")) == (False, 512 * 2**10), (
        f"{MAX_SIZES_ENV}=2:512KiB is not honoured at 2 ranks: {o.get('error') or o['log']}"
    )
    bad = out["scenarios"]["cc12_ws8_bad_gib"]
    assert bad.get("max_size") == 8 * 2**20 and any(
        m.startswith("WARNING") and f"{MAX_SIZES_ENV}='8:1GiB'" in m for m in bad["log"]
    ), f"{MAX_SIZES_ENV}=8:1GiB must fall back to the built-in 8 MiB with a warning: {bad.get('error') or bad['log']}"


# From 0.5.16 SGLang raises every TorchSymmMemCommunicator's buffer (any capability) to 512 MiB while
# SGLANG_OPT_USE_INKLING_CUSTOM_AR is on (its default) for the Inkling model's fused all-reduce kernels; that
# size, not the capability table, is then the limit. With the variable at 0 the table's limits hold.
INKLING_OFF = {"SGLANG_OPT_USE_INKLING_CUSTOM_AR": "0"}
