"""fedjax_rl.stats against cases worked by hand and against the exact bootstrap distribution,
enumerated in float64 (every one of the n^n equally likely resamples)."""

import itertools

import numpy as np
import pytest
import scipy.stats

from fedjax_rl import stats


def exact_bootstrap(values_per_stratum, statistic):
    """Every resample of every stratum (n^n each, all equally likely), the statistic of each."""
    choices = [list(itertools.product(v, repeat=len(v))) for v in values_per_stratum]
    return np.array([statistic(*combo) for combo in itertools.product(*choices)], dtype=np.float64)


def exact_interval(samples, confidence):
    """The inverted-CDF quantiles of the exact distribution, and the distance of each quantile level
    from the nearest CDF step (the Monte Carlo estimate lands on the same value when that margin is
    many standard errors wide)."""
    tail = (1 - confidence) / 2
    values = np.sort(samples)
    cdf = np.arange(1, len(values) + 1) / len(values)
    ends, margins = [], []
    for q in (tail, 1 - tail):
        ends.append(values[np.searchsorted(cdf, q - 1e-12)])
        steps = np.unique(cdf[np.r_[values[1:] != values[:-1], True]])  # CDF at each distinct value
        margins.append(np.min(np.abs(steps - q)))
    return tuple(ends), min(margins)


def test_three_seed_paired_difference_by_hand():
    # Per-seed differences (-3, 0, 6): mean 1. The 27 resamples give the means -3 (1 way), -2 (3),
    # -1 (3), 0 (1 + 3), 1 (6), 2 (3), 3 (3), 4 (3), 6 (1). CDF: 1, 4, 7, 11, 17, 20, 23, 26, 27 / 27.
    # 80%: the 10% quantile is -2 (4/27 >= 0.1 > 1/27), the 90% quantile 4 (26/27 >= 0.9 > 23/27).
    # 95%: 1/27 > 2.5% and 26/27 < 97.5%, so the interval is the whole range [-3, 6].
    x, y = np.array([7.0, 10.0, 16.0]), np.array([10.0, 10.0, 10.0])
    assert stats.difference(x, y, confidence=0.8) == stats.Interval(1.0, -2.0, 4.0)
    assert stats.difference(x, y) == stats.Interval(1.0, -3.0, 6.0)


@pytest.mark.parametrize("case_seed,n,paired,confidence", [(0, 3, True, 0.8), (0, 4, True, 0.95), (0, 5, True, 0.95),
                                                           (11, 3, False, 0.9)])
def test_bootstrap_intervals_equal_the_exact_distributions_quantiles(case_seed, n, paired, confidence):
    rng = np.random.default_rng(case_seed)
    x, y = rng.normal(size=n).round(1) * 10, rng.normal(size=n).round(1) * 10
    if paired:
        samples = exact_bootstrap([x - y], lambda d: np.mean(d))
    else:
        samples = exact_bootstrap([x, y], lambda a, b: np.mean(a) - np.mean(b))
    (low, high), margin = exact_interval(samples, confidence)
    tail = (1 - confidence) / 2
    assert margin > 5 * np.sqrt(tail * (1 - tail) / stats.REPS), "pick a case whose quantiles are not on a CDF step"
    interval = stats.difference(x, y, paired=paired, confidence=confidence)
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=1e-12)
    assert interval.estimate == pytest.approx(x.mean() - y.mean(), abs=1e-12)


def test_few_seeds_give_the_range_and_no_verdict():
    rng = np.random.default_rng(0)
    for n in (2, 3):  # a resample of n copies of one value has probability n^-n >= 1/27 > 2.5%
        d = rng.normal(size=n) + 5  # every seed ahead
        interval = stats.difference(d, np.zeros(n))
        assert (interval.low, interval.high) == pytest.approx((d.min(), d.max()), abs=1e-12)
        assert stats.verdict(interval, n) == stats.INCONCLUSIVE
    d = np.array([1.0, 2.0, 3.0, 4.0])  # at 4 seeds the interval lies strictly inside the range
    interval = stats.difference(d, np.zeros(4))
    assert 1.0 < interval.low < interval.high < 4.0
    assert stats.verdict(interval, 4) == stats.AHEAD
    assert stats.verdict(stats.difference(-d, np.zeros(4)), 4) == stats.BEHIND
    assert stats.verdict(stats.difference(d - 2.5, np.zeros(4)), 4) == stats.INCONCLUSIVE
    assert stats.verdict(stats.Interval(0.5, 0.0, 1.0), 5) == stats.INCONCLUSIVE  # touching 0 does not exclude it


def test_probability_of_improvement_by_hand():
    # Pairs of (1, 2, 3) against (2, 2): 0 + 0 + 1/2 + 1/2 + 1 + 1 over 6.
    assert stats.probability_of_improvement([1, 2, 3], [2, 2]) == 0.5
    # (3, 4) against (1, 2, 3): 1 + 1 + 1/2 + 1 + 1 + 1 over 6.
    assert stats.probability_of_improvement([3, 4], [1, 2, 3]) == pytest.approx(5.5 / 6, abs=1e-15)
    assert stats.probability_of_improvement([5, 5], [5, 5]) == 0.5
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 4, 7).astype(float), rng.integers(0, 4, 5).astype(float)  # with ties
    u = scipy.stats.mannwhitneyu(x, y).statistic
    assert stats.probability_of_improvement(x, y) == pytest.approx(u / (7 * 5), abs=1e-15)


def test_iqm_by_hand_and_against_scipy():
    # 8 numbers, sorted -50, 1, 2, 3, 4, 5, 6, 100: drop two at each end, average 2, 3, 4, 5.
    assert stats.iqm([100.0, 3.0, 1.0, 6.0, 2.0, 5.0, 4.0, -50.0]) == 3.5
    rng = np.random.default_rng(2)
    for n in range(1, 14):
        values = rng.normal(size=n)
        assert stats.iqm(values) == pytest.approx(scipy.stats.trim_mean(values, 0.25), abs=1e-12)
    batch = rng.normal(size=(3, 9))
    np.testing.assert_allclose(stats.iqm(batch), scipy.stats.trim_mean(batch, 0.25, axis=1), atol=1e-12)


def test_stratified_iqm_resamples_within_rows_and_keeps_pairs():
    # Rows whose seeds agree: a stratified resample always draws 2 scores of each row, so the IQM
    # never moves; a bootstrap that pooled the rows' scores would draw 0 to 4 of a row.
    baseline = [np.array([1.0, 1.0]), np.array([3.0, 3.0])]
    robust = [np.array([2.0, 2.0]), np.array([5.0, 5.0])]
    agg = stats.stratified_iqm(baseline, robust)
    assert agg.baseline == stats.Interval(2.0, 2.0, 2.0)  # IQM of (1, 1, 3, 3): mean of (1, 3)
    assert agg.robust == stats.Interval(3.5, 3.5, 3.5)
    assert agg.difference == stats.Interval(1.5, 1.5, 1.5)
    assert agg.probability_of_improvement == stats.Interval(1.0, 1.0, 1.0)
    assert (agg.num_rows, agg.min_seeds) == (2, 2)
    assert agg.verdict == stats.INCONCLUSIVE  # 2 seeds per row

    # Robust = baseline + 1 seed by seed: the IQM shifts by exactly 1 in every resample if (and only
    # if) both algorithms get the same draw.
    rng = np.random.default_rng(3)
    baseline = [rng.normal(size=5) * 10 for _ in range(4)]
    agg = stats.stratified_iqm(baseline, [b + 1 for b in baseline])
    assert (agg.difference.low, agg.difference.high) == pytest.approx((1.0, 1.0), abs=1e-9)
    assert agg.verdict == stats.AHEAD
    assert agg.baseline.low < agg.baseline.estimate < agg.baseline.high


def test_seeded_and_reproducible():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=5), rng.normal(size=5)
    assert stats.difference(x, y) == stats.difference(x, y)
    rows = [rng.normal(size=5) for _ in range(3)]
    assert stats.stratified_iqm(rows, rows[::-1]) == stats.stratified_iqm(rows, rows[::-1])


def test_normalise_by_hand():
    # MountainCar-like: random -200, reference -100: -150 is halfway, -100 is 1, -250 is -0.5.
    np.testing.assert_allclose(stats.normalise([-150.0, -100.0, -250.0], -200.0, -100.0), [0.5, 1.0, -0.5])
    with pytest.raises(ValueError, match=r"reference return \(-200.0\) must exceed the random-policy return"):
        stats.normalise([1.0], -200.0, -200.0)


@pytest.mark.parametrize("call,message", [
    (lambda: stats.difference([1.0], [1.0], confidence=1.5), r"confidence must be in \(0, 1\), got 1.5"),
    (lambda: stats.difference([1.0], [1.0], reps=0), r"reps \(bootstrap resamples\) must be an integer >= 1, got 0"),
    (lambda: stats.difference([], [1.0], paired=False), r"x must be a non-empty 1-D array"),
    (lambda: stats.difference([1.0, 2.0], [1.0]), r"paired values need one per seed on both sides, got 2 and 1"),
    (lambda: stats.difference([np.nan], [1.0]), r"x must be finite"),
    (lambda: stats.stratified_iqm([[1.0]], []), r"need the same, non-zero number of rows"),
    (lambda: stats.stratified_iqm([[1.0, 2.0]], [[1.0]]), r"one score per seed for both algorithms"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
