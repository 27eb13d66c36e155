"""The house's one boundary: sm120/image/ (copied into the image whole) imports only the standard library and
itself; the host-side package may import from it, never the other way round."""

from __future__ import annotations

import ast
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
