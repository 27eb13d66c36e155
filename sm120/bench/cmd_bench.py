"""`build.py bench`: SGLang under load, baseline vs EAGLE-3, on SGLang's own bench_serving.

Against a running server:  build.py bench --endpoint URL --label NAME --tokenizer DIR
Starting the image:        build.py bench --image TAG [--modes LIST] --models DIR --env MODEL_PATH=...
For each label, at each concurrency of --concurrency, --runs runs of bench_serving (from the image: the server's
SGLang) over the prompt set: throughput, TTFT/TPOT/ITL percentiles, accept length; then the speedup over the
baseline per concurrency with its 95 % interval, and the concurrency from which EAGLE-3 stops being faster.
Results in --out DIR: bench.json (every run, saved as each finishes), bench.md, bench.png.
Exit status: 0 done; 1 a run failed or --min-speedup not met; 2 bad input, or the server/engine unreachable.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from tqdm import tqdm

from sm120 import errors
from sm120.arguments import add_config_args, integer, positive_float, positive_int
from sm120.bench import docker_runner, grid, probe, prompts, report, serving, sweep
from sm120.bench.results import BASELINE, LOCK_NAME, Label, Results, SaveFailed, open_results, writer_lock
from sm120.build import docker_client, image_ref
from sm120.errors import CheckFailed, UsageError, suggest
from sm120.image.entrypoint import key_file
from sm120.image.entrypoint.errors import SECRETS
from sm120.plan import image_plan, resolve
from sm120.plan.plan_types import Plan
from sm120.verify import gpu_ids

MAX_CONCURRENCY = 4096


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark a SGLang server or the image under load (baseline vs EAGLE-3, bench_serving)",
        description=__doc__,
    )
    add_config_args(p, sglang=False, profile=False)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--endpoint", metavar="URL", help="a running SGLang server (a bare host gets the image's port)")
    target.add_argument(
        "--image", type=image_ref.image_argument, metavar="TAG", help="start this image once per mode and measure it"
    )
    p.add_argument("--label", metavar="NAME", help="with --endpoint: the name of this measurement (e.g. baseline)")
    p.add_argument(
        "--baseline", metavar="NAME", default=BASELINE, help="label speedups are over (default: %(default)s)"
    )

    m = p.add_argument_group("the sweep")
    m.add_argument(
        "--concurrency",
        metavar="LIST",
        default="1,2,4,8,16,32,64",
        help="concurrent requests, one point each (default: %(default)s)",
    )
    m.add_argument("--runs", type=positive_int, default=3, metavar="N", help="runs per point (default: %(default)s)")
    m.add_argument(
        "--max-tokens", type=positive_int, default=256, metavar="N", help="output tokens per request (%(default)s)"
    )
    m.add_argument("--prompts", metavar="FILE", help="JSONL prompts (default: the shipped code/chat/reasoning set)")
    m.add_argument("--seed", type=integer(), default=0, help="bench_serving's --seed (default: %(default)s)")
    m.add_argument("--tokenizer", metavar="DIR", help="the model's tokenizer files (with --image: MODEL_PATH's)")
    m.add_argument(
        "--bench-image",
        type=image_ref.image_argument,
        metavar="TAG",
        help="with --endpoint: the image whose bench_serving runs (default: build.toml's image, the server's SGLang)",
    )
    m.add_argument(
        "--run-timeout", type=positive_float, default=1800.0, metavar="S", help="one run in all (default: %(default)s)"
    )
    m.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="the server's API key (one line), read by bench_serving from a read-only mount; with --image also "
        "the server's API_KEY_FILE",
    )
    m.add_argument("--out", metavar="DIR", default="bench-results", help="results directory (default: %(default)s)")
    m.add_argument("--fresh", action="store_true", help="drop the labels already in DIR/bench.json")
    m.add_argument(
        "--min-speedup",
        type=positive_float,
        metavar="X",
        help="exit 1 unless each speedup's 95 %% interval starts at X or above",
    )
    m.add_argument(
        "--gate-concurrency",
        type=positive_int,
        metavar="C",
        help="the concurrency --min-speedup judges (default: the lowest)",
    )
    m.add_argument(
        "--speedup-metric",
        choices=sorted(sweep.SPEEDUP_FIGURES),
        default="output",
        help="output: tok/s of all requests; per-request: tok/s of each (default: %(default)s)",
    )

    d = p.add_argument_group("--image mode")
    d.add_argument("--modes", metavar="LIST", help="entrypoint modes, e.g. baseline,eagle3 (default: every mode)")
    d.add_argument("--models", metavar="DIR", help="host model directory, mounted read-only at /models")
    d.add_argument("--env", action="append", default=[], metavar="K=V", help="entrypoint variable (MODEL_PATH, ...)")
    d.add_argument(
        "--gpus", default="all", metavar="all|none|IDS", help="GPUs for the container (default: %(default)s)"
    )
    d.add_argument(
        "--cache-volume", metavar="NAME", help="named volume for the JIT cache (default: <image repo>-cache)"
    )
    d.add_argument(
        "--health-timeout", type=positive_float, default=1800.0, metavar="S", help="wait for /health (%(default)s)"
    )
    d.add_argument(
        "--spec-grid", action="store_true", help="sweep EAGLE-3 steps / top-k / draft tokens, report the best"
    )
    for flag, default, what in (
        ("--grid-steps", grid.DEFAULT_STEPS, "speculative steps"),
        ("--grid-topk", grid.DEFAULT_TOPK, "EAGLE top-k"),
        ("--grid-draft", grid.DEFAULT_DRAFT, "draft tokens"),
    ):
        d.add_argument(flag, metavar="LIST", default=",".join(map(str, default)), help=f"{what} (default: %(default)s)")
    p.set_defaults(func=run)


def concurrency_list(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not re.fullmatch(r"[1-9][0-9]{0,3}", t) for t in items):
        raise UsageError(f"--concurrency {text!r}: give whole numbers from 1 to {MAX_CONCURRENCY}, e.g. 1,8,32")
    values = [int(t) for t in items]
    if max(values) > MAX_CONCURRENCY or len(set(values)) != len(values):
        raise UsageError(f"--concurrency {text!r}: each from 1 to {MAX_CONCURRENCY}, none twice")
    return sorted(values)


def read_api_key(path: str | None) -> key_file.ApiKey | None:
    """--api-key-file: the entrypoint's checks (sm120/image/entrypoint/key_file.py). The value given is never shown:
    a key pasted where its file's path goes would be printed."""
    if path is None:
        return None
    SECRETS.add(path)
    try:
        key = key_file.read(path)
    except key_file.KeyFileError as exc:
        raise UsageError(
            f"--api-key-file: {exc.problem} (the path is not shown: a key pasted there would be)"
        ) from None
    SECRETS.add(key.value)  # masked in everything bench prints and writes from here on
    return key


_USERINFO = re.compile(r"^([^:/?#]*://)?([^/?#]*)@")


def _check_label(name: str, flag: str) -> str:
    if not name or any(c in name for c in "/\\|\n") or name.startswith(".") or name != name.strip():
        raise UsageError(f"{flag} {name!r}: use letters, digits, '-', '_' or '.'")
    if any(unicodedata.category(c).startswith("C") for c in name):
        raise UsageError(f"{flag} {name!r}: control characters; use letters, digits, '-', '_'")
    return name


def _readable_dir(given: str, flag: str) -> Path:
    if not (os.path.isdir(given) and os.access(given, os.R_OK | os.X_OK)):  # isdir: False on any OSError
        raise UsageError(f"{flag} {given}: no such directory, or not readable by this user")
    return Path(given)


def read_image_plan(image: str) -> Plan:
    """What `--image` serves, from the image itself (its plan.json: modes, port, cache directory, tag)."""
    engine = docker_client.connect(probe.ServerUnreachable)
    docker_client.image(engine, image, "--image")
    return image_plan.read(engine, image)


class Terminated(errors.Terminated):
    what = "terminated (SIGTERM): the finished runs are kept"


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """Ctrl-C stops bench even where it started with SIGINT ignored (a background job of a script); SIGTERM raises
    Terminated. Either way the finished runs are kept, the label is marked interrupted and bench.md is written."""

    def terminated(signum: int, frame: object) -> None:
        raise Terminated()

    with contextlib.ExitStack() as restore:  # the previous handlers, however bench ends
        for signum, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, terminated)):
            restore.callback(signal.signal, signum, signal.signal(signum, handler))
        yield


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as held, _signals():
        concurrency = concurrency_list(args.concurrency)
        prompt_set = prompts.load(args.prompts)
        if not args.out.strip():
            raise UsageError("--out is empty: give a directory, e.g. --out bench-results")
        if args.max_tokens < 4:
            raise UsageError("--max-tokens must be at least 4 (bench_serving's least output length)")
        if args.min_speedup is not None and args.runs < 2:
            raise UsageError("--min-speedup judges a 95 % interval: give --runs 2 or more")
        args.gate_concurrency = args.gate_concurrency or concurrency[0]
        if args.gate_concurrency not in concurrency:
            raise UsageError(f"--gate-concurrency {args.gate_concurrency}: not in --concurrency {args.concurrency}")
        _check_label(args.baseline, "--baseline")
        key = read_api_key(args.api_key_file)
        target = _ImageTarget(args) if args.image is not None else _EndpointTarget(args, key.value if key else None)
        engine = docker_client.connect(probe.ServerUnreachable)
        docker_client.image(engine, target.bench_image, target.bench_flag)
        settings = {
            "concurrency": concurrency,
            **{name: getattr(args, name) for name in ("runs", "max_tokens", "seed")},
            "prompts": prompt_set.to_dict(),
            "figure": sweep.SPEEDUP_FIGURES[args.speedup_metric],
            "run_timeout_s": args.run_timeout,
            "bench_image": target.bench_image,
        }
        out_dir = Path(args.out)
        results = _open_results(args, held, out_dir, target.labels, settings)
        try:
            try:
                failures = target.sweep(engine, results, out_dir, prompt_set, key)
            except BaseException:  # a failed run, Ctrl-C: bench.json, bench.md and bench.png keep what was measured
                results.interrupt()
                if any(label.runs or label.error for label in results.labels.values()):
                    with contextlib.suppress(Exception):  # never hide the real error behind a report error
                        report.write(results, out_dir)
                raise
            return _finish(args, results, out_dir, target.best, failures)
        except SaveFailed as exc:  # a full disk under --out: what bench.json would hold goes to stdout
            print(json.dumps(results.to_dict(), indent=2))
            runs = sum(len(label.runs) for label in results.labels.values())
            done = f"all {runs} finished runs are printed above as bench.json would hold them"
            raise SaveFailed(f"{exc}: {done}") from None


class _Target:
    """--endpoint or --image: its labels, the image whose bench_serving runs (bench_image, named by bench_flag), the
    tokenizer (its path in that container, the host directory mounted there); sweep() measures every label."""

    models: Path | None = None
    best: str | None = None  # --spec-grid's best point: the label --min-speedup judges

    def sweep(self, engine: Any, results: Results, out_dir: Path, prompt_set: Any, key: Any) -> list[str]:
        """Every run of every label, bench.json saved after each; the failures (exit 1 once the report is written)."""
        self.engine, self.results, self.out_dir, self.prompt_set, self.key = engine, results, out_dir, prompt_set, key
        total = len(self.labels) * len(results.settings["concurrency"]) * results.settings["runs"]
        self.bar = tqdm(total=total, unit="run", file=sys.stderr, disable=not sys.stderr.isatty(), dynamic_ncols=True)
        return self.measure()

    def label(self, label: Label, endpoint: str, server: Any = None) -> None:
        s = self.results.settings
        job = serving.Job(
            image=self.bench_image,
            endpoint=endpoint,
            tokenizer=self.tokenizer[0],
            tokenizer_dir=self.tokenizer[1],
            models_dir=self.models,
            max_tokens=s["max_tokens"],
            seed=s["seed"],
            deadline_s=s["run_timeout_s"],
            api_key_file=Path(self.key.path) if self.key else None,
        )
        label.server = server or probe.server_info(endpoint, self.key.value if self.key else None)
        self.results.labels[label.name] = label
        self.results.save(self.out_dir)
        work = Path(tempfile.mkdtemp(prefix=".bench-work-", dir=self.out_dir))
        try:
            points = [(c, i + 1) for c in s["concurrency"] for i in range(s["runs"])]
            records = serving.runs(self.engine, job, [c for c, _ in points], self.prompt_set, work)
            with contextlib.closing(records):  # its container goes at once, however the loop ends
                for (c, repeat), record in zip(points, records, strict=False):
                    figures = sweep.run_figures(record)
                    label.runs.append({"concurrency": c, "repeat": repeat, **figures})
                    self.results.save(self.out_dir)
                    self._progress(label.name, c, repeat, figures)
            label.status = "complete"
            self.results.save(self.out_dir)
        except CheckFailed as exc:
            label.status, label.error = "failed", str(exc)
            self.results.save(self.out_dir)
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _progress(self, name: str, c: int, i: int, f: dict[str, Any]) -> None:
        text = f"{name} c={c} run {i}: {f['output_tok_s'] or 0:.1f} tok/s, p99 ITL {f['itl_ms_p99'] or 0:.1f} ms"
        if f["accept_length"]:
            text += f", accept {f['accept_length']:.2f}"
        if self.bar.disable:
            print(text, file=sys.stderr, flush=True)
        else:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)


class _EndpointTarget(_Target):
    """--endpoint: one label, a server someone else started; bench_serving from --bench-image (or build.toml's).
    The server answers, and takes the key, before --out exists."""

    bench_flag = "--bench-image"  # its default: the image ./dev build makes

    def __init__(self, args: argparse.Namespace, key: str | None) -> None:
        if args.label is None:
            raise UsageError("--endpoint needs --label NAME (e.g. --label baseline, then --label eagle3)")
        for flag in ("spec_grid", "models", "cache_volume", "modes", "env"):
            if getattr(args, flag):
                raise UsageError(f"--{flag.replace('_', '-')} goes with --image, not --endpoint")
        # --endpoint's user info (http://USER:PASSWORD@host) goes to SECRETS, as given and percent-decoded, first:
        # every message below may quote --endpoint.
        userinfo = _USERINFO.match(args.endpoint.strip())
        self.credentials = userinfo is not None
        for value in (userinfo.group(2), userinfo.group(2).partition(":")[2]) if userinfo else ():
            SECRETS.add(value)
            SECRETS.add(unquote(value))
        plan = resolve.load_plan(args.config)
        self.endpoint = probe.normalize_endpoint(args.endpoint, plan.image.port)
        self.labels = [_check_label(args.label, "--label")]
        if args.tokenizer is None:
            raise UsageError("--endpoint needs --tokenizer DIR: the served model's directory (its tokenizer files)")
        self.tokenizer = (serving.TOKENIZER, _readable_dir(args.tokenizer, "--tokenizer"))
        self.bench_image = args.bench_image or plan.tags[0]
        self.server = probe.server_info(self.endpoint, key)

    def measure(self) -> list[str]:
        # The endpoint as bench.json and bench.md record it: without its user info.
        source: dict[str, Any] = {"endpoint": _USERINFO.sub(lambda m: m.group(1) or "", self.endpoint, count=1)}
        if self.credentials:
            source["credentials"] = "given in the URL, not recorded"
        self.label(Label(self.labels[0], source=source), self.endpoint, self.server)
        return []


class _ImageTarget(_Target):
    """--image: one container per mode (and per grid point), measured in turn; bench_serving from the same image.
    Each mode's server is probed once its container is up."""

    bench_flag = "--image"

    def __init__(self, args: argparse.Namespace) -> None:
        args.gpus = gpu_ids.check_gpus(args.gpus, "--gpus", allow_none=True)
        if args.label or args.bench_image:
            raise UsageError("--label and --bench-image go with --endpoint; with --image the labels are the modes")
        plan = read_image_plan(args.image)  # after the checks that need no Docker
        self.args, self.bench_image, self.plan = args, args.image, plan
        known = plan.entrypoint.modes
        self.modes = _modes(args.modes, known)
        self.env = _parse_env(args.env)
        if key_file.VARIABLE in self.env:
            raise UsageError(f"--env {key_file.VARIABLE}=...: give --api-key-file FILE (bench mounts it)")
        if not probe.is_port(port := self.env.setdefault("PORT", str(plan.image.port))):
            raise UsageError(f"--env PORT={port!r}: {probe.PORT_RULE}")
        self.env.setdefault("HOST", "0.0.0.0")
        if "MODEL_PATH" not in self.env:
            raise UsageError(
                "--image needs --env MODEL_PATH=PATH (the model's path inside the container, e.g. /models/NAME)"
            )
        self.models = _readable_dir(args.models, "--models") if args.models else None
        mount = docker_runner.MODELS_MOUNT
        for name in ("MODEL_PATH", "DRAFT_MODEL_PATH"):
            value = self.env.get(name, "")
            if not value.startswith(mount + "/"):
                continue
            if self.models is None:
                raise UsageError(f"--env {name}={value} is under {mount}: give --models DIR (the host directory)")
            if not (host := self.models / value[len(mount) + 1 :]).exists():
                raise UsageError(f"--env {name}={value}: {host} does not exist on this host")
        for mode in self.modes:
            if known[mode].draft and "DRAFT_MODEL_PATH" not in self.env:
                raise UsageError(f"mode {mode} needs --env DRAFT_MODEL_PATH=PATH (the EAGLE-3 draft model)")
        tokenizer_dir = _readable_dir(args.tokenizer, "--tokenizer") if args.tokenizer else None
        self.tokenizer = (serving.TOKENIZER, tokenizer_dir) if tokenizer_dir else (self.env["MODEL_PATH"], None)
        self.spec_mode, self.points = _grid(args, self.modes, known) if args.spec_grid else ("", [])
        self.plain = [m for m in self.modes if not (self.points and m == self.spec_mode)]  # not swept
        self.labels = self.plain + [p.label for p in self.points]

    def _one(self, mode: str, name: str, point: grid.Point | None = None) -> None:
        a = self.args
        container = docker_runner.ContainerSpec(
            image=a.image,
            mode=mode,
            label=name,
            env={**self.env, **(point.env() if point else {})},
            port=int(self.env["PORT"]),
            cache_dir=self.plan.image.cache_dir,
            cache_volume=a.cache_volume or f"{self.plan.tags[0].split(':')[0].rsplit('/', 1)[-1]}-cache",
            models_dir=self.models,
            gpus=a.gpus,
            health_timeout_s=a.health_timeout,
            api_key_file=Path(a.api_key_file) if a.api_key_file else None,
        )
        spec = dataclasses.asdict(point) if point else None
        source = {"image": a.image, "mode": mode, "env": container.recorded_env(), "gpus": a.gpus, "spec": spec}
        label = self.results.labels[name] = Label(name, source=source)
        try:
            with docker_runner.serve(self.engine, container, self.out_dir) as endpoint:
                self.label(label, endpoint)
        except CheckFailed as exc:
            label.status, label.error = "failed", label.error or str(exc)
            self.results.save(self.out_dir)
            raise

    def measure(self) -> list[str]:
        for mode in self.plain:
            self._one(mode, mode)
        if not self.points:
            return []
        results, failures = self.results, []
        results.grid = {"points": [p.to_dict() for p in self.points], "best": None}
        for point in self.points:
            try:
                self._one(self.spec_mode, point.label, point)
            except CheckFailed as exc:  # one setting that cannot run (out of memory, say) does not end the sweep
                failures.append(str(exc))
                print(f"bench: {exc}; going on with the next setting", file=sys.stderr)
        gate_c = str(self.args.gate_concurrency)
        at_c = {n: sweep.summaries(lab.runs).get(gate_c, {}) for n, lab in results.labels.items()}
        best = grid.best(at_c, self.points, results.settings["figure"])
        self.best = results.grid["best"] = best.label if best else None
        results.save(self.out_dir)
        return [] if self.best else failures  # a best setting found: the failed points are reported, not fatal


def _parse_env(items: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UsageError(f"--env {item!r}: give NAME=VALUE, e.g. --env MODEL_PATH=/models/Kimi-K2.5-NVFP4")
        env[key] = value
    return env


def _modes(given: str | None, known: dict[str, Any]) -> list[str]:
    """--modes: the image's modes to measure, in order (default: every mode of the image, as its plan lists them)."""
    if given is None:
        return list(known)
    modes = [m.strip() for m in given.split(",") if m.strip()]
    if not modes:
        raise UsageError(f"--modes is empty: give e.g. {','.join(known)}")
    for mode in modes:
        if mode not in known:
            raise UsageError(f"--modes {mode!r}: the image knows {', '.join(sorted(known))}" + suggest(mode, known))
    if len(set(modes)) != len(modes):
        raise UsageError(f"--modes {given!r}: a mode is listed twice")
    return modes


def _grid(args: argparse.Namespace, modes: list[str], known: dict[str, Any]) -> tuple[str, list[grid.Point]]:
    """--spec-grid: the draft mode it sweeps and the runnable points of --grid-steps x --grid-topk x --grid-draft."""
    spec_modes = [m for m in modes if known[m].draft]
    if not spec_modes:
        drafted = " or ".join(m for m in known if known[m].draft) or "a mode with a draft model"
        raise UsageError(f"--spec-grid sweeps EAGLE-3 settings: add {drafted} to --modes")
    lists = (grid.parse_list(getattr(args, f"grid_{n}"), f"--grid-{n}") for n in ("steps", "topk", "draft"))
    return spec_modes[0], grid.points(*lists, known[spec_modes[0]].draft_tree)


def _open_results(
    args: argparse.Namespace, held: contextlib.ExitStack, out_dir: Path, labels: list[str], settings: dict[str, Any]
) -> Results:
    """--out checked (a directory this user can write bench.json into: found before the first request), locked and
    read (the labels kept from an earlier run); a mistake leaves no new directory."""
    created = not out_dir.exists()
    try:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".bench-probe-"):
                pass
        except FileExistsError:
            raise UsageError(f"--out {out_dir}: not a directory") from None
        except OSError as exc:
            raise UsageError(f"--out {out_dir}: cannot write into it ({exc.strerror or exc})") from None
        for name in ("bench.json", "bench.md", "bench.png"):
            if (out_dir / name).exists() and not (out_dir / name).is_file():
                raise UsageError(f"--out {out_dir}: {out_dir / name} is not a file")
        held.enter_context(writer_lock(out_dir))
        results = open_results(out_dir, settings, baseline=args.baseline, fresh=args.fresh)
        present = set(results.labels) | set(labels)
        if args.min_speedup is not None and (args.baseline not in present or len(present) < 2):
            raise UsageError(
                f"--min-speedup needs results for label {args.baseline!r} and another label in {out_dir}; "
                f"measure {args.baseline!r} first (--label {args.baseline}) or use --image --modes baseline,..."
            )
    except UsageError:
        held.close()  # the lock file goes with the directory
        if created:
            with contextlib.suppress(OSError):
                (out_dir / LOCK_NAME).unlink(missing_ok=True)
                out_dir.rmdir()
        raise
    if kept_now := [k for k in results.labels if k not in labels]:
        print(f"bench: keeping {', '.join(kept_now)} from {out_dir / 'bench.json'}", file=sys.stderr)
    return results


def _finish(args: argparse.Namespace, results: Results, out_dir: Path, best: str | None, failures: list[str]) -> int:
    """The gate (--min-speedup), the report and the summary; exit 1 when the gate or a grid point failed."""
    gate_c, minimum = args.gate_concurrency, args.min_speedup
    if minimum is not None:
        names = [best] if best else [n for n in results.labels if n != results.baseline]
        missed = sweep.gate(results.to_dict()["speedup"], names, gate_c, minimum)
        passed = f"{', '.join(names)}: the 95 % interval at concurrency {gate_c} starts at or above {minimum:g}"
        message = "; ".join(missed) or passed
        results.gate = dict(min_speedup=minimum, concurrency=gate_c, labels=names, passed=not missed, message=message)
        failures = missed + failures
    paths = report.write(results, out_dir)
    data = results.to_dict()
    for name, by_c in data["speedup"].items():
        ratios = ", ".join(f"c={c} ×{r['ratio']:.2f}" for c, r in by_c.items())
        when = f"not faster from concurrency {c} on" if (c := data["crossover"][name]) else ""
        print(f"{name}: {ratios}; {when or 'faster at every concurrency measured'}")
    print("wrote " + ", ".join(str(p) for p in paths))
    if failures:
        raise CheckFailed(failures[0])
    return 0
