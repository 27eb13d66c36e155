"""`build.py bench`: single-stream SGLang benchmark (baseline vs EAGLE-3) through SGLang's HTTP API.

Against a running server:  build.py bench --endpoint URL --label NAME
Starting the image:        build.py bench --image TAG [--modes LIST] --models DIR --env MODEL_PATH=...
Results in --out DIR: bench.json (every run, summaries, speedups), bench.md, bench.png.
Exit status: 0 done; 1 a run failed or --min-speedup not met; 2 bad input or the server/engine unreachable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sm120 import errors
from sm120.arguments import add_config_args, integer, non_negative_int, positive_float, positive_int
from sm120.bench import client, docker_runner, grid, report, runner
from sm120.bench import prompts as prompts_mod
from sm120.bench.results import BASELINE, LOCK_NAME, Label, Results, SaveFailed, open_results, writer_lock
from sm120.build import image_ref
from sm120.errors import CheckFailed, UsageError, suggest
from sm120.image.entrypoint import key_file
from sm120.image.entrypoint.errors import SECRETS
from sm120.plan import image_plan, resolve
from sm120.plan.plan_types import Plan
from sm120.verify import gpu_ids

METRICS = {"decode": "decode_tok_s", "e2e": "e2e_tok_s"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark a SGLang server or the image (baseline vs EAGLE-3)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_args(p, sglang=False, profile=False)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--endpoint", metavar="URL", help="a running SGLang server (a bare host gets the image's port)")
    target.add_argument(
        "--image",
        type=image_ref.image_argument,
        metavar="TAG",
        help="start this image once per mode (docker SDK) and measure it",
    )
    p.add_argument("--label", metavar="NAME", help="with --endpoint: the name of this measurement (e.g. baseline)")
    p.add_argument(
        "--baseline", metavar="NAME", default=BASELINE, help="label the speedups are over (default: %(default)s)"
    )

    m = p.add_argument_group("measurement")
    m.add_argument(
        "--runs", type=positive_int, default=10, metavar="N", help="timed runs per label (default: %(default)s)"
    )
    m.add_argument(
        "--warmup", type=non_negative_int, default=1, metavar="K", help="untimed runs first (default: %(default)s)"
    )
    m.add_argument(
        "--max-tokens", type=positive_int, default=256, metavar="N", help="max_new_tokens (default: %(default)s)"
    )
    m.add_argument("--prompts", metavar="FILE", help="JSONL prompts (default: the shipped code/chat/reasoning set)")
    m.add_argument(
        "--seed", type=integer(), default=0, help="sampling_seed sent with every request (default: %(default)s)"
    )
    m.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens tokens")
    m.add_argument(
        "--timeout",
        type=positive_float,
        default=300.0,
        metavar="S",
        help="longest wait for a new token, keep-alive lines or not (default: %(default)s)",
    )
    m.add_argument(
        "--request-timeout",
        type=positive_float,
        default=client.DEFAULT_DEADLINE_S,
        metavar="S",
        help="longest one request may take in all (default: %(default)s)",
    )
    m.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="the server's API key (one line), sent as `Authorization: Bearer`; with --image also mounted "
        "read-only into each container as its API_KEY_FILE",
    )
    m.add_argument("--out", metavar="DIR", default="bench-results", help="results directory (default: %(default)s)")
    m.add_argument("--fresh", action="store_true", help="drop the labels already in DIR/bench.json")
    m.add_argument("--min-speedup", type=positive_float, metavar="X", help="exit 1 when a mode / baseline is below X")
    m.add_argument(
        "--speedup-metric",
        choices=sorted(METRICS),
        default="decode",
        help="figure --min-speedup and --spec-grid judge by (default: %(default)s)",
    )

    d = p.add_argument_group("--image mode")
    d.add_argument(
        "--modes", metavar="LIST", help="entrypoint modes, e.g. baseline,eagle3 (default: every mode of the image)"
    )
    d.add_argument("--models", metavar="DIR", help="host model directory, mounted read-only at /models")
    d.add_argument(
        "--env", action="append", default=[], metavar="K=V", help="entrypoint variable (MODEL_PATH, TP_SIZE, ...)"
    )
    d.add_argument(
        "--gpus", default="all", metavar="all|none|IDS", help="GPUs for the container (default: %(default)s)"
    )
    d.add_argument(
        "--cache-volume", metavar="NAME", help="named volume for the JIT cache (default: <image repo>-cache)"
    )
    d.add_argument(
        "--health-timeout",
        type=positive_float,
        default=1800.0,
        metavar="S",
        help="wait for /health (default: %(default)s)",
    )
    d.add_argument(
        "--spec-grid", action="store_true", help="sweep EAGLE-3 steps / top-k / draft tokens, report the best"
    )
    for flag, default, what in (
        ("--grid-steps", grid.DEFAULT_STEPS, "speculative steps"),
        ("--grid-topk", grid.DEFAULT_TOPK, "EAGLE top-k"),
        ("--grid-draft", grid.DEFAULT_DRAFT, "draft tokens"),
    ):
        d.add_argument(
            flag, metavar="LIST", default=",".join(map(str, default)), help=f"{what} to sweep (default: %(default)s)"
        )
    p.set_defaults(func=run)


def check_out_dir(out_dir: Path) -> None:
    """--out must be a directory this user can write bench.json into: found before the first request."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"--out {out_dir}: not a directory") from None
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot be created ({exc.strerror or exc})") from None
    if not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".bench-probe-"):
            pass
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot write into it ({exc.strerror or exc})") from None
    for name in ("bench.json", "bench.md", "bench.png"):
        existing = out_dir / name
        if existing.exists() and not existing.is_file():
            raise UsageError(f"--out {out_dir}: {existing} is not a file")


def read_api_key(path: str | None) -> key_file.ApiKey | None:
    """--api-key-file: the key file's checks are the entrypoint's (sm120/image/entrypoint/key_file.py); never shown."""
    if path is None:
        return None
    try:
        key = key_file.read(path)
    except key_file.KeyFileError as exc:
        raise UsageError(f"--api-key-file {path!r}: {exc.problem}" + (f"; {exc.hint}" if exc.hint else "")) from None
    SECRETS.add(key.value)  # masked in everything bench prints and writes from here on (cli.main, results, report)
    return key


_USERINFO = re.compile(r"^([^:/?#]*://)?([^/?#]*)@")


def endpoint_secrets(text: str) -> bool:
    """--endpoint's user info (http://USER:PASSWORD@host): the password and the whole user info, as given and
    percent-decoded, go to SECRETS before anything quotes the URL. Whether the URL holds any."""
    match = _USERINFO.match(text.strip())
    if match is None:
        return False
    userinfo = match.group(2)
    for value in (userinfo, userinfo.partition(":")[2]):
        SECRETS.add(value)
        SECRETS.add(unquote(value))
    return True


def public_endpoint(url: str) -> str:
    """The endpoint as bench.json and bench.md record it: without its user info."""
    return _USERINFO.sub(lambda m: m.group(1) or "", url.strip(), count=1)


def _parse_env(items: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise UsageError(f"--env {item!r}: give NAME=VALUE, e.g. --env MODEL_PATH=/models/Kimi-K2.5-NVFP4")
        env[key] = value
    return env


def _check_label(name: str, flag: str) -> str:
    if not name or any(c in name for c in "/\\|\n") or name.startswith("."):
        raise UsageError(f"{flag} {name!r}: use letters, digits, '-', '_' or '.'")
    # A carriage return or another control character would make a label that prints like another one (and
    # breaks bench.md's table); surrounding spaces too.
    if any(unicodedata.category(c).startswith("C") for c in name) or name != name.strip():
        raise UsageError(f"{flag} {name!r}: control characters or surrounding spaces; use letters, digits, '-', '_'")
    return name


class Terminated(errors.Terminated):
    what = "terminated (SIGTERM): the finished runs are kept"


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises Terminated in the main thread, so the runs are kept, the label is marked interrupted and
    bench.md is written, as after Ctrl-C. Elsewhere (a thread) the default stays."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _settings(args: argparse.Namespace, prompt_set: prompts_mod.PromptSet) -> dict[str, Any]:
    return {
        "max_tokens": args.max_tokens,
        "temperature": 0.0,
        "seed": args.seed,
        "ignore_eos": args.ignore_eos,
        "prompts": prompt_set.to_dict(),
        "runs": args.runs,
        "warmup": args.warmup,
        "read_timeout_s": args.timeout,
        "request_timeout_s": args.request_timeout,
    }


def read_image_plan(image: str) -> Plan:
    """What `--image` serves, from the image itself (its plan.json: modes, port, cache directory, tag)."""
    engine = docker_runner.connect()
    docker_runner.check_image(engine, image)
    return image_plan.read(engine, image)


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as held:  # the --out lock and the SIGTERM handler, released however it ends
        held.enter_context(_sigterm_as_interrupt())
        return _run(args, held)


def _run(args: argparse.Namespace, held: contextlib.ExitStack) -> int:
    endpoint, labels = _target(args)
    prompt_set, run_plan = _measurement(args)
    image_job = _ImageJob(args, read_image_plan(args.image)) if args.image is not None else None
    if image_job is not None:
        labels = image_job.labels
    out_dir = Path(args.out)
    results = _open_results(args, held, out_dir, labels, prompt_set)
    try:
        if image_job is None:
            source: dict[str, Any] = {"endpoint": public_endpoint(endpoint)}
            if endpoint_secrets(endpoint):
                source["credentials"] = "given in the URL, not recorded"
            label = Label(labels[0], source=source)
            runner.measure_label(endpoint, label, results, out_dir, prompt_set, run_plan)
        else:
            image_job.run(results, out_dir, prompt_set, run_plan)
    except BaseException as exc:
        _keep_what_was_measured(results, out_dir, exc)
        raise
    return _finish(args, results, out_dir, image_job)


def _target(args: argparse.Namespace) -> tuple[str, list[str]]:
    """What is measured: --endpoint with its label (the endpoint, [label]), or --image ('', []: its modes, later).
    Checked before anything is asked of the server or of Docker."""
    if args.image is not None:
        args.gpus = gpu_ids.check_gpus(args.gpus, "--gpus", allow_none=True)  # before Docker is asked
        if args.label:
            raise UsageError("--label goes with --endpoint; with --image the labels are the modes")
        _check_label(args.baseline, "--baseline")
        return "", []
    # --endpoint has no image: build.toml's plan (--config) gives the port to default to. --image reads the image's
    # own plan (read_image_plan) and never build.toml, so a bad --config cannot stop it.
    endpoint_secrets(args.endpoint)  # first: every message below may quote --endpoint
    port = resolve.load_plan(args.config).image.port
    if not args.label:
        raise UsageError("--endpoint needs --label NAME (e.g. --label baseline, then --label eagle3)")
    for flag in ("spec_grid", "models", "cache_volume", "modes"):
        if getattr(args, flag):
            raise UsageError(f"--{flag.replace('_', '-')} goes with --image, not --endpoint")
    if args.env:
        raise UsageError("--env goes with --image, not --endpoint")
    labels = [_check_label(args.label, "--label")]
    endpoint = client.normalize_endpoint(args.endpoint, port)
    _check_label(args.baseline, "--baseline")
    return endpoint, labels


def _measurement(args: argparse.Namespace) -> tuple[prompts_mod.PromptSet, runner.RunPlan]:
    """The prompts and how each label is measured (--runs, --warmup, sampling, timeouts, the API key)."""
    prompt_set = prompts_mod.load(args.prompts)
    if not args.out.strip():
        raise UsageError("--out is empty: give a directory, e.g. --out bench-results")
    if args.max_tokens < 2:
        raise UsageError("--max-tokens must be at least 2: decode speed needs tokens after the first")
    sampling = client.SamplingSettings(max_tokens=args.max_tokens, seed=args.seed, ignore_eos=args.ignore_eos)
    return prompt_set, runner.RunPlan(
        runs=args.runs,
        warmup=args.warmup,
        sampling=sampling,
        read_timeout_s=args.timeout,
        deadline_s=args.request_timeout,
        api_key=read_api_key(args.api_key_file),
    )


def _open_results(
    args: argparse.Namespace,
    held: contextlib.ExitStack,
    out_dir: Path,
    labels: list[str],
    prompt_set: prompts_mod.PromptSet,
) -> Results:
    """--out checked, locked and read (the labels kept from an earlier run); a mistake leaves no new directory."""
    created = not out_dir.exists()
    check_out_dir(out_dir)  # before the first request (and before an image is started)
    try:
        held.enter_context(writer_lock(out_dir))
    except UsageError:
        _remove_created(out_dir, created)
        raise
    try:
        results, kept = open_results(out_dir, _settings(args, prompt_set), baseline=args.baseline, fresh=args.fresh)
        if args.min_speedup is not None:
            present = set(results.labels) | set(labels)
            if args.baseline not in present or len(present - {args.baseline}) == 0:
                raise UsageError(
                    f"--min-speedup needs results for label {args.baseline!r} and another label in {out_dir}; "
                    f"measure {args.baseline!r} first (--label {args.baseline}) or use --image --modes baseline,..."
                )
    except UsageError:
        held.close()  # the lock file goes with the directory
        _remove_created(out_dir, created)
        raise
    kept_now = [k for k in kept if k not in labels]
    if kept_now:
        print(f"bench: keeping {', '.join(kept_now)} from {out_dir / 'bench.json'}", file=sys.stderr)
    return results


def _keep_what_was_measured(results: Results, out_dir: Path, exc: BaseException) -> None:
    """The benchmark stopped (a failed run, Ctrl-C): bench.json (already saved after each run), bench.md and
    bench.png keep what was measured."""
    for label in results.labels.values():
        if label.status == "running":
            label.status, label.error = "interrupted", label.error or "the benchmark stopped during this label"
    if any(label.runs or label.error for label in results.labels.values()):
        with contextlib.suppress(Exception):  # never hide the real error behind a report error
            report.write(results, out_dir)
    if isinstance(exc, SaveFailed):
        raise _unsaved(results, exc) from None


def _finish(args: argparse.Namespace, results: Results, out_dir: Path, image_job: _ImageJob | None) -> int:
    """The gate (--min-speedup), the report and the summary; exit 1 when the gate or a grid point failed."""
    gate_failed = None
    if args.min_speedup is not None:
        only = [image_job.best] if image_job and image_job.grid_points and image_job.best else None
        gate_failed = _gate(results, args.min_speedup, METRICS[args.speedup_metric], only)
    try:
        paths = report.write(results, out_dir)
    except SaveFailed as exc:
        raise _unsaved(results, exc) from None
    _print_summary(results)
    print("wrote " + ", ".join(str(p) for p in paths))
    if gate_failed:
        raise CheckFailed(gate_failed)
    if image_job and image_job.failures:
        raise CheckFailed(image_job.failures[0])
    return 0


def _unsaved(results: Results, exc: SaveFailed) -> SaveFailed:
    """A full disk under --out: what bench.json would hold goes to stdout, and one line says so (exit 1)."""
    print(json.dumps(results.to_dict(), indent=2))
    runs = sum(len(label.runs) for label in results.labels.values())
    return SaveFailed(
        f"{exc}: bench.json keeps the runs saved before; all {runs} finished runs are printed above as "
        "bench.json would hold them"
    )


def _remove_created(out_dir: Path, created: bool) -> None:
    """A mistake leaves no empty results directory behind (nor its lock file)."""
    if created:
        with contextlib.suppress(OSError):
            (out_dir / LOCK_NAME).unlink(missing_ok=True)
            out_dir.rmdir()


def _gate(results: Results, minimum: float, figure: str, only: list[str] | None) -> str | None:
    """Set results.gate; return the one-line failure, or None when every compared label reaches minimum."""
    speedups = results.speedups()
    names = only or [n for n in results.labels if n != results.baseline]
    failures, checked = [], []
    for name in names:
        r = speedups.get(name, {}).get(figure)
        if r is None:
            failures.append(f"{name}: no {figure} speedup over {results.baseline} (no finished runs)")
            continue
        interval = f" (95 % CI {r['ci95_low']:.3f}–{r['ci95_high']:.3f})" if r.get("ci95_low") is not None else ""
        text = f"{name} / {results.baseline} {figure} = {r['ratio']:.3f}{interval}"
        checked.append(text)
        if r["ratio"] < minimum:
            failures.append(f"{text} is below --min-speedup {minimum:g}")
    passed = not failures
    message = "; ".join(failures) if failures else "; ".join(checked) + f" ≥ {minimum:g}"
    results.gate = {"min_speedup": minimum, "figure": figure, "labels": names, "passed": passed, "message": message}
    return None if passed else failures[0]


def _print_summary(results: Results) -> None:
    data = results.to_dict()
    for name, label in data["labels"].items():
        summary = label["summary"]
        parts = [f"{name:<20} {len(label['runs']):>3} runs"]
        for key, title, digits in (("decode_tok_s", "decode", 1), ("e2e_tok_s", "e2e", 1), ("ttft_s", "ttft", 3)):
            if key in summary:
                s = summary[key]
                ci = (
                    f" [{s['ci95_low']:.{digits}f}, {s['ci95_high']:.{digits}f}]"
                    if s.get("ci95_low") is not None
                    else ""
                )
                parts.append(f"{title} {s['mean']:.{digits}f}{ci}")
        if "spec_accept_length" in summary:
            parts.append(f"accept {summary['spec_accept_length']['mean']:.2f}")
        speedup = data["speedup"].get(name, {}).get("decode_tok_s")
        if speedup:
            parts.append(f"speedup ×{speedup['ratio']:.3f}")
        if label["status"] != "complete":
            parts.append(label["status"])
        print("  ".join(parts))


class _ImageJob:
    """--image: one container per mode (and per grid point), measured in turn."""

    def __init__(self, args: argparse.Namespace, plan: Plan) -> None:
        self.args = args
        modes_known = plan.entrypoint.modes
        self.modes = _modes(args.modes, modes_known)
        self.env = _parse_env(args.env)
        if key_file.VARIABLE in self.env:
            raise UsageError(
                f"--env {key_file.VARIABLE}=...: give --api-key-file FILE (bench mounts it into the container and "
                "sends the key)"
            )
        self.api_key_file = Path(args.api_key_file) if args.api_key_file else None
        port = self.env.get("PORT", str(plan.image.port))
        if not client.is_port(port):
            raise UsageError(f"--env PORT={port!r}: {client.PORT_RULE}")
        self.port = int(port)
        self.env.setdefault("HOST", "0.0.0.0")
        self.env.setdefault("PORT", str(self.port))
        if "MODEL_PATH" not in self.env:
            raise UsageError(
                "--image needs --env MODEL_PATH=PATH (the model's path inside the container, e.g. /models/NAME)"
            )
        self.models = _models_dir(args.models)
        for key in ("MODEL_PATH", "DRAFT_MODEL_PATH"):
            self._check_model_path(key)
        for mode in self.modes:
            if modes_known[mode].draft and "DRAFT_MODEL_PATH" not in self.env:
                raise UsageError(f"mode {mode} needs --env DRAFT_MODEL_PATH=PATH (the EAGLE-3 draft model)")
        self.cache_dir = plan.image.cache_dir
        self.cache_volume = args.cache_volume or f"{plan.tags[0].split(':')[0].rsplit('/', 1)[-1]}-cache"
        self.spec_mode, self.grid_points = _grid(args, self.modes, modes_known) if args.spec_grid else ("", [])
        self.labels = [m for m in self.modes if not (self.grid_points and m == self.spec_mode)]
        self.labels += [p.label for p in self.grid_points]
        self.best: str | None = None
        self.failures: list[str] = []

    def _check_model_path(self, key: str) -> None:
        value = self.env.get(key)
        if not value or not value.startswith(docker_runner.MODELS_MOUNT + "/"):
            return
        if self.models is None:
            raise UsageError(
                f"--env {key}={value} is under {docker_runner.MODELS_MOUNT}: give --models DIR (the host directory)"
            )
        host = self.models / value[len(docker_runner.MODELS_MOUNT) + 1 :]
        try:
            found = host.exists()
        except OSError:
            found = False
        if not found:
            raise UsageError(f"--env {key}={value}: {host} does not exist on this host")

    def _spec(self, mode: str, label: str, extra_env: dict[str, str]) -> Any:
        return docker_runner.ContainerSpec(
            image=self.args.image,
            mode=mode,
            label=label,
            env={**self.env, **extra_env},
            port=self.port,
            cache_dir=self.cache_dir,
            cache_volume=self.cache_volume,
            models_dir=self.models,
            gpus=self.args.gpus,
            health_timeout_s=self.args.health_timeout,
            api_key_file=self.api_key_file,
        )

    def _measure(
        self, docker_client: Any, spec: Any, results: Results, out_dir: Path, prompt_set: Any, run_plan: Any
    ) -> None:
        source = {"image": spec.image, "mode": spec.mode, "env": spec.recorded_env(), "gpus": spec.gpus}
        point = next((p for p in self.grid_points if p.label == spec.label), None)
        if point is not None:
            source["spec"] = {"steps": point.steps, "topk": point.topk, "draft": point.draft}
        label = Label(spec.label, source=source)
        results.labels[spec.label] = label
        try:
            with docker_runner.serve(docker_client, spec, out_dir) as endpoint:
                runner.measure_label(endpoint, label, results, out_dir, prompt_set, run_plan)
        except CheckFailed as exc:
            label.status = "failed"
            label.error = label.error or str(exc)
            results.save(out_dir)
            raise

    def run(self, results: Results, out_dir: Path, prompt_set: Any, run_plan: Any) -> None:
        docker_client = docker_runner.connect()
        docker_runner.check_image(docker_client, self.args.image)
        for mode in self.modes:
            if self.grid_points and mode == self.spec_mode:
                continue
            self._measure(docker_client, self._spec(mode, mode, {}), results, out_dir, prompt_set, run_plan)
        if not self.grid_points:
            return
        figure = METRICS[self.args.speedup_metric]
        results.grid = {"figure": figure, "points": [p.to_dict() for p in self.grid_points], "best": None}
        for point in self.grid_points:
            spec = self._spec(self.spec_mode, point.label, point.env())
            try:
                self._measure(docker_client, spec, results, out_dir, prompt_set, run_plan)
            except CheckFailed as exc:
                # One setting that cannot run (e.g. out of memory with a large draft tree) does not end the sweep.
                self.failures.append(str(exc))
                for entry in results.grid["points"]:
                    if entry["label"] == point.label:
                        entry["error"] = str(exc)
                print(f"bench: {exc}; going on with the next setting", file=sys.stderr)
        summaries = {name: label.summary() for name, label in results.labels.items()}
        best = grid.best(summaries, self.grid_points, figure)
        self.best = best.label if best else None
        results.grid["best"] = self.best
        results.save(out_dir)
        if self.best is not None:
            self.failures = []  # the sweep found a best setting: failed points are reported, not fatal


def _modes(given: str | None, known: dict[str, Any]) -> list[str]:
    """--modes: the image's modes to measure, in order (default: every mode of the image, as its plan lists them)."""
    if given is None:
        return list(known)
    modes = [m.strip() for m in given.split(",") if m.strip()]
    if not modes:
        raise UsageError(f"--modes is empty: give e.g. {','.join(known)}")
    for mode in modes:
        if mode not in known:
            raise UsageError(
                f"--modes {mode!r}: the image knows {', '.join(sorted(known))} (build.toml [modes])"
                + suggest(mode, known)
            )
    if len(set(modes)) != len(modes):
        raise UsageError(f"--modes {given!r}: a mode is listed twice")
    return modes


def _models_dir(given: str | None) -> Path | None:
    """--models: a directory this user can read, mounted read-only at /models."""
    if given is None:
        return None
    try:
        found = Path(given).is_dir() and os.access(given, os.R_OK | os.X_OK)
    except OSError:
        found = False
    if not found:
        raise UsageError(f"--models {given}: no such directory, or not readable by this user")
    return Path(given)


def _grid(args: argparse.Namespace, modes: list[str], known: dict[str, Any]) -> tuple[str, list[grid.Point]]:
    """--spec-grid: the draft mode it sweeps and the runnable points of --grid-steps x --grid-topk x --grid-draft."""
    spec_modes = [m for m in modes if known[m].draft]
    if not spec_modes:
        drafted = " or ".join(m for m in known if known[m].draft) or "a mode with a draft model"
        raise UsageError(f"--spec-grid sweeps EAGLE-3 settings: add {drafted} to --modes")
    reference = known[spec_modes[0]].draft_tree  # None where the track leaves it to SGLang
    return spec_modes[0], grid.points(
        grid.parse_list(args.grid_steps, "--grid-steps"),
        grid.parse_list(args.grid_topk, "--grid-topk"),
        grid.parse_list(args.grid_draft, "--grid-draft"),
        reference,
    )
