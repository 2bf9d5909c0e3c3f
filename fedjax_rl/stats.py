"""Interval estimates and verdicts for comparing two algorithms over few seeds, at a measured level.

`fedjax-rl compare`, the reproduction tables (`fedjax_rl/reproduce_report.py`) and
`notebooks/reproduction_results.ipynb` all use this module. The vocabulary is that of Agarwal et al.,
"Deep Reinforcement Learning at the Edge of the Statistical Precipice" (NeurIPS 2021) and its `rliable`
library: paired differences with confidence intervals, the interquartile mean (IQM) across tasks with
a stratified bootstrap, and the probability of improvement P(X > Y).

Which interval. `benchmarks/verdict_coverage.py` measured, on simulated seeds where the two
algorithms are equal, how often each candidate interval of a mean excludes 0 (a false verdict), at
n = 3, 4, 5, 6, 8, 10 and 20 seeds, for normal, heavy-tailed (t with 3 degrees of freedom), skewed
(1 - Exp(1), skewness -2) differences and differences resampled from the committed rows' own
standardized ones, 20,000 datasets each (benchmarks/results/verdict_coverage.json; every number in
REPRODUCTION.md). A 95% verdict should be false 5% of the time. At 4 to 20 seeds:

- the percentile bootstrap (`rliable`'s, and this module's until the study) was false 20% of the time
  at 4 seeds and 16% at 5, for normal differences: it is about mean ± 1.96 std(ddof 0)/sqrt(n), too
  narrow at small n; BCa was no better;
- the Student t interval is exact for normal differences and conservative for t(3) ones, but was
  false 8-12% of the time for the skewed ones, and 7% for the committed ones at 4 seeds;
- the bootstrap-t (studentized bootstrap) corrects for skewness but was false up to 7% of the time
  for the skewed and the t(3) differences;
- their hull (a verdict only where both exclude 0) was false up to 6.4% of the time at nominal 95%
  (skewed, 6 seeds), and up to 5.2% ± 0.15% at nominal 97%, the smallest level (in steps of 1%) within
  two standard errors of 5% in every distribution: that is the tables' rule (`METHOD` at
  `VERDICT_CONFIDENCE`), printed as their 95% interval. For normal differences it is false 2% of the
  time; the price is power (a difference of 1 standard deviation at 10 seeds is decided 60% of the
  time, the t test's 80%).

At 3 seeds no method that gives verdicts holds in every distribution (Student t was false 11.5% of
the time for skewed differences, the bootstrap methods 25% or more), and the rule's own interval is
unbounded: a bootstrap-t resample of n copies of one seed has no spread and a moved mean, and it is
drawn with probability n^(1-n) >= 1/9. So `verdict` says `TOO_FEW` below `MIN_SEEDS` = 4.

Each function takes per-seed values on the last axis; leading axes are independent datasets (the
study passes thousands at once through the same code the tables call with one). Bootstrap resamples
draw from `np.random.default_rng(seed)` (default `SEED`), so tables are reproducible; every dataset of
a batch sees the same resamples of its seed indices. Bootstrap quantiles are read off the resampled
statistic by the inverted empirical CDF (the smallest value whose CDF reaches q, numpy's
"inverted_cdf"), so an interval's ends are values the bootstrap distribution takes and a small case
can be enumerated by hand (tests/test_stats.py).

Why numpy and not `rliable`: rliable 1.2.0 installs with the pinned packages, but as an sdist built at
install time plus seven more packages (arch, statsmodels, ...), for a few lines of numpy here. Its
`get_interval_estimates` resamples each algorithm on its own and needs the same number of runs in
every task: the comparisons here are paired by seed, and rows may differ in their number of seeds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import scipy.stats

CONFIDENCE = 0.95
REPS = 50_000
SEED = 0

T, PERCENTILE, BCA, BOOTSTRAP_T, T_AND_BOOTSTRAP_T = "t", "percentile", "bca", "bootstrap-t", "t+bootstrap-t"
METHODS = (T, PERCENTILE, BCA, BOOTSTRAP_T, T_AND_BOOTSTRAP_T)
METHOD = T_AND_BOOTSTRAP_T  # the verdicts' interval, chosen by benchmarks/verdict_coverage.py (above)
# The nominal level at which METHOD is computed so that it holds CONFIDENCE in every distribution the
# study measured (above): at nominal 95% the hull was false up to 6.4% of the time for skewed
# differences, at 96% up to 5.8%. `default_confidence` hands it to every method=METHOD call.
VERDICT_CONFIDENCE = 0.97
METHOD_NAMES = {
    T: "Student t interval",
    PERCENTILE: "percentile bootstrap interval",
    BCA: "BCa bootstrap interval",
    BOOTSTRAP_T: "bootstrap-t (studentized bootstrap) interval",
    T_AND_BOOTSTRAP_T: "hull of the Student t and bootstrap-t intervals",
}
MIN_SEEDS = 4  # below it no interval measured holds its level; METHOD's is unbounded (above)
POWER = 0.8  # seeds_for_power's target
# What benchmarks/verdict_coverage.py measured (benchmarks/results/verdict_coverage.json; tests/test_stats.py
# checks these against it), quoted by the tables and `fedjax-rl compare`. False-verdict rates on equal
# algorithms: METHOD's largest at MIN_SEEDS..20 seeds over every distribution; the percentile bootstrap's
# for normal differences at 4 and 5 seeds; Student t's largest for skewed ones. Power at a difference of
# 1 standard deviation, 10 seeds, normal differences: METHOD's. Across rows: the largest rate at which
# the verdict (AGGREGATE_CONFIDENCE) and a nominal 95% interval called a difference, and at which
# P(X > Y)'s interval excluded 1/2, over the committed table shapes (the shapes simulated).
MEASURED = dict(method_false_rate=0.0516, percentile_false_rate_4=0.2035, percentile_false_rate_5=0.1635,
                t_false_rate=0.1229, rule_power_10=0.6046, aggregate_false_rate=0.054,
                aggregate_nominal_false_rate=0.142, improvement_excludes_half=0.086,
                aggregate_shapes="8 rows x 5 seeds and 6 rows x 4")
AHEAD, BEHIND, INCONCLUSIVE, TOO_FEW = "ahead", "behind", "inconclusive", "too few seeds"
VERDICTS = (AHEAD, BEHIND, INCONCLUSIVE, TOO_FEW)

# The across-rows IQM difference's stratified percentile interval is too narrow at its nominal level
# with 4-5 seeds per row (each row's resamples spread (n-1)/n as much as its seeds): on simulated
# tables of equal algorithms shaped like the committed ones it excluded 0 up to 14% of the time at
# nominal 95%, 7% at 99%. The verdict reads it at this nominal level, the smallest of 95, 98, 99 and
# 99.5% within two standard errors of 5% (benchmarks/verdict_coverage.py; REPRODUCTION.md).
AGGREGATE_CONFIDENCE = 0.995


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval [low, high] (floats, or arrays over datasets)."""

    estimate: float
    low: float
    high: float

    def format(self, digits: int = 1) -> str:
        return f"{self.estimate:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


def default_confidence(method: str) -> float:
    """The nominal level a `confidence=None` call uses: VERDICT_CONFIDENCE for METHOD (calibrated to
    hold CONFIDENCE), CONFIDENCE itself for the other methods (nominal)."""
    return VERDICT_CONFIDENCE if method == METHOD else CONFIDENCE


def _check(confidence: float, reps: int, method: str) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if int(reps) != reps or reps < 1:
        raise ValueError(f"reps (bootstrap resamples) must be an integer >= 1, got {reps}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


def _values(values, name: str, at_least: int = 1) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0 or values.shape[-1] < at_least:
        raise ValueError(f"{name} must hold at least {at_least} per-seed value(s) on its last axis, "
                         f"got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name} must be finite, got {values.tolist()}")
    return values


def _scalar(array):
    """A 0-d result as a Python float, so that one dataset gives plain numbers."""
    return float(array) if np.ndim(array) == 0 else array


def quantile(samples, q) -> np.ndarray:
    """Inverted-CDF quantiles along the last axis of `samples` (numpy's "inverted_cdf": the
    smallest value whose empirical CDF reaches q). q broadcasts against the leading axes, so BCa can
    ask each dataset for its own level."""
    samples = np.sort(np.asarray(samples, np.float64), axis=-1)
    count = samples.shape[-1]
    q = np.broadcast_to(np.asarray(q, np.float64), samples.shape[:-1])
    index = np.clip(np.ceil(count * q - 1).astype(np.int64), 0, count - 1)  # numpy's own arithmetic
    return np.take_along_axis(samples, index[..., None], axis=-1)[..., 0]


def percentile_interval(samples, confidence: float = CONFIDENCE) -> tuple:
    """The central `confidence` interval of bootstrap samples (last axis), by the inverted CDF."""
    tail = (1 - confidence) / 2
    return _scalar(quantile(samples, tail)), _scalar(quantile(samples, 1 - tail))


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


def mean_interval(values, method: str = METHOD, confidence: float | None = None, reps: int = REPS,
                  seed: int = SEED) -> Interval:
    """The mean of the last axis of `values` (per-seed values; leading axes are datasets) with an
    interval by `method` (METHODS; the module docstring says which holds its level) at nominal level
    `confidence` (default: `default_confidence(method)`)."""
    confidence = default_confidence(method) if confidence is None else confidence
    _check(confidence, reps, method)
    values = _values(values, "values", at_least=2 if method != PERCENTILE else 1)
    n = values.shape[-1]
    mean = values.mean(axis=-1)
    if method == T:
        return Interval(_scalar(mean), *map(_scalar, _t_interval(mean, values.std(axis=-1, ddof=1), n, confidence)))
    counts = _resample_counts(n, reps, seed)
    boot_mean = values @ counts.T / n  # [..., reps]
    if method == PERCENTILE:
        return Interval(_scalar(mean), *percentile_interval(boot_mean, confidence))
    if method == BCA:
        return Interval(_scalar(mean), *map(_scalar, _bca_ends(values, mean, boot_mean, confidence)))
    spread = values.std(axis=-1, ddof=1)
    centred = values - mean[..., None]
    boot_var = np.maximum((centred**2) @ counts.T / n - (boot_mean - mean[..., None]) ** 2, 0.0) * n / (n - 1)
    boot_t = _t_statistics(boot_mean - mean[..., None], np.sqrt(boot_var / n))
    low, high = _studentized_ends(mean, spread / np.sqrt(n), boot_t, confidence)
    if method == T_AND_BOOTSTRAP_T:
        t_low, t_high = _t_interval(mean, spread, n, confidence)
        low, high = np.minimum(low, t_low), np.maximum(high, t_high)
    return Interval(_scalar(mean), _scalar(low), _scalar(high))


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


def difference(x, y, paired: bool = True, method: str = METHOD, confidence: float | None = None,
               reps: int = REPS, seed: int = SEED, value_range: tuple[float, float] | None = None) -> Interval:
    """mean(x) - mean(y) with its interval by `method` at nominal level `confidence` (default:
    `default_confidence(method)`, so that `difference(x, y)` is the tables' 95% interval). paired:
    x[i] and y[i] come from the same seed (the same initialisation, physics and exploration keys), so
    the interval is `mean_interval` of the per-seed differences x - y. Otherwise the two are
    independent samples: Welch's t interval, and a bootstrap that resamples x and y separately
    (bootstrap-t: studentized by Welch's standard error); BCa is for paired values only.

    value_range: (low, high) that every value of x and y lies in, or None. A task's returns have one
    where its rewards bound them (`envs.return_range`: CartPole's lie in [0, 500]). The difference of
    the means then lies in [low - high, high - low], and the interval is intersected with that: where
    most seeds' differences are equal, a bootstrap-t interval can run to +-inf or past the largest
    difference the task allows. The true difference lies inside, so the intersection covers it
    whenever the interval did: coverage and verdicts stay as they were (the estimate is inside too)."""
    confidence = default_confidence(method) if confidence is None else confidence
    _check(confidence, reps, method)
    x, y = _values(x, "x"), _values(y, "y")
    if value_range is not None:
        _check_range(value_range, x=x, y=y)
    if paired:
        if x.shape != y.shape:
            raise ValueError(f"paired values need one per seed on both sides, got {x.shape[-1]} and {y.shape[-1]}")
        inner = mean_interval(x - y, method, confidence, reps, seed)
        interval = Interval(_scalar(x.mean(axis=-1) - y.mean(axis=-1)), inner.low, inner.high)
    elif method == BCA:
        raise ValueError("method 'bca' is for paired values only; unpaired values take t, percentile, "
                         "bootstrap-t or t+bootstrap-t")
    else:
        interval = _unpaired(x, y, method, confidence, reps, seed)
    if value_range is None:
        return interval
    widest = value_range[1] - value_range[0]
    return Interval(interval.estimate, _scalar(np.maximum(interval.low, -widest)),
                    _scalar(np.minimum(interval.high, widest)))


def _check_range(value_range, **values) -> None:
    """Every value lies in value_range = (low, high), low < high; else a ValueError naming it."""
    low, high = value_range
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise ValueError(f"value_range must be (low, high) with finite low < high, got {value_range}")
    for name, array in values.items():
        outside = array[(array < low) | (array > high)]
        if outside.size:
            raise ValueError(f"{name} holds {outside.tolist()[:5]} outside value_range [{low}, {high}]: "
                             "the values are not what the range was declared for")


def _unpaired(x, y, method, confidence, reps, seed) -> Interval:
    m, n = x.shape[-1], y.shape[-1]
    if method != PERCENTILE and min(m, n) < 2:
        raise ValueError(f"method {method!r} needs at least 2 seeds on each side, got {m} and {n}")
    estimate = x.mean(axis=-1) - y.mean(axis=-1)
    rng = np.random.default_rng(seed)
    x_draws, y_draws = rng.integers(0, m, size=(reps, m)), rng.integers(0, n, size=(reps, n))
    if method == PERCENTILE:
        samples = x[..., x_draws].mean(-1) - y[..., y_draws].mean(-1)
        return Interval(_scalar(estimate), *percentile_interval(samples, confidence))
    var_x, var_y = x.var(axis=-1, ddof=1) / m, y.var(axis=-1, ddof=1) / n
    scale = np.sqrt(var_x + var_y)
    with np.errstate(invalid="ignore", divide="ignore"):  # Welch-Satterthwaite degrees of freedom
        dof = np.where(scale > 0, (var_x + var_y) ** 2 / (var_x**2 / (m - 1) + var_y**2 / (n - 1)), 1.0)
    half = scipy.stats.t.ppf((1 + confidence) / 2, dof) * scale
    t_low, t_high = estimate - half, estimate + half
    if method == T:
        return Interval(_scalar(estimate), _scalar(t_low), _scalar(t_high))
    xs, ys = x[..., x_draws], y[..., y_draws]  # [..., reps, m], [..., reps, n]
    boot_scale = np.sqrt(xs.var(-1, ddof=1) / m + ys.var(-1, ddof=1) / n)
    boot_t = _t_statistics(xs.mean(-1) - ys.mean(-1) - estimate[..., None], boot_scale)
    low, high = _studentized_ends(estimate, scale, boot_t, confidence)
    if method == T_AND_BOOTSTRAP_T:
        low, high = np.minimum(low, t_low), np.maximum(high, t_high)
    return Interval(_scalar(estimate), _scalar(low), _scalar(high))


def verdict(interval: Interval, num_seeds: int):
    """'ahead' if the interval of (robust - baseline) lies above 0, 'behind' if below, otherwise
    'inconclusive'; 'too few seeds' below MIN_SEEDS, where no interval measured holds its level.
    An interval over many datasets gives an array of verdicts."""
    if num_seeds < MIN_SEEDS:
        return TOO_FEW if np.ndim(interval.low) == 0 else np.full(np.shape(interval.low), TOO_FEW)
    words = np.where(np.asarray(interval.low) > 0, AHEAD, np.where(np.asarray(interval.high) < 0, BEHIND, INCONCLUSIVE))
    return str(words) if words.ndim == 0 else words


def verdict_cell(word: str, num_seeds: int) -> str:
    """A verdict as the tables print it: bold, with the seed count where it is below MIN_SEEDS."""
    return f"**{word}**" + (f" ({num_seeds} < {MIN_SEEDS})" if num_seeds < MIN_SEEDS else "")


def seeds_cell(verdict_word: str, seeds_needed: int | None) -> str:
    """About how many seeds an undecided comparison needs (`seeds_for_power`), as the tables print
    it; '—' for a decided one."""
    if verdict_word in (AHEAD, BEHIND):
        return "—"
    return "no difference seen" if seeds_needed is None else f"about {seeds_needed}"


def t_test_power(n: int, effect: float, confidence: float = VERDICT_CONFIDENCE, paired: bool = True) -> float:
    """The probability that the two-sided t test at level 1 - `confidence` rejects a zero difference
    when the true one is `effect` standard deviations, with n seeds (per algorithm): noncentral t with
    n - 1 degrees of freedom and noncentrality sqrt(n) effect (paired), or 2 n - 2 and sqrt(n / 2)
    effect (unpaired, equal spreads)."""
    dof, noncentral = (n - 1, math.sqrt(n) * effect) if paired else (2 * n - 2, math.sqrt(n / 2) * effect)
    critical = scipy.stats.t.ppf((1 + confidence) / 2, dof)
    return float(scipy.stats.nct.sf(critical, dof, noncentral) + scipy.stats.nct.cdf(-critical, dof, noncentral))


def seeds_for_power(x, y, paired: bool = True, power: float = POWER, confidence: float = VERDICT_CONFIDENCE,
                    limit: int = 100_000) -> int | None:
    """About how many seeds (per algorithm) a difference of the observed size and spread needs for a
    `confidence` interval to exclude 0 with probability `power`: the smallest n at which
    `t_test_power` reaches it, for a true difference of `|mean|` over the observed standard deviation
    (ddof 1; paired: of the per-seed differences; unpaired: the two samples' pooled one); the test's
    level defaults to METHOD's nominal one. It is the count for normal differences; METHOD also needs
    the bootstrap-t interval to agree, so its own power is lower (MEASURED["rule_power_10"]). At least
    MIN_SEEDS; None where no n <= `limit` gets there (no observed difference)."""
    x, y = _values(x, "x", at_least=2), _values(y, "y", at_least=2)
    if paired:
        d = x - y
        size, spread = abs(d.mean()), d.std(ddof=1)
    else:
        size, spread = abs(x.mean() - y.mean()), math.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2)
    if size == 0:
        return None
    if spread == 0:
        return MIN_SEEDS
    effect = size / spread
    z = scipy.stats.norm.ppf((1 + confidence) / 2) + scipy.stats.norm.ppf(power)
    # From the normal approximation less a margin, and never below MIN_SEEDS, where no verdict is given.
    start = max(MIN_SEEDS, math.floor((z / effect) ** 2 * (1 if paired else 2)) - 2)
    return next((n for n in range(start, limit + 1) if t_test_power(n, effect, confidence, paired) >= power), None)


def probability_of_improvement(x, y) -> float:
    """P(X > Y) over every pair (x_i, y_j), ties counting one half: the Mann-Whitney U statistic
    over m n, rliable's definition. It ignores any pairing of the seeds."""
    x, y = _values(x, "x"), _values(y, "y")
    return _scalar(_pairwise_improvement(x, y))


def comparison(robust: dict, baseline: dict, metrics: Sequence[str], paired: bool = True, decide_on: str = "minimum",
               value_range: tuple[float, float] | None = None) -> dict:
    """How the tables and `fedjax-rl compare` judge robust against baseline from their seeds' values
    ({metric: per-seed values}, paired by seed or not): per metric the difference with its interval
    (`difference`, within what the task's `value_range` of returns allows) and P(robust > baseline);
    the verdict read from `decide_on`'s interval over the fewer side's seeds and, for an undecided one,
    about how many seeds would decide it (`seeds_for_power`; None where no difference is seen). At
    least 2 seeds a side, as `difference` needs."""
    seeds = min(len(robust[decide_on]), len(baseline[decide_on]))
    line = dict(seeds=seeds)
    for metric in metrics:
        line[metric] = difference(robust[metric], baseline[metric], paired=paired, value_range=value_range)
        line[f"{metric}_improvement"] = probability_of_improvement(robust[metric], baseline[metric])
    line["verdict"] = verdict(line[decide_on], seeds)
    decided = line["verdict"] in (AHEAD, BEHIND)
    line["seeds_for_power"] = (None if decided
                               else seeds_for_power(robust[decide_on], baseline[decide_on], paired=paired))
    return line


def iqm(values, axis: int = -1) -> np.ndarray | float:
    """Interquartile mean: the mean of the values left after dropping floor(n / 4) from each end
    of the sorted values (scipy.stats.trim_mean(values, 0.25), as rliable computes it)."""
    values = np.sort(np.asarray(values, np.float64), axis=axis)
    n = values.shape[axis]
    cut = n // 4
    kept = np.take(values, np.arange(cut, n - cut), axis=axis)
    out = kept.mean(axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def normalise(score, random_return: float, reference_return: float):
    """(score - random) / (reference - random): 0 is a uniformly random policy, 1 the reference."""
    if not reference_return > random_return:
        raise ValueError(f"the reference return ({reference_return}) must exceed the random-policy "
                         f"return ({random_return}) to normalise by it")
    return (np.asarray(score, np.float64) - random_return) / (reference_return - random_return)


@dataclasses.dataclass(frozen=True)
class Aggregate:
    """IQM over all (row, seed) scores of a baseline and of the robust algorithm, their difference
    (robust - baseline) and the mean over rows of P(robust > baseline), each with a stratified
    percentile bootstrap interval: the difference's at AGGREGATE_CONFIDENCE (its verdict's level,
    measured), the others at CONFIDENCE (nominal). num_rows: strata; min_seeds: the fewest seeds of
    any row."""

    baseline: Interval
    robust: Interval
    difference: Interval
    probability_of_improvement: Interval
    num_rows: int
    min_seeds: int

    @property
    def verdict(self):
        return verdict(self.difference, self.min_seeds)


def stratified_samples(baseline: Sequence, robust: Sequence, reps: int = REPS, seed: int = SEED) -> dict:
    """The stratified bootstrap behind `stratified_iqm`: point estimates and [..., reps] resampled
    values of the baseline's IQM, the robust IQM, their difference and the mean P(robust > baseline).
    baseline[r] and robust[r] hold row r's per-seed scores on their last axis (leading axes:
    datasets), paired by seed. Each resample draws every row's seeds with replacement, separately per
    row (so each row keeps its weight), and the same draw for both algorithms (so the difference stays
    paired); the probability of improvement, which ignores pairing, resamples the two independently,
    as rliable."""
    _check(CONFIDENCE, reps, PERCENTILE)
    if len(baseline) != len(robust) or not baseline:
        raise ValueError(f"need the same, non-zero number of rows for both algorithms, got {len(baseline)} "
                         f"and {len(robust)}")
    base = [_values(b, f"baseline row {r}") for r, b in enumerate(baseline)]
    rob = [_values(b, f"robust row {r}") for r, b in enumerate(robust)]
    if any(b.shape != r.shape for b, r in zip(base, rob)):
        raise ValueError("each row needs one score per seed for both algorithms (paired by seed)")
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, b.shape[-1], size=(reps, b.shape[-1])) for b in base]
    base_samples = iqm(np.concatenate([b[..., i] for b, i in zip(base, draws)], axis=-1))
    rob_samples = iqm(np.concatenate([r[..., i] for r, i in zip(rob, draws)], axis=-1))
    other_draws = [rng.integers(0, b.shape[-1], size=(reps, b.shape[-1])) for b in base]
    base_point, rob_point = iqm(np.concatenate(base, axis=-1)), iqm(np.concatenate(rob, axis=-1))
    return dict(
        baseline=(base_point, base_samples), robust=(rob_point, rob_samples),
        difference=(rob_point - base_point, rob_samples - base_samples),
        probability_of_improvement=(np.mean([_pairwise_improvement(r, b) for r, b in zip(rob, base)], axis=0),
                                    np.mean([_pairwise_improvement(r[..., i], b[..., j])
                                             for r, b, i, j in zip(rob, base, draws, other_draws)], axis=0)),
        num_rows=len(base), min_seeds=min(b.shape[-1] for b in base))


def stratified_iqm(baseline: Sequence, robust: Sequence, confidence: float = CONFIDENCE,
                   difference_confidence: float = AGGREGATE_CONFIDENCE, reps: int = REPS,
                   seed: int = SEED) -> Aggregate:
    """The across-rows aggregate of `stratified_samples`, each quantity with its percentile interval:
    the difference at `difference_confidence` (the verdict's), the others at `confidence`."""
    _check(difference_confidence, reps, PERCENTILE)
    samples = stratified_samples(baseline, robust, reps, seed)

    def interval(name, level):
        point, resampled = samples[name]
        return Interval(_scalar(point), *percentile_interval(resampled, level))

    return Aggregate(baseline=interval("baseline", confidence), robust=interval("robust", confidence),
                     difference=interval("difference", difference_confidence),
                     probability_of_improvement=interval("probability_of_improvement", confidence),
                     num_rows=samples["num_rows"], min_seeds=samples["min_seeds"])


def _pairwise_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """probability_of_improvement along the last axis of [..., m] and [..., n] values."""
    return ((x[..., :, None] > y[..., None, :]) + 0.5 * (x[..., :, None] == y[..., None, :])).mean(axis=(-2, -1))
