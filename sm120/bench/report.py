"""bench.md (a table per label, the speedup per concurrency, the crossover, the gate) and bench.png (throughput and
p99 inter-token latency against concurrency, a line per label), both from bench.json's data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sm120.bench import sweep
from sm120.bench.results import Results
from sm120.image.entrypoint.errors import redact

COLUMNS = ("output_tok_s", "request_tok_s", "request_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99")
COLUMNS += ("itl_ms_p50", "itl_ms_p90", "itl_ms_p99", "accept_length")
PLOTTED = (("output_tok_s", "output tok/s"), ("itl_ms_p99", "p99 inter-token latency (ms)"))  # bench.png's panels


def _cell(s: dict[str, Any] | None, digits: int = 1, key: str = "mean", sign: str = "") -> str:
    if not s:
        return "–"
    text = f"{sign}{s[key]:.{digits}f}"
    return text + (f" ({s['ci95_low']:.{digits}f}–{s['ci95_high']:.{digits}f})" if s["ci95_low"] is not None else "")


def stand_in(data: dict[str, Any]) -> bool:
    """Measured against the tests' stand-in server (it says so in /server_info's version), not SGLang."""
    return any(str(lab["server"].get("version", "")).endswith("stand-in") for lab in data["labels"].values())


def _source(label: dict[str, Any]) -> str:
    src, server = label["source"], label["server"]
    where = f"image `{src['image']}` mode `{src.get('mode')}`" if "image" in src else f"endpoint {src.get('endpoint')}"
    spec = ["steps {steps}, top-k {topk}, draft tokens {draft}".format(**src["spec"])] if src.get("spec") else []
    said = [f"{k} {server[k]}" for k in ("version", "model_path", "tp_size", "speculative_algorithm") if server.get(k)]
    return "; ".join([where, *spec, *said])


def markdown(data: dict[str, Any]) -> str:
    from tabulate import tabulate

    s = data["settings"]
    lines = [
        "## SGLang under load: baseline vs EAGLE-3 (SGLang's bench_serving)",
        "",
        f"Concurrency {', '.join(map(str, s['concurrency']))}; {s['runs']} runs each; max tokens {s['max_tokens']}, "
        f"seed {s['seed']}; prompts {s['prompts']['name']} ({s['prompts']['count']}, sha256 "
        f"{s['prompts']['sha256'][:12]}). Mean (95 % interval, Student t) over the runs; speedups: "
        f"{sweep.FIGURES[s['figure']]} over `{data['baseline']}`.",
    ]
    if stand_in(data):
        lines += ["", "**Measured against a stand-in server, not SGLang: the figures show the tool, not a GPU.**"]
    headers = ["concurrency", *(sweep.FIGURES[c] for c in COLUMNS)]
    for name, label in data["labels"].items():
        status = label["status"] + (f": {label['error']}" if label["error"] else "")
        lines += ["", f"### {name}", "", f"{_source(label)}. Status: {status}.", ""]
        rows = [
            [c, *(_cell(figs.get(k), 2 if k == "accept_length" else 1) for k in COLUMNS)]
            for c, figs in label["summary"].items()
        ]
        lines.append(tabulate(rows, headers, tablefmt="github") if rows else "No finished runs.")
    if data["speedup"]:
        lines += ["", f"### Speedup over `{data['baseline']}`", ""]
        concurrencies = sorted({c for by_c in data["speedup"].values() for c in by_c}, key=int)
        rows = [
            [name, *(_cell(by_c.get(c), 3, "ratio", "×") for c in concurrencies)]
            for name, by_c in data["speedup"].items()
        ]
        lines.append(tabulate(rows, ["label", *(f"c={c}" for c in concurrencies)], tablefmt="github"))
        for name, c in data["crossover"].items():
            when = f"no longer faster from concurrency {c} on" if c is not None else ""
            lines.append(f"\n- `{name}`: {when or 'still faster at the highest concurrency measured'}")
    if gate := data["gate"]:
        lines += ["", f"**Gate: {'passed' if gate['passed'] else 'FAILED'}**: {gate['message']}"]
    if grid := data["grid"]:
        lines += ["", f"EAGLE-3 settings sweep: best `{grid.get('best')}` of {len(grid['points'])} points."]
    return redact("\n".join(lines) + "\n")


def plot(data: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for ax, (key, title) in zip(axes, PLOTTED, strict=True):
        for name, label in data["labels"].items():
            points = [(int(c), f[key]) for c, f in label["summary"].items() if key in f]
            if not points:
                continue
            xs, ss = zip(*points, strict=True)
            means = [x["mean"] for x in ss]
            yerr = [[abs(x["mean"] - x[k]) if x[k] is not None else 0 for x in ss] for k in ("ci95_low", "ci95_high")]
            ax.errorbar(xs, means, yerr=yerr, marker="o", capsize=4, label=redact(f"{name} ({label['status']})"))
        ax.set_xscale("log", base=2)
        ax.set_xticks(data["settings"]["concurrency"], [str(c) for c in data["settings"]["concurrency"]])
        ax.minorticks_off()
        ax.set(xlabel="concurrent requests", title=title, ylim=(0, None))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    title = "SGLang bench_serving: baseline vs EAGLE-3 by concurrency (mean, 95 % interval)"
    if stand_in(data):
        title += "\nSTAND-IN SERVER, NOT SGLANG: these figures show the tool, not a GPU"
    fig.suptitle(title, fontsize=10, color="darkred" if stand_in(data) else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(results: Results, directory: Path) -> list[Path]:
    paths, data = [results.save(directory), directory / "bench.md"], results.to_dict()
    paths[1].write_text(markdown(data), encoding="utf-8")
    if any(label.runs for label in results.labels.values()):
        paths.append(plot(data, directory / "bench.png"))
    return paths
