"""T1: the census's FlashInfer modules, by name, against the real FlashInfer release it is of (its wheel from PyPI,
read, not imported: there is no nvcc or GPU here): every census generator is a function of that release, and the
place the flashinfer-prebuilt stage puts modules is the one that release's loader looks in first, without a GPU
or a provider package. The build and the load are proven in the image (T2, sm120/verify/suite/test_jit.py)."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import zipfile

import pytest

from sm120.patches import pypi
from sm120.plan import prebuilt

CENSUS = prebuilt.census()
VERSION = CENSUS["census"]["flashinfer"]


@functools.cache
def wheel() -> zipfile.ZipFile:
    folder = pypi.cache_home() / "flashinfer" / VERSION
    found = sorted(folder.glob("flashinfer_python-*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(folder)]
        subprocess.run([*pip, f"flashinfer-python=={VERSION}"], check=True, timeout=900)
        found = sorted(folder.glob("flashinfer_python-*.whl"))
    return zipfile.ZipFile(found[0])


def source(module: str) -> ast.Module:
    return ast.parse(wheel().read(module.replace(".", "/") + ".py").decode())


@pytest.mark.parametrize("entry", CENSUS["modules"], ids=[m["name"] for m in CENSUS["modules"]])
def test_every_census_generator_is_a_function_of_the_release(entry):
    module, _, function = entry["gen"].partition(":")
    functions = {n.name: n for n in source(module).body if isinstance(n, ast.FunctionDef)}
    assert function in functions, f"flashinfer-python {VERSION} has no {module}.{function}"
    args = functions[function].args
    required = [a.arg for a in args.args][: len(args.args) - len(args.defaults)]
    assert set(required) <= set(entry.get("kwargs", {})), f"{entry['gen']} needs {required}"


def test_the_stage_puts_modules_where_the_release_looks_first_without_a_gpu():
    tree = source("flashinfer.jit.env")
    text = ast.unparse(tree)
    assert "FLASHINFER_AOT_DIR: pathlib.Path = _package_root / 'data' / 'aot'" in text
    lookup = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_aot_artifacts")
    first = ast.unparse(lookup.body[1:3])  # after the docstring: the fallback path, returned before any GPU query
    assert "FLASHINFER_AOT_DIR / module_name / f'{module_name}.so'" in first and "return" in first
