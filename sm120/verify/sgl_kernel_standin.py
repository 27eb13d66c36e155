"""Stand-ins for compiled modules that cannot load without a GPU, for checks that only read Python code.

`sgl_kernel` links CUDA libraries and needs a driver, so `import sglang.srt.models.kimi_k25` fails on a CPU runner
before any Python of interest runs. The code the T1 tests and verify's suite exercise (EAGLE-3 delegation, the
symmetric-memory size tables) never calls a kernel, so mock modules are enough to import it; never for serving (a
call into a stand-in kernel returns a `MagicMock`). Standard library only: loaded by path into another interpreter
before the first `import sglang` (`sm120.verify.behaviour.SNIPPET_PRELUDE`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterable, Sequence
from unittest import mock


class StubModule(types.ModuleType):
    """A module whose every missing attribute is a MagicMock (so `from sgl_kernel import x` works)."""

    __stub__ = True
    __version__ = "0.0.0+stub"

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the named top-level packages and all their submodules as StubModules."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        self.imported: list[str] = []

    def _covers(self, fullname: str) -> bool:
        return any(fullname == n or fullname.startswith(n + ".") for n in self.names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not self._covers(fullname):
            return None
        self.imported.append(fullname)
        # a package (its __path__ is []): submodules (sgl_kernel.flash_attn, ...) resolve through the finder too
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install(names: Iterable[str] = ("sgl_kernel",)) -> StubFinder:
    """Put a StubFinder first on sys.meta_path (so it wins over an installed but unloadable package)."""
    finder = StubFinder(names)
    for name in [n for n in sys.modules if finder._covers(n)]:
        del sys.modules[name]
    sys.meta_path.insert(0, finder)
    return finder
