"""T0: the load sweep's figures (sm120/bench/sweep.py): one bench_serving line as a run of bench.json, the mean and
95 % interval over the runs, the speedup with its interval, the crossover and the gate, against figures computed
here from how the line was made (tests/unit/bench_fakes.fabricate), numpy's percentiles and published t values."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from sm120.bench import sweep
from tests.unit.bench_fakes import fabricate

# --------------------------------------------------------------------------------------------------
# One run: run_figures
# --------------------------------------------------------------------------------------------------


def expected_figures(requests: int, tokens: int, ttft: float, itl: float) -> dict[str, float]:
    """The figures of fabricate()'s requests from its definition: request i has TTFT ttft·f_i and inter-token
    latencies itl·f_i·(1 + j/20), f_i = 1 + i/10; its TPOT is (latency - TTFT) / (tokens - 1)."""
    f = 1 + np.arange(requests) / 10
    steps = 1 + np.arange(tokens - 1) / 20
    ttft_ms, itl_ms = 1000 * ttft * f, 1000 * itl * np.outer(f, steps)
    decode_s = itl * f * steps.sum()
    out = {"request_tok_s": float(np.mean(tokens / (ttft * f + decode_s)))}
    for name, values in (("ttft", ttft_ms), ("tpot", 1000 * decode_s / (tokens - 1)), ("itl", itl_ms.ravel())):
        for p in (50, 90, 99):
            out[f"{name}_ms_p{p}"] = float(np.percentile(values, p))
    return out


RUNS = [
    # id, fabricate's arguments, failed requests, accept length kept
    ("plain", dict(concurrency=4, tok_s=500.0, ttft=0.2, itl=0.02), 0, None),
    ("eagle3", dict(concurrency=8, tok_s=900.0, ttft=0.3, itl=0.012, accept=3.2, tokens=17), 0, 3.2),
    ("two-failed", dict(concurrency=2, tok_s=120.0, ttft=0.1, itl=0.03, failed=2, requests=5), 2, None),
    ("accept-zero", dict(concurrency=1, tok_s=80.0, ttft=0.35, itl=0.0125, accept=0), 0, None),
    ("one-request", dict(concurrency=1, tok_s=80.0, ttft=0.35, itl=0.0125, requests=1, tokens=2), 0, None),
]


@pytest.mark.parametrize(("made", "failed", "accept"), [c[1:] for c in RUNS], ids=[c[0] for c in RUNS])
def test_a_run_is_bench_servings_line_reduced_to_its_figures(made, failed, accept):
    record = fabricate(**made)
    figures = sweep.run_figures(record)
    requests, tokens = made.get("requests", 8), made.get("tokens", 9)
    duration = requests * tokens / made["tok_s"]
    assert figures == {
        "completed": requests,
        "failed": failed,
        "error": "RuntimeError: the connection was closed" if failed else None,
        "duration_s": pytest.approx(duration),
        "output_tokens": requests * tokens,
        "output_tok_s": made["tok_s"],
        "request_s": pytest.approx(requests / duration),
        **{k: pytest.approx(v) for k, v in expected_figures(requests, tokens, made["ttft"], made["itl"]).items()},
        "accept_length": accept,
    }
    assert set(figures) - {"completed", "failed", "error", "duration_s", "output_tokens"} == set(sweep.FIGURES)


def test_a_line_without_per_request_times_has_no_percentiles():
    figures = sweep.run_figures({"completed": 3, "output_throughput": 10.0, "duration": 2.0})
    assert figures["output_tok_s"] == 10.0 and figures["request_tok_s"] is None
    assert all(figures[f"{t}_ms_p{p}"] is None for t in ("ttft", "tpot", "itl") for p in (50, 90, 99))


def test_non_finite_numbers_in_the_line_are_not_figures():
    record = fabricate(1, 100.0, 0.1, 0.01, accept=float("inf"))
    record["output_throughput"] = float("nan")
    record["ttfts"][0] = float("nan")
    figures = sweep.run_figures(record)
    assert all(math.isfinite(v) for v in figures.values() if isinstance(v, float)), figures


# --------------------------------------------------------------------------------------------------
# Over the runs: summarize
# --------------------------------------------------------------------------------------------------

SAMPLE = [92.0, 95.5, 97.0, 88.5, 103.5, 96.0, 94.0, 99.0, 87.5, 98.0]
T_975_DF9 = 2.2622  # two-sided 95 % for 9 degrees of freedom, from the published t table (NIST/SEMATECH 1.3.6.7.2)


def test_summary_of_a_known_sample_is_the_student_t_interval():
    s = sweep.summarize(SAMPLE)
    mean = sum(SAMPLE) / 10
    sd = math.sqrt(sum((v - mean) ** 2 for v in SAMPLE) / 9)
    assert s is not None and (s["n"], s["mean"], s["sd"]) == (10, pytest.approx(mean), pytest.approx(sd))
    assert s["ci95_low"] == pytest.approx(mean - T_975_DF9 * sd / math.sqrt(10), rel=1e-5)
    half = stats.t.ppf(0.975, 9) * stats.sem(SAMPLE)  # scipy's own, computed apart from sweep's
    assert (s["ci95_low"], s["ci95_high"]) == (pytest.approx(mean - half), pytest.approx(mean + half))


SUMMARIES = [
    # id, values, expected (n, mean, ci95_low, ci95_high) or None
    ("one-run-no-interval", [5.0], (1, 5.0, None, None)),
    ("no-spread", [2.0, 2.0, 2.0], (3, 2.0, 2.0, 2.0)),
    ("missing-and-non-finite-skipped", [None, 4.0, float("nan"), float("inf"), "x"], (1, 4.0, None, None)),
    ("nothing", [None, float("nan")], None),
]


@pytest.mark.parametrize(("values", "expected"), [c[1:] for c in SUMMARIES], ids=[c[0] for c in SUMMARIES])
def test_summary_edge_cases(values, expected):
    s = sweep.summarize(values)
    assert (s if s is None else (s["n"], s["mean"], s["ci95_low"], s["ci95_high"])) == expected


@pytest.mark.filterwarnings("error")
def test_runs_that_agree_exactly_give_no_warning():
    """scipy's t.interval with a scale of 0 makes numpy warn (two lines on bench's stderr): not asked for then."""
    assert sweep.summarize([2.0, 2.0])["ci95_low"] == 2.0


def test_the_interval_of_a_figure_that_cannot_be_negative_stops_at_zero():
    s = sweep.summarize([10.0, 12.0, 300.0])  # e.g. p99 TTFT in ms over three runs, one slow
    assert s["ci95_low"] >= 0.0


def test_summaries_are_per_concurrency_in_numeric_order():
    runs = [{"concurrency": c, "output_tok_s": v} for c, v in ((16, 9.0), (4, 2.0), (4, 4.0), (1, 1.0))]
    summary = sweep.summaries(runs)
    assert list(summary) == ["1", "4", "16"]
    assert summary["4"]["output_tok_s"]["mean"] == 3.0 and summary["16"]["output_tok_s"]["n"] == 1
    assert "accept_length" not in summary["4"]  # no run had one


# --------------------------------------------------------------------------------------------------
# The speedup: ratio, speedups
# --------------------------------------------------------------------------------------------------


def test_the_ratio_of_a_known_case_and_its_delta_method_interval():
    a, b = [96.1, 94.0, 98.2, 95.0, 97.3], [92.6, 91.9, 93.4, 92.0, 93.1]
    r = sweep.ratio(sweep.summarize(a), sweep.summarize(b))
    assert r["ratio"] == pytest.approx(np.mean(a) / np.mean(b))
    # log r ± t(df)·sqrt(ra² + rb²), ra = sem/mean, Welch-Satterthwaite df: computed here with numpy and scipy.
    ra, rb = stats.sem(a) / np.mean(a), stats.sem(b) / np.mean(b)
    df = (ra**2 + rb**2) ** 2 / (ra**4 / 4 + rb**4 / 4)
    assert 4 <= df <= 8  # between the smaller sample's n - 1 and n_a + n_b - 2
    half = stats.t.ppf(0.975, df) * math.hypot(ra, rb)
    assert r["ci95_low"] == pytest.approx(r["ratio"] * math.exp(-half))
    assert r["ci95_high"] == pytest.approx(r["ratio"] * math.exp(half))


RATIOS = [
    # id, numerator values, denominator values, expected (ratio, low, high) or None
    ("one-run-no-interval", [3.0], [1.0, 1.0, 1.0], (3.0, None, None)),
    ("one-run-baseline", [3.0, 3.2], [1.0], (3.1, None, None)),
    ("no-spread", [2.0, 2.0], [1.0, 1.0, 1.0], (2.0, 2.0, 2.0)),
    ("zero-baseline", [2.0, 2.2], [0.0, 0.0], None),
]


@pytest.mark.parametrize(("num", "den", "expected"), [c[1:] for c in RATIOS], ids=[c[0] for c in RATIOS])
def test_ratio_edge_cases(num, den, expected):
    r = sweep.ratio(sweep.summarize(num), sweep.summarize(den))
    assert (r if r is None else (pytest.approx(r["ratio"]), r["ci95_low"], r["ci95_high"])) == expected


def test_the_ratio_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = random.Random(12345)
    covered = 0
    for _ in range(1000):
        a = sweep.summarize([rng.gauss(96.0, 5.0) for _ in range(10)])
        b = sweep.summarize([rng.gauss(92.0, 2.0) for _ in range(8)])
        r = sweep.ratio(a, b)
        covered += r["ci95_low"] <= 96.0 / 92.0 <= r["ci95_high"]
    assert 0.93 <= covered / 1000 <= 0.97


def test_speedups_are_per_concurrency_both_measured():
    base = sweep.summaries([{"concurrency": c, "output_tok_s": v} for c, v in ((1, 10.0), (1, 12.0), (4, 30.0))])
    spec = sweep.summaries([{"concurrency": c, "output_tok_s": v} for c, v in ((1, 22.0), (1, 22.0), (8, 50.0))])
    by_c = sweep.speedups(spec, base, "output_tok_s")
    assert list(by_c) == ["1"] and by_c["1"]["ratio"] == pytest.approx(2.0)
    assert sweep.speedups(spec, base, "request_tok_s") == {}  # a figure no run has


# --------------------------------------------------------------------------------------------------
# The crossover and the gate
# --------------------------------------------------------------------------------------------------


def speedup(ratio: float, low: float | None = None, high: float | None = None) -> dict:
    return {"ratio": ratio, "ci95_low": low, "ci95_high": high}


FASTER, DIP, NOT_FASTER = speedup(2.0, 1.8, 2.2), speedup(1.2, 0.9, 1.5), speedup(0.9, 0.8, 1.0)


CROSSOVERS = [
    # id, {concurrency: speedup}, the crossover
    ("faster-everywhere", {1: speedup(2.0, 1.8, 2.2), 8: speedup(1.5, 1.2, 1.9), 64: speedup(1.1, 1.05, 1.2)}, None),
    ("stops-at-16", {1: FASTER, 8: speedup(1.6, 1.3, 1.9), 16: DIP, 32: NOT_FASTER}, 16),
    ("a-dip-then-faster-again", {1: FASTER, 4: DIP, 8: speedup(1.5, 1.2, 1.8), 16: NOT_FASTER}, 16),
    ("never-faster", {2: speedup(0.9, 0.8, 1.0), 4: speedup(0.7, 0.6, 0.8)}, 2),
    ("ratio-above-1-interval-not", {1: speedup(1.4, 1.2, 1.6), 8: speedup(1.3, 0.8, 2.1)}, 8),
    ("one-run-judged-by-the-ratio", {1: speedup(1.4), 8: speedup(1.3)}, None),
]


@pytest.mark.parametrize(("by_c", "expected"), [c[1:] for c in CROSSOVERS], ids=[c[0] for c in CROSSOVERS])
def test_the_crossover_is_where_the_mode_stops_being_faster_for_good(by_c, expected):
    # As bench.json holds it: string keys, in the order of a JSON object (not necessarily numeric).
    assert sweep.crossover({str(c): r for c, r in reversed(by_c.items())}) == expected


GATES = [
    # id, speedup at concurrency 1 (None: not measured there), --min-speedup, the failure (None: passed)
    (
        "lower-end-below",
        speedup(2.43, 1.12, 5.26),
        1.5,
        "eagle3 speedup at concurrency 1 = 2.430 (95 % CI 1.120-5.260): its lower end is below --min-speedup 1.5",
    ),
    ("lower-end-above", speedup(2.43, 1.6, 3.7), 1.5, None),
    ("lower-end-exactly", speedup(2.0, 1.5, 2.6), 1.5, None),
    ("one-run", speedup(2.43), 1.5, "eagle3: one run at concurrency 1 gives no interval; use --runs 2 or more"),
    ("not-measured", None, 1.5, "eagle3: no speedup at concurrency 1 (no finished runs there)"),
]


@pytest.mark.parametrize(("at_1", "minimum", "failure"), [c[1:] for c in GATES], ids=[c[0] for c in GATES])
def test_the_gate_judges_the_lower_end_of_the_interval(at_1, minimum, failure):
    by_label = {"eagle3": {"1": at_1} if at_1 else {"4": speedup(3.0, 2.0, 4.0)}}
    assert sweep.gate(by_label, ["eagle3"], 1, minimum) == ([failure] if failure else [])
