"""What the installed SGLang has, read from its files without importing it (importing takes seconds and torch):
its version, a patch's change, the model registry (`EntryClass` under srt/models), the CLI options, the
quantization methods, and the methods of a model class and its bases."""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.metadata
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

_VERSION = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)
_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\([^)]*\)|\w+)", re.M)
_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass
class InstalledSGLang:
    package: Path  # .../site-packages/sglang
    _texts: dict[Path, str] = field(default_factory=dict, repr=False)
    _options: frozenset[str] | None = field(default=None, repr=False)

    @property
    def root(self) -> Path:
        return self.package.parent

    @property
    def version(self) -> str | None:
        """The release, from sglang/_version.py, else the installed metadata."""
        if match := _VERSION.search(self._read(self.package / "_version.py") or ""):
            return match.group(1)
        for dist in importlib.metadata.distributions(path=[str(self.root)]):
            if (dist.metadata["Name"] or "").lower() == "sglang":
                return dist.version
        return None

    def _read(self, path: Path) -> str | None:
        if path not in self._texts:
            try:
                self._texts[path] = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None
        return self._texts[path]

    def _nodes(self, path: Path) -> list[ast.AST]:
        """Every node of a Python file (none where it cannot be read or parsed)."""
        try:
            return list(ast.walk(ast.parse(self._read(path) or "")))
        except (SyntaxError, ValueError, RecursionError):
            return []

    def _model_files(self) -> list[Path]:
        models = self.package / "srt" / "models"
        return sorted(models.rglob("*.py")) if models.is_dir() else []

    def has_change(self, checks: Sequence[tuple[str, Sequence[str]]]) -> tuple[bool, str]:
        """(present, the first file that lacks it) for checks of (site-packages-relative path, regexes): whether a
        patch's change is there, applied by this image or already upstream's."""
        for rel, patterns in checks:
            text = self._read(self.root / rel)
            if text is None or not all(re.search(p, text, re.M) for p in patterns):
                return False, rel
        return True, ""

    def options(self) -> frozenset[str]:
        """The option strings of SGLang's CLI parser (`add_argument("--...")` in srt/server_args.py), so that an
        abbreviation is refused before the GPU checks. Empty where the parser is built another way (0.5.23 makes
        its options from ServerArgs' fields): then the options the entrypoint relies on stand in."""
        if self._options is None:
            found = {
                a.value
                for node in self._nodes(self.package / "srt" / "server_args.py")
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
            }
            # A parser assembled some other way (a loop, a helper): these are then not all of its options.
            self._options = frozenset(found) if {"--model-path", "--tp-size", "--port"} <= found else frozenset()
        return self._options

    def knows_option(self, option: str) -> bool:
        """Whether SGLang's CLI parser has `option`: in options(), or, where those cannot be read, a ServerArgs
        field of that name in srt/server_args.py."""
        if options := self.options():
            return option in options
        dest = option.lstrip("-").replace("-", "_")
        text = self._read(self.package / "srt" / "server_args.py") or ""
        return re.search(rf"^\s+{re.escape(dest)}\s*:", text, re.M) is not None

    def quantization_methods(self) -> frozenset[str]:
        """The names SGLang's QUANTIZATION_METHODS takes (srt/layers/quantization/__init__.py: the keys of the
        BASE_QUANTIZATION_METHODS literal and of every .update({...}) of it); empty when they cannot be read."""
        found: set[str] = set()
        for node in self._nodes(self.package / "srt" / "layers" / "quantization" / "__init__.py"):
            literal = None
            if "BASE_QUANTIZATION_METHODS" in _assigned(node):
                literal = node.value  # type: ignore[attr-defined]
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "BASE_QUANTIZATION_METHODS.update":
                literal = node.args[0] if node.args else None
            if isinstance(literal, ast.Dict):
                found.update(k.value for k in literal.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        return frozenset(found) if {"fp8", "modelopt_fp4"} <= found else frozenset()

    def entry_classes(self, path: Path) -> list[str]:
        """The class names a model file's `EntryClass` names (what SGLang's registry takes from it)."""
        text = self._read(path) or ""
        return [name for match in _ENTRY.finditer(text) for name in _NAME.findall(match.group(1))]

    @functools.cached_property
    def _registry(self) -> set[str]:
        return {n for path in self._model_files() for n in self.entry_classes(path)}

    def registered(self, name: str) -> bool:
        return name in self._registry

    def registered_like(self, needle: str) -> list[str]:
        return sorted(n for n in self._registry if needle in n)

    def _classes(self, name: str) -> list[ast.ClassDef]:
        """The top-level definitions of class `name` in SGLang's model files."""
        pattern = re.compile(rf"^class\s+{re.escape(name)}\b", re.M)
        found = []
        for path in self._model_files():
            text = self._read(path) or ""
            try:
                body = ast.parse(text, str(path)).body if pattern.search(text) else []
            except SyntaxError:
                continue
            found += [node for node in body if isinstance(node, ast.ClassDef) and node.name == name]
        return found

    def methods_missing(self, name: str, methods: Sequence[str]) -> list[str] | None:
        """The methods that neither the class nor any base found here defines, following the bases by name through
        srt/models; None when it cannot be told (class not found, or a `__getattr__` on the way)."""
        missing = set(methods)
        seen: set[str] = set()
        todo = [name]
        found_any = False
        while todo and missing:
            current = todo.pop()
            seen.add(current)
            for cls in self._classes(current):
                found_any = True
                members = {s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
                members.update(n for s in cls.body for n in _assigned(s))
                if "__getattr__" in members:
                    return None
                missing -= members
                todo.extend(base for b in cls.bases if (base := _base_name(b)) and base not in seen)
        return sorted(missing) if found_any else None


def _assigned(node: ast.AST) -> list[str]:
    """The names an assignment binds (`x = ...`, `x: T = ...`); none for any other node."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _base_name(node: ast.expr) -> str:
    node = node.value if isinstance(node, ast.Subscript) else node
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def locate(search_path: Sequence[str] | None = None) -> InstalledSGLang | None:
    """The installed `sglang` package this interpreter would import (found, not imported), or None."""
    try:
        spec = importlib.machinery.PathFinder.find_spec("sglang", list(search_path) if search_path else None)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return InstalledSGLang(Path(next(iter(spec.submodule_search_locations))))
