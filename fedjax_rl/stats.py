"""Interval estimates for comparing two algorithms over few seeds.

The definitions are those of Agarwal et al., "Deep Reinforcement Learning at the Edge of the
Statistical Precipice" (NeurIPS 2021) and its `rliable` library: percentile bootstrap confidence
intervals, stratified over tasks for aggregates; the interquartile mean (IQM); the probability of
improvement P(X > Y). `fedjax-rl compare`, the reproduction tables (`fedjax_rl/reproduce.py`) and
`notebooks/reproduction_results.ipynb` all use this module.

Why numpy and not `rliable`: rliable 1.2.0 installs with the pinned packages, but as an sdist
built at install time plus seven more packages (arch, statsmodels, formulaic, patsy, ...), for what
is a few lines of numpy here. Its `get_interval_estimates` also resamples each algorithm on its own
and needs the same number of runs in every task: the paired comparisons here (both algorithms ran
on the same seed keys) keep the same draw of seeds for both, and rows may differ in their number of
seeds. Bootstrap quantiles are read off the resampled statistic by the inverted empirical CDF
(`np.quantile(..., method="inverted_cdf")`, the smallest value whose CDF reaches q), so an
interval's ends are values the exact bootstrap distribution takes, and a small case can be
enumerated by hand and checked exactly (tests/test_stats.py).

Every bootstrap draws from `np.random.default_rng(seed)` (default `SEED`), so tables are
reproducible; `REPS` resamples keep the Monte Carlo error of a 2.5% quantile far below the
precision the tables print.

What an interval can say with few seeds. A 95% percentile interval for the mean of n values spans
their whole range when n <= 3: every resample of n copies of the smallest value has probability
n^-n >= 1/27 > 2.5%, so the interval is [min, max] and says no more than whether every seed has the
same sign. Verdicts therefore need `MIN_SEEDS` = 4. Even at 5 seeds the percentile interval is
narrow for its nominal level: it is close to mean ± 1.96 std(ddof=0)/sqrt(n), which for normal data
at n = 5 covers about 85%, not 95% (a t interval would use 2.78 std(ddof=1)/sqrt(n)). A verdict from
5 seeds is a weaker statement than "95%".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
REPS = 50_000
SEED = 0
MIN_SEEDS = 4  # below it a 95% percentile interval of a mean is the values' [min, max] (see above)
AHEAD, BEHIND, INCONCLUSIVE = "ahead", "behind", "inconclusive"


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap confidence interval [low, high]."""

    estimate: float
    low: float
    high: float

    def format(self, digits: int = 1) -> str:
        return f"{self.estimate:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


def _check(confidence: float, reps: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if int(reps) != reps or reps < 1:
        raise ValueError(f"reps (bootstrap resamples) must be an integer >= 1, got {reps}")


def _values(values, name: str) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of per-seed values, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name} must be finite, got {values.tolist()}")
    return values


def percentile_interval(samples, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The central `confidence` interval of bootstrap samples, quantiles by the inverted CDF."""
    tail = (1 - confidence) / 2
    low, high = np.quantile(np.asarray(samples, np.float64), [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high)


def difference(x, y, paired: bool = True, confidence: float = CONFIDENCE, reps: int = REPS,
               seed: int = SEED) -> Interval:
    """mean(x) - mean(y) with a percentile bootstrap interval. paired: x[i] and y[i] come from the
    same seed (the same initialisation, physics and exploration keys), so the seed is resampled and
    both values come with it, i.e. the per-seed differences x - y are resampled; otherwise x and y
    are resampled independently (two strata)."""
    _check(confidence, reps)
    x, y = _values(x, "x"), _values(y, "y")
    rng = np.random.default_rng(seed)
    if paired:
        if x.shape != y.shape:
            raise ValueError(f"paired values need one per seed on both sides, got {x.size} and {y.size}")
        d = x - y
        samples = d[rng.integers(0, d.size, size=(reps, d.size))].mean(axis=1)
    else:
        samples = (x[rng.integers(0, x.size, size=(reps, x.size))].mean(axis=1)
                   - y[rng.integers(0, y.size, size=(reps, y.size))].mean(axis=1))
    return Interval(float(x.mean() - y.mean()), *percentile_interval(samples, confidence))


def probability_of_improvement(x, y) -> float:
    """P(X > Y) over every pair (x_i, y_j), ties counting one half: the Mann-Whitney U statistic
    over m n, rliable's definition. It ignores any pairing of the seeds."""
    x, y = _values(x, "x"), _values(y, "y")
    return float(((x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])).mean())


def verdict(interval: Interval, num_seeds: int) -> str:
    """'ahead' if the interval of (robust - baseline) lies above 0, 'behind' if below, otherwise
    'inconclusive'; also 'inconclusive' with fewer than MIN_SEEDS seeds, whose interval is only
    the values' range."""
    if num_seeds < MIN_SEEDS:
        return INCONCLUSIVE
    if interval.low > 0:
        return AHEAD
    if interval.high < 0:
        return BEHIND
    return INCONCLUSIVE


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
    bootstrap interval. num_rows: strata; min_seeds: the fewest seeds of any row."""

    baseline: Interval
    robust: Interval
    difference: Interval
    probability_of_improvement: Interval
    num_rows: int
    min_seeds: int

    @property
    def verdict(self) -> str:
        return verdict(self.difference, self.min_seeds)


def stratified_iqm(baseline: Sequence, robust: Sequence, confidence: float = CONFIDENCE, reps: int = REPS,
                   seed: int = SEED) -> Aggregate:
    """Aggregate over rows (strata): baseline[r] and robust[r] hold row r's per-seed scores, paired by
    seed. Each resample draws every row's seeds with replacement, separately per row (so each row
    keeps its weight), and the same draw for both algorithms (so the difference stays paired); the
    probability of improvement, which ignores pairing, resamples the two independently, as rliable."""
    _check(confidence, reps)
    if len(baseline) != len(robust) or not baseline:
        raise ValueError(f"need the same, non-zero number of rows for both algorithms, got {len(baseline)} "
                         f"and {len(robust)}")
    base = [_values(b, f"baseline row {r}") for r, b in enumerate(baseline)]
    rob = [_values(b, f"robust row {r}") for r, b in enumerate(robust)]
    if any(b.shape != r.shape for b, r in zip(base, rob)):
        raise ValueError("each row needs one score per seed for both algorithms (paired by seed)")
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, b.size, size=(reps, b.size)) for b in base]
    base_samples = iqm(np.concatenate([b[i] for b, i in zip(base, draws)], axis=1))
    rob_samples = iqm(np.concatenate([r[i] for r, i in zip(rob, draws)], axis=1))
    other_draws = [rng.integers(0, b.size, size=(reps, b.size)) for b in base]
    poi_samples = np.mean([_pairwise_improvement(r[i], b[j])
                           for r, b, i, j in zip(rob, base, draws, other_draws)], axis=0)

    def interval(point, samples):
        return Interval(float(point), *percentile_interval(samples, confidence))

    base_point, rob_point = iqm(np.concatenate(base)), iqm(np.concatenate(rob))
    return Aggregate(
        baseline=interval(base_point, base_samples),
        robust=interval(rob_point, rob_samples),
        difference=interval(rob_point - base_point, rob_samples - base_samples),
        probability_of_improvement=interval(np.mean([probability_of_improvement(r, b) for r, b in zip(rob, base)]),
                                            poi_samples),
        num_rows=len(base), min_seeds=min(b.size for b in base))


def _pairwise_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """probability_of_improvement along the last axis of [reps, m] and [reps, n] samples."""
    return ((x[:, :, None] > y[:, None, :]) + 0.5 * (x[:, :, None] == y[:, None, :])).mean(axis=(1, 2))
