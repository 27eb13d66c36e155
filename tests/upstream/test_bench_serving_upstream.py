"""T1: what `build.py bench` asks of SGLang's bench_serving, read from each track's real release (its source, parsed,
not imported: a release that renames an option or a result field fails here, not on a GPU).

- the module the in-image launcher runs (sglang.benchmark.serving, else sglang.bench_serving) runs as __main__;
- every option of serving.Job.argv is one of that module's `add_argument` options;
- every field of the result line that sweep.run_figures reads (sweep.RECORD_KEYS) is a key the module writes;
- the API key is read from OPENAI_API_KEY and sent as `Authorization: Bearer` (how the launcher hands it over);
- the sharegpt loader reads `conversations` and their `value`s (serving.write_dataset's format).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from sm120.bench import serving, sweep
from tests.upstream.conftest import TRACKS
from tests.upstream.env import ensure, run_snippet


@functools.cache
def package(version: str) -> Path:
    where = "import importlib.util; emit(importlib.util.find_spec('sglang').submodule_search_locations[0])"
    return Path(run_snippet(ensure(version), where))


def module(version: str) -> Path:
    """The file the launcher runs (serving.LAUNCHER's choice)."""
    root = package(version)
    moved = root / "benchmark" / "serving.py"
    return moved if moved.is_file() else root / "bench_serving.py"


def tree(version: str) -> ast.Module:
    return ast.parse(module(version).read_text(encoding="utf-8"))


@pytest.mark.parametrize("version", TRACKS)
def test_the_launchers_module_runs_as_main(version):
    mains = [n for n in tree(version).body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    assert mains, f"{module(version)} has no `if __name__ == '__main__'`"


@pytest.mark.parametrize("version", TRACKS)
def test_every_option_bench_passes_is_one_of_the_release(version):
    options = {
        a.value
        for call in ast.walk(tree(version))
        if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument"
        for a in call.args
        if isinstance(a, ast.Constant) and isinstance(a.value, str)
    }
    job = serving.Job(image="i", endpoint="http://127.0.0.1:1", tokenizer="/t", max_tokens=8, seed=0, deadline_s=1)
    passed = [a for a in job.argv(1, 4, "/bench/dataset-4.json", "/bench/result.jsonl") if a.startswith("--")]
    assert len(passed) > 10
    assert sorted(set(passed) - options) == []


@pytest.mark.parametrize("version", TRACKS)
def test_every_result_field_bench_reads_is_written_by_the_release(version):
    keys = {
        k.value
        for d in ast.walk(tree(version))
        if isinstance(d, ast.Dict)
        for k in d.keys
        if isinstance(k, ast.Constant) and isinstance(k.value, str)
    }
    assert sorted(set(sweep.RECORD_KEYS) - keys) == []


@pytest.mark.parametrize("version", TRACKS)
def test_the_key_goes_from_openai_api_key_to_a_bearer_header(version):
    for node in ast.walk(tree(version)):
        if isinstance(node, ast.FunctionDef) and "OPENAI_API_KEY" in ast.unparse(node):
            assert "Bearer" in ast.unparse(node)
            return
    pytest.fail(f"{module(version)} no longer reads OPENAI_API_KEY")


@pytest.mark.parametrize("version", TRACKS)
def test_the_sharegpt_loader_reads_conversations_and_values(version):
    root = package(version)
    sources = [module(version), *(root / "benchmark" / "datasets").glob("sharegpt*.py")]
    text = "\n".join(p.read_text(encoding="utf-8") for p in sources if p.is_file())
    assert "def sample_sharegpt_requests" in text
    assert '"conversations"' in text and '["value"]' in text
