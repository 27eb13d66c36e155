"""Statistics for benchmark runs: summaries with a Student-t 95 % interval, and the interval of a speedup.

The t quantile is computed here (regularized incomplete beta function by continued fraction, inverted by
bisection) rather than taken from SciPy: it is the only figure this project needs from SciPy, and the tests
check it against the published t table.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

CONFIDENCE = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom (df > 0, need not be an integer)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, for 0 < p < 1."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@functools.lru_cache(maxsize=256)
def t_critical(df: float, confidence: float = CONFIDENCE) -> float:
    """Two-sided critical value: the half-width of a confidence interval in standard errors."""
    return t_quantile(0.5 + confidence / 2.0, df)


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    min: float
    max: float
    stdev: float | None  # sample standard deviation (n - 1); None for one value
    ci95_low: float | None  # Student-t 95 % interval of the mean
    ci95_high: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    @property
    def sem(self) -> float | None:
        return None if self.stdev is None else self.stdev / math.sqrt(self.n)


def summarize(values: Sequence[float], floor: float | None = None) -> Summary:
    """Mean, median, range, standard deviation and the Student-t 95 % interval of the mean; `floor` cuts the
    interval at the lowest value the quantity can take (a speed or a time is never negative)."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values to summarize")
    mean = statistics.fmean(vals)
    if len(vals) < 2:
        return Summary(1, mean, mean, mean, mean, None, None, None)
    sd = statistics.stdev(vals)
    half = t_critical(len(vals) - 1) * sd / math.sqrt(len(vals))
    low = mean - half if floor is None else max(mean - half, floor)
    return Summary(len(vals), mean, statistics.median(vals), min(vals), max(vals), sd, low, mean + half)


@dataclass(frozen=True)
class Ratio:
    """A ratio of two means (e.g. eagle3 tok/s over baseline tok/s) with its 95 % interval."""

    ratio: float
    ci95_low: float | None
    ci95_high: float | None
    df: float | None

    def to_dict(self) -> dict[str, float | None]:
        return asdict(self)


def ratio_of_means(num: Summary, den: Summary) -> Ratio:
    """num.mean / den.mean with a 95 % interval for independent samples.

    The interval is the delta method on the log scale: log(r) +/- t * sqrt((se_a/m_a)^2 + (se_b/m_b)^2), with
    Welch-Satterthwaite degrees of freedom for the relative variances. It is asymmetric around r and stays
    positive. With fewer than two values on either side there is no interval.
    """
    if den.mean <= 0 or num.mean <= 0:
        raise ValueError("a speedup needs positive means")
    r = num.mean / den.mean
    if num.sem is None or den.sem is None:
        return Ratio(r, None, None, None)
    ra, rb = num.sem / num.mean, den.sem / den.mean
    var = ra * ra + rb * rb
    if var == 0.0:
        return Ratio(r, r, r, None)
    terms = (ra**4 / (num.n - 1)) + (rb**4 / (den.n - 1))
    df = var * var / terms
    half = t_critical(df) * math.sqrt(var)
    return Ratio(r, r * math.exp(-half), r * math.exp(half), df)
