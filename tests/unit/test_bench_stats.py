"""T0: the benchmark's statistics: Student-t quantiles, summaries, the interval of a speedup."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from sm120.bench import stats

# Two-sided 95 % critical values from the published t table (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
T_TABLE = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    15: 2.131,
    20: 2.086,
    29: 2.045,
    30: 2.042,
    60: 2.000,
    100: 1.984,
}


@pytest.mark.parametrize(("df", "expected"), sorted(T_TABLE.items()))
def test_t_critical_matches_the_published_table(df, expected):
    assert stats.t_critical(df) == pytest.approx(expected, abs=6e-4)


def test_t_critical_tends_to_the_normal_quantile():
    assert stats.t_critical(1e7) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-4)


def test_t_cdf_is_symmetric_and_inverts_the_quantile():
    for df in (1, 2.5, 7, 40):
        for p in (0.6, 0.9, 0.975, 0.999):
            t = stats.t_quantile(p, df)
            assert stats.t_cdf(t, df) == pytest.approx(p, abs=1e-9)
            assert stats.t_cdf(-t, df) == pytest.approx(1 - p, abs=1e-9)
            assert stats.t_quantile(1 - p, df) == pytest.approx(-t, abs=1e-9)


def test_t_critical_for_fractional_df_lies_between_its_integer_neighbours():
    # Welch-Satterthwaite gives fractional degrees of freedom: the quantile must be monotonic in df.
    assert stats.t_critical(3) > stats.t_critical(3.5) > stats.t_critical(4)
    assert stats.t_critical(2.5) > stats.t_critical(3)


def test_t_cdf_rejects_bad_input():
    with pytest.raises(ValueError):
        stats.t_cdf(1.0, 0)
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 5)


def test_summary_of_known_values():
    values = [92.0, 95.5, 97.0, 88.5, 103.5, 96.0, 94.0, 99.0, 87.5, 98.0]
    s = stats.summarize(values)
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = 2.2622 * sd / math.sqrt(len(values))  # t(0.975, 9) from the table
    assert s.n == 10
    assert s.mean == pytest.approx(mean)
    assert s.median == pytest.approx(95.75)
    assert (s.min, s.max) == (87.5, 103.5)
    assert s.stdev == pytest.approx(sd)
    assert s.ci95_low == pytest.approx(mean - half, rel=1e-4)
    assert s.ci95_high == pytest.approx(mean + half, rel=1e-4)


def test_summary_of_one_value_has_no_spread():
    s = stats.summarize([5.0])
    assert (s.n, s.mean, s.median, s.stdev, s.ci95_low, s.ci95_high) == (1, 5.0, 5.0, None, None, None)
    with pytest.raises(ValueError):
        stats.summarize([])


def test_ratio_of_means_point_and_interval():
    num = stats.summarize([96.1, 94.0, 98.2, 95.0, 97.3])
    den = stats.summarize([92.6, 91.9, 93.4, 92.0, 93.1])
    r = stats.ratio_of_means(num, den)
    assert r.ratio == pytest.approx(num.mean / den.mean)
    assert r.ci95_low < r.ratio < r.ci95_high
    # log-symmetric: low * high = ratio^2
    assert r.ci95_low * r.ci95_high == pytest.approx(r.ratio**2)
    # Welch df lies between the smaller sample's n - 1 and the pooled n - 2.
    assert 4 <= r.df <= 8
    # Hand computation of the same delta-method interval.
    ra, rb = num.sem / num.mean, den.sem / den.mean
    df = (ra**2 + rb**2) ** 2 / (ra**4 / 4 + rb**4 / 4)
    half = stats.t_critical(df) * math.sqrt(ra**2 + rb**2)
    assert r.ci95_high == pytest.approx(r.ratio * math.exp(half))


def test_ratio_without_spread_or_with_one_run():
    flat = stats.summarize([2.0, 2.0, 2.0])
    one = stats.summarize([1.0, 1.0, 1.0])
    r = stats.ratio_of_means(flat, one)
    assert (r.ratio, r.ci95_low, r.ci95_high) == (2.0, 2.0, 2.0)
    r1 = stats.ratio_of_means(stats.summarize([3.0]), one)
    assert r1.ratio == 3.0 and r1.ci95_low is None


def test_ratio_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = random.Random(12345)
    trials, covered = 1500, 0
    true_a, true_b = 96.0, 92.0
    for _ in range(trials):
        a = stats.summarize([rng.gauss(true_a, 5.0) for _ in range(10)])
        b = stats.summarize([rng.gauss(true_b, 2.0) for _ in range(8)])
        r = stats.ratio_of_means(a, b)
        covered += r.ci95_low <= true_a / true_b <= r.ci95_high
    assert 0.93 <= covered / trials <= 0.97


def test_mean_interval_covers_about_95_percent_of_the_time():
    rng = random.Random(7)
    trials = 2000
    covered = 0
    for _ in range(trials):
        s = stats.summarize([rng.gauss(50.0, 3.0) for _ in range(5)])
        covered += s.ci95_low <= 50.0 <= s.ci95_high
    assert 0.935 <= covered / trials <= 0.965
