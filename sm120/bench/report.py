"""bench.md (a table for a person, e.g. a CI job summary) and bench.png (bars with intervals, every run a dot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sm120.bench.results import Results
from sm120.image.entrypoint.errors import redact


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _mean_ci(summary: dict[str, Any] | None, digits: int = 1) -> str:
    if not summary:
        return "–"
    text = _fmt(summary["mean"], digits)
    if summary.get("ci95_low") is not None:
        text += f" ({_fmt(summary['ci95_low'], digits)}–{_fmt(summary['ci95_high'], digits)})"
    return text


def _ratio(r: dict[str, Any] | None) -> str:
    if not r:
        return "–"
    text = f"×{r['ratio']:.3f}"
    if r.get("ci95_low") is not None:
        text += f" ({r['ci95_low']:.3f}–{r['ci95_high']:.3f})"
    return text


def _source(label: dict[str, Any]) -> str:
    src = label.get("source", {})
    server = label.get("server", {})
    parts = []
    if "image" in src:
        parts.append(f"image `{src['image']}` mode `{src.get('mode')}`")
        spec = src.get("spec")
        if spec:
            parts.append("steps {steps}, top-k {topk}, draft tokens {draft}".format(**spec))
    elif "endpoint" in src:
        parts.append(
            f"endpoint {src['endpoint']}" + (" (credentials given, not recorded)" if src.get("credentials") else "")
        )
    if server.get("version"):
        parts.append(f"SGLang {server['version']}")
    if server.get("model_path"):
        parts.append(f"model `{server['model_path']}`")
    if server.get("tp_size"):
        parts.append(f"TP {server['tp_size']}")
    if server.get("speculative_algorithm"):
        parts.append(
            f"{server['speculative_algorithm']} steps {server.get('speculative_num_steps')}, "
            f"top-k {server.get('speculative_eagle_topk')}, draft tokens {server.get('speculative_num_draft_tokens')}"
        )
    return "; ".join(parts) or "–"


def _incomplete(data: dict[str, Any]) -> list[str]:
    """'eagle3: 3 of 10 runs (interrupted)' for every label that did not finish its runs."""
    asked = data["settings"].get("runs")
    out = []
    for name, label in data["labels"].items():
        if label["status"] != "complete":
            done = len(label["runs"])
            of = f" of {asked}" if isinstance(asked, int) else ""
            out.append(f"{name}: {done}{of} runs ({label['status']})")
    return out


def markdown(results: Results) -> str:
    data = results.to_dict()
    s = data["settings"]
    prompts = s.get("prompts", {})
    lines = [
        "## SGLang single-stream benchmark",
        "",
        f"{s.get('runs')} runs per label after {s.get('warmup')} warm-up; max tokens {s.get('max_tokens')}, "
        f"temperature {s.get('temperature')}, seed {s.get('seed')}, "
        f"ignore EOS {'on' if s.get('ignore_eos') else 'off'}; "
        f"prompts: {prompts.get('name')} ({prompts.get('count')}, sha256 {str(prompts.get('sha256'))[:12]}). "
        "Mean with its 95 % interval (Student t); speedups are over "
        f"`{data['baseline']}`.",
        "",
    ]
    incomplete = _incomplete(data)
    if incomplete:
        lines += [f"**Incomplete: {'; '.join(incomplete)}.** The figures are of the runs that finished.", ""]
    lines += [
        "| label | runs | decode tok/s | e2e tok/s | TTFT (s) | tokens | accept length | speedup (decode) | "
        "speedup (e2e) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, label in data["labels"].items():
        summary = label["summary"]
        speedup = data["speedup"].get(name, {})
        runs = str(len(label["runs"]))
        if label["status"] != "complete":
            asked = s.get("runs")
            runs += (f" of {asked}" if isinstance(asked, int) else "") + f" ({label['status']})"
        decode = summary.get("decode_tok_s")
        decode_text = _mean_ci(decode)
        if decode:
            decode_text += f"<br>median {_fmt(decode['median'])}, {_fmt(decode['min'])}–{_fmt(decode['max'])}"
        lines.append(
            f"| {name} | {runs} | {decode_text} | {_mean_ci(summary.get('e2e_tok_s'))} | "
            f"{_mean_ci(summary.get('ttft_s'), 3)} | {_fmt((summary.get('completion_tokens') or {}).get('mean'), 0)} | "
            f"{_mean_ci(summary.get('spec_accept_length'), 2)} | {_ratio(speedup.get('decode_tok_s'))} | "
            f"{_ratio(speedup.get('e2e_tok_s'))} |"
        )
    gate = data.get("gate")
    if gate:
        lines += ["", f"**Gate: {'passed' if gate['passed'] else 'FAILED'}**: {gate['message']}"]
    grid = data.get("grid")
    if grid and grid.get("points"):
        lines += [
            "",
            "### EAGLE-3 settings sweep",
            "",
            "| steps | top-k | draft tokens | decode tok/s | accept length | speedup (decode) | |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for point in grid["points"]:
            summary = data["labels"].get(point["label"], {}).get("summary", {})
            speedup = data["speedup"].get(point["label"], {})
            mark = "best" if point["label"] == grid.get("best") else ("failed" if point.get("error") else "")
            lines.append(
                f"| {point['steps']} | {point['topk']} | {point['draft']} | {_mean_ci(summary.get('decode_tok_s'))} | "
                f"{_mean_ci(summary.get('spec_accept_length'), 2)} | {_ratio(speedup.get('decode_tok_s'))} | {mark} |"
            )
    lines += ["", "| label | source | status |", "| --- | --- | --- |"]
    for name, label in data["labels"].items():
        status = label["status"] + (f": {label['error']}" if label.get("error") else "")
        lines.append(f"| {name} | {_source(label)} | {status.replace('|', '/')} |")
    lines += [
        "",
        "decode tok/s: tokens after the first streamed chunk over the time after it; e2e tok/s: all completion "
        "tokens over the whole request; tokens are SGLang's own `completion_tokens`; accept length: SGLang's "
        "`spec_accept_length` (completion tokens per verify step).",
        "",
    ]
    return "\n".join(lines)


def plot_title(data: dict[str, Any]) -> str:
    """bench.png's title: what the figure shows, and which labels stopped short (runs done of runs asked)."""
    s = data["settings"]
    title = (
        f"SGLang single stream: {s.get('runs')} runs per label, max {s.get('max_tokens')} tokens "
        f"(bars: mean, whiskers: 95 % interval, dots: runs, ×: over {data['baseline']})"
    )
    incomplete = _incomplete(data)
    return title + ("\nINCOMPLETE: " + "; ".join(incomplete) if incomplete else "")


def plot(results: Results, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = results.to_dict()
    s = data["settings"]
    names = [n for n, lab in data["labels"].items() if lab["runs"]]
    panels = [
        ("decode_tok_s", "decode tok/s"),
        ("e2e_tok_s", "end-to-end tok/s"),
        ("ttft_s", "time to first token (s)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        for i, name in enumerate(names):
            label = data["labels"][name]
            summary = label["summary"].get(key)
            color = colors[i % len(colors)]
            if not summary:
                continue
            err = None
            if summary.get("ci95_low") is not None:  # a speed or a time: the interval stops at zero
                low = max(summary["ci95_low"], 0.0)
                err = [[max(summary["mean"] - low, 0.0)], [max(summary["ci95_high"] - summary["mean"], 0.0)]]
            ax.bar(i, summary["mean"], width=0.6, color=color, alpha=0.35, edgecolor=color)
            ax.errorbar(i, summary["mean"], yerr=err, fmt="none", ecolor="black", capsize=6, linewidth=1.2)
            values = [r[key] for r in label["runs"] if isinstance(r.get(key), (int, float))]
            n = len(values)
            xs = [i + (j - (n - 1) / 2) * (0.4 / max(n - 1, 1)) for j in range(n)]
            ax.scatter(xs, values, s=14, color=color, edgecolor="black", linewidths=0.4, zorder=3)
        ax.set_xlim(-0.8, max(len(names), 2) - 0.2)
        ax.set_xticks(range(len(names)))
        ticks = []
        for name in names:
            r = data["speedup"].get(name, {}).get(key if key in ("decode_tok_s", "e2e_tok_s") else "", {})
            tick = f"{name}\n×{r['ratio']:.2f}" if r else name
            label = data["labels"][name]
            if label["status"] != "complete":
                asked = s.get("runs")
                tick += (
                    f"\n{len(label['runs'])}{f' of {asked}' if isinstance(asked, int) else ''} runs, {label['status']}"
                )
            ticks.append(redact(tick))
        ax.set_xticklabels(ticks, rotation=20 if len(names) > 3 else 0, ha="right" if len(names) > 3 else "center")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    title, incomplete = plot_title(data), _incomplete(data)
    fig.suptitle(redact(title), fontsize=10, color="black" if not incomplete else "darkred")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(results: Results, directory: Path) -> list[Path]:
    """bench.json, bench.md and bench.png in directory."""
    paths = [results.save(directory)]
    md = directory / "bench.md"
    md.write_text(redact(markdown(results)), encoding="utf-8")
    paths.append(md)
    if any(label.runs for label in results.labels.values()):
        paths.append(plot(results, directory / "bench.png"))
    return paths
