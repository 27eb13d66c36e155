"""What the installed SGLang has, read from its files without importing it (importing takes seconds and torch).

- `version`: the release, from sglang/_version.py or the installed metadata.
- `has_change(checks)`: whether a patch's change is present (build.toml's upstream_check: every regex matches
  the file), whether this image applied the patch or upstream already has it.
- `registered(name)`: whether a model architecture is in SGLang's model registry (an `EntryClass` of a module
  under sglang/srt/models).
- `knows_option(option)`: whether the parser has that option (options(), else ServerArgs' field of its name).
- `options()`: every option string SGLang's CLI parser knows (`add_argument("--...")` in srt/server_args.py),
  so an abbreviation is refused before the GPU checks, which need the values SGLang will really read. Empty
  where the parser is built another way (0.5.23 makes its options from ServerArgs' dataclass fields): then
  the options the entrypoint relies on stand in, and the parser check refuses the other abbreviations.
- `methods_missing(class, methods)`: which methods a model class lacks, following its base classes by name
  through sglang/srt/models (None when that cannot be told: class not found, or a `__getattr__` on the way).
"""

from __future__ import annotations

import ast
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
class _Class:
    name: str
    bases: list[str]
    members: set[str]


@dataclass
class InstalledSGLang:
    package: Path  # .../site-packages/sglang
    _texts: dict[Path, str] = field(default_factory=dict, repr=False)
    _registry: set[str] | None = field(default=None, repr=False)
    _options: frozenset[str] | None = field(default=None, repr=False)

    @property
    def root(self) -> Path:
        return self.package.parent

    @property
    def models(self) -> Path:
        return self.package / "srt" / "models"

    @property
    def version(self) -> str | None:
        text = self._read(self.package / "_version.py")
        match = _VERSION.search(text or "")
        if match:
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

    def _model_files(self) -> list[Path]:
        return sorted(self.models.rglob("*.py")) if self.models.is_dir() else []

    def has_change(self, checks: Sequence[tuple[str, Sequence[str]]]) -> tuple[bool, str]:
        """(present, the first file that lacks it) for checks of (site-packages-relative path, regexes)."""
        for rel, patterns in checks:
            text = self._read(self.root / rel)
            if text is None or not all(re.search(p, text, re.M) for p in patterns):
                return False, rel
        return True, ""

    def options(self) -> frozenset[str]:
        """The option strings of SGLang's CLI parser, read from server_args.py; empty when they cannot be read."""
        if self._options is None:
            found: set[str] = set()
            text = self._read(self.package / "srt" / "server_args.py")
            try:
                tree = ast.parse(text or "")
            except (SyntaxError, ValueError, RecursionError):
                tree = None
            for node in ast.walk(tree) if tree is not None else ():
                call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                if call and node.func.attr == "add_argument":
                    found.update(
                        a.value
                        for a in node.args
                        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
                    )
            # A parser assembled some other way (a loop, a helper): these are then not all of its options.
            self._options = frozenset(found) if {"--model-path", "--tp-size", "--port"} <= found else frozenset()
        return self._options

    def knows_option(self, option: str) -> bool:
        """Whether SGLang's CLI parser has `option`: in options(), or, where those cannot be read (0.5.23 makes its
        options from ServerArgs' dataclass fields), a field of that name in srt/server_args.py."""
        options = self.options()
        if options:
            return option in options
        dest = option.lstrip("-").replace("-", "_")
        text = self._read(self.package / "srt" / "server_args.py") or ""
        return re.search(rf"^\s+{re.escape(dest)}\s*:", text, re.M) is not None

    def quantization_methods(self) -> frozenset[str]:
        """The names SGLang's QUANTIZATION_METHODS takes (srt/layers/quantization/__init__.py: the keys of the
        BASE_QUANTIZATION_METHODS literal and of every .update({...}) of it); empty when they cannot be read."""
        text = self._read(self.package / "srt" / "layers" / "quantization" / "__init__.py")
        try:
            tree = ast.parse(text or "")
        except (SyntaxError, ValueError, RecursionError):
            return frozenset()
        found: set[str] = set()
        for node in ast.walk(tree):
            literal = None
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "BASE_QUANTIZATION_METHODS" for t in targets):
                    literal = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                owner = node.func.value
                if (
                    node.func.attr == "update"
                    and isinstance(owner, ast.Name)
                    and owner.id == "BASE_QUANTIZATION_METHODS"
                ):
                    literal = node.args[0]
            if isinstance(literal, ast.Dict):
                found.update(k.value for k in literal.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        return frozenset(found) if {"fp8", "modelopt_fp4"} <= found else frozenset()

    def entry_classes(self, path: Path) -> list[str]:
        """The class names a model file's `EntryClass` names (what SGLang's registry takes from it)."""
        text = self._read(path) or ""
        return [name for match in _ENTRY.finditer(text) for name in _NAME.findall(match.group(1))]

    def registered(self, name: str) -> bool:
        if self._registry is None:
            self._registry = {n for path in self._model_files() for n in self.entry_classes(path)}
        return name in self._registry

    def registered_like(self, needle: str) -> list[str]:
        self.registered("")
        return sorted(n for n in self._registry or () if needle in n)

    def _classes(self, name: str) -> list[_Class]:
        found = []
        pattern = re.compile(rf"^class\s+{re.escape(name)}\b", re.M)
        for path in self._model_files():
            text = self._read(path) or ""
            if not pattern.search(text):
                continue
            try:
                tree = ast.parse(text, str(path))
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    found.append(_Class(name, [_base_name(b) for b in node.bases], _members(node)))
        return found

    def methods_missing(self, name: str, methods: Sequence[str]) -> list[str] | None:
        """The methods that neither the class nor any base found here defines; None when it cannot be told."""
        missing = set(methods)
        seen: set[str] = set()
        todo = [name]
        found_any = False
        while todo and missing:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for cls in self._classes(current):
                found_any = True
                if "__getattr__" in cls.members:
                    return None
                missing -= cls.members
                todo.extend(b for b in cls.bases if b)
        if not found_any:
            return None
        return sorted(missing)


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _members(node: ast.ClassDef) -> set[str]:
    members: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            members.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            members.add(stmt.target.id)
    return members


def locate(search_path: Sequence[str] | None = None) -> InstalledSGLang | None:
    """The installed `sglang` package this interpreter would import (found, not imported), or None."""
    try:
        spec = importlib.machinery.PathFinder.find_spec("sglang", list(search_path) if search_path else None)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return InstalledSGLang(Path(next(iter(spec.submodule_search_locations))))
