"""bench.json: every run of every label, the summaries per concurrency, the speedups over the baseline, each mode's
crossover and the gate. Rewritten (atomically) after every run; several invocations can share one directory (the
labels already there are kept when their settings match; a label measured again replaces its old runs).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sm120.bench import sweep
from sm120.errors import CheckFailed, UsageError
from sm120.image.entrypoint.errors import redact

SCHEMA = 2
BASELINE = "baseline"
# The settings that must match for two labels to be compared.
COMPARABLE = ("max_tokens", "seed", "prompts", "figure")
STATUSES = ("running", "complete", "failed", "interrupted")
LOCK_NAME = ".bench.lock"


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass
class Label:
    name: str
    source: dict[str, Any]  # {"endpoint": url} or {"image": tag, "mode": ..., "env": {...}}
    server: dict[str, Any] = field(default_factory=dict)  # from /server_info
    status: str = "running"
    error: str | None = None
    started: str = field(default_factory=_now)
    runs: list[dict[str, Any]] = field(default_factory=list)  # sweep.run_figures + concurrency, repeat

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)[1:]} | {"summary": sweep.summaries(self.runs)}


@dataclass
class Results:
    settings: dict[str, Any]
    labels: dict[str, Label] = field(default_factory=dict)
    baseline: str = BASELINE
    grid: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    created: str = field(default_factory=_now)

    def interrupt(self) -> None:
        for label in self.labels.values():
            if label.status == "running":
                label.status, label.error = "interrupted", label.error or "the benchmark stopped during this label"

    def to_dict(self) -> dict[str, Any]:
        labels = {name: label.to_dict() for name, label in self.labels.items()}
        base, figure = labels.get(self.baseline, {}).get("summary", {}), self.settings["figure"]
        # Each label over the baseline, per concurrency, by the settings' figure, with a 95 % interval.
        ratios = {n: sweep.speedups(lab["summary"], base, figure) for n, lab in labels.items() if n != self.baseline}
        speedup = {name: by_c for name, by_c in ratios.items() if by_c}
        return {
            "schema": SCHEMA,
            "tool": "build.py bench (sglang-sm120) on SGLang's bench_serving",
            "created": self.created,
            "updated": _now(),
            "settings": self.settings,
            "baseline": self.baseline,
            "labels": labels,
            "speedup": speedup,
            "crossover": {name: sweep.crossover(by_c) for name, by_c in speedup.items()},
            "grid": self.grid,
            "gate": self.gate,
        }

    def save(self, directory: Path) -> Path:
        """Write bench.json atomically (a temporary file renamed over it): a failed write leaves the last one."""
        path = directory / "bench.json"
        try:
            fd, tmp = tempfile.mkstemp(prefix=".bench.", suffix=".json", dir=directory)
            try:
                os.chmod(tmp, 0o644)  # mkstemp makes it 0600; bench.json is a report others (CI artifacts) read
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(redact(json.dumps(self.to_dict(), indent=2)) + "\n")  # no secret bench knows
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:  # a full disk, a directory gone read-only: the caller reports what is not saved
            raise SaveFailed(f"cannot write {path} ({exc.strerror or exc})") from None
        return path


class SaveFailed(CheckFailed):
    """bench.json could not be written (exit 1): the runs since the last save are reported, not lost silently."""


@contextlib.contextmanager
def writer_lock(directory: Path) -> Iterator[None]:
    """Hold DIR/.bench.lock (fcntl.flock) while this bench writes DIR/bench.json: a second bench on the same
    --out is refused at once (exit 2), before it measures. The kernel drops the lock when the process ends."""
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UsageError(f"--out {directory}: cannot create {path} ({exc.strerror or exc})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise UsageError(
                f"--out {directory}: another build.py bench{f' (pid {holder})' if holder.isdigit() else ''} is "
                "writing bench.json there; wait for it to finish, or give this one another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _problem(data: Any) -> str | None:
    """What is wrong with a decoded bench.json (hand-edited, another tool's, another schema), or None."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("labels"), dict):
        return f"not a bench.json of this tool (schema {SCHEMA})"
    if not isinstance(data.get("settings", {}), dict):
        return "settings is not an object"
    if (grid := data.get("grid")) is not None and not (isinstance(grid, dict) and isinstance(grid.get("points"), list)):
        return "grid is not an object with a list of points"
    for name, label in data["labels"].items():
        if not isinstance(label, dict) or not isinstance(label.get("runs", []), list):
            return f"labels.{name} is not an object with a list of runs"
        if not all(isinstance(label.get(k, {}), dict) for k in ("source", "server")):
            return f"labels.{name}: its source and server must be objects"
        if label.get("status", "complete") not in STATUSES:
            return f"labels.{name}.status is {label.get('status')!r} (one of {', '.join(STATUSES)})"
        for i, run in enumerate(label.get("runs", [])):
            c = run.get("concurrency") if isinstance(run, dict) else None
            if isinstance(c, bool) or not isinstance(c, int) or c < 1:
                return f"labels.{name}.runs.{i} has no concurrency (a whole number, 1 or more)"
    return None


def load(path: Path) -> Results:
    """A bench.json as Results (summaries and speedups are recomputed from the runs)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda name: name)
    except (OSError, ValueError, RecursionError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0][:120] or type(exc).__name__
        raise UsageError(f"{path}: cannot read it ({reason}); use another --out or --fresh") from None
    if (problem := _problem(data)) is not None:
        raise UsageError(f"{path}: {problem}; use another --out or --fresh")
    given = {key: data[key] for key in ("settings", "baseline", "grid", "created") if key in data}  # not the gate
    results = Results(**{"settings": {}, **given})
    for name, label in data["labels"].items():
        kept = {f.name: label[f.name] for f in fields(Label)[1:] if f.name in label}
        results.labels[name] = Label(name=name, **{"source": {}, **kept})
    return results


def open_results(directory: Path, settings: dict[str, Any], *, baseline: str, fresh: bool) -> Results:
    path = directory / "bench.json"
    if fresh or not path.exists():
        return Results(settings=settings, baseline=baseline)
    old = load(path)
    for key in COMPARABLE:
        if old.settings.get(key) != settings.get(key):
            raise UsageError(
                f"{path} was measured with {key} {old.settings.get(key)!r}, this run uses {settings.get(key)!r}: "
                "results would not be comparable; use another --out, the same settings, or --fresh"
            )
    # The gate belongs to the invocation that set it; the labels and a sweep are kept.
    results = Results(settings=settings, baseline=baseline, grid=old.grid, created=old.created, labels=old.labels)
    results.interrupt()  # a run killed too hard to record its end
    return results
