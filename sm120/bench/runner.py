"""Measure one label: warm-up requests, then N timed single-stream runs, saving bench.json after each run."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import requests
from tqdm import tqdm

from sm120.bench import client
from sm120.bench.prompts import WARMUP, Prompt, PromptSet
from sm120.bench.results import Label, Results
from sm120.errors import CheckFailed
from sm120.image.entrypoint.key_file import ApiKey


@dataclass(frozen=True)
class RunPlan:
    runs: int
    warmup: int
    sampling: client.SamplingSettings
    read_timeout_s: float
    deadline_s: float = client.DEFAULT_DEADLINE_S
    api_key: ApiKey | None = None  # --api-key-file: sent as `Authorization: Bearer`; its repr is masked


class Progress:
    """A tqdm bar on a terminal; one plain line per run elsewhere (CI logs), all on stderr."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.total = total
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = (
            tqdm(total=total, desc=label, unit="run", file=self.stream, leave=True, dynamic_ncols=True)
            if self.tty
            else None
        )

    def step(self, text: str, short: str | None = None) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(short or text, refresh=False)
            self.bar.update(1)
        else:
            print(f"{self.label}: {text}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _line(run: client.RunResult, which: str) -> str:
    decode = f"{run.decode_tok_s:.1f}" if run.decode_tok_s is not None else "-"
    text = (
        f"{which} ttft {run.ttft_s:.3f} s, decode {decode} tok/s, e2e {run.e2e_tok_s:.1f} tok/s, "
        f"{run.completion_tokens} tokens"
    )
    if run.spec_accept_length is not None:
        text += f", accept length {run.spec_accept_length:.2f}"
    return text


def _short(run: client.RunResult) -> str:
    decode = f"{run.decode_tok_s:.1f}" if run.decode_tok_s is not None else "-"
    text = f"decode {decode} tok/s, ttft {run.ttft_s:.2f} s"
    return text + (f", accept {run.spec_accept_length:.2f}" if run.spec_accept_length is not None else "")


def _requests(prompts: PromptSet, plan: RunPlan) -> list[tuple[str, Prompt, int]]:
    """(which, prompt, index) of every request of a label: the untimed warm-ups (index 0), then the timed runs."""
    warmups = [(f"warm-up {i + 1}/{plan.warmup}", WARMUP, 0) for i in range(plan.warmup)]
    return warmups + [(f"run {i + 1}/{plan.runs}", prompts.for_run(i), i + 1) for i in range(plan.runs)]


def measure_label(
    endpoint: str,
    label: Label,
    results: Results,
    out_dir: Path,
    prompts: PromptSet,
    plan: RunPlan,
    *,
    session: requests.Session | None = None,
) -> Label:
    """Probe the server, then run warm-ups and timed runs. Raises ServerUnreachable (exit 2) before the first
    request, CheckFailed (exit 1) naming the run that failed; bench.json then holds every finished run."""
    own = session is None
    session = session or client.new_session()
    if plan.api_key is not None:
        session.headers["Authorization"] = f"Bearer {plan.api_key.value}"
    try:
        client.probe(session, endpoint)
        client.check_access(session, endpoint)  # a missing or wrong key: exit 2 before the label starts
        label.server = client.server_info(session, endpoint)
        label.runs = []
        label.status, label.error = "running", None
        results.labels[label.name] = label
        results.save(out_dir)
        progress = Progress(label.name, plan.warmup + plan.runs)
        try:
            for which, prompt, index in _requests(prompts, plan):
                try:
                    run = client.measure(
                        session,
                        endpoint,
                        prompt,
                        plan.sampling,
                        index=index,
                        read_timeout_s=plan.read_timeout_s,
                        deadline_s=plan.deadline_s,
                    )
                except client.RunFailed as exc:
                    raise _failed(label, results, out_dir, which, exc) from None
                if index == 0:  # a warm-up: untimed, not kept
                    progress.step(f"{which} ({run.completion_tokens} tokens)", "warm-up")
                    continue
                label.runs.append(run.to_dict())
                results.save(out_dir)
                progress.step(_line(run, which), _short(run))
        finally:
            progress.close()
        after = client.server_info(session, endpoint).get("avg_spec_accept_length")
        if after is not None:
            label.server["avg_spec_accept_length"] = after
        label.status = "complete"
        results.save(out_dir)
        return label
    finally:
        if own:
            session.close()


def _failed(label: Label, results: Results, out_dir: Path, which: str, exc: Exception) -> CheckFailed:
    label.status = "failed"
    label.error = f"{which} failed: {exc}"
    results.save(out_dir)
    kept = len(label.runs)
    return CheckFailed(
        f"{label.name} {which} failed: {exc} ({kept} finished run{'s' if kept != 1 else ''} kept in "
        f"{out_dir / 'bench.json'})"
    )
