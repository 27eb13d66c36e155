"""bench.json: every run of every label, a summary per label, and the speedups over the baseline label.

The file is rewritten (atomically) after every run, so a benchmark that dies keeps every run finished before.
Results of several invocations can share one directory (e.g. `--label baseline`, then `--label eagle3` against
the restarted server): labels already there are kept when their settings match, and a label measured again
replaces its old runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sm120.bench import stats
from sm120.errors import CheckFailed, UsageError
from sm120.image.entrypoint.errors import redact

SCHEMA = 1
BASELINE = "baseline"
# The figures summarized per label, with how a person reads them.
FIGURES: dict[str, str] = {
    "decode_tok_s": "decode tok/s",
    "e2e_tok_s": "end-to-end tok/s",
    "ttft_s": "time to first token (s)",
    "completion_tokens": "completion tokens",
    "spec_accept_length": "accept length",
    "spec_accept_rate": "accept rate",
}
SPEEDUP_FIGURES = ("decode_tok_s", "e2e_tok_s")
# The settings that must match for two labels to be compared.
COMPARABLE = ("max_tokens", "temperature", "seed", "ignore_eos", "prompts")


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass
class Label:
    name: str
    source: dict[str, Any]  # {"endpoint": url} or {"image": tag, "mode": ..., "env": {...}}
    server: dict[str, Any] = field(default_factory=dict)  # from /server_info
    runs: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"  # running | complete | failed
    error: str | None = None
    started: str = field(default_factory=_now)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in FIGURES:
            values = [r[key] for r in self.runs if isinstance(r.get(key), (int, float))]
            if values:  # every figure here is a count, a rate or a time: never below zero
                out[key] = stats.summarize(values, floor=0.0).to_dict()
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "server": self.server,
            "status": self.status,
            "error": self.error,
            "started": self.started,
            "runs": self.runs,
            "summary": self.summary(),
        }

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Label:
        return cls(
            name=name,
            source=data.get("source", {}),
            server=data.get("server", {}),
            runs=list(data.get("runs", [])),
            status=data.get("status", "complete"),
            error=data.get("error"),
            started=data.get("started", ""),
        )


@dataclass
class Results:
    settings: dict[str, Any]
    labels: dict[str, Label] = field(default_factory=dict)
    baseline: str = BASELINE
    grid: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    created: str = field(default_factory=_now)

    def speedups(self) -> dict[str, dict[str, Any]]:
        """Each label over the baseline label, per figure in SPEEDUP_FIGURES, with a 95 % interval."""
        base = self.labels.get(self.baseline)
        if base is None:
            return {}
        out: dict[str, dict[str, Any]] = {}
        base_summary = base.summary()
        for name, label in self.labels.items():
            if name == self.baseline:
                continue
            mine = label.summary()
            per: dict[str, Any] = {}
            for key in SPEEDUP_FIGURES:
                if key in mine and key in base_summary and base_summary[key]["mean"] > 0 and mine[key]["mean"] > 0:
                    num = stats.Summary(**mine[key])
                    den = stats.Summary(**base_summary[key])
                    per[key] = stats.ratio_of_means(num, den).to_dict()
            if per:
                out[name] = per
        return out

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "tool": "build.py bench (sglang-sm120)",
            "created": self.created,
            "updated": _now(),
            "settings": self.settings,
            "baseline": self.baseline,
            "labels": {name: label.to_dict() for name, label in self.labels.items()},
            "speedup": self.speedups(),
        }
        if self.grid is not None:
            data["grid"] = self.grid
        if self.gate is not None:
            data["gate"] = self.gate
        return data

    def save(self, directory: Path) -> Path:
        """Write bench.json atomically (a temporary file renamed over it): a failed write leaves the last one."""
        try:
            return self._save(directory)
        except OSError as exc:  # a full disk, a directory gone read-only: the caller reports what is not saved
            raise SaveFailed(f"cannot write {directory / 'bench.json'} ({exc.strerror or exc})") from None

    def _save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "bench.json"
        fd, tmp = tempfile.mkstemp(prefix=".bench.", suffix=".json", dir=directory)
        try:
            os.chmod(tmp, 0o644)  # mkstemp makes it 0600; bench.json is a report others (CI artifacts) read
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(redact(json.dumps(self.to_dict(), indent=2)) + "\n")  # no secret bench knows
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


class SaveFailed(CheckFailed):
    """bench.json could not be written (exit 1): the runs since the last save are reported, not lost silently."""


LOCK_NAME = ".bench.lock"


@contextlib.contextmanager
def writer_lock(directory: Path) -> Iterator[None]:
    """Hold DIR/.bench.lock (fcntl.flock) while this bench writes DIR/bench.json: a second bench on the same
    --out is refused at once (exit 2), before it measures, instead of one label's runs being lost when both
    rewrite the file. The kernel drops the lock when the process ends, however it ends."""
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


STATUSES = ("running", "complete", "failed", "interrupted")


def _check(data: Any) -> str | None:
    """What is wrong with a decoded bench.json (hand-edited, another tool's, another schema), or None."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("labels"), dict):
        return f"not a bench.json of this tool (schema {SCHEMA})"
    for key, kind in (("settings", dict), ("baseline", str), ("created", str), ("grid", (dict, type(None)))):
        if key in data and not isinstance(data[key], kind):
            return f"{key} is a {type(data[key]).__name__}"
    for name, label in data["labels"].items():
        where = f"labels.{name}"
        if not isinstance(label, dict):
            return f"{where} is not an object"
        for key, kind in (("source", dict), ("server", dict), ("runs", list), ("started", str)):
            if key in label and not isinstance(label[key], kind):
                return f"{where}.{key} is a {type(label[key]).__name__}"
        if label.get("status", "complete") not in STATUSES:
            return f"{where}.status is {label.get('status')!r} (one of {', '.join(STATUSES)})"
        if not isinstance(label.get("error"), (str, type(None))):
            return f"{where}.error is not text"
        for i, run in enumerate(label.get("runs", [])):
            if not isinstance(run, dict):
                return f"{where}.runs.{i} is not an object"
            for key in FIGURES:
                value = run.get(key)
                if value is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    return f"{where}.runs.{i}.{key} is {value!r}, not a finite number"
                if value < 0:
                    return f"{where}.runs.{i}.{key} is {value!r}: it cannot be negative"
    grid = data.get("grid")
    if isinstance(grid, dict):
        points = grid.get("points", [])
        if not isinstance(points, list) or not all(
            isinstance(p, dict)
            and isinstance(p.get("label"), str)
            and all(isinstance(p.get(k), int) and not isinstance(p.get(k), bool) for k in ("steps", "topk", "draft"))
            for p in points
        ):
            return "grid.points is not a list of {steps, topk, draft, label}"
    return None


def load(path: Path) -> Results:
    """A bench.json as Results (summaries and speedups are recomputed from the runs)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda name: name)
    except (OSError, ValueError, RecursionError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0][:120] or type(exc).__name__
        raise UsageError(f"{path}: cannot read it ({reason}); use another --out or --fresh") from None
    problem = _check(data)
    if problem is not None:
        raise UsageError(f"{path}: {problem}; use another --out or --fresh")
    results = Results(
        settings=data.get("settings", {}),
        baseline=data.get("baseline", BASELINE),
        grid=data.get("grid"),
        gate=data.get("gate"),
        created=data.get("created", _now()),
    )
    for name, label in data["labels"].items():
        results.labels[name] = Label.from_dict(name, label)
    return results


def open_results(directory: Path, settings: dict[str, Any], *, baseline: str, fresh: bool) -> tuple[Results, list[str]]:
    """Results for DIR: the labels already in DIR/bench.json when their settings match (unless fresh).

    Returns the results and the names of the labels kept.
    """
    path = directory / "bench.json"
    if fresh or not path.exists():
        return Results(settings=settings, baseline=baseline), []
    old = load(path)
    for key in COMPARABLE:
        if old.settings.get(key) != settings.get(key):
            raise UsageError(
                f"{path} was measured with {key} {old.settings.get(key)!r}, this run uses {settings.get(key)!r}: "
                "results would not be comparable; use another --out, the same settings, or --fresh"
            )
    # The gate belongs to the invocation that set it; the labels and a sweep are kept.
    results = Results(settings=settings, baseline=baseline, grid=old.grid, created=old.created)
    results.labels = old.labels
    for label in results.labels.values():
        if label.status == "running":  # a run killed too hard to record its end
            label.status, label.error = "interrupted", label.error or "the benchmark stopped during this label"
    return results, list(results.labels)
