"""T0: the start-up check's pieces that need no image: the personas file, the persona installed in a stand-in
torch (answers from the data, stops at GPU calls naming the SGLang line), the nvidia-smi stand-in, the traps
(build.toml [[sm120_traps]]), the decisions and their table, and import failures traced to a kernel library."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from sm120.errors import UsageError
from sm120.plan import config as cfg
from sm120.verify import persona, report, startup
from sm120.verify import startup_probe as probe

# ---------------------------------------------------------------------------------------------------------------
# personas.toml
# ---------------------------------------------------------------------------------------------------------------


def test_every_persona_is_an_sm120_card_with_a_source_for_each_answer():
    personas = persona.load()
    assert {"rtx-pro-6000", "rtx-5090"} <= set(personas.personas)
    for key, card in personas.personas.items():
        assert card.capability.value[0] == 12, key
        assert all(
            getattr(card, field).source.startswith(("http", "NVIDIA", "CUDA", "96 GB", "32 GB", "assumption"))
            for field in persona.Persona.model_fields
            if field != "summary"
        )
    pro = personas.get().answers(8)
    assert pro == {
        "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "capability": [12, 0],
        "multi_processor_count": 188,
        "total_memory": 97887 << 20,
        "free_memory": 97887 << 20,
        "driver_cuda_version": 13000,
        "devices": 8,
    }
    assert personas.get("rtx-5090").answers(1)["multi_processor_count"] == 170


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "personas.toml"
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """
default = "card"
[personas.card]
summary = "a card"
name = { value = "Card", source = "https://example.org/card" }
capability = { value = [12, 0], source = "https://example.org/cc" }
multi_processor_count = { value = 10, source = "https://example.org/sm" }
total_memory_mib = { value = 100, source = "https://example.org/mem" }
free_memory_mib = { value = 100, source = "assumption: idle" }
driver_cuda_version = { value = 13000, source = "https://example.org/driver" }
"""


@pytest.mark.parametrize(
    "change, says",
    [
        ('name = { value = "Card", source = "https://example.org/card" }', None),
        ('name = { value = "Card" }', "source"),
        ('name = { value = "Card", source = "https://example.org/card", extra = 1 }', "extra"),
        ('capability = { value = [9, 0], source = "https://example.org/cc" }', "sm_120"),
    ],
)
def test_a_persona_without_a_source_or_not_sm120_is_refused(tmp_path, change: str, says: str | None):
    key = change.split(" =", 1)[0]
    text = "\n".join(change if line.startswith(key + " =") else line for line in GOOD.splitlines())
    path = _write(tmp_path, text)
    if says is None:
        assert persona.load(path).get().name.value == "Card"
        return
    with pytest.raises(UsageError, match=says):
        persona.load(path)


def test_an_unknown_default_persona_is_refused(tmp_path):
    with pytest.raises(UsageError, match="no persona 'other'"):
        persona.load(_write(tmp_path, GOOD.replace('default = "card"', 'default = "other"')))


# ---------------------------------------------------------------------------------------------------------------
# The persona in a stand-in torch
# ---------------------------------------------------------------------------------------------------------------


class _Device:
    def __init__(self, spec: str) -> None:
        kind, _, idx = spec.partition(":")
        self.type, self.index = kind, int(idx) if idx else None


class _Stream:
    pass


@pytest.fixture
def fake_torch(monkeypatch):
    """A torch with a real-shaped torch.cuda that knows no GPU; the persona is installed into it."""
    torch = types.ModuleType("torch")
    cuda = types.ModuleType("torch.cuda")
    for name in ("is_available", "device_count", "get_device_capability", "_lazy_init", "set_device", "synchronize"):
        setattr(cuda, name, lambda *a, **k: pytest.fail("the real torch.cuda was reached"))
    cuda.Stream = type("Stream", (_Stream,), {})
    torch.cuda, torch.device = cuda, _Device
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(probe, "BOUNDARIES", [])
    monkeypatch.setattr(probe, "ASKED", probe.collections.Counter())
    probe.install(persona.load().get().answers(8))
    return torch


def test_torch_answers_from_the_persona_and_counts_the_questions(fake_torch):
    cuda = fake_torch.cuda
    assert cuda.is_available() is True and cuda.device_count() == 8 and cuda.current_device() == 0
    assert cuda.get_device_capability() == (12, 0) == cuda.get_device_capability("cuda:7")
    props = cuda.get_device_properties(3)
    assert (props.major, props.minor, props.multi_processor_count) == (12, 0, 188)
    assert props.total_memory == 97887 << 20 and cuda.mem_get_info() == (97887 << 20, 97887 << 20)
    assert cuda.get_device_name() == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    with pytest.raises(AssertionError, match="Invalid device id"):
        cuda.get_device_capability(8)
    assert probe.ASKED["get_device_capability"] == 2  # the refused index is not an answer


def _sglang_module(tmp_path: Path, monkeypatch, name: str, body: str, *, load: bool = True) -> types.ModuleType | None:
    """A module at .../site-packages/sglang/srt/<name>.py (what the probe takes for SGLang's code)."""
    site = tmp_path / "site-packages"
    pkg = site / "sglang" / "srt"
    pkg.mkdir(parents=True, exist_ok=True)
    for init in (site / "sglang" / "__init__.py", pkg / "__init__.py"):
        init.touch()
    (pkg / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(site))
    for mod in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, mod)
    return importlib.import_module(f"sglang.srt.{name}") if load else None


def test_a_gpu_call_stops_the_check_naming_the_call_and_sglang_line(fake_torch, tmp_path, monkeypatch):
    mod = _sglang_module(
        tmp_path,
        monkeypatch,
        "runner",
        """
        import torch

        def start():
            torch.cuda.set_device(0)

        def stream():
            return torch.cuda.Stream()

        def swallow():
            try:
                torch.cuda._lazy_init()
            except Exception:
                return "swallowed"
        """,
    )
    with pytest.raises(probe.PersonaBoundary, match=r"torch.cuda.set_device .*sglang/srt/runner.py:5 \(start\)"):
        mod.start()
    with pytest.raises(probe.PersonaBoundary, match=r"torch.cuda.Stream\(\)"):
        mod.stream()
    with pytest.raises(probe.PersonaBoundary):  # a BaseException: `except Exception` does not hide it
        mod.swallow()
    assert [b["call"] for b in probe.BOUNDARIES] == [
        "torch.cuda.set_device",
        "torch.cuda.Stream()",
        "torch.cuda._lazy_init",
    ]


def test_a_property_the_persona_has_no_value_for_stops_the_check(fake_torch):
    props = fake_torch.cuda.get_device_properties()
    with pytest.raises(probe.PersonaBoundary, match=r"L2_cache_size .*no value"):
        _ = props.L2_cache_size


def test_an_import_failure_names_the_sglang_module_line_and_kernel_library(tmp_path, monkeypatch):
    _sglang_module(
        tmp_path,
        monkeypatch,
        "vision",
        "import os\nfrom sgl_kernel.flash_attn import flash_attn_varlen_func\n",
        load=False,
    )
    (tmp_path / "site-packages" / "sglang" / "srt" / "kimi.py").write_text("from sglang.srt import vision\n")
    with pytest.raises(ImportError) as info:
        importlib.import_module("sglang.srt.kimi")
    found = probe.failure(info.value)
    assert found["module"] == "sglang.srt.vision" and found["line"] == 2
    assert found["statement"] == "from sgl_kernel.flash_attn import flash_attn_varlen_func"
    assert startup.kernel_library(found) == "sgl_kernel"
    assert startup.describe_failure(found).startswith("sglang.srt.vision line 2: from sgl_kernel.flash_attn")


def test_the_nvidia_smi_stand_in_answers_from_the_persona_only(tmp_path):
    answers = persona.load().get().answers(2)
    (tmp_path / "persona.json").write_text(json.dumps(answers))
    script = tmp_path / "nvidia-smi"
    script.write_text(
        probe.NVIDIA_SMI.format(
            python=sys.executable, persona=str(tmp_path / "persona.json"), log=str(tmp_path / "log")
        )
    )

    def smi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, check=False)

    ok = smi("--query-gpu=memory.total", "--format=csv,noheader,nounits")
    assert ok.returncode == 0 and ok.stdout.split() == ["97887", "97887"]
    both = smi("--query-gpu=name,compute_cap", "--format=csv,noheader")
    assert both.stdout.splitlines()[0] == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0"
    unknown = smi("topo", "-m")
    assert unknown.returncode == 9 and "no answer for nvidia-smi topo -m" in unknown.stderr
    assert len((tmp_path / "log").read_text().splitlines()) == 3


# ---------------------------------------------------------------------------------------------------------------
# Traps, decisions, the table
# ---------------------------------------------------------------------------------------------------------------


def _trap(**kw) -> cfg.Sm120Trap:
    base = dict(settings=["moe_runner_backend"], values=["flashinfer_trtllm"], fix="--x y", reason="r", source="s")
    return cfg.Sm120Trap(**{**base, **kw})


def test_a_trap_matches_by_value_type_release_and_quantization():
    assert _trap().hits({"moe_runner_backend": "flashinfer_trtllm"}) == [("moe_runner_backend", "flashinfer_trtllm")]
    assert _trap().hits({"moe_runner_backend": "flashinfer_cutlass"}) == []
    flag = _trap(settings=["deep_gemm.ENABLE_JIT_DEEPGEMM"], values=[True])
    assert flag.hits({"deep_gemm.ENABLE_JIT_DEEPGEMM": 1}) == []  # 1 is not True
    assert flag.hits({"deep_gemm.ENABLE_JIT_DEEPGEMM": True})
    ranged = _trap(sglang="<0.5.10", quantization=["modelopt_fp4"])
    assert ranged.applies("0.5.9", "modelopt_fp4") and not ranged.applies("0.5.23", "modelopt_fp4")
    assert not ranged.applies("0.5.9", "fp8")
    with pytest.raises(ValueError, match="version range"):
        _trap(sglang="soon")


def test_build_tomls_traps_catch_the_known_sm120_traps():
    traps = cfg.load().sm120_traps
    bad = {
        "0.5.9": {
            "moe_runner_backend": "flashinfer_trtllm",
            "speculative_draft_attention_backend": "trtllm_mla",
            "attention_backend": "fa3",
            "decode_attention_backend": "flashmla",
            "deep_gemm.ENABLE_JIT_DEEPGEMM": True,
            "enable_flashinfer_allreduce_fusion": True,
        },
        "0.5.23": {"moe_runner_backend": "auto", "quantization": "modelopt_fp4"},
    }
    for version, decided in bad.items():
        hits = startup.trap_hits(traps, version, {"case": decided})
        assert {h.setting for h in hits} == set(decided) - {"quantization"}, version
        assert all("set " in h.message(version) for h in hits)
    good = {"attention_backend": "triton", "moe_runner_backend": "flashinfer_cutlass", "quantization": "modelopt_fp4"}
    assert startup.trap_hits(traps, "0.5.23", {"case": good}) == []
    assert startup.trap_hits(traps, "0.5.23", {"case": {"deep_gemm.ENABLE_JIT_DEEPGEMM": True}}) == []


def test_decisions_derive_the_drafts_backend_and_cuda_graph_rows():
    case = {
        "settings": {
            "attention_backend": "triton",
            "decode_attention_backend": None,
            "speculative_algorithm": "EAGLE3",
            "speculative_draft_attention_backend": None,
            "speculative_num_steps": 2,
            "speculative_eagle_topk": 4,
            "speculative_num_draft_tokens": 16,
            "disable_cuda_graph": False,
            "cuda_graph_max_bs": 48,
            "cuda_graph_bs": [1, 2, 4],
        },
        "runners": {"moe_runner": "auto"},
        "deep_gemm": {"ENABLE_JIT_DEEPGEMM": False},
    }
    out = startup.decisions(case)
    assert out["speculative_draft_attention_backend"] == "triton"  # inherited from the target
    assert out["prefill_decode_attention"] == "triton / triton"
    assert out["speculative"] == "EAGLE3 2/4/16" and out["cuda_graph"] == "max bs 48, 3 sizes"
    assert out["moe_runner"] == "auto" and out["deep_gemm.ENABLE_JIT_DEEPGEMM"] is False


def test_the_mla_drafters_trap_holds_for_mla_drafts_only():
    """[[sm120_traps]] with draft_attention = ["MLA"]: the MLA drafter's attention on an sm_100-only backend is a trap;
    the same value for a case whose draft is not MLA is judged by the general traps only."""
    traps = [t for t in cfg.load().sm120_traps if t.draft_attention == ["MLA"]]
    assert len(traps) == 1 and "cutlass_mla" in traps[0].values
    mla = {"speculative_draft_attention_backend": "cutlass_mla", "draft_attention": "MLA"}
    (hit,) = startup.trap_hits(traps, "0.5.23", {"kimi/eagle3": mla})
    assert "--speculative-draft-attention-backend triton" in hit.message("0.5.23")
    assert startup.trap_hits(traps, "0.5.23", {"kimi/eagle3": {**mla, "draft_attention": "MHA"}}) == []
    assert (
        startup.trap_hits(traps, "0.5.23", {"kimi/eagle3": {**mla, "speculative_draft_attention_backend": "triton"}})
        == []
    )


def test_decisions_read_the_draft_model_and_overlap_scheduling():
    case = {
        "settings": {
            "speculative_algorithm": "EAGLE3",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
            "disable_overlap_schedule": False,
        },
        "runners": {"draft_model": {"architecture": "Eagle3DeepseekV2ForCausalLM", "attention_arch": "MLA"}},
    }
    out = startup.decisions(case)
    assert out["speculative"] == "EAGLE3 3/1/4" and out["overlap_schedule"] == "on"
    assert out["draft_model"] == "Eagle3DeepseekV2ForCausalLM (MLA)" and out["draft_attention"] == "MLA"
    assert startup.decisions({"settings": {"disable_overlap_schedule": True}})["overlap_schedule"] == "off"


def test_the_mla_family_runs_the_draft_modes_with_an_mla_drafter():
    cases = startup.cases({"baseline": False, "eagle3": True})
    assert "kimi-k25-nvfp4-mla/eagle3" in cases and "kimi-k25-nvfp4-mla/baseline" not in cases
    assert {"kimi-k25-nvfp4/baseline", "deepseek-v3/eagle3"} <= set(cases)
    family = startup.family("kimi-k25-nvfp4-mla/eagle3")
    draft = family.draft["config.json"]
    assert family.draft_class == "Eagle3DeepseekV2ForCausalLM"
    # the MLA fields SGLang's model config reads for this class, equal to the target's attention
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank", "hidden_size"):
        assert draft[key] == family.text[key], key
    assert draft["num_hidden_layers"] == 1


def test_decisions_read_the_per_phase_cuda_graph_record_of_newer_releases():
    """0.5.2x's resolved_dict() holds cuda_graph_config as one record per phase (what the probe keeps, nested)."""
    graphs = {
        "decode": {"backend": "full", "max_bs": 512, "bs": [1, 2, 4]},
        "prefill": {"backend": "disabled", "max_bs": 8192, "bs": [8, 16]},
    }
    out = startup.decisions({"settings": {"cuda_graph_config": graphs, "disable_cuda_graph": False}})
    assert out["cuda_graph"] == "decode full, max bs 512, 3 sizes; prefill disabled"


def test_the_decision_table_has_a_column_per_case_and_says_who_refused():
    rep = report.Report(image="img")
    rep.startup = {
        "persona": "Card x8",
        "cudnn": 91002,
        "decisions": {"m/baseline": {"attention_backend": "triton", "enable_torch_symm_mem": True}},
        "refused": {"m/eagle3": "server_args line 1 -> RuntimeError: cuDNN 9.10"},
    }
    text = report.table(rep)
    assert "start-up on the sm_120 persona: Card x8, cuDNN 91002" in text
    header = next(line for line in text.splitlines() if line.startswith("decision"))
    assert header.split()[1:] == ["m/baseline", "m/eagle3", "(refused)"]
    assert any(line.split()[-2:] == ["triton", "refused"] for line in text.splitlines() if "attention backend" in line)
    assert "m/eagle3: SGLang refused to start: server_args line 1 -> RuntimeError: cuDNN 9.10" in text


def test_split_command_reads_the_entrypoints_last_line():
    env, argv = startup.split_command(
        ["SGLANG_ENABLE_JIT_DEEPGEMM=0", "/opt/venv/bin/python3", "-m", "sglang.launch_server", "--tp-size", "8"]
    )
    assert env == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"} and argv == ["--tp-size", "8"]
    with pytest.raises(ValueError, match="not an SGLang launch command"):
        startup.split_command(["python3", "-c", "pass"])


def test_model_files_are_the_families_configs_and_their_drafters():
    files = startup.model_files("models")
    kimi = json.loads(files["models/kimi-k25-nvfp4/target/config.json"])
    assert kimi["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert kimi["quantization_config"]["quant_algo"] == "NVFP4"
    assert json.loads(files["models/kimi-k25-nvfp4/target/hf_quant_config.json"])["quantization"]["group_size"] == 16
    draft = json.loads(files["models/deepseek-v3/draft/config.json"])
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"] and draft["hidden_size"] == 7168
    assert draft["vocab_size"] == 129280


def test_a_derived_layer_holds_the_added_files_and_whiteouts_for_the_removed():
    import io
    import tarfile

    from tests.image_meta.derive import layer

    data = layer(add={"/opt/lib/libx.so.9": (b"ELF", 0o755)}, remove=["/opt/venv/pkg/flash_ops.abi3.so"])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"opt/lib/libx.so.9", "opt/venv/pkg/.wh.flash_ops.abi3.so"}
        assert members["opt/lib/libx.so.9"].mode == 0o755 and members["opt/lib/libx.so.9"].uid == 0
        assert tar.extractfile("opt/lib/libx.so.9").read() == b"ELF"


def test_a_refusal_names_the_launch_check_and_the_model_loader():
    gate = {"module": None, "sglang_frame": "sglang/srt/server_args.py:5298 (gate)", "type": "RuntimeError"}
    loader = {"sglang_frame": "sglang/srt/model_loader/weight_utils.py:1 (x)", "type": "ValueError", "message": "FP8"}
    both = startup.refusal({"error": {**gate, "message": "CuDNN 9.10"}, "runners": {"load_error": loader}})
    assert both.split(" || ") == [
        "sglang/srt/server_args.py:5298 (gate) -> RuntimeError: CuDNN 9.10",
        "model loader: sglang/srt/model_loader/weight_utils.py:1 (x) -> ValueError: FP8",
    ]
    assert startup.refusal({"settings": {}, "runners": {"quantization": "fp8"}}) == ""


AUDITED = """
import json, os, socket, sys
sys.path.insert(0, sys.argv[1])
import startup_probe as probe

site = sys.argv[2]
probe.audit(site, ["gone/cu12", "pkg/*.alt.so*", "bin/ptxas"])
for rel in ("gone/cu12/lib.so", "pkg/libx.alt.so.13", "pkg/kept.so"):
    try:
        open(os.path.join(site, rel)).close()
    except OSError:
        pass
sys.path.insert(0, site)
try:
    import gone  # noqa: F401  (a package dir that is shipped: not recorded)
except ImportError:
    pass
try:
    import gone.cu12.lib  # noqa: F401  (left out: never found, and the error is swallowed)
except ImportError:
    pass
import subprocess
try:
    subprocess.run([os.path.join(site, "bin/ptxas"), "--version"], check=False)  # a left-out program, run
except OSError:
    pass
for address in (("127.0.0.1", 9), ("192.0.2.1", 80)):
    s = socket.socket()
    s.settimeout(0.01)
    try:
        s.connect(address)
    except OSError:
        pass
    s.close()
print(json.dumps(probe.AUDIT))
"""


def test_the_audit_records_what_the_image_leaves_out_and_the_network(tmp_path):
    """The probe's audit hook (sm120/verify/startup_probe.py `audit`): an open of a not_shipped path is recorded,
    one of a shipped path is not; an import of a left-out module (which is never found) and a run of a left-out
    program are recorded; a connect off the machine is, one to loopback is not."""
    site = tmp_path / "site"
    for rel in ("gone/__init__.py", "gone/cu12/lib.so", "pkg/libx.alt.so.13", "pkg/kept.so"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("")
    script = tmp_path / "audited.py"
    script.write_text(AUDITED)
    proc = subprocess.run(
        [sys.executable, str(script), str(Path(probe.__file__).parent), str(site)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    events = [(e["event"], e["what"]) for e in json.loads(proc.stdout.strip().splitlines()[-1])]
    assert ("open", str(site / "gone/cu12/lib.so")) in events and ("open", str(site / "pkg/libx.alt.so.13")) in events
    assert not any("kept.so" in what or "__init__" in what for _, what in events)
    assert ("import", "gone.cu12.lib (left out: gone/cu12/lib)") in events
    assert ("run", str(site / "bin/ptxas")) in events
    assert not any(event == "import" and what.startswith("gone ") for event, what in events)
    assert ("connect", "192.0.2.1:80") in events and not any("127.0.0.1" in what for _, what in events)
