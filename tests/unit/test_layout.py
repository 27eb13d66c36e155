"""The house's one boundary: sm120/image/ (copied into the image whole) imports only the standard library and
itself; the host-side package may import from it, never the other way round."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "sm120" / "image"
IMAGE_FILES = sorted(IMAGE.rglob("*.py"))
# Imported inside the image from SGLang's own code (the start-up parse and the all-reduce workers run in the
# image's venv, next to SGLang and torch), never at the top level of a module the entrypoint loads first.
RUNTIME_PACKAGES = {"sglang", "torch", "sgl_kernel"}


def imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, absolute module name, at module level) of every import in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name, id(node) in top))
    return out


def test_there_is_an_image_package():
    assert IMAGE_FILES and (IMAGE / "__init__.py").is_file()


@pytest.mark.parametrize("path", IMAGE_FILES, ids=[str(p.relative_to(IMAGE)) for p in IMAGE_FILES])
def test_the_image_package_imports_only_the_standard_library_and_itself(path: Path):
    for line, name, at_top in imports(path):
        root = name.split(".")[0]
        if name == "sm120" or name.startswith("sm120.image"):
            continue
        if root in sys.stdlib_module_names or root == "__future__":
            continue
        if root in RUNTIME_PACKAGES and not at_top:
            continue
        pytest.fail(f"{path.relative_to(ROOT)}:{line} imports {name}: the image holds only sm120/image/")


def test_the_dockerfile_and_the_context_carry_the_image_package_whole():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY sm120/image/ " in dockerfile
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!sm120/image/" in ignore
    assert not [x for x in ignore if x.startswith("!sm120/") and x not in ("!sm120/image/", "!sm120/__init__.py")]


HOST_FILES = sorted(p for p in (ROOT / "sm120").rglob("*.py") if IMAGE not in p.parents)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_the_host_has_no_import_cycle_and_nothing_imports_the_cli():
    """The CLI imports every command by name (no import_module); a command imports the steps before its own, never
    the CLI: the module graph (imports under `if TYPE_CHECKING:`, for annotations only, left out) has no cycle."""
    modules = {_module(p) for p in HOST_FILES}
    assert "import_module" not in (ROOT / "sm120" / "cli.py").read_text(), "sm120/cli.py: import each command by name"
    graph: dict[str, set[str]] = {}
    for path in HOST_FILES:
        tree = ast.parse(path.read_text())
        hidden = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in hidden and (node.module or "").startswith("sm120"):
                found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            elif isinstance(node, ast.Import) and id(node) not in hidden:
                found |= {a.name for a in node.names}
        graph[_module(path)] = (found & modules) - {_module(path)}
        if _module(path) != "sm120.cli":
            assert "sm120.cli" not in graph[_module(path)], f"{path.relative_to(ROOT)} imports the CLI"
    state: dict[str, int] = {}

    def visit(module: str, trail: tuple[str, ...]) -> None:
        if state.get(module) == 2:
            return
        assert state.get(module) != 1, "an import cycle: " + " -> ".join((*trail, module))
        state[module] = 1
        for target in sorted(graph[module]):
            visit(target, (*trail, module))
        state[module] = 2

    for module in sorted(graph):
        visit(module, ())


# The H200 lender (benchmarks/device_kernel_runs.sh) has torch, psutil and the standard library, not this project's
# requirements: these scripts run there from a carried checkout, so what they import from sm120/ needs nothing more.
@pytest.mark.parametrize("script", ["kernel_build.py", "flashinfer_census.py"])
def test_the_lender_scripts_import_without_the_host_requirements(script: str):
    blocked = ("pydantic", "packaging", "yaml", "requests", "docker", "tabulate", "scipy")
    code = (
        "import sys, types, runpy\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "sys.modules.setdefault('psutil', types.ModuleType('psutil'))\n"
        f"runpy.run_path({str(ROOT / 'benchmarks' / script)!r}, run_name='lender_import_check')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
