"""Run by the entrypoint in SGLang's interpreter when API_KEY_FILE is set, in place of `python3 -m MODULE`:

    python3 _with_api_key.py -m sglang.launch_server ARGS...      (or: python3 _with_api_key.py SCRIPT ARGS...)

It reads the key from API_KEY_FILE (key_file.py, the entrypoint's own checks), appends `--api-key=KEY` to
sys.argv (`=`: a key that starts with '-' stays a value) and runs the module as `python3 -m` does (runpy, as
__main__, in this process: the PID the entrypoint exec'd, so signals reach SGLang as before). The key lives in
the interpreter's memory only: the process's command line (`ps`, `docker top`) and environment (`docker
inspect`) never hold it, and stdout/stderr write it as ******** (SGLang logs its ServerArgs at start-up, the
key included). Standard library only; key_file.py is loaded by its path, so nothing of this directory is put
on sys.path (it is set as `python3 -m` or `python3 SCRIPT` would set it).

The admin key the same way: ADMIN_API_KEY_FILE's key as `--admin-api-key=KEY`; or, where the entrypoint sets
SM120_ADMIN_ROUTES=closed (an API key without an admin key), a random one made here and known to nobody, so
SGLang's admin routes are closed (srt/utils/auth.py). `--admin-api-key=...` goes before `--api-key=KEY`, which
stays the last argument. SM120_ADMIN_ROUTES is removed from the environment before SGLang runs.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import secrets
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
PROG = "entrypoint"


def _load(stem: str) -> ModuleType:
    name = f"_sm120_{stem}"
    spec = importlib.util.spec_from_file_location(name, HERE / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _error(*lines: str) -> int:
    sys.stderr.write(f"{PROG}: error: {lines[0]}\n" + "".join(f"  {line}\n" for line in lines[1:]))
    return 2


def main(argv: list[str]) -> int:
    key_file = _load("key_file")
    if len(argv) >= 2 and argv[0] == "-m":
        module, script, args = argv[1], None, argv[2:]
    elif argv and not argv[0].startswith("-"):
        module, script, args = None, argv[0], argv[1:]
    else:
        return _error(f"usage: {Path(__file__).name} -m MODULE [ARGS...] | SCRIPT [ARGS...]")
    keys: dict[str, str] = {}  # option -> key
    for variable, option in key_file.FILES.items():
        path = (os.environ.get(variable) or "").strip()
        if not path:
            continue
        try:
            keys[option] = key_file.read(path).value
        except key_file.KeyFileError as exc:
            return _error(*key_file.describe(variable, path, exc))
    closed = os.environ.pop(key_file.ADMIN_ROUTES, "") == "closed"
    if key_file.OPTION not in keys and key_file.ADMIN_OPTION not in keys:
        return _error(f"{Path(__file__).name} needs {key_file.VARIABLE}: the file that holds the API key")
    if closed and key_file.ADMIN_OPTION not in keys:
        keys[key_file.ADMIN_OPTION] = secrets.token_urlsafe(32)  # known to nobody: the admin routes are closed
    sys.stdout = key_file.Masked(sys.stdout, *keys.values())  # type: ignore[assignment]
    sys.stderr = key_file.Masked(sys.stderr, *keys.values())  # type: ignore[assignment]
    added = [f"{option}={keys[option]}" for option in (key_file.ADMIN_OPTION, key_file.OPTION) if option in keys]
    sys.argv = [script or "-m", *args, *added]
    if module is not None and module.startswith("sglang."):
        try:  # SGLang's JSON answers (/server_info: its ServerArgs, the launch command) hold the keys: hide them
            _load("hide_keys").install(keys.values())
        except Exception as exc:
            sys.stderr.write(f"[{PROG}] warning: the keys are not hidden from SGLang's /server_info ({exc!r})\n")
    if module is not None:
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(script or ""))
        runpy.run_path(script or "", run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
