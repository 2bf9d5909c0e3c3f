"""fedjax_rl.analysis.stats against cases worked by hand, against exact distributions (the sign test's binomial,
the Mann-Whitney count enumerated, every one of the n^n equally likely bootstrap resamples), against
scipy, against what benchmarks/studies/verdict_coverage.py measured, and, through the very calls the tables
make, against the false-verdict rate a 95% verdict promises."""

import itertools

import numpy as np
import pytest
import scipy.stats

from benchmarks import harness
from benchmarks.studies import mean_intervals
from fedjax_rl.analysis import aggregate, cells, judge, power, stats


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


def studentized(resample, mean):
    """A resample's t statistic (mean* - mean) / (std*(ddof 1) / sqrt(n)); no spread: 0 or ±inf."""
    resample = np.asarray(resample)
    shift, scale = resample.mean() - mean, resample.std(ddof=1) / np.sqrt(resample.size)
    if np.isclose(scale, 0, atol=1e-12):
        return 0.0 if np.isclose(shift, 0, atol=1e-12) else np.copysign(np.inf, shift)
    return shift / scale


def ends(interval):
    return interval.estimate, interval.low, interval.high


def test_the_mean_hull_on_four_seeds_by_hand():
    # Per-seed differences (1, 2, 2, 3): mean 2, std (ddof 1) sqrt(2/3), standard error 1/sqrt(6).
    # The hull (the tables' rule before the median's) is computed at nominal 97% (mean_intervals.HULL_CONFIDENCE).
    # Student t: 2 ∓ t_{0.985, 3} / sqrt(6) = 2 ∓ 3.89605 x 0.40825 = [0.40945, 3.59055].
    # Bootstrap-t, 256 equally likely resamples of the seeds. The smallest t statistics: four copies of
    # 1 have no spread and a moved mean, -inf (1 resample); three 1s and a 2: mean 1.25, std 1/2,
    # t = -0.75 / (1/4) = -3 (4 places for the 2 x 2 seeds holding a 2 = 8 resamples). The CDF steps
    # from 1/256 to 9/256 there, past 1.5% (and past 2.5%), so the 1.5% quantile is -3, and by symmetry
    # the 98.5% one +3: the interval 2 ∓ 3 / sqrt(6) = [0.77526, 3.22474] lies inside Student t's, so
    # the hull is Student t's, and it lies above 0.
    d = np.array([1.0, 2.0, 2.0, 3.0])
    assert mean_intervals.HULL_CONFIDENCE == 0.97
    half_t = scipy.stats.t.ppf(0.985, 3) / np.sqrt(6)
    assert ends(mean_intervals.mean_interval(d, mean_intervals.T, 0.97)) == pytest.approx((2.0, 0.40945, 3.59055), abs=1e-5)
    assert ends(mean_intervals.mean_interval(d, mean_intervals.T, 0.97)) == pytest.approx((2.0, 2 - half_t, 2 + half_t), abs=1e-12)
    for level in (0.95, 0.97):
        assert ends(mean_intervals.mean_interval(d, mean_intervals.BOOTSTRAP_T, level)) == pytest.approx(
            (2.0, 2 - 3 / np.sqrt(6), 2 + 3 / np.sqrt(6)), abs=1e-12)
    interval = mean_intervals.difference(d + 10, np.full(4, 10.0), method=mean_intervals.T_AND_BOOTSTRAP_T)
    assert ends(interval) == pytest.approx((2.0, 2 - half_t, 2 + half_t), abs=1e-12)
    assert interval.low > 0  # the mean's hull would call it ahead at 4 seeds
    assert mean_intervals.difference(-d, np.zeros(4), method=mean_intervals.T_AND_BOOTSTRAP_T).high < 0
    # Why 50,000 resamples land on the exact quantile: 1.5% lies between the CDF steps 1/256 and
    # 9/256, 0.0111 from the nearer, 20 standard errors of a 1.5% quantile at 50,000 resamples.
    for level in (0.95, 0.97):
        (low, high), margin = exact_interval(exact_bootstrap([d], lambda r: studentized(r, 2.0)), level)
        tail = (1 - level) / 2
        assert (low, high) == (-3.0, 3.0) and margin > 14 * np.sqrt(tail * (1 - tail) / aggregate.REPS)


def test_three_seed_percentile_interval_by_hand():
    # Per-seed differences (-3, 0, 6): mean 1. The 27 resamples give the means -3 (1 way), -2 (3),
    # -1 (3), 0 (1 + 3), 1 (6), 2 (3), 3 (3), 4 (3), 6 (1). CDF: 1, 4, 7, 11, 17, 20, 23, 26, 27 / 27.
    # 80%: the 10% quantile is -2 (4/27 >= 0.1 > 1/27), the 90% quantile 4 (26/27 >= 0.9 > 23/27).
    # 95%: 1/27 > 2.5% and 26/27 < 97.5%, so the interval is the whole range [-3, 6].
    x, y = np.array([7.0, 10.0, 16.0]), np.array([10.0, 10.0, 10.0])
    assert mean_intervals.difference(x, y, method=mean_intervals.PERCENTILE, confidence=0.8) == stats.Interval(1.0, -2.0, 4.0)
    assert mean_intervals.difference(x, y, method=mean_intervals.PERCENTILE) == stats.Interval(1.0, -3.0, 6.0)


@pytest.mark.parametrize("case_seed,n,paired,confidence", [(0, 3, True, 0.8), (0, 4, True, 0.95), (0, 5, True, 0.95),
                                                           (11, 3, False, 0.9)])
def test_percentile_intervals_equal_the_exact_distributions_quantiles(case_seed, n, paired, confidence):
    rng = np.random.default_rng(case_seed)
    x, y = rng.normal(size=n).round(1) * 10, rng.normal(size=n).round(1) * 10
    if paired:
        samples = exact_bootstrap([x - y], lambda d: np.mean(d))
    else:
        samples = exact_bootstrap([x, y], lambda a, b: np.mean(a) - np.mean(b))
    (low, high), margin = exact_interval(samples, confidence)
    tail = (1 - confidence) / 2
    assert margin > 5 * np.sqrt(tail * (1 - tail) / aggregate.REPS), "pick a case whose quantiles are not on a CDF step"
    interval = mean_intervals.difference(x, y, paired=paired, method=mean_intervals.PERCENTILE, confidence=confidence)
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=1e-12)
    assert interval.estimate == pytest.approx(x.mean() - y.mean(), abs=1e-12)


def test_bootstrap_t_equals_the_exact_distributions_quantiles_on_five_seeds():
    rng = np.random.default_rng(14)  # a case whose quantiles are 5 standard errors from a CDF step
    d = rng.normal(size=5).round(1) * 10  # 3,125 resamples
    samples = exact_bootstrap([d], lambda r: studentized(r, d.mean()))
    (q_low, q_high), margin = exact_interval(samples, 0.95)
    assert margin > 5 * np.sqrt(0.025 * 0.975 / aggregate.REPS), "pick a case whose quantiles are not on a CDF step"
    se = d.std(ddof=1) / np.sqrt(5)
    interval = mean_intervals.mean_interval(d, mean_intervals.BOOTSTRAP_T)
    assert (interval.low, interval.high) == pytest.approx((d.mean() - q_high * se, d.mean() - q_low * se), abs=1e-9)
    t_interval = mean_intervals.mean_interval(d, mean_intervals.T)
    hull = mean_intervals.mean_interval(d, mean_intervals.T_AND_BOOTSTRAP_T, 0.95)  # at the same nominal level as the two
    assert (hull.low, hull.high) == (min(interval.low, t_interval.low), max(interval.high, t_interval.high))
    assert mean_intervals.mean_interval(d) == mean_intervals.mean_interval(d, mean_intervals.T_AND_BOOTSTRAP_T, mean_intervals.HULL_CONFIDENCE)  # the default


def test_t_intervals_are_scipys():
    rng = np.random.default_rng(5)
    d = rng.normal(size=6) * 3 + 1
    assert (mean_intervals.mean_interval(d, mean_intervals.T).low, mean_intervals.mean_interval(d, mean_intervals.T).high) == pytest.approx(
        tuple(scipy.stats.ttest_1samp(d, 0).confidence_interval()), abs=1e-12)
    x, y = rng.normal(size=4) * 2, rng.normal(size=7) + 1
    welch = mean_intervals.difference(x, y, paired=False, method=mean_intervals.T)
    assert (welch.low, welch.high) == pytest.approx(
        tuple(scipy.stats.ttest_ind(x, y, equal_var=False).confidence_interval()), abs=1e-12)
    unpaired = mean_intervals.difference(x, y, paired=False, method=mean_intervals.T_AND_BOOTSTRAP_T)  # Welch's or a wider bootstrap-t
    assert unpaired.low <= welch.low and unpaired.high >= welch.high


def test_bca_is_close_to_scipys():
    # scipy resamples its own way and interpolates its quantiles, so only close; the same definition
    # (bias from the share of resampled means below the estimate, acceleration from the jackknife).
    rng = np.random.default_rng(6)
    d = rng.exponential(size=12)
    ours = mean_intervals.mean_interval(d, mean_intervals.BCA)
    theirs = scipy.stats.bootstrap((d,), np.mean, method="BCa", n_resamples=50_000, random_state=0).confidence_interval
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), rel=0.01)
    percentile = mean_intervals.mean_interval(d, mean_intervals.PERCENTILE)
    assert ours.high > percentile.high  # right-skewed values: BCa moves the interval up


def test_a_batch_of_datasets_is_each_dataset_on_its_own():
    rng = np.random.default_rng(7)
    batch = rng.normal(size=(3, 5))
    for method in set(mean_intervals.METHODS) - {mean_intervals.MEDIAN}:
        together = mean_intervals.mean_interval(batch, method, reps=500)
        for i, d in enumerate(batch):
            alone = mean_intervals.mean_interval(d, method, reps=500)
            assert (together.estimate[i], together.low[i], together.high[i]) == pytest.approx(
                (alone.estimate, alone.low, alone.high), abs=1e-12), method
    verdicts = stats.verdict(*stats.sign_test(np.array([9, 0, 4]), np.array([0, 9, 4])))
    assert verdicts.tolist() == [stats.AHEAD, stats.BEHIND, stats.INCONCLUSIVE]
    median = stats.difference(batch, np.zeros_like(batch))
    for i, d in enumerate(batch):
        alone = stats.difference(d, np.zeros_like(d))
        assert (median.estimate[i], median.low[i], median.high[i]) == (alone.estimate, alone.low, alone.high)


@pytest.fixture(scope="module")
def null_datasets():
    """3,000 datasets of equal algorithms per (distribution, n): paired differences with mean 0."""
    rng = np.random.default_rng(40)
    return {(name, n): draw(rng, (3000, n)) for name, draw in
            (("normal", lambda rng, shape: rng.normal(size=shape)),
             ("t3", lambda rng, shape: rng.standard_t(3, size=shape))) for n in (5, 6, 10, 20)}


@pytest.mark.parametrize("n", [6, 10, 20])
@pytest.mark.parametrize("distribution", ["normal", "t3"])
def test_verdicts_between_equal_algorithms_are_rarely_false(null_datasets, distribution, n):
    # Through the tables' own call (judge.comparison), dataset by dataset. The sign test is exact for
    # any distribution: at most stats.sign_level(n) of datasets are decided (3.1% at 6 seeds, 3.9% at 10,
    # 4.9% at 20); 3,000 datasets put 5.5% over 3 standard errors above.
    d = null_datasets[distribution, n]
    verdicts = [judge.comparison(dict(minimum=100.0 + row), dict(minimum=np.full(n, 100.0)), ("minimum",))["verdict"]
                for row in d[:100]]
    assert set(verdicts) <= {stats.AHEAD, stats.BEHIND, stats.INCONCLUSIVE}
    ahead, behind = stats.sign_test((d > 0).sum(-1), (d < 0).sum(-1))  # the comparison's test, on all 3,000
    assert np.isin(verdicts, (stats.AHEAD, stats.BEHIND)).tolist() == (ahead | behind)[:100].tolist()
    false_rate = (ahead | behind).mean()
    assert false_rate <= stats.sign_level(n) + 3 * np.sqrt(0.05 * 0.95 / 3000), false_rate


def test_the_percentile_bootstrap_fails_the_same_check(null_datasets):
    # The interval the tables used before the coverage study: at 5 seeds it is about mean ± 1.96
    # std(ddof 0)/sqrt(5) and calls a difference between equal algorithms about 16% of the time.
    d = null_datasets["normal", 5]
    interval = mean_intervals.difference(d, np.zeros_like(d), method=mean_intervals.PERCENTILE, reps=2000)
    assert np.isin(stats.verdict(interval.low > 0, interval.high < 0), (stats.AHEAD, stats.BEHIND)).mean() > 0.12


def test_order_ranks_and_their_coverage_by_hand():
    # P(Binomial(n, 1/2) <= k - 1) <= 2.5%: n = 5 allows no k (1/32 = 3.1%); n = 6, k = 1 (1/64); n = 9,
    # k = 2 (10/512 = 1.95%); n = 10, k = 2 (11/1024; 56/1024 = 5.5% is too much); n = 20, k = 6 (2.07%).
    assert [stats.order_rank(n) for n in (1, 5, 6, 9, 10, 20)] == [0, 0, 1, 2, 2, 6]
    assert stats.MIN_SEEDS == 6  # follows from the rule: 2 (1/2)^n <= 5% first at n = 6
    assert stats.order_coverage(6) == pytest.approx(1 - 2 / 64) and stats.order_coverage(5) == 1.0
    assert stats.order_coverage(10) == pytest.approx(1 - 2 * 11 / 1024)
    # At 90% (equivalence), 5 seeds are enough: 1/32 <= 5%; at 10, 56/1024 = 5.5% stops k at 2 again.
    assert [stats.order_rank(n, 0.9) for n in (4, 5, 10)] == [0, 1, 2]
    rng = np.random.default_rng(12)
    d = rng.permutation(np.arange(1.0, 11.0)) - 3.5  # -2.5 .. 6.5
    assert stats.median_interval(d) == stats.Interval(2.0, -1.5, 5.5)  # median 2, 2nd and 9th smallest
    assert stats.difference(d + 7, np.full(10, 7.0)) == stats.Interval(2.0, -1.5, 5.5)  # the tables' call


def test_the_median_interval_is_the_sign_test_inverted():
    # Wherever no difference is 0, the interval lies above 0 exactly where the one-sided exact sign test
    # (scipy's binomtest) gives p <= 2.5%.
    rng = np.random.default_rng(13)
    for n in (6, 7, 10, 13, 20):
        for d in rng.normal(size=(60, n)) + rng.uniform(0, 2, size=(60, 1)):
            p = scipy.stats.binomtest(int((d > 0).sum()), n, 0.5, alternative="greater").pvalue
            assert (stats.median_interval(d).low > 0) == (p <= 0.025), (d, p)


def test_the_mann_whitney_count_is_the_enumerated_one():
    for m, n in ((1, 3), (3, 4), (4, 4)):
        counts = np.zeros(m * n + 1)
        for xs in itertools.combinations(range(m + n), m):  # ranks of the x's among all values
            counts[sum(rank - i for i, rank in enumerate(xs))] += 1  # each x beats the y's below it
        np.testing.assert_array_equal(stats._mann_whitney_counts(m, n), counts)
    # P(U <= 0) = 1/70 at 4 and 4; 1/20 > 2.5% at 3 and 3; at 5 and 5 P(U <= 2) = 4/252, P(U <= 3) = 7/252.
    assert [stats.mann_whitney_rank(*mn) for mn in ((3, 3), (4, 4), (5, 5))] == [0, 1, 3]
    # x = 3..7, y = 0..4: the 25 differences 3 + i - j run from -1 (once) through 0 (twice), median 3.
    assert stats.difference(np.arange(5.0) + 3, np.arange(5.0), paired=False) == stats.Interval(3.0, 0.0, 6.0)


def test_what_the_issue_asked_of_degenerate_inputs():
    zeros = np.zeros
    # Four equal nonzero differences are not decided (an exact sign test gives p = 0.125).
    four = judge.comparison(dict(minimum=np.full(4, 5.0)), dict(minimum=zeros(4)), ("minimum",))
    assert four["verdict"] == stats.TOO_FEW
    # Nine of +5 and one of 0 over ten seeds are: [d_(2), d_(9)] = [5, 5].
    nine = judge.comparison(dict(minimum=np.r_[np.full(9, 5.0), 0.0]), dict(minimum=zeros(10)), ("minimum",))
    assert nine["verdict"] == stats.AHEAD and nine["minimum"] == stats.Interval(5.0, 5.0, 5.0)
    assert (nine["higher"], nine["lower"], nine["equal"]) == (9, 0, 1)
    # [1, 1, 1, 1] and [1, 1, 2, 2] read alike: too few seeds; ten of +5 is ahead like nine and a 0.
    for d in ([1.0] * 4, [1.0, 1.0, 2.0, 2.0]):
        assert judge.comparison(dict(minimum=np.array(d)), dict(minimum=zeros(4)), ("minimum",))["verdict"] == stats.TOO_FEW
    assert judge.comparison(dict(minimum=np.full(10, 5.0)), dict(minimum=zeros(10)), ("minimum",))["verdict"] == stats.AHEAD
    # One seed is reported as too few seeds, not refused.
    one = judge.comparison(dict(minimum=np.array([3.0])), dict(minimum=np.array([1.0])), ("minimum",), value_range=(0, 10))
    assert one["verdict"] == stats.TOO_FEW and one["minimum"] == stats.Interval(2.0, -10.0, 10.0)


def test_moving_a_seed_further_from_zero_never_undoes_a_verdict():
    # A win moved up stays a win, a loss moved down stays a loss, and a tie moved up becomes a win: the
    # count of wins never falls and of losses never rises, so 'ahead' stays ahead and, mirrored, 'behind'
    # behind.
    rng = np.random.default_rng(14)
    checked = 0

    def word(d):  # the comparison's verdict (its test, checked against judge.comparison above)
        return stats.verdict(*stats.sign_test((d > 0).sum(), (d < 0).sum()))

    for d in np.round(rng.normal(size=(400, 10)) + 1.2, 1):
        if word(d) != stats.AHEAD:
            continue
        for i in range(10):
            for step in (0.1, 100.0):
                moved = d.copy()
                moved[i] += step if d[i] >= 0 else -step
                assert word(moved) == stats.AHEAD and word(-moved) == stats.BEHIND
        checked += 1
    assert checked > 50


def test_a_row_and_its_table_ask_one_question_ties_set_aside():
    """The issue's two rows: 10 wins, 0 losses and 10 ties at CartPole's cap are ahead (P = 1/1024, as
    the whole-table test says of the same signs); 7 wins, 1 loss, 12 ties are not (P(Binomial(8, 1/2) >=
    7) = 9/256 = 3.5% > 2.5%), and however many ties join 10 wins and no loss, the row stays ahead."""
    def line(wins, losses, ties):
        robust = np.r_[np.full(wins, 500.0), np.full(losses, 300.0), np.full(ties, 500.0)]
        baseline = np.r_[np.full(wins, 300.0), np.full(losses, 500.0), np.full(ties, 500.0)]
        return judge.comparison(dict(minimum=robust), dict(minimum=baseline), ("minimum",), value_range=(0, 500),
                                margin=22.6)

    ten = line(10, 0, 10)
    assert (ten["verdict"], ten["higher"], ten["lower"], ten["equal"]) == (stats.AHEAD, 10, 0, 10)
    assert ten["win_share"] == stats.Interval(1.0, pytest.approx(0.025 ** 0.1), 1.0)  # Clopper-Pearson: 0.025^(1/10)
    assert stats.pooled_signs([ten["differences"]])["verdict"] == stats.AHEAD
    assert line(10, 0, 90)["verdict"] == stats.AHEAD
    seven = line(7, 1, 12)
    # No direction, and not equivalent: the untied seeds' median is +200, its 90% interval [d_(2), d_(7)] of
    # the 8 untied differences [200, 200], far outside the margin (ties set aside, as the direction test does).
    assert seven["verdict"] == stats.INCONCLUSIVE and seven["equivalence"] == stats.Interval(200.0, 200.0, 200.0)
    assert stats.pooled_signs([seven["differences"]])["verdict"] == stats.INCONCLUSIVE
    assert scipy.stats.binomtest(7, 8, alternative="greater").pvalue == pytest.approx(9 / 256)
    assert line(7, 0, 12)["verdict"] == stats.AHEAD  # 1/128
    # A direction whose typical size is inside the margin says both.
    small = judge.comparison(dict(minimum=np.r_[np.full(8, 1.0), np.zeros(4)]), dict(minimum=np.zeros(12)),
                             ("minimum",), margin=22.6)
    assert (small["verdict"], small["within_margin"]) == (stats.AHEAD, True)
    assert cells.verdict_cell(small["verdict"], 12, small["within_margin"]) == "**ahead**, within the margin"


def test_a_row_that_never_loses_is_never_equivalent_and_reads_as_its_table():
    """Issue 84's row: 5 wins of +100 and 15 ties at CartPole's cap. Counted as differences of 0 the ties
    pulled the median's interval inside the margin (+-22.6) and the row read *equivalent* where the whole
    table read it undecided; with ties set aside for both words the row reads what its table reads."""
    robust = np.r_[np.full(5, 500.0), np.full(15, 500.0)]
    baseline = np.r_[np.full(5, 400.0), np.full(15, 500.0)]
    line = judge.comparison(dict(minimum=robust), dict(minimum=baseline), ("minimum",), value_range=(0, 500),
                            margin=22.6)
    table = stats.pooled_signs([line["differences"]])
    assert (line["higher"], line["lower"], line["equal"]) == (5, 0, 15)
    assert line["verdict"] == table["verdict"] == stats.INCONCLUSIVE
    # Fewer than MIN_SEEDS untied seeds: no direction could be found, so none is ruled out.
    assert line["equivalence"] == stats.Interval(100.0, -500.0, 500.0)  # (-inf, +inf) cut to CartPole's range
    # Every count of ties at 20 seeds, every untied seed a win of any size: never equivalent, and the row's
    # word is the table's.
    for ties in range(21):
        for size in (0.5, 100.0):
            d = np.r_[np.full(20 - ties, size), np.zeros(ties)]
            word = judge.comparison(dict(minimum=d), dict(minimum=np.zeros(20)), ("minimum",), margin=22.6)["verdict"]
            assert word != stats.EQUIVALENT and word == stats.pooled_signs([d])["verdict"], (ties, size)


def test_equivalent_refines_only_what_the_table_leaves_undecided():
    """On a one-row table the row's direction word is the table's; 'equivalent' is said only where the
    table reads inconclusive and at least MIN_SEEDS seeds are untied, and only where the untied seeds'
    median interval at 90% lies inside the margin (checked against a direct computation)."""
    rng = np.random.default_rng(84)
    said = 0
    for _ in range(400):
        n = int(rng.integers(1, 26))
        d = rng.choice([-3.0, -1.0, 0.0, 0.0, 1.0, 2.0, 30.0], size=n)
        line = judge.comparison(dict(minimum=d), dict(minimum=np.zeros(n)), ("minimum",), margin=2.5)
        table = stats.pooled_signs([d])["verdict"]
        untied = np.sort(d[d != 0])
        m = untied.size
        if line["verdict"] == stats.EQUIVALENT:
            said += 1
            k = stats.order_rank(m, stats.EQUIVALENCE_CONFIDENCE)
            assert table == stats.INCONCLUSIVE and m >= stats.MIN_SEEDS
            assert -2.5 < untied[k - 1] and untied[m - k] < 2.5
        else:
            assert line["verdict"] == table
    assert said > 20


def test_the_equivalence_level_is_exact_given_the_ties():
    # m untied seeds, k = order_rank(m, 90%): P(Binomial(m, 1/2) <= k - 1); nothing below MIN_SEEDS untied.
    assert [stats.equivalence_level_given(m) for m in range(6)] == [0.0] * 6
    assert stats.equivalence_level_given(6) == pytest.approx(1 / 64)  # k = 1
    assert stats.equivalence_level_given(7) == pytest.approx(1 / 128)  # k = 1: 8/128 > 5%
    assert stats.equivalence_level_given(8) == pytest.approx(9 / 256)  # k = 2
    # Over every number of ties: the largest, which is not monotone in the count.
    assert stats.equivalence_level(7) == pytest.approx(1 / 64) and stats.equivalence_level(20) == pytest.approx(
        max(stats.equivalence_level_given(m) for m in range(21)))
    for n in range(1, 30):
        assert stats.equivalence_level(n) >= stats.equivalence_level_given(n)


def test_bad_counts_and_missing_metrics_are_refused_by_name():
    with pytest.raises(ValueError, match="higher must be a count of units"):
        stats.sign_test(-1, 3)
    with pytest.raises(ValueError, match="lower must be a count of units"):
        stats.sign_test(3, 1.5)
    with pytest.raises(ValueError, match="higher must be a count of units"):
        stats.win_share(np.array([2, -1]), np.array([1, 1]))
    assert stats.sign_test(np.array([6.0]), np.array([0.0]))[0].item()
    with pytest.raises(ValueError, match=r"baseline has no per-seed values for metric\(s\) \['average'\]"):
        judge.comparison(dict(minimum=np.ones(6), average=np.ones(6)), dict(minimum=np.zeros(6)),
                         ("minimum", "average"))
    with pytest.raises(ValueError, match=r"robust has no per-seed values for metric\(s\) \['minimum'\]"):
        judge.comparison(dict(average=np.ones(6)), dict(minimum=np.zeros(6)), ("average",))


def test_the_levels_quoted_are_computed_from_the_binomial():
    # The rule's largest false rate over every tie count: 2 P(Binomial(m, 1/2) >= c(m)) at the worst m <= n.
    assert stats.sign_level(5) == 0.0 and stats.sign_level(6) == pytest.approx(2 / 64)
    # At 10 seeds the worst is one tie: 8 or more wins of 9 untied (10/512 each way), more than 9 of 10 (11/1024).
    assert stats.sign_level(10) == pytest.approx(2 * 10 / 512)
    for n in range(1, 40):
        critical = next((w for w in range(n + 1) if scipy.stats.binom.sf(w - 1, n, 0.5) <= 0.025), None)
        assert stats.critical_wins(n) == critical
        worst = max([2 * scipy.stats.binom.sf(stats.critical_wins(m) - 1, m, 0.5) for m in range(1, n + 1)
                     if stats.critical_wins(m) is not None] or [0.0])
        assert stats.sign_level(n) == pytest.approx(worst, abs=1e-15) and stats.sign_level(n) <= 0.05
    # "Equivalent" at a typical untied difference exactly on the margin, the largest over the untied counts
    # m <= n that ties leave (none below MIN_SEEDS): 3.5% at 8-12 seeds, 4.6% at 13-17, 4.8% from 18.
    assert [round(stats.equivalence_level(n), 3) for n in (8, 12, 13, 17, 18, 25)] == [
        0.035, 0.035, 0.046, 0.046, 0.048, 0.048]
    for n in range(1, 40):
        assert stats.equivalence_level(n) == max([scipy.stats.binom.cdf(stats.order_rank(m, 0.9) - 1, m, 0.5)
                                                  for m in range(stats.MIN_SEEDS, n + 1)] or [0.0])


def test_equivalent_where_the_ninety_percent_interval_lies_inside_the_margin():
    # Seven seeds, one tied: of the 6 untied the 90% order-statistic interval is [smallest, largest] = [-1, 2]
    # around their median 1 (the tie is set aside, as the direction test sets it aside); 5 wins of 6 decide no
    # direction.
    robust, baseline = dict(minimum=np.array([1.0, 2.0, -1.0, 0.0, 1.0, 0.5, 1.0])), dict(minimum=np.zeros(7))
    inside = judge.comparison(robust, baseline, ("minimum",), margin=3.0)
    assert inside["equivalence"] == stats.Interval(1.0, -1.0, 2.0) and inside["verdict"] == stats.EQUIVALENT
    assert inside["seeds_for_power"] is None and cells.seeds_cell(inside) == "—"
    on_the_margin = judge.comparison(robust, baseline, ("minimum",), margin=2.0)  # 2 is not inside (-2, 2)
    assert on_the_margin["verdict"] == stats.INCONCLUSIVE
    assert judge.comparison(robust, baseline, ("minimum",))["verdict"] == stats.INCONCLUSIVE  # no margin
    # The other end: an interval that touches -margin is not inside either; a hair more margin is.
    mirrored = dict(minimum=-robust["minimum"])  # [-2, 1]
    assert judge.comparison(mirrored, baseline, ("minimum",), margin=2.0)["verdict"] == stats.INCONCLUSIVE
    assert judge.comparison(mirrored, baseline, ("minimum",), margin=2.0 + 1e-9)["verdict"] == stats.EQUIVALENT
    # Five untied seeds decide no direction, so they rule none out: too few seeds for either word.
    five = dict(minimum=robust["minimum"][[0, 1, 2, 4, 5]])
    assert judge.comparison(five, dict(minimum=np.zeros(5)), ("minimum",), margin=3.0)["verdict"] == stats.TOO_FEW
    for margin in (float("nan"), 0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="margin must be a finite number > 0"):
            judge.comparison(robust, baseline, ("minimum",), margin=margin)


def test_the_rules_power_is_exact():
    # Against every outcome of 6 seeds enumerated: a win with P 0.56 (0.7 of the untied 80%), a tie with 0.2.
    higher, tie, n = 0.7, 0.2, 6
    enumerated = sum(np.prod([{1: (1 - tie) * higher, -1: (1 - tie) * (1 - higher), 0: tie}[s] for s in signs])
                     for signs in itertools.product((1, -1, 0), repeat=n)
                     if stats.sign_test(signs.count(1), signs.count(-1))[0])
    assert power.rule_power(n, higher, tie) == pytest.approx(enumerated, abs=1e-12)
    assert power.sign_power(10, 0.9) == pytest.approx(scipy.stats.binom.sf(8, 10, 0.9))  # 9 or more wins of 10
    grid = power.rule_power(12, np.array([0.6, 0.9]), np.array([0.0, 0.5]))
    assert grid.shape == (2, 2) and grid[0, 1] == pytest.approx(power.rule_power(12, 0.9, 0.0))


def test_seeds_for_power_plans_with_ties_and_says_what_it_delivers():
    # The planned count is the fewest whose expected power reaches the target, the expectation over what
    # the pilot says of P(higher) and of the tie rate.
    for wins, losses, ties in ((4, 1, 0), (2, 0, 0), (7, 1, 12), (6, 2, 2)):
        n = power.planned_seeds(wins, losses, ties)
        assert power.expected_power(n, wins, losses, ties) >= power.POWER > power.expected_power(n - 1, wins, losses, ties)
    # Ties make a plan longer: the same signs among more tied seeds need more seeds.
    assert power.planned_seeds(6, 2, 12) > power.planned_seeds(6, 2, 2)
    assert power.seeds_for_power([1.0, -1.0, 2.0, -2.0], np.zeros(4)) is None  # no direction
    assert power.seeds_for_power(np.zeros(4), [5.0, 6.0, 7.0, 8.0]) == power.seeds_for_power([5.0, 6.0, 7.0, 8.0], np.zeros(4))
    # 3 wins, 2 losses among 15 ties: no count up to the limit is expected to decide 80% of the time.
    split = judge.comparison(dict(minimum=np.r_[np.ones(3), -np.ones(2), np.zeros(15)]), dict(minimum=np.zeros(20)),
                             ("minimum",))
    assert split["seeds_for_power"] is None and cells.seeds_cell(split) == f"more than {power.PLAN_LIMIT:,}"
    with pytest.raises(ValueError, match="paired values need one per seed on both sides, got 3 and 2"):
        power.seeds_for_power([1.0, 2.0, 3.0], [1.0, 2.0])
    # What it delivers, exactly, from 5 pilots of P(higher) 0.8 without ties: the count is planned for
    # most pilots, and the power at it is about the target.
    delivered = power.planned_power(5, 0.8)
    assert delivered["planned"] > 0.5 and delivered["power"] > 0.7


def test_the_whole_table_is_the_sign_test_over_its_units():
    rows = [np.array([1.0, 2.0, -1.0, 0.0, 3.0]), np.array([4.0, 1.0, 1.0, 2.0, -5.0])]  # 7 higher, 2 lower, 1 equal
    pooled = stats.pooled_signs(rows)  # two tasks: ten units
    assert (pooled["units"], pooled["higher"], pooled["lower"], pooled["even"]) == (10, 7, 2, 1)
    assert pooled["verdict"] == stats.INCONCLUSIVE  # 7 wins of 9: P(Binomial(9, 1/2) >= 7) = 9.0%
    interval = scipy.stats.binomtest(7, 9).proportion_ci(0.95, method="exact")
    share = pooled["win_share"]
    assert (share.estimate, share.low, share.high) == pytest.approx((7 / 9, interval.low, interval.high))
    # One task's two rows: one unit per seed, the mean of the seed's two signs (+1, +1, 0, +0.5, 0).
    same_task = stats.pooled_signs(rows, groups=["CartPole-v1", "CartPole-v1"])
    assert (same_task["units"], same_task["higher"], same_task["lower"], same_task["even"]) == (5, 3, 0, 2)
    assert same_task["verdict"] == stats.TOO_FEW  # 5 units
    with pytest.raises(ValueError, match="rows of group 'a' need one value per seed each"):
        stats.pooled_signs([np.ones(5), np.ones(4)], groups=["a", "a"])
    # A task whose rows hold different seeds (one with confirmatory seeds 8-11, one with 3-5 only):
    # units are (task, seed index), each valued over the rows that hold that seed.
    keyed = stats.pooled_signs([np.array([1.0, -2.0, 0.0, 3.0]), np.array([-1.0, 2.0, 5.0])],
                               groups=["a", "a"], seeds=[[8, 9, 10, 11], [3, 4, 9]])
    assert (keyed["units"], keyed["groups"], keyed["higher"], keyed["lower"], keyed["even"]) == (6, 1, 3, 1, 2)
    with pytest.raises(ValueError, match="row 1 needs one distinct seed index per value"):
        stats.pooled_signs([np.ones(2), np.ones(2)], groups=["a", "a"], seeds=[[0, 1], [0, 0]])
    # Lists that do not match the rows are refused, not cut to fit.
    with pytest.raises(ValueError, match="groups must name one group per row: 2 rows, 1 groups"):
        stats.pooled_signs([np.ones(6), -np.ones(6)], groups=["a"])
    with pytest.raises(ValueError, match="seeds must name each row's seeds: 2 rows, 1 seed lists"):
        stats.pooled_signs([np.ones(2), np.ones(2)], groups=["a", "a"], seeds=[[0, 1]])
    with pytest.raises(ValueError, match="at least one row of differences, got none"):
        stats.pooled_signs([])
    # Seven wins and no loss over twelve units decide (1/128 <= 2.5%) however many are even.
    seven = stats.pooled_signs([np.r_[np.ones(7), np.zeros(5)]])
    assert (seven["verdict"], seven["even"]) == (stats.AHEAD, 5)
    # Against scipy's exact test on the units that are not even, on random tables.
    rng = np.random.default_rng(15)
    for _ in range(40):
        table = [np.round(rng.normal(size=5) + 0.6) for _ in range(8)]
        signs = np.sign(np.concatenate(table))
        wins, losses = int((signs > 0).sum()), int((signs < 0).sum())
        ahead = scipy.stats.binomtest(wins, wins + losses, alternative="greater").pvalue <= 0.025
        assert (stats.pooled_signs(table)["verdict"] == stats.AHEAD) == ahead


def _expected_power_by_hand(n, wins, losses, ties):
    """The rule's power at n seeds averaged over the plan's prior point by point: P(higher) of the pilot's
    majority on PLAN_HIGHER or 1 - PLAN_HIGHER, ties on PLAN_TIES, each weighted by the pilot's likelihood."""
    major, minor = max(wins, losses), min(wins, losses)
    total = weights = 0.0
    for higher in (*power.PLAN_HIGHER, *(1 - h for h in power.PLAN_HIGHER)):
        for tie in power.PLAN_TIES:
            weight = higher ** major * (1 - higher) ** minor * (1 - tie) ** (major + minor) * tie ** ties
            total, weights = total + weight * power.rule_power(n, higher, tie), weights + weight
    return total / weights


def test_a_seed_plan_is_the_rules_power_over_its_prior_by_hand():
    """`expected_power` is the docstring's average summed by hand; a plan is the fewest seeds from MIN_SEEDS
    whose expected power reaches POWER (pinned: 4 wins and 1 loss plan 72 seeds), none beyond `limit` and
    none for a pilot without a direction; unpaired pilots plan from P(X > Y) as min(m, n) untied signs."""
    for n, wins, losses, ties in ((12, 5, 2, 3), (30, 1, 4, 0), (8, 3, 3, 2), (20, 6, 0, 1)):
        assert power.expected_power(n, wins, losses, ties) == pytest.approx(_expected_power_by_hand(n, wins, losses, ties),
                                                                           rel=1e-9, abs=1e-12)
    assert power.planned_seeds(4, 1, 0) == 72 and power.planned_seeds(1, 4, 0) == 72
    assert power.planned_seeds(4, 1, 0, limit=72) == 72 and power.planned_seeds(4, 1, 0, limit=71) is None
    assert power.planned_seeds(3, 3, 0) is None
    # 5, 6, 7 against 1, 2, 3, 6.5: X is higher in 10 of 12 pairs, read as 2.5 wins and 0.5 losses of 3.
    n = power.seeds_for_power([5.0, 6.0, 7.0], [1.0, 2.0, 3.0, 6.5], paired=False)
    assert _expected_power_by_hand(n, 2.5, 0.5, 0) >= power.POWER > _expected_power_by_hand(n - 1, 2.5, 0.5, 0)
    assert power.sign_power(10, 0.9) == power.rule_power(10, 0.9, 0.0)


def test_a_paired_pilot_plans_from_its_signs_and_a_target_met_exactly_is_reached():
    """Paired pilot seeds plan from the signs of x - y: how many are higher, lower and equal. A plan is the
    fewest seeds whose expected power reaches (>=) the target: a target equal to the expected power at n
    seeds plans n, whether n is met while the search doubles, while it bisects, or at the limit."""
    x, y = np.array([2.0, 2.0, 2.0, 2.0, 0.0, 1.0, 1.0]), np.ones(7)  # 4 higher, 1 lower, 2 equal
    assert power.seeds_for_power(x, y) == power.planned_seeds(4, 1, 2) == 97
    pilot = (6, 2, 2)  # its expected power rises with every seed from MIN_SEEDS to beyond 85 (checked below)
    expected = [power.expected_power(n, *pilot) for n in range(stats.MIN_SEEDS, 90)]
    assert np.all(np.diff(expected) > 0)
    for n in (stats.MIN_SEEDS, 4 * stats.MIN_SEEDS, 8 * stats.MIN_SEEDS, 85):  # 24 and 48: the doubling's brackets
        assert power.planned_seeds(*pilot, power=power.expected_power(n, *pilot)) == n
    assert power.planned_seeds(*pilot, power=power.expected_power(85, *pilot), limit=85) == 85
    assert power.planned_seeds(*pilot, power=0.0) == stats.MIN_SEEDS  # never fewer: the rule cannot decide below
    # 8 wins of 8: 20 seeds, the first count whose expected power reaches 80% (it dips at the binomial's
    # steps, so a coarser bracket can land on a later crossing: 23).
    assert power.planned_seeds(8, 0, 0) == 20
    assert max(power.expected_power(n, 8, 0, 0) for n in range(stats.MIN_SEEDS, 20)) < power.POWER
    # However long the pilot, the expected power is an average of the rule's power over the prior: 1000
    # wins and 500 losses weigh P(higher) 0.65 and 0.7 (about 2/3) and little else.
    long_pilot = power.expected_power(40, 1000, 500, 0)
    assert power.rule_power(40, 0.65) <= long_pilot <= power.rule_power(40, 0.7)


def test_t_test_power_against_the_published_counts():
    # The paired t test at 5% two-sided needs 10 pairs for 80% power at effect size 1 (power 0.803)
    # and 34 at 0.5 (0.808) (Cohen 1988; G*Power): the yardstick the rule's own power is read against.
    assert power.t_test_power(10, 1.0) == pytest.approx(0.803, abs=5e-4)
    assert power.t_test_power(34, 0.5) == pytest.approx(0.808, abs=5e-4)
    assert power.sign_power(10, scipy.stats.norm.cdf(1.0)) < power.t_test_power(10, 1.0)


def test_the_quoted_measurements_are_the_studys():
    # The rule's levels are computed (sign_level, equivalence_level); benchmarks/studies/verdict_coverage.py checks
    # them on simulated nulls and measures what no formula gives: what a seed plan delivers
    # (PLAN_DELIVERY), a rule for the mean's false rate and the across-rows IQM's level.
    result = harness.read(harness.default_out("studies.verdict_coverage"))
    parts = harness.rows_by(result, "part")  # a row per part of the study, holding its records
    sign = parts["sign"]["sign"]
    assert (sign["settings"]["rule"], sign["settings"]["min_seeds"], sign["settings"]["confidence"]) == (
        stats.RULE, stats.MIN_SEEDS, stats.CONFIDENCE)
    for kind, by_seeds in sign["null"].items():  # within Monte Carlo error of the computed bound, on every null
        for n, cell in by_seeds.items():
            assert cell["bound"] == pytest.approx(stats.sign_level(int(n)), abs=1e-12)
            assert cell["rate"] <= cell["bound"] + 3 * cell["se"] + 1e-12, (kind, n, cell)
    for name, by_seeds in sign["equivalence"].items():
        for n, cell in by_seeds.items():
            assert cell["computed"] == pytest.approx(stats.equivalence_level(int(n)), abs=1e-12)
            assert cell["rate"] <= cell["computed"] + 3 * np.sqrt(0.05 * 0.95 / sign["settings"]["datasets"]), (name, n)
    # Issue 84's kinds: ties at both ends of the margin, and untied seeds that are all wins (never equivalent).
    assert {"normal around +margin", "normal around -margin", "60% ties, untied around -margin"} <= set(sign["equivalence"])
    assert all(cell["rate"] == 0.0 for cell in sign["equivalence"]["75% ties, untied all wins of 0.5"].values())
    for shape, by_kind in sign["whole_table"].items():
        if "not grouped" not in shape:  # the tables group a task's rows
            assert max(c["rate"] for c in by_kind.values()) <= 0.05 + 3 * max(c["se"] for c in by_kind.values()), shape
    plan = sign["plan"]
    assert tuple(sign["settings"]["plan_pilots"]) == power.PLAN_PILOTS
    assert (tuple(sign["settings"]["plan_higher"]), tuple(sign["settings"]["plan_ties"])) == (power.PLAN_HIGHER, power.PLAN_TIES)
    assert {k: power.PLAN_DELIVERY[k] for k in ("mean", "smallest")} == pytest.approx(
        dict(mean=plan["mean"], smallest=plan["smallest"]), abs=5e-4)
    assert power.PLAN_DELIVERY["by_higher"] == pytest.approx({float(h): v for h, v in plan["by_higher"].items()}, abs=5e-4)
    # The plan delivers what it promises on the grid it assumes, from every pilot count (about: the prior is
    # the grid's ranges, the grid a few points of them).
    assert all(v["power"] >= power.POWER - 0.03 for v in plan["by_pilots"].values()), plan["by_pilots"]
    rule = parts["rule"]["rule"]
    mean_zero = ("normal", "collapsing", "capped", "three values", "one size", "committed, random signs",
                 "equal means, collapsing baseline")  # where the mean's hull's estimand, the mean, is 0
    assert stats.MEAN_RULE_FALSE_RATE == pytest.approx(max(
        rule["null"][kind][n]["hull"]["rate"] for kind in mean_zero for n in rule["null"][kind]), abs=5e-4)
    # The across-rows IQM's level: the first study's smallest nominal level within 2 standard errors of 5%.
    study = parts["aggregate"]
    cases = [case[model] for case in study["aggregate"] for model in ("normal", "resampled")]
    assert aggregate.MEASURED["aggregate_false_rate"] == pytest.approx(max(a["verdict_given"]["rate"] for a in cases), abs=5e-4)
    assert aggregate.MEASURED["aggregate_nominal_false_rate"] == pytest.approx(
        max(a["iqm_difference_excludes_0"]["0.95"]["rate"] for a in cases), abs=5e-4)
    shapes = {(case["rows"], max(case["seeds"])) for case in study["aggregate"]}
    assert aggregate.MEASURED["aggregate_shapes"] == " and ".join(
        f"{rows} rows x {seeds}" + (" seeds" if i == 0 else "") for i, (rows, seeds) in enumerate(sorted(shapes, reverse=True)))
    assert aggregate.MEASURED["improvement_excludes_half"] == pytest.approx(
        max(a["probability_of_improvement_excludes_half"]["rate"] for a in cases), abs=5e-4)
    calibration = study["aggregate_calibration"]
    assert result["settings"]["first_study"]["aggregate_confidence"] == aggregate.AGGREGATE_CONFIDENCE
    assert calibration[f"{aggregate.AGGREGATE_CONFIDENCE:g}"]["holds_5pct"]
    assert not any(v["holds_5pct"] for level, v in calibration.items() if float(level) < aggregate.AGGREGATE_CONFIDENCE)


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


def test_comparison_is_the_tables_reading_of_each_metric():
    # The Minimum decides; every metric gets its own interval, mean difference and probability of improvement.
    robust = dict(minimum=np.array([4.0, 5.0, 6.0, 5.0, 5.0, 7.0]), average=np.array([1.0, 3.0, 2.0, 2.0, 2.0, 4.0]))
    baseline = dict(minimum=np.zeros(6), average=np.full(6, 2.0))
    line = judge.comparison(robust, baseline, ("minimum", "average"), value_range=(0.0, 10.0))
    for metric in ("minimum", "average"):
        assert line[metric] == stats.difference(robust[metric], baseline[metric], value_range=(0.0, 10.0))
        assert line[f"{metric}_mean"] == pytest.approx(np.mean(robust[metric] - baseline[metric]))
        assert line[f"{metric}_improvement"] == stats.probability_of_improvement(robust[metric], baseline[metric])
    assert line["minimum"] == stats.Interval(5.0, 4.0, 7.0)  # 6 seeds: the smallest and largest
    assert (line["seeds"], line["verdict"], line["seeds_for_power"]) == (6, stats.AHEAD, None)  # decided
    assert line["average"] == stats.Interval(0.0, -1.0, 2.0)
    undecided = judge.comparison(dict(minimum=np.array([1.0, -1.0, 2.0, 0.0, 3.0, 4.0])),
                                 dict(minimum=np.zeros(6)), ("minimum",))
    assert undecided["verdict"] == stats.INCONCLUSIVE
    assert undecided["seeds_for_power"] == power.seeds_for_power([1.0, -1.0, 2.0, 0.0, 3.0, 4.0], np.zeros(6))
    # Unpaired (`fedjax-rl compare` on runs with other seed keys): the Hodges-Lehmann reading, judged
    # where the Mann-Whitney interval exists (5 against 4: P(U = 0) = 1/126).
    x, y = dict(minimum=np.array([3.0, 5.0, 4.0, 6.0, 2.0])), dict(minimum=np.array([1.0, 2.0, 0.0, 1.0]))
    unpaired = judge.comparison(x, y, ("minimum",), paired=False)
    assert unpaired["minimum"] == stats.difference(x["minimum"], y["minimum"], paired=False)
    assert unpaired["seeds"] == 4 and stats.decidable(5, 4)
    assert unpaired["verdict"] == stats.verdict(unpaired["minimum"].low > 0, unpaired["minimum"].high < 0, True)
    with pytest.raises(ValueError, match=r"robust minimum must be one dataset of per-seed values \(1-d\)"):
        judge.comparison(dict(minimum=np.ones((2, 6))), dict(minimum=np.zeros((2, 6))), ("minimum",))


def test_value_range_cuts_the_interval_to_what_the_task_allows():
    # CartPole: returns in [0, 500]. Three seeds have no bounded interval: it is cut to +-500, the most
    # the difference can be; a bounded interval inside the range is left as it is.
    robust, baseline = np.array([500.0, 400.0, 450.0]), np.array([480.0, 500.0, 400.0])
    assert stats.difference(robust, baseline, value_range=(0.0, 500.0)) == stats.Interval(20.0, -500.0, 500.0)
    d = np.arange(1.0, 7.0)
    assert stats.difference(d + 10, np.full(6, 10.0), value_range=(0, 20)) == stats.Interval(3.5, 1.0, 6.0)
    with pytest.raises(ValueError, match=r"x holds \[501.0\] outside value_range \[0.0, 500.0\]"):
        stats.difference(np.array([501.0, 3.0]), np.zeros(2), value_range=(0.0, 500.0))
    with pytest.raises(ValueError, match="finite low < high"):
        stats.difference(d, d, value_range=(1.0, 1.0))


def test_iqm_by_hand_and_against_scipy():
    # 8 numbers, sorted -50, 1, 2, 3, 4, 5, 6, 100: drop two at each end, average 2, 3, 4, 5.
    assert aggregate.iqm([100.0, 3.0, 1.0, 6.0, 2.0, 5.0, 4.0, -50.0]) == 3.5
    rng = np.random.default_rng(2)
    for n in range(1, 14):
        values = rng.normal(size=n)
        assert aggregate.iqm(values) == pytest.approx(scipy.stats.trim_mean(values, 0.25), abs=1e-12)
    batch = rng.normal(size=(3, 9))
    np.testing.assert_allclose(aggregate.iqm(batch), scipy.stats.trim_mean(batch, 0.25, axis=1), atol=1e-12)


def test_stratified_iqm_resamples_within_rows_and_keeps_pairs():
    # Rows whose seeds agree: a stratified resample always draws 2 scores of each row, so the IQM
    # never moves; a bootstrap that pooled the rows' scores would draw 0 to 4 of a row.
    baseline = [np.array([1.0, 1.0]), np.array([3.0, 3.0])]
    robust = [np.array([2.0, 2.0]), np.array([5.0, 5.0])]
    agg = aggregate.stratified_iqm(baseline, robust)
    assert agg.baseline == stats.Interval(2.0, 2.0, 2.0)  # IQM of (1, 1, 3, 3): mean of (1, 3)
    assert agg.robust == stats.Interval(3.5, 3.5, 3.5)
    assert agg.difference == stats.Interval(1.5, 1.5, 1.5)
    assert agg.probability_of_improvement == stats.Interval(1.0, 1.0, 1.0)
    assert (agg.num_rows, agg.min_seeds) == (2, 2)

    # Robust = baseline + 1 seed by seed: the IQM shifts by exactly 1 in every resample if (and only
    # if) both algorithms get the same draw.
    rng = np.random.default_rng(3)
    baseline = [rng.normal(size=5) * 10 for _ in range(4)]
    agg = aggregate.stratified_iqm(baseline, [b + 1 for b in baseline])
    assert (agg.difference.low, agg.difference.high) == pytest.approx((1.0, 1.0), abs=1e-9)
    assert agg.baseline.low < agg.baseline.estimate < agg.baseline.high


def test_the_across_rows_difference_is_read_at_its_calibrated_level():
    rng = np.random.default_rng(8)
    baseline = [rng.normal(size=5) for _ in range(8)]
    robust = [b + rng.normal(size=5) for b in baseline]
    agg = aggregate.stratified_iqm(baseline, robust)
    samples = aggregate.stratified_samples(baseline, robust)
    assert (agg.difference.low, agg.difference.high) == aggregate.percentile_interval(
        samples["difference"][1], aggregate.AGGREGATE_CONFIDENCE)
    assert (agg.baseline.low, agg.baseline.high) == aggregate.percentile_interval(samples["baseline"][1], stats.CONFIDENCE)
    nominal = aggregate.percentile_interval(samples["difference"][1], stats.CONFIDENCE)
    assert agg.difference.low <= nominal[0] and agg.difference.high >= nominal[1]


def test_seeded_and_reproducible():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=5), rng.normal(size=5)
    assert stats.difference(x, y) == stats.difference(x, y)
    rows = [rng.normal(size=5) for _ in range(3)]
    assert aggregate.stratified_iqm(rows, rows[::-1]) == aggregate.stratified_iqm(rows, rows[::-1])


def test_quantile_is_numpys_inverted_cdf():
    rng = np.random.default_rng(9)
    samples = rng.normal(size=(4, 997))
    for q in (0.0, 0.005, 0.025, 0.5, 0.975, 1.0):
        np.testing.assert_array_equal(aggregate.quantile(samples, q), np.quantile(samples, q, axis=-1, method="inverted_cdf"))


def test_normalise_by_hand():
    # MountainCar-like: random -200, reference -100: -150 is halfway, -100 is 1, -250 is -0.5.
    np.testing.assert_allclose(aggregate.normalise([-150.0, -100.0, -250.0], -200.0, -100.0), [0.5, 1.0, -0.5])
    with pytest.raises(ValueError, match=r"reference return \(-200.0\) must exceed the random-policy return"):
        aggregate.normalise([1.0], -200.0, -200.0)


@pytest.mark.parametrize("call,message", [
    (lambda: stats.difference([1.0], [1.0], confidence=1.5), r"confidence must be in \(0, 1\), got 1.5"),
    (lambda: mean_intervals.difference([1.0, 2.0], [1.0, 2.0], reps=0), r"reps \(bootstrap resamples\) must be an integer >= 1, got 0"),
    (lambda: aggregate.stratified_iqm([[1.0]], [[1.0]], reps=0), r"reps \(bootstrap resamples\) must be an integer >= 1, got 0"),
    (lambda: mean_intervals.difference([1.0, 2.0], [1.0, 2.0], method="wild"), r"method must be one of median, t, percentile, bca"),
    (lambda: stats.difference([], [1.0], paired=False), r"x must hold at least 1 per-seed value"),
    (lambda: mean_intervals.difference([1.0], [1.0], method=mean_intervals.T), r"values must hold at least 2 per-seed value"),
    (lambda: mean_intervals.mean_interval([1.0, 2.0], mean_intervals.MEDIAN), r"'median' is an interval of a median, not of a mean"),
    (lambda: stats.difference([1.0, 2.0], [1.0]), r"paired values need one per seed on both sides, got 2 and 1"),
    (lambda: mean_intervals.difference([1.0, 2.0], [1.0, 3.0], paired=False, method="bca"), r"'bca' is for paired values only"),
    (lambda: stats.difference([np.nan], [1.0]), r"x must be finite"),
    (lambda: aggregate.stratified_iqm([[1.0]], []), r"need the same, non-zero number of rows"),
    (lambda: aggregate.stratified_iqm([[1.0, 2.0]], [[1.0]]), r"one score per seed for both algorithms"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_every_at_most_rounds_up_and_each_legend_quotes_its_own_levels():
    """A figure quoted as "at most" never prints below the value it bounds (issue 84: 3.125% printed as
    3.1%, 4.904% as 4.9%), and each legend prints the levels computed for its own seed counts."""
    assert [cells.at_most(r) for r in (0.03125, 0.049042, 0.03, 0.0, 0.0001, 0.03 + 1e-15)] == [
        "3.2%", "5.0%", "3.0%", "0.0%", "0.1%", "3.0%"]
    from fedjax_rl.analysis import plots
    from fedjax_rl.reproduce import report

    for counts, rule, equivalence in (([6], "3.2%", "1.6%"), ([8, 20], "5.0%", "4.9%"), ([10], "4.0%", "3.6%")):
        legend = report.comparison_legend("FedRDQN", ["CartPole-v1"], counts)
        assert f"ahead or behind in at most {rule} of datasets" in legend, (counts, legend)
        assert f"exactly on the margin in at most {equivalence}" in legend, (counts, legend)
        note = plots.DIFFERENCES_NOTE.format(min_seeds=stats.MIN_SEEDS, power=power.POWER, equivalence_level=0.9,
                                             rule_level=cells.at_most(max(stats.sign_level(n) for n in counts)),
                                             equivalence_rate=cells.at_most(max(stats.equivalence_level(n) for n in counts)),
                                             counts="")
        assert f"in at most {rule} of cases" in note and f"in at most {equivalence} (" in note
    assert "33% at P(higher) 0.6" in report.comparison_legend("FedRDQN", ["CartPole-v1"], [6])
