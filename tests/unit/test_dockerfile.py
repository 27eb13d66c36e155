"""The Dockerfile's ARGs: each default declared once above the first FROM, equal to the default plan; stages
re-declare what they use without a value; nothing that depends on the builder's size reaches a layer's cache key;
the `patched` stage copies the patch engine and exactly the modules it imports."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sm120 import build_args
from sm120 import config as cfg
from sm120 import plan as planmod
from sm120 import resources as res
from sm120.entrypoint.preflight import CACHE_VARIABLES

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Dockerfile").read_text()
CONFIG = cfg.load(ROOT / "build.toml")
SMALL = res.Resources(cpus=2, memory_bytes=8 * 1024**3, source="test")
LARGE = res.Resources(cpus=64, memory_bytes=256 * 1024**3, source="test")


def top_defaults() -> dict[str, str]:
    return build_args.dockerfile_defaults(TEXT)


def stages() -> dict[str, str]:
    return build_args.stages(TEXT)


def test_every_default_is_declared_once_above_the_first_from():
    every = re.findall(r"^ARG (\w+)=", TEXT, flags=re.MULTILINE)
    assert len(every) == len(set(every)), (
        f"ARG defaults declared twice: {sorted(n for n in every if every.count(n) > 1)}"
    )
    assert set(every) == set(top_defaults()), "an ARG default is declared inside a stage"
    for name, used in build_args.stage_args(TEXT).items():
        for arg in used:
            assert arg in top_defaults(), f"stage {name} re-declares ARG {arg}, which has no default at the top"


def test_defaults_equal_the_default_plan():
    plan = planmod.resolve(CONFIG, machine=SMALL)
    assert top_defaults() == plan.build_args


def test_no_syntax_line_and_stage_comments():
    assert not re.search(r"^#\s*syntax=", TEXT, flags=re.MULTILINE)
    lines = TEXT.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FROM "):
            before = "\n".join(lines[max(0, i - 3) : i])
            assert "# ----" in before, f"stage at line {i + 1} has no comment saying why it exists"


@pytest.mark.parametrize("profile", sorted(CONFIG.profiles))
@pytest.mark.parametrize("track", sorted(CONFIG.tracks))
def test_builders_of_any_size_share_the_compiled_layers(profile: str, track: str):
    """Two plans for different machines give the same build args: the flash-attn and sgl-kernel layers' cache
    keys (their ARGs, their RUN text) cannot differ; the parallelism reaches them only as a secret."""
    small = planmod.resolve(CONFIG, profile=profile, sglang=track, machine=SMALL)
    large = planmod.resolve(CONFIG, profile=profile, sglang=track, machine=LARGE)
    assert small.build_jobs != large.build_jobs, "the two machines should get different parallelism"
    assert small.build_args == large.build_args
    for stage in ("flash-attn", "sgl-kernel"):
        text = stages()[stage]
        assert "id=build_jobs" in text, f"stage {stage} does not read the build_jobs secret"
        used = build_args.stage_args(TEXT)[stage]
        assert used <= set(small.build_args)
        assert not used & {"MAX_JOBS", "NVCC_THREADS", *small.build_jobs}


def test_one_job_budget_split_between_stages_that_compile_together():
    jobs = planmod._build_jobs(16, 1, ["flash-attn", "sgl-kernel"])
    assert int(jobs["FLASH_ATTN_MAX_JOBS"]) + int(jobs["SGL_KERNEL_MAX_JOBS"]) == 16
    alone = planmod._build_jobs(16, 1, ["flash-attn"])
    assert alone["FLASH_ATTN_MAX_JOBS"] == "16"
    assert planmod._build_jobs(1, 1, ["flash-attn", "sgl-kernel"])["SGL_KERNEL_MAX_JOBS"] == "1"


def test_the_cache_variables_are_the_entrypoints_list():
    """The runtime ENV points exactly the variables of CACHE_VARIABLES under ${CACHE_DIR}, each where it says."""
    runtime = stages()["runtime"]
    found = dict(re.findall(r"^\s+(\w+)=\$\{CACHE_DIR\}(\S*?) ?\\?$", runtime, flags=re.MULTILINE))
    want = {var.name: f"/{var.under}" if var.under else "" for var in CACHE_VARIABLES}
    assert found == want, "the Dockerfile's runtime ENV and sm120/entrypoint/preflight.py CACHE_VARIABLES differ"


def engine_files() -> set[str]:
    """sm120/__init__.py, the patch engine and every sm120 module it imports (transitively)."""
    todo, seen = ["patch_engine"], {"__init__"}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((ROOT / "sm120" / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo += [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n.split(".")[0] == "sm120" for n in names), f"sm120/{name}.py: use a relative import"
    return {f"sm120/{n}.py" for n in seen}


def test_the_patched_stage_copies_the_engine_and_exactly_what_it_imports(tmp_path):
    """An edit to any other module of sm120/ (the CLI's errors and suggestions among them) re-runs no stage; a module
    the engine imports but the stage does not copy would fail the build. .dockerignore lets in the same files."""
    (line,) = [x for x in stages()["patched"].splitlines() if x.startswith("COPY ") and "/opt/build/engine/" in x]
    copied = set(line.split()[1:-1])
    assert copied == engine_files()
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert {x[1:] for x in ignore if re.fullmatch(r"!sm120/\w+\.py", x)} == copied
    for path in copied:
        (tmp_path / path).parent.mkdir(exist_ok=True)
        shutil.copyfile(ROOT / path, tmp_path / path)
    probe = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import sm120.patch_engine as e; print(e.__file__)"
    out = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "sm120" / "patch_engine.py")
