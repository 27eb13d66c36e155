"""T0: `allreduce-sweep`'s CPU parts (no torch here): sizes, arguments, the machine checks on stand-in answers,
the crossover and the limit on given timings, the report, the entrypoint's route to it.

The GPU parts (worker, launch) run in T1 with real torch over gloo (tests/upstream/test_allreduce_sweep.py) and
on GPUs (docs/allreduce-sweep.md)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from sm120.image.allreduce import __main__ as sweep_main
from sm120.image.allreduce import cli, machine, report, sizes, worker
from sm120.image.allreduce.report import Row
from sm120.image.entrypoint import spec as entry_spec
from sm120.image.entrypoint import tools
from sm120.plan import config as cfg
from tests.entrypoint_helpers import ROOT, clean_env, real_plan, run_entrypoint, stderr_lines, synthetic_plan

KiB, MiB = 1024, 1024 * 1024
PATCHES = sorted((ROOT / "patches" / "sglang" / "torch-symm-mem-sm120").glob("*.patch"))

# --------------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4K", [4 * KiB]),
        ("4KiB", [4 * KiB]),
        ("512KiB", [512 * KiB]),
        ("8M", [8 * MiB]),
        ("16MiB", [16 * MiB]),
        ("1M,4K,1M", [4 * KiB, MiB]),
        ("4K..32K", [4 * KiB, 8 * KiB, 16 * KiB, 32 * KiB]),
        ("12K..40K", [12 * KiB, 24 * KiB, 40 * KiB]),  # doublings, and the end itself
        ("4K..8K,1M", [4 * KiB, 8 * KiB, MiB]),
    ],
)
def test_sizes_parse(text, expected):
    assert sizes.parse_sizes(text) == expected


def test_the_default_range_is_4_kib_to_64_mib():
    default = sizes.parse_sizes(sizes.DEFAULT_RANGE)
    assert default[0] == 4 * KiB and default[-1] == 64 * MiB and len(default) == 15


@pytest.mark.parametrize(
    "text, message",
    [
        ("3X", "'3X' is not a size"),
        ("4096", "'4096' is not a size"),
        ("4 K", "'4 K' is not a size"),
        ("0K", "'0K' is not a size"),
        ("1.5M", "'1.5M' is not a size"),
        ("-4K", "'-4K' is not a size"),
        ("\u0664K", "is not a size"),
        ("1G", "'1G' is not a size"),
        ("4k", "'4k' is not a size"),
        ("2K", "2KiB is out of range (the sweep measures 4KiB to 256MiB)"),
        ("512M", "512MiB is out of range"),
        ("4K,,8K", "has an empty item"),
        ("64M..4K", "'64M..4K': the range ends below its start"),
        ("4K..", "'' is not a size"),
        ("9" * 9999 + "K", "is not a size"),
    ],
)
def test_bad_sizes_name_the_value(text, message):
    with pytest.raises(sizes.SizeError, match=re.escape(message)):
        sizes.parse_sizes(text)


def test_format_size_reads_back():
    for size in (4 * KiB, 68 * KiB, MiB, 1536 * KiB, 64 * MiB + 4 * KiB, 512 * MiB):
        assert sizes.parse_size(sizes.format_size(size)) == size
    assert sizes.human(16 * MiB) == "16 MiB" and sizes.human(512 * KiB) == "512 KiB"


def _patch_grammar(patch: Path) -> re.Pattern[str]:
    """The regex the patch reads SM120_SYMM_MEM_MAX_SIZES entries with, taken from the patch's added lines."""
    (line,) = [ln for ln in patch.read_text().splitlines() if ln.startswith("+_MAX_SIZES_ENTRY = r")]
    return re.compile(ast.literal_eval(line.split(" = ", 1)[1]))  # a raw string literal


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_every_limit_the_sweep_prints_is_one_the_patch_reads(patch: Path):
    grammar = _patch_grammar(patch)
    bounds = re.search(r"^\+_MAX_SIZES_BOUNDS = \((.*)\)$", patch.read_text(), re.M)
    assert bounds and eval(bounds[1]) == (sizes.LIMIT_MIN, sizes.LIMIT_MAX)  # 4 * 1024, 512 * 1024 * 1024
    for size in [*sizes.parse_sizes("4K..256M"), 68 * KiB, 3 * MiB]:
        text = f"8:{sizes.format_size(size)}"
        match = grammar.fullmatch(text)
        assert match and int(match[2]) * {"KiB": KiB, "MiB": MiB}[match[3]] == size, text
    job = worker.Job(2, 0, [4 * KiB, 256 * MiB], 3, 0, False, None, "/tmp")
    assert grammar.fullmatch(job.buffer_size), job.buffer_size  # the sweep's own buffer, largest size + 4 KiB


def test_ops_per_repeat_is_the_same_on_every_rank_and_bounded():
    assert worker.ops_per_repeat(4 * KiB) == 64
    assert worker.ops_per_repeat(MiB) == 8
    assert worker.ops_per_repeat(64 * MiB) == 1


# --------------------------------------------------------------------------------------------------
# Arguments: every mistake is one line and exit status 2
# --------------------------------------------------------------------------------------------------


def test_defaults():
    o = cli.parse([])
    assert (o.tp, o.repeats, o.warmup, o.cuda_graph, o.capability, o.json) == (None, 20, 5, False, None, None)
    assert o.sizes == sizes.parse_sizes(sizes.DEFAULT_RANGE)


@pytest.mark.parametrize(
    "argv, text",
    [
        (["--tp", "1"], "argument --tp: '1' is not a whole number from 2 to 64"),
        (["--tp", "x"], "argument --tp: 'x' is not a whole number from 2 to 64"),
        (["--tp", "+2"], "argument --tp: '+2' is not a whole number"),
        (["--tp", "\u0662"], "argument --tp:"),
        (["--repeats", "2"], "argument --repeats: '2' is not a whole number from 3 to 1000"),
        (["--warmup", "-1"], "argument --warmup: '-1' is not a whole number from 0 to 1000"),
        (["--sizes", "3X"], "argument --sizes: '3X' is not a size"),
        (["--sizes", "1G"], "argument --sizes: '1G' is not a size"),
        (["--timeout", "nan"], "argument --timeout: 'nan' is not a number of seconds"),
        (["--timeout", "5"], "argument --timeout: '5' is not a number of seconds from 10 to 86400"),
        (["--capability", "0"], "argument --capability: '0' is not a whole number from 1 to 99"),
        (["--tpp", "2"], "unrecognized arguments: --tpp 2"),
        (["--t", "2"], "unrecognized arguments: --t 2"),  # no abbreviations
        (["--json", "/nonexistent/dir/out.json"], "--json '/nonexistent/dir/out.json': not a file in an existing"),
        (["extra"], "unrecognized arguments: extra"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv, text, capsys):
    assert sweep_main.main(argv, make_machine=_unused, launcher=_unused) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"allreduce-sweep: error: {text}"), err


def _unused(*a, **k):
    raise AssertionError("not reached: the arguments are checked first")


def test_help_needs_no_torch():
    proc = subprocess.run(
        [sys.executable, "-m", "sm120.image.allreduce", "--help"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert proc.returncode == 0 and proc.stderr == ""
    for text in ("--tp", "--sizes", "--cuda-graph", "--capability", "SM120_SYMM_MEM_MAX_SIZES", "Exit status"):
        assert text in proc.stdout


def test_without_torch_it_is_one_line_and_exit_1():
    pytest.importorskip("sys")  # this interpreter (the dev venv) has no torch; the image's has
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, check=False).returncode == 0:
        pytest.skip("torch is installed in this interpreter")
    proc = subprocess.run(
        [sys.executable, "-m", "sm120.image.allreduce"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("allreduce-sweep: error: torch cannot be imported here (No module named 'torch')")
    assert proc.stderr.count("\n") == 1


# --------------------------------------------------------------------------------------------------
# The machine: stand-in answers for torch's (the GPUs) and SGLang's (its size table)
# --------------------------------------------------------------------------------------------------

H200 = "NVIDIA H200"
RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
TABLE = {
    9: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB},
    12: {2: 16 * MiB, 4: 16 * MiB, 6: 8 * MiB, 8: 8 * MiB},
}


class StandInMachine:
    def __init__(self, names, cap=(12, 0), p2p=True, table=TABLE, caps=None):
        self.names, self.cap, self.p2p, self.table, self.caps = names, cap, p2p, table, caps or {}

    def gpus(self):
        return list(self.names)

    def capability(self, index):
        return self.caps.get(index, self.cap)

    def can_access_peer(self, a, b):
        return self.p2p(a, b) if callable(self.p2p) else self.p2p

    def limits(self):
        return self.table

    def sglang_version(self):
        return "0.5.23"


def test_the_plan_defaults_to_every_gpu_down_to_a_supported_world_size():
    p = machine.plan(cli.parse([]), StandInMachine([RTX] * 8))
    assert (p.world_size, p.answered_capability, p.builtin_limit) == (8, 12, 8 * MiB)
    p = machine.plan(cli.parse([]), StandInMachine([RTX] * 3))
    assert (p.world_size, p.gpus) == (2, [RTX, RTX])
    p = machine.plan(cli.parse(["--tp", "4"]), StandInMachine([RTX] * 8))
    assert (p.world_size, p.builtin_limit) == (4, 16 * MiB)


def test_capability_answered_as_12_takes_the_sm120_table():
    p = machine.plan(cli.parse(["--capability", "12"]), StandInMachine([H200] * 2, cap=(9, 0)))
    assert (p.capability, p.answered_capability, p.builtin_limit) == ((9, 0), 12, 16 * MiB)


@pytest.mark.parametrize(
    "names, argv, kw, code, first",
    [
        ([], [], {}, 1, "no GPU is visible here (torch sees none)"),
        ([RTX], [], {}, 1, f"one GPU is visible ({RTX}): an all-reduce needs two or more"),
        ([RTX] * 2, ["--tp", "4"], {}, 2, "--tp 4: only 2 GPUs are visible; use --tp 2 or less"),
        (
            [RTX] * 8,
            ["--tp", "3"],
            {},
            2,
            "--tp 3: SGLang's communicator supports world sizes 2, 4, 6, 8 on capability 12",
        ),
        ([RTX] * 2, [], {"p2p": False}, 1, "GPU 0 cannot access GPU 1's memory (no peer-to-peer)"),
        ([RTX] * 4, [], {"p2p": lambda a, b: {a, b} != {2, 3}}, 1, "GPU 2 cannot access GPU 3's memory"),
        (
            [RTX] * 2,
            [],
            {"table": {9: {2: MiB}}},
            1,
            "SGLang 0.5.23's symmetric-memory all-reduce has no size table for capability 12 (it has 9)",
        ),
        (
            [H200] * 2,
            ["--capability", "11"],
            {"cap": (9, 0)},
            2,
            "SGLang 0.5.23's symmetric-memory all-reduce has no size table for capability 11",
        ),
        ([RTX] * 2, [], {"caps": {1: (9, 0)}}, 1, "the GPUs differ in compute capability ((12, 0) and (9, 0))"),
    ],
)
def test_what_the_machine_cannot_do_is_one_line(names, argv, kw, code, first, capsys):
    assert sweep_main.main(argv, make_machine=lambda: StandInMachine(names, **kw), launcher=_unused) == code
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == f"allreduce-sweep: error: {first}" or lines[0].startswith(f"allreduce-sweep: error: {first}"), (
        err
    )
    assert len(lines) <= 3 and "Traceback" not in err


# --------------------------------------------------------------------------------------------------
# Crossover and limit, on given timings
# --------------------------------------------------------------------------------------------------


def rows(*timings: tuple[str, float, float], exact: bool = True, path: str = report.TWO_SHOT) -> list[Row]:
    return [Row(sizes.parse_size(s), t, n, exact, 0.0, True, path=path) for s, t, n in timings]


TYPICAL = rows(("4K", 8, 20), ("64K", 10, 22), ("1M", 30, 40), ("4M", 90, 100), ("8M", 200, 150), ("16M", 400, 280))


def test_the_crossover_is_where_nccl_starts_winning_for_good():
    a = report.advise(TYPICAL, 2, 16 * MiB)
    assert (a.crossover, a.limit) == (8 * MiB, 8 * MiB)
    assert a.lines == [
        "crossover: NCCL is faster from 8 MiB on (two-shot up to 4 MiB)",
        "limit to set: SM120_SYMM_MEM_MAX_SIZES=2:8MiB   (messages below 8 MiB take two-shot)",
        "built-in limit at world size 2: 16 MiB",
    ]


def test_a_two_shot_win_after_an_nccl_one_moves_the_crossover_up():
    noisy = rows(("64K", 10, 20), ("256K", 30, 25), ("1M", 40, 50), ("4M", 120, 100), ("8M", 250, 150))
    assert report.advise(noisy, 4, 16 * MiB).limit == 4 * MiB


def test_two_shot_faster_everywhere_keeps_the_largest_size_and_says_so():
    a = report.advise(rows(("4K", 5, 20), ("64M", 900, 1000)), 2, 16 * MiB)
    assert (a.crossover, a.limit) == (None, 64 * MiB)
    assert a.lines[0].startswith("crossover: none up to 64 MiB: two-shot is faster at the largest size measured")


def test_nccl_faster_everywhere_says_leave_it_off_with_the_rule_name():
    a = report.advise(rows(("4K", 30, 20), ("1M", 60, 50)), 8, 8 * MiB)
    assert (a.crossover, a.limit) == (4 * KiB, None)
    assert a.lines[1] == "limit to set: none; leave symmetric memory off: SKIP_RUNTIME_RULES=torch-symm-mem"


def test_a_limit_equal_to_the_built_in_one_says_so():
    assert report.advise(TYPICAL, 2, 8 * MiB).lines[-1] == "built-in limit at world size 2: 8 MiB (the same)"


def test_the_rule_the_advice_names_turns_symm_mem_on_in_every_track():
    for version, track in cfg.load().tracks.items():
        names = [r.name for r in track.runtime if tools.TOOLS["allreduce-sweep"][1] in r.args]
        assert names == [report.RULE], version


def test_multimem_rows_name_multimem_in_the_crossover_and_the_limit():
    multimem = rows(("4K", 8, 20), ("1M", 30, 40), ("8M", 200, 150), ("16M", 400, 280), path=report.MULTIMEM)
    a = report.advise(multimem, 4, 64 * MiB)
    assert (a.crossover, a.limit) == (8 * MiB, 8 * MiB)
    assert a.lines == [
        "crossover: NCCL is faster from 8 MiB on (multimem up to 1 MiB)",
        "limit to set: SM120_SYMM_MEM_MAX_SIZES=4:8MiB   (messages below 8 MiB take multimem)",
        "the limit is multimem's: SGLang takes multimem, not two-shot, on these GPUs at world size 4; "
        "on sm_120 (two-shot over PCIe) measure there",
        "built-in limit at world size 4: 64 MiB",
    ]
    everywhere = report.advise(rows(("4K", 5, 20), ("64M", 900, 1000), path=report.MULTIMEM), 4, 64 * MiB)
    assert everywhere.lines[0].startswith("crossover: none up to 64 MiB: multimem is faster at the largest size")
    text = report.table(multimem)
    assert text.splitlines()[0].startswith("| size | multimem (us) | NCCL (us) | NCCL / multimem | faster |")
    assert "| 4 KiB | 8.0 | 20.0 | 2.50 | multimem | equal | 0 |" in text and "two-shot" not in text
    assert report.path_of(multimem) == "multimem" and report.path_of([]) == "two-shot"


def test_the_table_is_markdown_and_marks_a_differing_sum():
    text = report.table([*TYPICAL[:1], Row(MiB, 30, 40, False, 0.5, False)])
    head, _, first, second = text.splitlines()
    assert head.startswith("| size | two-shot (us) | NCCL (us) | NCCL / two-shot | faster |")
    assert first == "| 4 KiB | 8.0 | 20.0 | 2.50 | two-shot | equal | 0 |"
    assert second == "| 1 MiB | 30.0 | 40.0 | 1.33 | two-shot | DIFFERS | 0.5 (too big) |"


# --------------------------------------------------------------------------------------------------
# The whole run on stand-in answers: what the user reads, the JSON, the exit status
# --------------------------------------------------------------------------------------------------


def launcher_of(result_rows: list[Row], log: list[str] | None = None):
    seen = {}

    def launch(fields, timeout):
        seen.update(fields, timeout=timeout)
        first = {"rows": [r.__dict__ for r in result_rows], "log": log or [], "max_size": 68 * KiB}
        return [first, {"rows": [], "log": [], "max_size": 68 * KiB}]

    return launch, seen


def test_a_run_prints_the_table_the_crossover_and_the_limit(tmp_path, capsys):
    log = ["INFO: TorchSymmMemCommunicator: two-shot all-reduce (capability 12, world size 2, multicast not available)"]
    launch, seen = launcher_of(TYPICAL, log)
    out_json = tmp_path / "sweep.json"
    argv = ["--capability", "12", "--sizes", "4K..16M", "--json", str(out_json), "--cuda-graph"]
    assert sweep_main.main(argv, make_machine=lambda: StandInMachine([H200] * 2, cap=(9, 0)), launcher=launch) == 0
    assert seen["world_size"] == 2 and seen["capability"] == 12 and seen["cuda_graph"] is True
    assert seen["sizes"][0] == 4 * KiB and seen["sizes"][-1] == 16 * MiB and seen["timeout"] == 900.0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert (
        out[0]
        == "all-reduce sweep: SGLang 0.5.23's TorchSymmMemCommunicator against NCCL, bf16, TP 2, inside CUDA graphs"
    )
    assert out[1] == "GPUs: 2 x NVIDIA H200 (capability 9.0; the communicator was told 12)"
    assert out[2].startswith("communicator: two-shot all-reduce (capability 12, world size 2")
    assert out[3] == "path: two-shot (two_shot_all_reduce_: SGLang's kernel at capability 12, world size 2)"
    assert out[4].endswith("so that every size it measures takes two-shot)")
    assert any(line.startswith("note: these GPUs are capability 9.0, not sm_120") for line in out)
    assert "| 8 MiB | 200.0 | 150.0 | 0.75 | NCCL | equal | 0 |" in out
    assert out[-2] == "limit to set: SM120_SYMM_MEM_MAX_SIZES=2:8MiB   (messages below 8 MiB take two-shot)"
    assert "[allreduce-sweep] TP 2: 15 sizes" not in captured.err and "[allreduce-sweep] TP 2:" in captured.err
    data = json.loads(out_json.read_text())
    assert data["limit_env"] == "SM120_SYMM_MEM_MAX_SIZES=2:8MiB" and data["crossover"] == 8 * MiB
    assert data["answered_capability"] == 12 and data["capability"] == [9, 0] and len(data["rows"]) == 6
    assert data["path"] == "two-shot" and {r["path"] for r in data["rows"]} == {"two-shot"}


def test_multimem_taken_by_sglang_is_labelled_multimem(tmp_path, capsys):
    """Capability 9 at TP 4 without --capability: SGLang's communicator takes multimem_all_reduce_ (the worker
    reports it in every row); the header, the table and the advice say multimem, not two-shot."""
    multimem = rows(("4K", 8, 20), ("1M", 30, 40), ("8M", 200, 150), path=report.MULTIMEM)
    launch, seen = launcher_of(multimem)
    out_json = tmp_path / "sweep.json"
    argv = ["--sizes", "4K..8M", "--json", str(out_json)]
    assert sweep_main.main(argv, make_machine=lambda: StandInMachine([H200] * 4, cap=(9, 0)), launcher=launch) == 0
    assert seen["world_size"] == 4 and seen["capability"] is None
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "GPUs: 4 x NVIDIA H200 (capability 9.0)"
    assert out[2] == (
        "path: multimem (multimem_all_reduce_ over NVLink multicast: SGLang selects it at capability 9, world size "
        "4), not two-shot; sm_120 takes two-shot, which --capability 12 measures"
    )
    assert out[3].endswith("so that every size it measures takes multimem)")
    assert any(line.startswith("| size | multimem (us) | NCCL (us) | NCCL / multimem |") for line in out)
    assert "| 4 KiB | 8.0 | 20.0 | 2.50 | multimem | equal | 0 |" in out
    assert "crossover: NCCL is faster from 8 MiB on (multimem up to 1 MiB)" in out
    assert "limit to set: SM120_SYMM_MEM_MAX_SIZES=4:8MiB   (messages below 8 MiB take multimem)" in out
    assert not [line for line in out if "two-shot" in line and not line.startswith(("path:", "the limit is"))]
    assert json.loads(out_json.read_text())["path"] == "multimem"


def test_a_multimem_sum_that_differs_names_multimem(capsys):
    launch, _ = launcher_of(
        [*rows(("4K", 8, 20), path=report.MULTIMEM), Row(MiB, 30, 40, False, 0.0, True, 1, "multimem")]
    )
    assert sweep_main.main([], make_machine=lambda: StandInMachine([H200] * 4, cap=(9, 0)), launcher=launch) == 1
    captured = capsys.readouterr()
    assert "SUMS DIFFER at 1 MiB: multimem's sum is not NCCL's" in captured.out
    assert captured.err.splitlines()[-1].startswith("allreduce-sweep: error: multimem's sum differs from NCCL's")


# --------------------------------------------------------------------------------------------------
# The worker's CPU parts: which path the communicator takes, the rules' environment
# --------------------------------------------------------------------------------------------------


class FakeCommunicator:
    """What the worker reads off SGLang's communicator: the patch's use_multimem, or all_reduce's own inputs."""

    _WORLD_SIZES_MULTIMEM: ClassVar[dict[int, list[int]]] = {9: [4, 6, 8], 10: [4, 6, 8]}  # 0.5.23's; 0.5.9: 10: [6, 8]

    def __init__(self, world_size, capability, **attrs):
        self.world_size, self.device_capability = world_size, capability
        self.__dict__.update(attrs)


@pytest.mark.parametrize(
    "comm, path",
    [
        (FakeCommunicator(4, 9, use_multimem=True), "multimem"),  # as the patch records it
        (FakeCommunicator(4, 12, use_multimem=False), "two-shot"),
        (FakeCommunicator(2, 9, use_multimem=False), "two-shot"),
        (FakeCommunicator(8, 10), "multimem"),  # without use_multimem: all_reduce's test on the table
        (FakeCommunicator(2, 10), "two-shot"),
        (FakeCommunicator(8, 12), "two-shot"),  # capability 12 is never in the table
        (object(), "two-shot"),  # a stand-in with none of it
    ],
)
def test_the_worker_reads_the_path_the_communicator_takes(comm, path):
    assert worker.symm_mem_path(comm) == path


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_the_patch_records_use_multimem_as_all_reduce_decides(patch: Path):
    text = patch.read_text()
    assert "+        self.use_multimem = self.world_size in self._WORLD_SIZES_MULTIMEM.get(" in text
    assert "+        if not self.use_multimem and not _group_has_peer_access(" in text


@pytest.mark.parametrize("version", sorted(cfg.load().tracks))
def test_outside_the_entrypoint_the_worker_gets_the_rules_environment(tmp_path, version):
    plan = real_plan(tmp_path / "plan.json", version)
    spec = entry_spec.from_plan(json.loads(plan.read_text()))
    _, through_entrypoint = tools.command("allreduce-sweep", [], spec, {})  # what the entrypoint route adds
    environ = {"SM120_PLAN": str(plan)}
    assert worker.rule_environment(environ) == through_entrypoint
    assert environ == {"SM120_PLAN": str(plan), **through_entrypoint}
    if version == "0.5.23":
        assert through_entrypoint == {"SGLANG_OPT_USE_INKLING_CUSTOM_AR": "0"}
    for name in through_entrypoint:  # a variable already set wins, as through the entrypoint
        environ = {"SM120_PLAN": str(plan), name: "1"}
        assert worker.rule_environment(environ) == {k: v for k, v in through_entrypoint.items() if k != name}
        assert environ[name] == "1"


def test_without_a_plan_the_worker_adds_nothing(tmp_path):
    environ = {"SM120_PLAN": str(tmp_path / "missing.json")}
    assert worker.rule_environment(environ) == {} and environ == {"SM120_PLAN": str(tmp_path / "missing.json")}


def test_the_worker_sets_the_rules_environment_before_it_imports_torch():
    tree = ast.parse(Path(worker.__file__).read_text())
    (run,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_run"]
    first = run.body[0]
    assert isinstance(first, ast.Expr) and ast.unparse(first) == "rule_environment(os.environ)"


def test_on_sm120_no_note_is_printed(capsys):
    launch, _ = launcher_of(TYPICAL)
    assert sweep_main.main([], make_machine=lambda: StandInMachine([RTX] * 2), launcher=launch) == 0
    assert "note:" not in capsys.readouterr().out


def test_a_sum_that_differs_prints_the_table_and_exits_1(capsys):
    launch, _ = launcher_of([*TYPICAL[:2], Row(MiB, 30, 40, False, 0.0, True)])
    assert sweep_main.main([], make_machine=lambda: StandInMachine([RTX] * 2), launcher=launch) == 1
    captured = capsys.readouterr()
    assert "SUMS DIFFER at 1 MiB: two-shot's sum is not NCCL's" in captured.out
    assert "limit to set" not in captured.out
    assert captured.err.splitlines()[-1].startswith("allreduce-sweep: error: two-shot's sum differs from NCCL's")


def test_a_failure_of_the_ranks_is_its_one_line(capsys):
    from sm120.image.allreduce import errors

    def launch(fields, timeout):
        raise errors.machine("rank 1 was killed by SIGFPE (its output above says more)")

    assert sweep_main.main([], make_machine=lambda: StandInMachine([RTX] * 2), launcher=launch) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "allreduce-sweep: error: rank 1 was killed by SIGFPE (its output above says more)"
    )


def test_a_bug_is_one_line_not_a_traceback(capsys):
    def launch(fields, timeout):
        return [{"rows": [{"size": 1}]}]  # not a row

    assert sweep_main.main([], make_machine=lambda: StandInMachine([RTX] * 2), launcher=launch) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("allreduce-sweep: internal error: TypeError:") and "Traceback" not in err


# --------------------------------------------------------------------------------------------------
# The entrypoint's route, and the image
# --------------------------------------------------------------------------------------------------


def test_the_entrypoint_lists_the_tool_among_the_modes(tmp_path):
    env = clean_env(SM120_PLAN=str(synthetic_plan(tmp_path / "plan.json")))
    proc = run_entrypoint(["--help"], env)
    assert proc.returncode == 0
    modes = proc.stdout.split("modes:\n", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^  allreduce-sweep  measures SGLang's symmetric-memory", modes, re.M), modes
    assert "IMAGE allreduce-sweep [--tp N] [--sizes LIST]" in proc.stdout


def test_the_entrypoint_runs_the_sweep_with_its_arguments(tmp_path):
    env = clean_env(SM120_PLAN=str(synthetic_plan(tmp_path / "plan.json")))
    proc = run_entrypoint(["allreduce-sweep", "--help"], env)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: allreduce-sweep")
    bad = run_entrypoint(["allreduce-sweep", "--tp", "1", "--", "x"], env)
    assert bad.returncode == 2
    assert stderr_lines(bad) == [
        "allreduce-sweep: error: argument --tp: '1' is not a whole number from 2 to 64 (see allreduce-sweep --help)"
    ]
    no_torch = run_entrypoint(["allreduce-sweep"], env)  # this interpreter has no torch; the image's has
    assert no_torch.returncode == 1 and stderr_lines(no_torch)[0].startswith("allreduce-sweep: error: torch cannot")


def test_a_misspelt_tool_is_suggested(tmp_path):
    env = clean_env(SM120_PLAN=str(synthetic_plan(tmp_path / "plan.json")))
    proc = run_entrypoint(["allreduce-swep"], env)
    assert proc.returncode == 2
    assert (
        stderr_lines(proc)[0] == "entrypoint: error: unknown mode 'allreduce-swep'; perhaps you meant allreduce-sweep"
    )


@pytest.mark.parametrize("version", sorted(cfg.load().tracks))
def test_the_sweep_gets_the_symm_mem_rules_environment_and_yours_wins(tmp_path, version):
    spec = entry_spec.from_plan(json.loads(real_plan(tmp_path / "plan.json", version).read_text()))
    rule_env = {k: v for r in spec.runtime if "--enable-torch-symm-mem" in r.args for k, v in r.env.items()}
    argv, env = tools.command("allreduce-sweep", ["--tp", "2"], spec, {"PATH": "/bin"})
    assert argv[:2] == [sys.executable, "-c"] and argv[3:] == ["--tp", "2"]
    assert f"sys.path.insert(0, {str(tools.ROOT)!r}); from sm120.image.allreduce.__main__ import main" in argv[2]
    assert env == {"PATH": "/bin", **rule_env}
    if rule_env:  # 0.5.23: SGLANG_OPT_USE_INKLING_CUSTOM_AR=0 keeps the patch's limits
        (name,) = rule_env
        _, env = tools.command("allreduce-sweep", [], spec, {name: "1"})
        assert env[name] == "1"


def test_the_image_ships_the_sweep_package():
    """Every tool is a package inside sm120/image/, which the image holds whole (tests/unit/test_layout.py)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY sm120/image/ /opt/sglang-sm120/sm120/image/" in dockerfile
    overlay = dockerfile.split("AS overlay", 1)[1].split("\nFROM ", 1)[0]
    assert "COPY --from=patched /opt/sglang-sm120/sm120/ /opt/sglang-sm120/sm120/" in overlay
    for module, _, _ in tools.TOOLS.values():
        package = module.replace(".", "/")
        assert package.startswith("sm120/image/") and (ROOT / package / "__main__.py").is_file(), package
        assert not re.search(r"^\s*(import|from)\s+(torch|sglang)", (ROOT / package / "__main__.py").read_text(), re.M)
