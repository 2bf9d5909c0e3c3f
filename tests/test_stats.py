"""fedjax_rl.stats against cases worked by hand, against the exact bootstrap distribution (every one of
the n^n equally likely resamples, enumerated in float64), against scipy, and, through the very calls
the tables make, against the false-verdict rate a 95% verdict promises."""

import itertools
import json
import os

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


def studentized(resample, mean):
    """A resample's t statistic (mean* - mean) / (std*(ddof 1) / sqrt(n)); no spread: 0 or ±inf."""
    resample = np.asarray(resample)
    shift, scale = resample.mean() - mean, resample.std(ddof=1) / np.sqrt(resample.size)
    if np.isclose(scale, 0, atol=1e-12):
        return 0.0 if np.isclose(shift, 0, atol=1e-12) else np.copysign(np.inf, shift)
    return shift / scale


def ends(interval):
    return interval.estimate, interval.low, interval.high


def test_the_verdicts_interval_on_four_seeds_by_hand():
    # Per-seed differences (1, 2, 2, 3): mean 2, std (ddof 1) sqrt(2/3), standard error 1/sqrt(6).
    # The tables compute both intervals at nominal 97% (stats.VERDICT_CONFIDENCE).
    # Student t: 2 ∓ t_{0.985, 3} / sqrt(6) = 2 ∓ 3.89605 x 0.40825 = [0.40945, 3.59055].
    # Bootstrap-t, 256 equally likely resamples of the seeds. The smallest t statistics: four copies of
    # 1 have no spread and a moved mean, -inf (1 resample); three 1s and a 2: mean 1.25, std 1/2,
    # t = -0.75 / (1/4) = -3 (4 places for the 2 x 2 seeds holding a 2 = 8 resamples). The CDF steps
    # from 1/256 to 9/256 there, past 1.5% (and past 2.5%), so the 1.5% quantile is -3, and by symmetry
    # the 98.5% one +3: the interval 2 ∓ 3 / sqrt(6) = [0.77526, 3.22474] lies inside Student t's, so
    # the hull is Student t's, and it lies above 0: ahead.
    d = np.array([1.0, 2.0, 2.0, 3.0])
    assert stats.VERDICT_CONFIDENCE == 0.97 and stats.METHOD == stats.T_AND_BOOTSTRAP_T
    half_t = scipy.stats.t.ppf(0.985, 3) / np.sqrt(6)
    assert ends(stats.mean_interval(d, stats.T, 0.97)) == pytest.approx((2.0, 0.40945, 3.59055), abs=1e-5)
    assert ends(stats.mean_interval(d, stats.T, 0.97)) == pytest.approx((2.0, 2 - half_t, 2 + half_t), abs=1e-12)
    for level in (0.95, 0.97):
        assert ends(stats.mean_interval(d, stats.BOOTSTRAP_T, level)) == pytest.approx(
            (2.0, 2 - 3 / np.sqrt(6), 2 + 3 / np.sqrt(6)), abs=1e-12)
    interval = stats.difference(d + 10, np.full(4, 10.0))  # the tables' call
    assert ends(interval) == pytest.approx((2.0, 2 - half_t, 2 + half_t), abs=1e-12)
    assert stats.verdict(interval, 4) == stats.AHEAD
    assert stats.verdict(stats.difference(-d, np.zeros(4)), 4) == stats.BEHIND
    # Why 50,000 resamples land on the exact quantile: 1.5% lies between the CDF steps 1/256 and
    # 9/256, 0.0111 from the nearer, 20 standard errors of a 1.5% quantile at 50,000 resamples.
    for level in (0.95, 0.97):
        (low, high), margin = exact_interval(exact_bootstrap([d], lambda r: studentized(r, 2.0)), level)
        tail = (1 - level) / 2
        assert (low, high) == (-3.0, 3.0) and margin > 14 * np.sqrt(tail * (1 - tail) / stats.REPS)


def test_three_seed_percentile_interval_by_hand():
    # Per-seed differences (-3, 0, 6): mean 1. The 27 resamples give the means -3 (1 way), -2 (3),
    # -1 (3), 0 (1 + 3), 1 (6), 2 (3), 3 (3), 4 (3), 6 (1). CDF: 1, 4, 7, 11, 17, 20, 23, 26, 27 / 27.
    # 80%: the 10% quantile is -2 (4/27 >= 0.1 > 1/27), the 90% quantile 4 (26/27 >= 0.9 > 23/27).
    # 95%: 1/27 > 2.5% and 26/27 < 97.5%, so the interval is the whole range [-3, 6].
    x, y = np.array([7.0, 10.0, 16.0]), np.array([10.0, 10.0, 10.0])
    assert stats.difference(x, y, method=stats.PERCENTILE, confidence=0.8) == stats.Interval(1.0, -2.0, 4.0)
    assert stats.difference(x, y, method=stats.PERCENTILE) == stats.Interval(1.0, -3.0, 6.0)


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
    assert margin > 5 * np.sqrt(tail * (1 - tail) / stats.REPS), "pick a case whose quantiles are not on a CDF step"
    interval = stats.difference(x, y, paired=paired, method=stats.PERCENTILE, confidence=confidence)
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=1e-12)
    assert interval.estimate == pytest.approx(x.mean() - y.mean(), abs=1e-12)


def test_bootstrap_t_equals_the_exact_distributions_quantiles_on_five_seeds():
    rng = np.random.default_rng(14)  # a case whose quantiles are 5 standard errors from a CDF step
    d = rng.normal(size=5).round(1) * 10  # 3,125 resamples
    samples = exact_bootstrap([d], lambda r: studentized(r, d.mean()))
    (q_low, q_high), margin = exact_interval(samples, 0.95)
    assert margin > 5 * np.sqrt(0.025 * 0.975 / stats.REPS), "pick a case whose quantiles are not on a CDF step"
    se = d.std(ddof=1) / np.sqrt(5)
    interval = stats.mean_interval(d, stats.BOOTSTRAP_T)
    assert (interval.low, interval.high) == pytest.approx((d.mean() - q_high * se, d.mean() - q_low * se), abs=1e-9)
    t_interval = stats.mean_interval(d, stats.T)
    hull = stats.mean_interval(d, stats.T_AND_BOOTSTRAP_T, 0.95)  # at the same nominal level as the two
    assert (hull.low, hull.high) == (min(interval.low, t_interval.low), max(interval.high, t_interval.high))
    assert stats.mean_interval(d) == stats.mean_interval(d, stats.METHOD, stats.VERDICT_CONFIDENCE)  # the default


def test_t_intervals_are_scipys():
    rng = np.random.default_rng(5)
    d = rng.normal(size=6) * 3 + 1
    assert (stats.mean_interval(d, stats.T).low, stats.mean_interval(d, stats.T).high) == pytest.approx(
        tuple(scipy.stats.ttest_1samp(d, 0).confidence_interval()), abs=1e-12)
    x, y = rng.normal(size=4) * 2, rng.normal(size=7) + 1
    welch = stats.difference(x, y, paired=False, method=stats.T)
    assert (welch.low, welch.high) == pytest.approx(
        tuple(scipy.stats.ttest_ind(x, y, equal_var=False).confidence_interval()), abs=1e-12)
    unpaired = stats.difference(x, y, paired=False)  # METHOD: Welch's interval or a wider bootstrap-t one
    assert unpaired.low <= welch.low and unpaired.high >= welch.high


def test_bca_is_close_to_scipys():
    # scipy resamples its own way and interpolates its quantiles, so only close; the same definition
    # (bias from the share of resampled means below the estimate, acceleration from the jackknife).
    rng = np.random.default_rng(6)
    d = rng.exponential(size=12)
    ours = stats.mean_interval(d, stats.BCA)
    theirs = scipy.stats.bootstrap((d,), np.mean, method="BCa", n_resamples=50_000, random_state=0).confidence_interval
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), rel=0.01)
    percentile = stats.mean_interval(d, stats.PERCENTILE)
    assert ours.high > percentile.high  # right-skewed values: BCa moves the interval up


def test_a_batch_of_datasets_is_each_dataset_on_its_own():
    rng = np.random.default_rng(7)
    batch = rng.normal(size=(3, 5))
    for method in stats.METHODS:
        together = stats.mean_interval(batch, method, reps=500)
        for i, d in enumerate(batch):
            alone = stats.mean_interval(d, method, reps=500)
            assert (together.estimate[i], together.low[i], together.high[i]) == pytest.approx(
                (alone.estimate, alone.low, alone.high), abs=1e-12), method
    verdicts = stats.verdict(stats.Interval(np.zeros(3), np.array([1.0, -2.0, -1.0]), np.array([2.0, -1.0, 1.0])), 5)
    assert verdicts.tolist() == [stats.AHEAD, stats.BEHIND, stats.INCONCLUSIVE]


@pytest.fixture(scope="module")
def null_datasets():
    """3,000 datasets of equal algorithms per (distribution, n): paired differences with mean 0."""
    rng = np.random.default_rng(40)
    return {(name, n): draw(rng, (3000, n)) for name, draw in
            (("normal", lambda rng, shape: rng.normal(size=shape)),
             ("t3", lambda rng, shape: rng.standard_t(3, size=shape))) for n in (4, 5, 10, 20)}


@pytest.mark.parametrize("n", [4, 5, 10, 20])
@pytest.mark.parametrize("distribution", ["normal", "t3"])
def test_verdicts_between_equal_algorithms_are_rarely_false(null_datasets, distribution, n):
    # Through the tables' own calls (stats.difference, then stats.verdict), with 2,000 resamples
    # instead of 50,000 to keep the test to seconds (benchmarks/verdict_coverage.py --part reps shows
    # the rate does not move beyond its Monte Carlo error). A 95% verdict is false 5% of the time;
    # 7% is 4.5 standard errors (0.4%) above it.
    d = null_datasets[distribution, n]
    robust, baseline = 100.0 + d, np.full_like(d, 100.0)
    verdicts = stats.verdict(stats.difference(robust, baseline, reps=2000), n)
    assert set(verdicts.tolist()) <= {stats.AHEAD, stats.BEHIND, stats.INCONCLUSIVE}
    false_rate = np.isin(verdicts, (stats.AHEAD, stats.BEHIND)).mean()
    assert false_rate <= 0.07, false_rate


def test_the_percentile_bootstrap_fails_the_same_check(null_datasets):
    # The interval the tables used before: at 5 seeds it is about mean ± 1.96 std(ddof 0)/sqrt(5) and
    # calls a difference between equal algorithms about 16% of the time, so the check above can fail.
    d = null_datasets["normal", 5]
    interval = stats.difference(d, np.zeros_like(d), method=stats.PERCENTILE, reps=2000)
    assert np.isin(stats.verdict(interval, 5), (stats.AHEAD, stats.BEHIND)).mean() > 0.12


def test_too_few_seeds_is_its_own_word():
    rng = np.random.default_rng(0)
    for n in (2, 3):  # a resample of n copies of one value has probability n^(1-n) >= 1/9 > 2.5%
        d = rng.normal(size=n) + 5  # every seed ahead
        interval = stats.difference(d, np.zeros(n))
        assert (interval.low, interval.high) == (-np.inf, np.inf)
        assert stats.verdict(interval, n) == stats.TOO_FEW
        percentile = stats.difference(d, np.zeros(n), method=stats.PERCENTILE)  # the range, n <= 3
        assert (percentile.low, percentile.high) == pytest.approx((d.min(), d.max()), abs=1e-12)
    assert stats.verdict(stats.Interval(5.0, 4.0, 6.0), stats.MIN_SEEDS - 1) == stats.TOO_FEW
    assert stats.verdict(stats.Interval(0.5, 0.0, 1.0), 5) == stats.INCONCLUSIVE  # touching 0 does not exclude it
    assert stats.verdict(stats.difference(np.array([1.0, 2.0, 3.0, 4.0]) - 2.5, np.zeros(4)), 4) == stats.INCONCLUSIVE
    same = stats.difference(np.full(5, 3.0), np.zeros(5))  # every seed the same difference: no spread
    assert same == stats.Interval(3.0, 3.0, 3.0) and stats.verdict(same, 5) == stats.AHEAD


def test_value_range_cuts_the_interval_to_what_the_task_allows():
    # CartPole: returns in [0, 500]. Both at the cap on 9 of 10 seeds, the robust one at 400 on one:
    # a resample of only the nine zero differences has no spread and a moved mean, so the bootstrap-t
    # end runs to -inf. No difference of means can be below -500.
    robust, baseline = np.array([500.0] * 7 + [400.0, 500.0, 500.0]), np.full(10, 500.0)
    for paired in (True, False):
        free = stats.difference(robust, baseline, paired=paired)
        bounded = stats.difference(robust, baseline, paired=paired, value_range=(0.0, 500.0))
        assert free.low == -np.inf and np.isfinite(free.high)
        assert bounded == stats.Interval(free.estimate, -500.0, free.high)
        assert stats.verdict(bounded, 10) == stats.verdict(free, 10) == stats.INCONCLUSIVE
    # A finite interval inside the range is left as it is.
    d = np.array([1.0, 2.0, 2.0, 3.0])
    assert stats.difference(d + 10, np.full(4, 10.0), value_range=(0, 20)) == stats.difference(d + 10, np.full(4, 10.0))
    with pytest.raises(ValueError, match=r"x holds \[501.0\] outside value_range \[0.0, 500.0\]"):
        stats.difference(np.array([501.0, 3.0]), np.zeros(2), value_range=(0.0, 500.0))
    with pytest.raises(ValueError, match="finite low < high"):
        stats.difference(d, d, value_range=(1.0, 1.0))


def test_seeds_for_power_against_the_published_counts():
    # The paired t test at 5% two-sided needs 10 pairs for 80% power at effect size 1 (power 0.803)
    # and 34 at 0.5 (0.808) (Cohen 1988; G*Power). Two values with mean m and std (ddof 1) 1.
    assert stats.t_test_power(10, 1.0, 0.95) == pytest.approx(0.803, abs=5e-4)
    assert stats.t_test_power(34, 0.5, 0.95) == pytest.approx(0.808, abs=5e-4)
    for effect, count in ((1.0, 10), (0.5, 34)):
        d = effect + np.array([-1.0, 1.0]) / np.sqrt(2)
        assert stats.seeds_for_power(d, np.zeros(2), confidence=0.95) == count
        assert stats.seeds_for_power(np.zeros(2), d, confidence=0.95) == count  # either sign
        # By default at the level the tables' rule is computed at (3%), which needs more seeds.
        assert stats.seeds_for_power(d, np.zeros(2)) > count
    assert stats.seeds_for_power([1.0, -1.0, 2.0], [1.0, -1.0, 2.0]) is None  # no difference at all
    # Unpaired, two groups of n: 17 each for effect 1, 64 for 0.5 (the same tables).
    x = np.array([-1.0, 1.0]) / np.sqrt(2)
    assert stats.seeds_for_power(x + 1.0, x, paired=False, confidence=0.95) == 17
    assert stats.seeds_for_power(x + 0.5, x, paired=False, confidence=0.95) == 64


def test_the_quoted_measurements_are_the_studys():
    # stats.MEASURED (quoted by the tables and `fedjax-rl compare`) and the calibrated levels against
    # what benchmarks/verdict_coverage.py wrote.
    with open(os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results", "verdict_coverage.json")) as f:
        study = json.load(f)
    paired, rule = study["paired"], "tables' rule"
    at_least = [str(n) for n in study["settings"]["seeds"] if n >= stats.MIN_SEEDS]
    assert stats.MEASURED["method_false_rate"] == pytest.approx(
        max(paired[d][n]["null"][rule]["rate"] for d in paired for n in at_least), abs=5e-4)
    for n in (4, 5):
        assert stats.MEASURED[f"percentile_false_rate_{n}"] == pytest.approx(
            paired["normal"][str(n)]["null"][stats.PERCENTILE]["rate"], abs=5e-4)
    assert stats.MEASURED["t_false_rate"] == pytest.approx(
        max(paired["skewed"][n]["null"][stats.T]["rate"] for n in at_least), abs=5e-4)
    assert stats.MEASURED["rule_power_10"] == pytest.approx(paired["normal"]["10"]["shift 1"][rule]["rate"], abs=5e-3)
    aggregate = [case[model] for case in study["aggregate"] for model in ("normal", "resampled")]
    assert stats.MEASURED["aggregate_false_rate"] == pytest.approx(max(a["verdict_given"]["rate"] for a in aggregate), abs=5e-4)
    assert stats.MEASURED["aggregate_nominal_false_rate"] == pytest.approx(
        max(a["iqm_difference_excludes_0"]["0.95"]["rate"] for a in aggregate), abs=5e-4)
    shapes = {(case["rows"], max(case["seeds"])) for case in study["aggregate"]}
    assert stats.MEASURED["aggregate_shapes"] == " and ".join(
        f"{rows} rows x {seeds}" + (" seeds" if i == 0 else "") for i, (rows, seeds) in enumerate(sorted(shapes, reverse=True)))
    assert stats.MEASURED["improvement_excludes_half"] == pytest.approx(
        max(a["probability_of_improvement_excludes_half"]["rate"] for a in aggregate), abs=5e-4)
    # The levels in use are the smallest the study found to hold 95% (within 2 standard errors of 5%).
    settings = study["settings"]
    assert (settings["chosen_method"], settings["verdict_confidence"], settings["aggregate_confidence"],
            settings["min_seeds"]) == (stats.METHOD, stats.VERDICT_CONFIDENCE, stats.AGGREGATE_CONFIDENCE, stats.MIN_SEEDS)
    hull = study["held"]["hull_calibration"]
    assert hull[f"{stats.VERDICT_CONFIDENCE:g}"]["holds_5pct"]
    assert not any(v["holds_5pct"] for level, v in hull.items() if float(level) < stats.VERDICT_CONFIDENCE)
    calibration = study["aggregate_calibration"]
    assert calibration[f"{stats.AGGREGATE_CONFIDENCE:g}"]["holds_5pct"]
    assert not any(v["holds_5pct"] for level, v in calibration.items() if float(level) < stats.AGGREGATE_CONFIDENCE)
    # No verdict below MIN_SEEDS: the rule's interval is unbounded there.
    assert all(paired[d][str(n)]["null"][rule]["rate"] == 0 for d in paired for n in study["settings"]["seeds"]
               if n < stats.MIN_SEEDS)


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
    # The Minimum decides; every metric gets its own interval and probability of improvement.
    robust = dict(minimum=np.array([4.0, 5.0, 6.0, 5.0, 5.0]), average=np.array([1.0, 3.0, 2.0, 2.0, 2.0]))
    baseline = dict(minimum=np.zeros(5), average=np.full(5, 2.0))
    line = stats.comparison(robust, baseline, ("minimum", "average"), value_range=(0.0, 10.0))
    for metric in ("minimum", "average"):
        assert line[metric] == stats.difference(robust[metric], baseline[metric], value_range=(0.0, 10.0))
        assert line[f"{metric}_improvement"] == stats.probability_of_improvement(robust[metric], baseline[metric])
    assert (line["seeds"], line["verdict"], line["seeds_for_power"]) == (5, stats.AHEAD, None)  # decided
    undecided = stats.comparison(dict(minimum=np.array([1.0, -1.0, 2.0, 0.0])),
                                        dict(minimum=np.zeros(4)), ("minimum",))
    assert undecided["verdict"] == stats.INCONCLUSIVE
    assert undecided["seeds_for_power"] == stats.seeds_for_power([1.0, -1.0, 2.0, 0.0], np.zeros(4))
    # Unpaired (`fedjax-rl compare` on runs with other seed keys): Welch's reading, judged on the fewer seeds.
    x, y = dict(minimum=np.array([3.0, 5.0, 4.0, 6.0, 2.0])), dict(minimum=np.array([1.0, 2.0, 0.0, 1.0]))
    unpaired = stats.comparison(x, y, ("minimum",), paired=False)
    assert unpaired["minimum"] == stats.difference(x["minimum"], y["minimum"], paired=False)
    assert unpaired["seeds"] == 4 and unpaired["verdict"] == stats.verdict(unpaired["minimum"], 4)
    with pytest.raises(ValueError, match="at least 2 per-seed value"):  # one seed has no spread to judge
        stats.comparison(dict(minimum=np.array([3.0])), dict(minimum=np.array([1.0])), ("minimum",))


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
    assert agg.verdict == stats.TOO_FEW  # 2 seeds per row

    # Robust = baseline + 1 seed by seed: the IQM shifts by exactly 1 in every resample if (and only
    # if) both algorithms get the same draw.
    rng = np.random.default_rng(3)
    baseline = [rng.normal(size=5) * 10 for _ in range(4)]
    agg = stats.stratified_iqm(baseline, [b + 1 for b in baseline])
    assert (agg.difference.low, agg.difference.high) == pytest.approx((1.0, 1.0), abs=1e-9)
    assert agg.verdict == stats.AHEAD
    assert agg.baseline.low < agg.baseline.estimate < agg.baseline.high


def test_the_across_rows_difference_is_read_at_its_calibrated_level():
    rng = np.random.default_rng(8)
    baseline = [rng.normal(size=5) for _ in range(8)]
    robust = [b + rng.normal(size=5) for b in baseline]
    agg = stats.stratified_iqm(baseline, robust)
    samples = stats.stratified_samples(baseline, robust)
    assert (agg.difference.low, agg.difference.high) == stats.percentile_interval(
        samples["difference"][1], stats.AGGREGATE_CONFIDENCE)
    assert (agg.baseline.low, agg.baseline.high) == stats.percentile_interval(samples["baseline"][1], stats.CONFIDENCE)
    nominal = stats.percentile_interval(samples["difference"][1], stats.CONFIDENCE)
    assert agg.difference.low <= nominal[0] and agg.difference.high >= nominal[1]


def test_seeded_and_reproducible():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=5), rng.normal(size=5)
    assert stats.difference(x, y) == stats.difference(x, y)
    rows = [rng.normal(size=5) for _ in range(3)]
    assert stats.stratified_iqm(rows, rows[::-1]) == stats.stratified_iqm(rows, rows[::-1])


def test_quantile_is_numpys_inverted_cdf():
    rng = np.random.default_rng(9)
    samples = rng.normal(size=(4, 997))
    for q in (0.0, 0.005, 0.025, 0.5, 0.975, 1.0):
        np.testing.assert_array_equal(stats.quantile(samples, q), np.quantile(samples, q, axis=-1, method="inverted_cdf"))


def test_normalise_by_hand():
    # MountainCar-like: random -200, reference -100: -150 is halfway, -100 is 1, -250 is -0.5.
    np.testing.assert_allclose(stats.normalise([-150.0, -100.0, -250.0], -200.0, -100.0), [0.5, 1.0, -0.5])
    with pytest.raises(ValueError, match=r"reference return \(-200.0\) must exceed the random-policy return"):
        stats.normalise([1.0], -200.0, -200.0)


@pytest.mark.parametrize("call,message", [
    (lambda: stats.difference([1.0], [1.0], confidence=1.5), r"confidence must be in \(0, 1\), got 1.5"),
    (lambda: stats.difference([1.0, 2.0], [1.0, 2.0], reps=0), r"reps \(bootstrap resamples\) must be an integer >= 1, got 0"),
    (lambda: stats.difference([1.0, 2.0], [1.0, 2.0], method="wild"), r"method must be one of t, percentile, bca"),
    (lambda: stats.difference([], [1.0], paired=False), r"x must hold at least 1 per-seed value"),
    (lambda: stats.difference([1.0], [1.0]), r"values must hold at least 2 per-seed value"),
    (lambda: stats.difference([1.0, 2.0], [1.0]), r"paired values need one per seed on both sides, got 2 and 1"),
    (lambda: stats.difference([1.0, 2.0], [1.0, 3.0], paired=False, method="bca"), r"'bca' is for paired values only"),
    (lambda: stats.difference([np.nan], [1.0]), r"x must be finite"),
    (lambda: stats.stratified_iqm([[1.0]], []), r"need the same, non-zero number of rows"),
    (lambda: stats.stratified_iqm([[1.0, 2.0]], [[1.0]]), r"one score per seed for both algorithms"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
