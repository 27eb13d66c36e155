"""The benchmark's prompts: a shipped set (prompts.jsonl beside this file) or a user's JSONL file. One JSON object
per line: {"id": "...", "category": "code|chat|reasoning|...", "text": "..."}; only "text" is required.
"""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass
from pathlib import Path

from sm120.errors import UsageError
from sm120.image.entrypoint.errors import long_number

SHIPPED = Path(__file__).with_name("prompts.jsonl")


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


@dataclass(frozen=True)
class PromptSet:
    name: str  # the file's name (the shipped set: "shipped")
    sha256: str  # of the file's bytes: two results are comparable only with the same prompts
    prompts: list[Prompt]

    def for_run(self, index: int) -> Prompt:
        """Run i uses prompt i mod len: every label sees the same prompts in the same order."""
        return self.prompts[index % len(self.prompts)]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "sha256": self.sha256, "count": len(self.prompts)}


def load(path: str | Path | None = None) -> PromptSet:
    file = Path(path) if path else SHIPPED
    if file.is_dir():
        raise UsageError(f"--prompts {file}: a directory, not a JSONL file")
    try:
        if not stat.S_ISREG(file.stat().st_mode):  # a FIFO would block the read forever
            raise UsageError(f"--prompts {file}: not a regular file (a FIFO or a device), give a JSONL file")
        data = file.read_bytes()
    except OSError as exc:
        raise UsageError(f"--prompts {file}: cannot read it ({exc.strerror or exc})") from None
    prompts: dict[str, Prompt] = {}  # by id
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"--prompts {file}, line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise UsageError(f"{where}: nested too deeply to be a prompt") from None
        except ValueError:  # a number longer than int() converts: json raises a bare ValueError
            detail = (long_number(line) or "a number too long to read").split(": ", 1)[-1]
            raise UsageError(f"{where}: not a prompt ({detail})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or not obj["text"].strip():
            raise UsageError(f'{where}: each line must be an object with a non-empty "text"')
        pid = str(obj.get("id") or f"prompt-{len(prompts) + 1}")
        if pid in prompts:
            raise UsageError(f"{where}: duplicate id {pid!r}")
        prompts[pid] = Prompt(pid, obj["text"])
    if not prompts:
        raise UsageError(f"--prompts {file}: no prompts in it")
    name = "shipped" if file == SHIPPED else file.name
    return PromptSet(name, hashlib.sha256(data).hexdigest(), list(prompts.values()))
