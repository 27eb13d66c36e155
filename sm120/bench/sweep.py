"""The load sweep's figures: a run of bench_serving reduced to what bench.json keeps, the mean and 95 % interval over
the repeated runs, the speedup over the baseline, the crossover and the gate. The percentiles are computed from the
per-request times of bench_serving's `--output-details` line: its own summary has only some (no p90).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

CONFIDENCE = 0.95
PERCENTILES = (50, 90, 99)
# The figures a speedup may be judged by (--speedup-metric), with how a person reads them.
SPEEDUP_FIGURES = {"output": "output_tok_s", "per-request": "request_tok_s"}
FIGURES: dict[str, str] = {
    "output_tok_s": "output tok/s (all requests)",
    "request_tok_s": "tok/s per request",
    "request_s": "requests/s",
    **{f"{t}_ms_p{p}": f"{t.upper()} p{p} (ms)" for t in ("ttft", "tpot", "itl") for p in PERCENTILES},
    "accept_length": "accept length",
}
ByConcurrency = dict[str, dict[str, Any]]  # a summary, a speedup: per concurrency (a string key, JSON's)


# What run_figures reads of bench_serving's result line: T1 finds each in every track's release.
RECORD_KEYS = ("completed", "duration", "total_output_tokens", "output_throughput", "request_throughput")
RECORD_KEYS += ("accept_length", "ttfts", "itls", "output_lens", "errors")


def _finite(value: Any) -> float | None:
    """A number bench.json can hold: NaN and infinity (JSON has neither) are no figure."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _percentiles(name: str, values: Sequence[float]) -> dict[str, float | None]:
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return {f"{name}_ms_p{p}": None for p in PERCENTILES}
    ms = [v * 1000.0 for v in values] * (2 if len(values) == 1 else 1)  # quantiles wants two points; one is all
    cuts = statistics.quantiles(ms, n=100, method="inclusive")  # numpy.percentile's default (linear) interpolation
    return {f"{name}_ms_p{p}": cuts[p - 1] for p in PERCENTILES}


def run_figures(record: dict[str, Any]) -> dict[str, Any]:
    """bench_serving's result line (with --output-details) as one run of bench.json. The generated texts and the
    server's own settings in it are not kept."""
    ttfts, itls, lens = record.get("ttfts") or [], record.get("itls") or [], record.get("output_lens") or []
    errors = [e for e in record.get("errors") or [] if e]
    done = [(t, list(i), n) for t, i, n in zip(ttfts, itls, lens, strict=False) if n and t]
    tpots = [sum(i) / (n - 1) for _, i, n in done if n > 1 and i]
    per_request = [n / (t + sum(i)) for t, i, n in done if t + sum(i) > 0]
    return {
        "completed": int(record.get("completed") or 0),
        "failed": len(errors),
        "error": errors[0].strip().splitlines()[-1][:300] if errors else None,
        "duration_s": _finite(record.get("duration")),
        "output_tokens": int(record.get("total_output_tokens") or 0),
        "output_tok_s": _finite(record.get("output_throughput")),
        "request_tok_s": statistics.fmean(per_request) if per_request else None,
        "request_s": _finite(record.get("request_throughput")),
        **_percentiles("ttft", [t for t, _, _ in done]),
        **_percentiles("tpot", tpots),
        **_percentiles("itl", [x for _, i, _ in done for x in i]),
        "accept_length": accept if (accept := _finite(record.get("accept_length"))) and accept > 0 else None,
    }


def summarize(values: Iterable[float | None]) -> dict[str, Any] | None:
    """Mean, standard deviation and the Student-t 95 % interval of the mean (none for a single run)."""
    xs = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not xs:
        return None
    out: dict[str, Any] = {"n": len(xs), "mean": statistics.fmean(xs), "sd": None, "ci95_low": None, "ci95_high": None}
    if len(xs) > 1:
        sd = statistics.stdev(xs)
        low = high = out["mean"]
        if sd > 0:
            from scipy import stats  # here: scipy's import takes a second, every build.py command would pay it

            low, high = stats.t.interval(CONFIDENCE, len(xs) - 1, loc=out["mean"], scale=sd / math.sqrt(len(xs)))
        out.update(sd=sd, ci95_low=max(float(low), 0.0), ci95_high=float(high))  # no figure here is below zero
    return out


def summaries(runs: Sequence[dict[str, Any]]) -> ByConcurrency:
    by_c: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        by_c.setdefault(int(run["concurrency"]), []).append(run)
    return {
        str(c): {k: s for k in FIGURES if (s := summarize(r.get(k) for r in rs)) is not None}
        for c, rs in sorted(by_c.items())
    }


def ratio(num: dict[str, Any], den: dict[str, Any]) -> dict[str, Any] | None:
    """num.mean / den.mean with a 95 % interval for independent samples: the delta method on the log scale,
    log r ± t·sqrt((se_a/m_a)² + (se_b/m_b)²), Welch-Satterthwaite degrees of freedom. None without positive means;
    no interval with fewer than two runs on either side."""
    if num["mean"] <= 0 or den["mean"] <= 0:
        return None
    r = num["mean"] / den["mean"]
    out: dict[str, Any] = {"ratio": r, "ci95_low": None, "ci95_high": None}
    if num["sd"] is None or den["sd"] is None:
        return out
    ra, rb = (s["sd"] / math.sqrt(s["n"]) / s["mean"] for s in (num, den))
    var = ra * ra + rb * rb
    if var == 0.0:
        return {**out, "ci95_low": r, "ci95_high": r}
    df = var * var / (ra**4 / (num["n"] - 1) + rb**4 / (den["n"] - 1))
    from scipy import stats

    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * math.sqrt(var)
    return {**out, "ci95_low": r * math.exp(-half), "ci95_high": r * math.exp(half)}


def speedups(summary: ByConcurrency, baseline: ByConcurrency, figure: str) -> ByConcurrency:
    both = [c for c, figures in summary.items() if figure in figures and figure in baseline.get(c, {})]
    return {c: r for c in both if (r := ratio(summary[c][figure], baseline[c][figure])) is not None}


def crossover(by_c: ByConcurrency) -> int | None:
    """The lowest concurrency from which the mode is no longer faster (its interval's lower end, or the ratio without
    one, above 1) at any higher one measured; None where it is still faster at the highest (the sweep did not reach
    its end)."""
    low = {c: r["ci95_low"] if r["ci95_low"] is not None else r["ratio"] for c, r in by_c.items()}
    slower = list(itertools.takewhile(lambda c: not low[c] > 1.0, sorted(by_c, key=int, reverse=True)))
    return int(slower[-1]) if slower else None


def gate(speedup: dict[str, dict[str, Any]], names: Sequence[str], concurrency: int, minimum: float) -> list[str]:
    """--min-speedup: each name's speedup at `concurrency` judged by its interval's lower end. The failures, one
    line each (empty: passed)."""
    failures = []
    for name in names:
        if (r := speedup.get(name, {}).get(str(concurrency))) is None:
            failures.append(f"{name}: no speedup at concurrency {concurrency} (no finished runs there)")
        elif r["ci95_low"] is None:
            failures.append(f"{name}: one run at concurrency {concurrency} gives no interval; use --runs 2 or more")
        elif r["ci95_low"] < minimum:
            failures.append(
                f"{name} speedup at concurrency {concurrency} = {r['ratio']:.3f} "
                f"(95 % CI {r['ci95_low']:.3f}-{r['ci95_high']:.3f}): its lower end is below --min-speedup {minimum:g}"
            )
    return failures
