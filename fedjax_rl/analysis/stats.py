"""The verdict rule for comparing two algorithms over few seeds, at a level that holds on every kind of
data RL results have: the question a row and a table ask, its exact test and computed levels, the
size of a difference with its distribution-free interval, and the comparison the tables and
`fedjax-rl compare` print. Seed plans are `fedjax_rl.analysis.power`'s, the across-rows IQM
`fedjax_rl.analysis.aggregate`'s, the cells the tables print `fedjax_rl.analysis.cells`'s; rules for a
mean, which decide nothing here, are the coverage study's (`benchmarks/studies/mean_intervals.py`).

`fedjax-rl compare`, the reproduction tables (`fedjax_rl/reproduce/report.py`) and
`notebooks/reproduction_results.ipynb` all judge a comparison with `judge.comparison`, which reads this rule. The vocabulary is that of
Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice" (NeurIPS 2021) and
its `rliable` library: paired differences with confidence intervals, the interquartile mean (IQM) across
tasks with a stratified bootstrap, and the probability of improvement P(X > Y).

What a verdict asks. Per-seed returns are skewed, capped at a task's maximum, collapse on some seeds
and repeat values; where both algorithms reach a task's cap (CartPole's 500) a seed ties and says
nothing about which is better. The question a row and a table answer alike (rliable's probability of
improvement, paired): **does the robust algorithm do better than the baseline on more seeds than it
does worse?** *Ahead* where, of the seeds that are not tied, it is higher on more than a fair coin
gives with probability 2.5% (`sign_test`: the sign test with ties set aside, exact given the number
of ties whatever the values' distribution; its false rate at every seed count is computed,
`sign_level`), *behind* likewise; the whole table (`pooled_signs`) asks it over its (task, seed)
units. With fewer than 6 seeds no count of wins can decide ((1/2)^5 > 2.5%: `MIN_SEEDS`). The share
of wins comes with its Clopper-Pearson interval (`win_share`), the inversion of the same test. No
test of a *mean* holds its level over every such distribution at any seed count (Bahadur and Savage,
1956): a rare collapsed seed moves a mean further than 5-20 seeds can show.

The size of the difference is the **median paired difference** with its distribution-free
order-statistic interval [d_(k), d_(n+1-k)] (`median_interval`). *Equivalent*, said only where no
direction is found, asks the direction test's question of the same seeds: is the typical difference
among the **untied** seeds small? The median of the untied differences, with its order-statistic
interval at 90% (two one-sided tests at 5%), lies strictly inside +-margin, a margin per task declared
before looking (`fedjax_rl.analysis.judge.equivalence_margin`), and there are at least MIN_SEEDS untied seeds,
so that the direction test could have found a direction and did not (`equivalence_interval`). Ties
are reported apart, as the direction test sets them aside: counted as differences of 0 they would pull
the median into the margin, and a row whose every untied seed is a win would read equivalent where the
whole table (`pooled_signs`) reads it undecided. How often 'equivalent' is said of a typical untied
difference exactly on the margin is computed, exact given the number of ties
(`equivalence_level_given`) and over every number of ties (`equivalence_level`). A direction found
whose size lies inside the margin reads "ahead, within the margin". Unpaired samples (runs
with other seed keys) get the Hodges-Lehmann shift with its exact Mann-Whitney interval, which
decides their direction. `benchmarks/studies/verdict_coverage.py` checks the levels on the kinds of data
RL seeds give and measures what a seed plan (`seeds_for_power`) delivers (REPRODUCTION.md, "How the
tables judge a comparison").

The interval and test functions take per-seed values on the last axis; leading axes are independent
datasets (the study passes thousands at once through the same code the tables call with one).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Sequence

import numpy as np
import scipy.stats

CONFIDENCE = 0.95
METHOD = "median"  # the size's interval (module docstring)
RULE = "sign test, ties set aside"  # the verdicts' direction test (module docstring)
# "Equivalent" reads the size's interval at this level: two one-sided 5% tests (TOST) against +-margin.
EQUIVALENCE_CONFIDENCE = 0.90
AHEAD, BEHIND, EQUIVALENT, INCONCLUSIVE, TOO_FEW = "ahead", "behind", "equivalent", "inconclusive", "too few seeds"
VERDICTS = (AHEAD, BEHIND, EQUIVALENT, INCONCLUSIVE, TOO_FEW)
# What benchmarks/studies/verdict_coverage.py measured where no formula gives it, quoted by the tables' legends
# (tests/test_stats.py checks it against benchmarks/results/studies/verdict_coverage.json): the largest false
# ahead/behind rate of a rule for the mean (the hull of Student t and bootstrap-t at 97%) on data whose
# mean difference is 0. The rule's own levels are computed (`sign_level`, `equivalence_level`).
MEAN_RULE_FALSE_RATE = 0.1258


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval [low, high] (floats, or arrays over datasets)."""

    estimate: float
    low: float
    high: float

    def format(self, digits: int = 1) -> str:
        return f"{self.estimate:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


@functools.lru_cache(maxsize=None)
def order_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """The largest k with P(Binomial(n, 1/2) <= k - 1) <= (1 - confidence) / 2: the order statistics
    [d_(k), d_(n+1-k)] of n values cover their distribution's median with probability at least
    `confidence`, whatever the distribution. 0 where even [d_(1), d_(n)] does not (n < 6 at 95%)."""
    tail = (1 - confidence) / 2
    cdf = scipy.stats.binom.cdf(np.arange(n), n, 0.5)
    return int(np.sum(cdf <= tail * (1 + 1e-9)))


def order_coverage(n: int, confidence: float = CONFIDENCE) -> float:
    """The exact coverage of `median_interval` at n values: 1 - 2 P(Binomial(n, 1/2) <= k - 1) for
    continuous values (ties only raise it); 1 where the interval is unbounded."""
    k = order_rank(n, confidence)
    return 1.0 if k == 0 else float(1 - 2 * scipy.stats.binom.cdf(k - 1, n, 0.5))


# The fewest paired seeds at which the rule can decide: (1/2)^n <= 2.5% first at n = 6.
MIN_SEEDS = next(n for n in range(1, 64) if order_rank(n) > 0)


def median_interval(values, confidence: float = CONFIDENCE) -> Interval:
    """The median of the last axis of `values` with its order-statistic interval [d_(k), d_(n+1-k)]
    (`order_rank`), (-inf, +inf) where n is too small for any. Every order statistic rises with each
    value, so raising one seed's value never lowers either end."""
    values = per_seed(values, "values")
    return _order_interval(values, order_rank(values.shape[-1], confidence))


def _order_interval(values: np.ndarray, k: int) -> Interval:
    """The median of the last axis with the k-th smallest and k-th largest value as its ends;
    (-inf, +inf) where k is 0 (no order statistic covers at the level asked)."""
    ordered, median = np.sort(values, axis=-1), np.median(values, axis=-1)
    if k == 0:
        return Interval(plain(median), plain(np.full(median.shape, -np.inf)), plain(np.full(median.shape, np.inf)))
    return Interval(plain(median), plain(ordered[..., k - 1]), plain(ordered[..., values.shape[-1] - k]))


@functools.lru_cache(maxsize=None)
def _mann_whitney_counts(m: int, n: int) -> np.ndarray:
    """How many of the C(m + n, m) orderings of m x's and n y's give U = #{(i, j): x_i > y_j} = u, for
    u = 0..m n. The largest value is an x (U gains n) or a y (U gains nothing)."""
    if m == 0 or n == 0:
        return np.ones(1)
    counts = np.zeros(m * n + 1)
    counts[n:] += _mann_whitney_counts(m - 1, n)
    counts[: m * (n - 1) + 1] += _mann_whitney_counts(m, n - 1)
    return counts


def mann_whitney_rank(m: int, n: int, confidence: float = CONFIDENCE) -> int:
    """The largest k with P(U <= k - 1) <= (1 - confidence) / 2 under U's null distribution: the k-th
    smallest and largest of the m n differences x_i - y_j bound the shift between the two samples'
    distributions with probability at least `confidence` (Hodges and Lehmann, 1963). 0 where none does."""
    counts = _mann_whitney_counts(m, n)
    cdf = np.cumsum(counts) / counts.sum()
    return int(np.sum(cdf[:-1] <= (1 - confidence) / 2 * (1 + 1e-9)))


def shift_interval(x, y, confidence: float = CONFIDENCE) -> Interval:
    """The Hodges-Lehmann shift of x against y (the median of every x_i - y_j) with its Mann-Whitney
    interval (`mann_whitney_rank`); (-inf, +inf) where the samples are too small for any."""
    x, y = per_seed(x, "x"), per_seed(y, "y")
    m, n = x.shape[-1], y.shape[-1]
    pairs = (x[..., :, None] - y[..., None, :]).reshape(*np.broadcast_shapes(x.shape[:-1], y.shape[:-1]), m * n)
    return _order_interval(pairs, mann_whitney_rank(m, n, confidence))


def difference(x, y, paired: bool = True, confidence: float = CONFIDENCE,
               value_range: tuple[float, float] | None = None) -> Interval:
    """The size of x against y with its interval at level `confidence`, exact whatever the distribution.
    paired: x[i] and y[i] come from the same seed (the same initialisation, physics and exploration
    keys): the median of the per-seed differences x - y with its order-statistic interval
    (`median_interval`); unpaired, the Hodges-Lehmann shift with its Mann-Whitney interval
    (`shift_interval`).

    value_range: (low, high) that every value of x and y lies in, or None. A task's returns have one
    where its rewards bound them (`envs.return_range`: CartPole's lie in [0, 500]). The difference then
    lies in [low - high, high - low], and the interval is intersected with that: where too few seeds
    bound an order statistic, the interval runs to +-inf. The true difference lies inside, so the
    intersection covers it whenever the interval did: coverage and verdicts stay as they were."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x, y = per_seed(x, "x"), per_seed(y, "y")
    if value_range is not None:
        check_range(value_range, x=x, y=y)
    if paired and x.shape != y.shape:
        raise ValueError(f"paired values need one per seed on both sides, got {x.shape[-1]} and {y.shape[-1]}")
    interval = median_interval(x - y, confidence) if paired else shift_interval(x, y, confidence)
    return interval if value_range is None else within_range(interval, value_range)


def within_range(interval: Interval, value_range: tuple[float, float]) -> Interval:
    """`interval` of a difference cut to what values in `value_range` allow, +-(high - low)."""
    widest = value_range[1] - value_range[0]
    return Interval(interval.estimate, plain(np.maximum(interval.low, -widest)),
                    plain(np.minimum(interval.high, widest)))


def check_range(value_range, **values) -> None:
    """Every value lies in value_range = (low, high), low < high; else a ValueError naming it."""
    low, high = value_range
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise ValueError(f"value_range must be (low, high) with finite low < high, got {value_range}")
    for name, array in values.items():
        outside = array[(array < low) | (array > high)]
        if outside.size:
            raise ValueError(f"{name} holds {outside.tolist()[:5]} outside value_range [{low}, {high}]: "
                             "the values are not what the range was declared for")


def decidable(num_seeds: int, other_seeds: int | None = None) -> bool:
    """Whether the rule can decide a direction at all: `num_seeds` paired seeds (the sign test needs
    MIN_SEEDS of them, untied), or `num_seeds` against `other_seeds` unpaired (the shift's Mann-Whitney
    interval). Where it cannot, the verdict is 'too few seeds'."""
    if other_seeds is None:
        return critical_wins(num_seeds) is not None
    return mann_whitney_rank(num_seeds, other_seeds) > 0


def critical_wins(decided: int, confidence: float = CONFIDENCE) -> int | None:
    """The fewest wins of `decided` untied units at which the sign test says ahead: the smallest w with
    P(Binomial(decided, 1/2) >= w) <= (1 - confidence) / 2; None where even decided of decided is not
    enough (fewer than MIN_SEEDS untied units at 95%)."""
    wins = int(critical_wins_upto(decided, confidence)[-1])
    return wins if wins <= decided else None


@functools.lru_cache(maxsize=64)
def critical_wins_upto(n: int, confidence: float = CONFIDENCE) -> np.ndarray:
    """critical_wins(m) for m = 0..n, and m + 1 (more wins than there are) where none decides: one above
    the binomial's inverse survival function at the tail (scipy's isf, the smallest k with
    P(X > k) <= tail)."""
    m = np.arange(n + 1)
    return np.minimum(scipy.stats.binom.isf((1 - confidence) / 2 * (1 + 1e-9), m, 0.5) + 1, m + 1)


def sign_test(higher, lower, confidence: float = CONFIDENCE) -> tuple:
    """(ahead, behind) of the sign test with ties set aside: of the `higher` + `lower` units that are not
    even, the robust algorithm wins more (fewer) than a fair coin gives with probability
    (1 - confidence) / 2. Exact given how many units are even, whatever the values' distribution:
    the question is whether it wins more often than it loses (module docstring). Arrays broadcast."""
    higher, lower = counts(higher, "higher"), counts(lower, "lower")
    decided, tail = higher + lower, (1 - confidence) / 2 * (1 + 1e-9)
    ahead = scipy.stats.binom.sf(higher - 1, decided, 0.5) <= tail
    behind = scipy.stats.binom.sf(lower - 1, decided, 0.5) <= tail
    return ahead, behind


def win_share(higher, lower, confidence: float = CONFIDENCE) -> Interval:
    """The share of wins among the units that are not even, with its Clopper-Pearson interval: the
    inversion of the same binomial test (`sign_test` says ahead exactly where the interval lies above
    1/2); [0, 1] around nan where no unit is decided."""
    higher, lower = counts(higher, "higher"), counts(lower, "lower")
    decided, tail = higher + lower, (1 - confidence) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(higher > 0, scipy.stats.beta.ppf(tail, higher, decided - higher + 1), 0.0)
        high = np.where(higher < decided, scipy.stats.beta.ppf(1 - tail, higher + 1, decided - higher), 1.0)
        return Interval(plain(higher / np.where(decided > 0, decided, np.nan)), plain(low), plain(high))


@functools.lru_cache(maxsize=None)
def sign_level(units: int, confidence: float = CONFIDENCE) -> float:
    """The largest probability, over every distribution with P(win) = P(loss), that the sign test says
    ahead or behind with `units` units: computed, not measured. Given m untied units it is exactly
    2 P(Binomial(m, 1/2) >= critical_wins(m)); ties move m anywhere from 0 to `units`, so the largest over m."""
    rates = [0.0]
    for m in range(1, units + 1):
        w = critical_wins(m, confidence)
        if w is not None:
            rates.append(2 * float(scipy.stats.binom.sf(w - 1, m, 0.5)))
    return max(rates)


@functools.lru_cache(maxsize=None)
def equivalence_level_given(untied: int) -> float:
    """How often, at most, 'equivalent' is said of a comparison with `untied` untied seeds whose typical
    untied difference (the median of the differences' distribution given no tie) lies exactly on the
    margin: the 90% interval of the untied median must then exclude the margin on its side, which it does
    with probability P(Binomial(m, 1/2) <= k - 1), k = order_rank(m, EQUIVALENCE_CONFIDENCE); 0 below
    MIN_SEEDS untied seeds, where 'equivalent' is not said (`equivalence_interval`). Computed, not
    measured, and exact given the number of ties: the untied seeds are independent draws from the
    differences' distribution given no tie, whatever that is."""
    if untied < MIN_SEEDS:
        return 0.0
    k = order_rank(untied, EQUIVALENCE_CONFIDENCE)
    return float(scipy.stats.binom.cdf(k - 1, untied, 0.5))


@functools.lru_cache(maxsize=None)
def equivalence_level(num_seeds: int) -> float:
    """How often, at most, 'equivalent' is said of a typical untied difference exactly on the margin with
    `num_seeds` seeds, whatever the tie rate: ties leave anywhere from 0 to num_seeds seeds untied, so
    the largest `equivalence_level_given` over those counts (not monotone in the count: 1.6% at 6
    untied seeds, 0.8% at 7, 3.5% at 8)."""
    return max(equivalence_level_given(m) for m in range(num_seeds + 1))


def equivalence_interval(differences, confidence: float = EQUIVALENCE_CONFIDENCE) -> Interval:
    """What 'equivalent' reads (module docstring): the median of the untied (nonzero) paired differences
    on the last axis with its order-statistic interval at `confidence` among them, (-inf, +inf) where
    fewer than MIN_SEEDS seeds are untied (no direction could have been found there, so none can be
    ruled out); the estimate is nan where every seed ties. Leading axes are datasets, each with its own
    number of ties."""
    d = per_seed(differences, "differences")
    untied = np.count_nonzero(d, axis=-1)
    ranks = np.array([order_rank(m, confidence) if m >= MIN_SEEDS else 0 for m in range(d.shape[-1] + 1)])
    k = ranks[untied]
    ordered = np.sort(np.where(d != 0, d, np.nan), axis=-1)  # nan (the ties) sort last
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-tied dataset's nanmedian is nan
        median = np.nanmedian(ordered, axis=-1)
    low = np.take_along_axis(ordered, np.where(k > 0, k - 1, 0)[..., None], axis=-1)[..., 0]
    high = np.take_along_axis(ordered, np.where(k > 0, untied - k, 0)[..., None], axis=-1)[..., 0]
    return Interval(plain(median), plain(np.where(k > 0, low, -np.inf)), plain(np.where(k > 0, high, np.inf)))


def counts(values, name: str) -> np.ndarray:
    """Counts of units (non-negative whole numbers, arrays allowed) as an int array; a ValueError naming
    `name` otherwise."""
    array = np.asarray(values)
    if array.dtype.kind not in "iub" and not (array.dtype.kind == "f" and np.all(np.isfinite(array))
                                             and np.all(array == np.round(array))):
        raise ValueError(f"{name} must be a count of units (a whole number >= 0), got {values!r}")
    if np.any(array < 0):
        raise ValueError(f"{name} must be a count of units (a whole number >= 0), got {values!r}")
    return array.astype(np.int64)


def verdict(ahead, behind, can_decide=True, equivalence: Interval | None = None, margin: float | None = None):
    """The word for robust - baseline: 'ahead' or 'behind' where the direction test says so (paired:
    `sign_test`; unpaired: the shift's interval excludes 0); otherwise 'equivalent' if `equivalence`
    (paired: `equivalence_interval`; unpaired: the shift's interval at EQUIVALENCE_CONFIDENCE) lies
    strictly inside (-margin, +margin);
    otherwise 'too few seeds' where no test could have decided at this seed count (`can_decide`,
    `decidable`), else 'inconclusive'. A direction found is said even where the size is inside the margin
    too (`judge.comparison`'s "within_margin" says so). Arrays of datasets give an array of words."""
    ahead, behind, can_decide = np.asarray(ahead), np.asarray(behind), np.asarray(can_decide)
    words = np.where(can_decide, INCONCLUSIVE, TOO_FEW).astype(object)
    if margin is not None and equivalence is not None:
        words = np.where(inside_margin(equivalence, margin), EQUIVALENT, words)
    words = np.where(can_decide & ahead, AHEAD, np.where(can_decide & behind, BEHIND, words))
    return str(words) if words.ndim == 0 else words.astype(str)


def inside_margin(interval: Interval, margin: float):
    """Whether `interval` lies strictly inside (-margin, +margin): an end on either bound is not inside."""
    if not (np.isfinite(margin) and margin > 0):
        raise ValueError(f"margin must be a finite number > 0, got {margin}")
    return (np.asarray(interval.low) > -margin) & (np.asarray(interval.high) < margin)


def one_dataset(values, name: str) -> np.ndarray:
    """Per-seed values of one dataset (a 1-d array of finite values); a ValueError naming `name` otherwise."""
    values = per_seed(values, name)
    if values.ndim != 1:
        raise ValueError(f"{name} must be one dataset of per-seed values (1-d), got shape {values.shape}")
    return values


def pooled_signs(differences: Sequence, groups: Sequence | None = None, confidence: float = CONFIDENCE,
                 seeds: Sequence | None = None) -> dict:
    """A verdict for a whole table: the rows' rule (`sign_test`) over the table's independent units.
    `differences[r]` holds row r's per-seed robust - baseline (leading axes: datasets); rows with the
    same `groups[r]` (a task's rows, which share their seeds' keys) make one unit per seed, valued by the
    mean sign of their differences at that seed; rows of different groups are independent. `seeds[r]`
    names row r's seeds (their indices), for rows of a group that hold different seeds (one row with
    confirmatory seeds, the other without): a unit is then a (group, seed index), valued over the rows
    that hold that seed; without `seeds` a group's rows must hold the same seeds in the same order. The
    question is a row's: whether, over the (task, seed) units one could draw, the robust algorithm wins
    more often than it loses ('ahead'), less often ('behind'), exact given the number of units that are
    not even; 'too few seeds' below MIN_SEEDS units. Signs need no common scale. The share of wins among
    the units that are not even comes with its Clopper-Pearson interval (`win_share`)."""
    if len(differences) == 0:
        raise ValueError("pooled_signs needs at least one row of differences, got none")
    rows = [per_seed(r, f"row {i}") for i, r in enumerate(differences)]
    groups = list(range(len(rows))) if groups is None else list(groups)
    if len(groups) != len(rows):
        raise ValueError(f"groups must name one group per row: {len(rows)} rows, {len(groups)} groups")
    if seeds is not None:
        seeds = [list(s) for s in seeds]
        if len(seeds) != len(rows):
            raise ValueError(f"seeds must name each row's seeds: {len(rows)} rows, {len(seeds)} seed lists")
        for i, (row, keys) in enumerate(zip(rows, seeds)):
            if len(keys) != row.shape[-1] or len(set(keys)) != len(keys):
                raise ValueError(f"row {i} needs one distinct seed index per value: {row.shape[-1]} values, "
                                 f"seeds {keys}")
    units = []
    for group in dict.fromkeys(groups):
        members = [i for i, g in enumerate(groups) if g == group]
        signs = [np.sign(rows[i]) for i in members]
        if seeds is None:
            if len({m.shape for m in signs}) != 1:
                raise ValueError(f"rows of group {group!r} need one value per seed each, got shapes "
                                 f"{[m.shape for m in signs]}; name each row's seeds to pool rows with "
                                 "different seeds")
            units.append(np.mean(signs, axis=0))
            continue
        for key in dict.fromkeys(k for i in members for k in seeds[i]):
            units.append(np.mean([sign[..., seeds[i].index(key)] for i, sign in zip(members, signs)
                                  if key in seeds[i]], axis=0)[..., None])
    values = np.concatenate(units, axis=-1)
    n = values.shape[-1]
    higher, lower = (values > 0).sum(-1), (values < 0).sum(-1)
    ahead, behind = sign_test(higher, lower, confidence)
    words = np.where(ahead, AHEAD, np.where(behind, BEHIND, INCONCLUSIVE if n >= MIN_SEEDS else TOO_FEW))

    def count(array):
        return int(array) if np.ndim(array) == 0 else array

    return dict(units=n, rows=len(rows), groups=len(dict.fromkeys(groups)), higher=count(higher), lower=count(lower),
                even=count(n - higher - lower), win_share=win_share(higher, lower, confidence),
                verdict=str(words) if words.ndim == 0 else words)


def probability_of_improvement(x, y) -> float:
    """P(X > Y) over every pair (x_i, y_j), ties counting one half: the Mann-Whitney U statistic
    over m n, rliable's definition. It ignores any pairing of the seeds."""
    x, y = per_seed(x, "x"), per_seed(y, "y")
    return plain(pairwise_improvement(x, y))


def pairwise_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """probability_of_improvement along the last axis of [..., m] and [..., n] values."""
    return ((x[..., :, None] > y[..., None, :]) + 0.5 * (x[..., :, None] == y[..., None, :])).mean(axis=(-2, -1))


def per_seed(values, name: str, at_least: int = 1) -> np.ndarray:
    """`values` as float64 with at least `at_least` finite per-seed values on the last axis; a ValueError
    naming `name` otherwise."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0 or values.shape[-1] < at_least:
        raise ValueError(f"{name} must hold at least {at_least} per-seed value(s) on its last axis, "
                         f"got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name} must be finite, got {values.tolist()}")
    return values


def plain(array):
    """A 0-d result as a Python float, so that one dataset gives plain numbers."""
    return float(array) if np.ndim(array) == 0 else array
