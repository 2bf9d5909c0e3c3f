"""Intervals for a mean difference (Student t, percentile bootstrap, BCa, bootstrap-t and the hull of t
and bootstrap-t): the rules the coverage study (`verdict_coverage.py`) measures beside the tables' rule
(`fedjax_rl.analysis.stats`), which no rule for a mean can match on RL seeds. Nothing in the library
decides by them. `difference(..., method=MEDIAN)` is the tables' size interval (`stats.difference`).

Each function takes per-seed values on the last axis; leading axes are independent datasets. Bootstrap
resamples draw from `np.random.default_rng(seed)`; quantiles are read by the inverted empirical CDF
(`fedjax_rl.analysis.aggregate.quantile`), so small cases can be enumerated by hand
(tests/test_mean_intervals.py).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from fedjax_rl.analysis import stats
from fedjax_rl.analysis.aggregate import REPS, SEED, percentile_interval, quantile
from fedjax_rl.analysis.stats import CONFIDENCE, Interval, plain, per_seed

MEDIAN, T, PERCENTILE, BCA, BOOTSTRAP_T, T_AND_BOOTSTRAP_T = (
    "median", "t", "percentile", "bca", "bootstrap-t", "t+bootstrap-t")
METHODS = (MEDIAN, T, PERCENTILE, BCA, BOOTSTRAP_T, T_AND_BOOTSTRAP_T)
# The nominal level at which the hull of Student t and bootstrap-t held 95% for a mean on the
# distributions the first coverage study drew (normal, t3, 1 - Exp(1), the committed differences): the
# rule for the mean the study sets beside the tables'.
HULL_CONFIDENCE = 0.97
METHOD_NAMES = {
    MEDIAN: "order-statistic (sign test) interval of the median paired difference; unpaired: the "
            "Hodges-Lehmann shift with its Mann-Whitney interval",
    T: "Student t interval",
    PERCENTILE: "percentile bootstrap interval",
    BCA: "BCa bootstrap interval",
    BOOTSTRAP_T: "bootstrap-t (studentized bootstrap) interval",
    T_AND_BOOTSTRAP_T: "hull of the Student t and bootstrap-t intervals",
}


def difference(x, y, paired: bool = True, method: str = MEDIAN, confidence: float | None = None,
               reps: int = REPS, seed: int = SEED, value_range: tuple[float, float] | None = None) -> Interval:
    """x against y with an interval by `method` at nominal level `confidence` (default:
    `default_confidence(method)`). paired: x[i] and y[i] come from the same seed. MEDIAN is the tables'
    size interval (`stats.difference`). The other methods estimate mean(x) - mean(y): paired,
    `mean_interval` of the per-seed differences; unpaired, Welch's t interval and a bootstrap that
    resamples x and y separately (bootstrap-t: studentized by Welch's standard error); BCa is for
    paired values only. `value_range` cuts the interval to the differences values in it allow, as
    `stats.within_range` does (a bootstrap-t interval can otherwise run to +-inf where most seeds'
    differences are equal)."""
    confidence = default_confidence(method) if confidence is None else confidence
    _check(confidence, reps, method)
    if method == MEDIAN:
        return stats.difference(x, y, paired, confidence, value_range)
    x, y = per_seed(x, "x"), per_seed(y, "y")
    if value_range is not None:
        stats.check_range(value_range, x=x, y=y)
    if paired and x.shape != y.shape:
        raise ValueError(f"paired values need one per seed on both sides, got {x.shape[-1]} and {y.shape[-1]}")
    if paired:
        inner = mean_interval(x - y, method, confidence, reps, seed)
        interval = Interval(plain(x.mean(axis=-1) - y.mean(axis=-1)), inner.low, inner.high)
    elif method == BCA:
        raise ValueError("method 'bca' is for paired values only; unpaired values take t, percentile, "
                         "bootstrap-t or t+bootstrap-t")
    else:
        interval = _unpaired(x, y, method, confidence, reps, seed)
    return interval if value_range is None else stats.within_range(interval, value_range)


def default_confidence(method: str) -> float:
    """The nominal level a `confidence=None` call uses: HULL_CONFIDENCE for the hull of Student t and
    bootstrap-t (where it held 95% for a mean), CONFIDENCE for the others (exact for MEDIAN)."""
    return HULL_CONFIDENCE if method == T_AND_BOOTSTRAP_T else CONFIDENCE


def mean_interval(values, method: str = T_AND_BOOTSTRAP_T, confidence: float | None = None, reps: int = REPS,
                  seed: int = SEED) -> Interval:
    """The mean of the last axis of `values` (per-seed values; leading axes are datasets) with an
    interval by `method` (METHODS; the module docstring says which holds its level) at nominal level
    `confidence` (default: `default_confidence(method)`)."""
    confidence = default_confidence(method) if confidence is None else confidence
    _check(confidence, reps, method)
    if method == MEDIAN:
        raise ValueError("method 'median' is an interval of a median, not of a mean: call median_interval")
    values = per_seed(values, "values", at_least=2 if method != PERCENTILE else 1)
    n = values.shape[-1]
    mean = values.mean(axis=-1)
    if method == T:
        return Interval(plain(mean), *map(plain, _t_interval(mean, values.std(axis=-1, ddof=1), n, confidence)))
    counts = _resample_counts(n, reps, seed)
    boot_mean = values @ counts.T / n  # [..., reps]
    if method == PERCENTILE:
        return Interval(plain(mean), *percentile_interval(boot_mean, confidence))
    if method == BCA:
        return Interval(plain(mean), *map(plain, _bca_ends(values, mean, boot_mean, confidence)))
    spread = values.std(axis=-1, ddof=1)
    centred = values - mean[..., None]
    boot_var = np.maximum((centred**2) @ counts.T / n - (boot_mean - mean[..., None]) ** 2, 0.0) * n / (n - 1)
    boot_t = _t_statistics(boot_mean - mean[..., None], np.sqrt(boot_var / n))
    low, high = _studentized_ends(mean, spread / np.sqrt(n), boot_t, confidence)
    if method == T_AND_BOOTSTRAP_T:
        t_low, t_high = _t_interval(mean, spread, n, confidence)
        low, high = np.minimum(low, t_low), np.maximum(high, t_high)
    return Interval(plain(mean), plain(low), plain(high))


def _bca_ends(values, mean, boot_mean, confidence):
    """Efron's bias-corrected and accelerated percentile interval of a mean: the bias z0 from the
    share of resampled means below the estimate (ties counting one half), the acceleration from the
    jackknife, which for a mean is the skewness sum(c^3) / (6 sum(c^2)^1.5) of the centred values c."""
    reps = boot_mean.shape[-1]
    centred = values - mean[..., None]
    # A resample that is a permutation of the seeds has the estimate as its mean up to rounding, which
    # would decide "below" by the order of a sum: within 1e-9 of the values' spread is a tie.
    shift = boot_mean - mean[..., None]
    tie = np.abs(shift) <= 1e-9 * np.abs(centred).max(axis=-1, keepdims=True)
    below = ((shift < 0) & ~tie).sum(-1) / reps + 0.5 * tie.sum(-1) / reps
    z0 = scipy.stats.norm.ppf(np.clip(below, 0.5 / reps, 1 - 0.5 / reps))
    square = (centred**2).sum(-1)
    accel = np.where(square > 0, (centred**3).sum(-1) / (6 * np.where(square > 0, square, 1.0) ** 1.5), 0.0)
    tail = (1 - confidence) / 2
    ends = []
    for z in scipy.stats.norm.ppf([tail, 1 - tail]):
        level = scipy.stats.norm.cdf(z0 + (z0 + z) / (1 - accel * (z0 + z)))
        ends.append(quantile(boot_mean, level))
    return ends


def _unpaired(x, y, method, confidence, reps, seed) -> Interval:
    m, n = x.shape[-1], y.shape[-1]
    if method != PERCENTILE and min(m, n) < 2:
        raise ValueError(f"method {method!r} needs at least 2 seeds on each side, got {m} and {n}")
    estimate = x.mean(axis=-1) - y.mean(axis=-1)
    rng = np.random.default_rng(seed)
    x_draws, y_draws = rng.integers(0, m, size=(reps, m)), rng.integers(0, n, size=(reps, n))
    if method == PERCENTILE:
        samples = x[..., x_draws].mean(-1) - y[..., y_draws].mean(-1)
        return Interval(plain(estimate), *percentile_interval(samples, confidence))
    var_x, var_y = x.var(axis=-1, ddof=1) / m, y.var(axis=-1, ddof=1) / n
    scale = np.sqrt(var_x + var_y)
    with np.errstate(invalid="ignore", divide="ignore"):  # Welch-Satterthwaite degrees of freedom
        dof = np.where(scale > 0, (var_x + var_y) ** 2 / (var_x**2 / (m - 1) + var_y**2 / (n - 1)), 1.0)
    half = scipy.stats.t.ppf((1 + confidence) / 2, dof) * scale
    t_low, t_high = estimate - half, estimate + half
    if method == T:
        return Interval(plain(estimate), plain(t_low), plain(t_high))
    xs, ys = x[..., x_draws], y[..., y_draws]  # [..., reps, m], [..., reps, n]
    boot_scale = np.sqrt(xs.var(-1, ddof=1) / m + ys.var(-1, ddof=1) / n)
    boot_t = _t_statistics(xs.mean(-1) - ys.mean(-1) - estimate[..., None], boot_scale)
    low, high = _studentized_ends(estimate, scale, boot_t, confidence)
    if method == T_AND_BOOTSTRAP_T:
        low, high = np.minimum(low, t_low), np.maximum(high, t_high)
    return Interval(plain(estimate), plain(low), plain(high))


def _check(confidence: float, reps: int, method: str) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if int(reps) != reps or reps < 1:
        raise ValueError(f"reps (bootstrap resamples) must be an integer >= 1, got {reps}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


def _resample_counts(size: int, reps: int, seed: int) -> np.ndarray:
    """[reps, size]: how often each seed index is drawn in each bootstrap resample (the same draws
    as indexing with `rng.integers(0, size, (reps, size))`), so a resampled mean is one matrix product."""
    draws = np.random.default_rng(seed).integers(0, size, size=(reps, size))
    counts = np.zeros((reps, size))
    np.add.at(counts, (np.arange(reps)[:, None], draws), 1.0)
    return counts


def _t_interval(mean, spread, n, confidence):
    """mean ± t_{(1+c)/2, n-1} spread/sqrt(n), spread the ddof-1 standard deviation."""
    half = scipy.stats.t.ppf((1 + confidence) / 2, n - 1) * spread / np.sqrt(n)
    return mean - half, mean + half


def _studentized_ends(mean, scale, boot_t, confidence):
    """The bootstrap-t interval [mean - q_hi scale, mean - q_lo scale] from resampled t statistics;
    a zero `scale` (every value equal) gives [mean, mean]."""
    tail = (1 - confidence) / 2
    q_lo, q_hi = quantile(boot_t, tail), quantile(boot_t, 1 - tail)
    with np.errstate(invalid="ignore"):  # inf * 0 where scale is 0
        low, high = mean - q_hi * scale, mean - q_lo * scale
    return np.where(scale > 0, low, mean), np.where(scale > 0, high, mean)


def _t_statistics(shift, scale):
    """shift / scale with 0 / 0 read as 0 and c / 0 as ±inf: a resample without spread whose mean
    moved is infinitely far out, which makes the interval unbounded where such resamples are likely."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = shift / scale
    return np.where((scale == 0) & (shift == 0), 0.0, t)
