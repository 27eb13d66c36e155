"""Run by the entrypoint in SGLang's interpreter when API_KEY_FILE is set, in place of `python3 -m MODULE`:

    python3 _with_api_key.py -m sglang.launch_server ARGS...      (or: python3 _with_api_key.py SCRIPT ARGS...)

It reads the key from API_KEY_FILE (key_file.py, the entrypoint's own checks), appends `--api-key=KEY` to
sys.argv (`=`: a key that starts with '-' stays a value) and runs the module as `python3 -m` does (runpy, as
__main__, in this process: the PID the entrypoint exec'd, so signals reach SGLang as before). The key lives in
the interpreter's memory only: the process's command line (`ps`, `docker top`) and environment (`docker
inspect`) never hold it, and stdout/stderr write it as ******** (SGLang logs its ServerArgs at start-up, the
key included). Standard library only; key_file.py is loaded by its path, so nothing of this directory is put
on sys.path (it is set as `python3 -m` or `python3 SCRIPT` would set it).
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
PROG = "entrypoint"


def _key_file() -> ModuleType:
    name = "_sm120_key_file"
    spec = importlib.util.spec_from_file_location(name, HERE / "key_file.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _error(*lines: str) -> int:
    sys.stderr.write(f"{PROG}: error: {lines[0]}\n" + "".join(f"  {line}\n" for line in lines[1:]))
    return 2


def main(argv: list[str]) -> int:
    key_file = _key_file()
    if len(argv) >= 2 and argv[0] == "-m":
        module, script, args = argv[1], None, argv[2:]
    elif argv and not argv[0].startswith("-"):
        module, script, args = None, argv[0], argv[1:]
    else:
        return _error(f"usage: {Path(__file__).name} -m MODULE [ARGS...] | SCRIPT [ARGS...]")
    path = (os.environ.get(key_file.VARIABLE) or "").strip()
    if not path:
        return _error(f"{Path(__file__).name} needs {key_file.VARIABLE}: the file that holds the API key")
    try:
        key = key_file.read(path)
    except key_file.KeyFileError as exc:
        return _error(f"{key_file.VARIABLE}={path!r}: {exc.problem}", *([exc.hint] if exc.hint else []))
    sys.stdout = key_file.Masked(sys.stdout, key.value)  # type: ignore[assignment]
    sys.stderr = key_file.Masked(sys.stderr, key.value)  # type: ignore[assignment]
    sys.argv = [script or "-m", *args, f"{key_file.OPTION}={key.value}"]
    if module is not None:
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(script or ""))
        runpy.run_path(script or "", run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
