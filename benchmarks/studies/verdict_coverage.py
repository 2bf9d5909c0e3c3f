"""How often a verdict is false when the two algorithms are equal, and how often it is given when they
differ: the coverage study behind `fedjax_rl.analysis.stats`'s verdict rule, `MIN_SEEDS`,
`PLAN_DELIVERY` and `AGGREGATE_CONFIDENCE`.

Sign part (`--part sign`, the tables' rule). A row's and a table's question: does the robust algorithm
do better on more seeds than it does worse? `stats.sign_test` with ties set aside, whose false rate is
computed (`stats.sign_level`); checked here on kinds of data whose wins and losses are equally likely
(SIGN_NULL: the exchangeable pairs, one-size and committed differences with random signs, skewed and
lopsided differences with median 0, and differences tied on most seeds), with its power against the
exact `power.rule_power`; "equivalent" at a median on the margin against `stats.equivalence_level`;
the whole-table test on tables of those kinds; and what `power.seeds_for_power` delivers, exactly
(`power.planned_power`), over pilots of `power.PLAN_PILOTS` seeds, P(higher | untied) in
`power.PLAN_HIGHER` and tie rates `power.PLAN_TIES`: per cell, and per pilot count over the grid
weighted by how often a pilot gets a figure (`power.PLAN_DELIVERY`), which is what the plan's expected
power promises.

Rule part (`--part rule`): a rule about the median difference alone (the order-statistic interval,
ties counting against a direction). The median paired difference with its
order-statistic interval (`judge.comparison`, the tables' call), beside the rule it replaced (the hull of
Student t and bootstrap-t at nominal 97%, about the mean) and Student t, on the kinds of data RL results
have (KINDS): two exchangeable algorithms (the same distribution of returns per seed: normal,
collapsing on a tenth of the seeds, capped at a task's maximum with few distinct values, three values,
one-size differences +-c, the committed differences with random signs), and algorithms whose median
difference is 0 but whose shapes differ (skewed, a rare large gain against a frequent small loss,
ties at 0). Also: the issue's case of equal means and different shapes (the baseline collapses on a
tenth of its seeds and is otherwise a little better), a null for a mean but not for a median; the
level of "equivalent" at a median difference on the margin; the whole-table sign test on tables of
those kinds; the per-seed level average of the heterogeneity table; and what `seeds_for_power`
delivers from 4, 5 and 10 pilot seeds, exactly (`power.planned_power`) and by simulation.

The sections below describe the first study (`--part paired`, `reps`, `aggregate`, `unpaired`), which
chose the replaced rule and still sets `AGGREGATE_CONFIDENCE`; their results stay in the file.

Paired part. Simulated per-seed differences d_1..d_n of robust minus baseline, for n in SEEDS, drawn
from four distributions, each with mean 0 and variance 1:
- normal: N(0, 1);
- t3: heavy-tailed, Student t with 3 degrees of freedom / sqrt(3);
- skewed: 1 - Exp(1) (skewness -2): mostly small differences and a long tail of large losses, as when
  one seed of one algorithm fails; the committed 5-seed rows' differences have a mean |sample
  skewness| of 0.68 (Minimum) and 0.84 (Average), against 0.67 for exponential samples of 5 and 0.49
  for normal ones (`committed_pool` in the results);
- committed: drawn with replacement from the pool of the committed rows' own paired differences (every
  table with at least 4 reported seeds, headline FedR* minus each baseline, Minimum and Average), each
  comparison standardized by its own mean and standard deviation (ddof 0).
Each dataset goes through `stats.difference(d, 0, paired=True, ...)`, the call the tables make,
batched (`fedjax_rl.analysis.stats` takes datasets on leading axes), for each of CANDIDATES: the percentile
bootstrap, BCa, Student t and the bootstrap-t at nominal 95%, the hull of Student t and bootstrap-t at
95% and 96%, and the tables' rule of the time (the hull at mean_intervals.HULL_CONFIDENCE, no verdict below 4
seeds). The false-verdict rate is the share of datasets whose interval excludes 0; the
power is the same share when every d_i is shifted by SHIFTS standard deviations. `held` picks the
hull's nominal level: the smallest whose largest rate over the distributions at n >= 4 is within 2
standard errors of 5%. Monte Carlo standard errors come from the spread between chunks of datasets
(each chunk draws its own bootstrap resamples, shared by its datasets).

The bootstrap methods here use REPS_STUDY resamples per dataset, not the tables' 50,000: the reps
part runs some of the same datasets both ways and reports how many verdicts differ.

Aggregate part. The IQM across rows with its stratified percentile bootstrap, and the probability of
improvement, on simulated tables shaped like each committed one (its rows, its seeds per row), with
both algorithms drawn from the same row distribution (so both the IQM difference and P(X > Y) - 1/2
are 0): per row, normal with the row's mean and standard deviation, or resampled from the row's own
normalised scores (both algorithms' pooled). The IQM difference's interval is read at nominal levels
AGGREGATE_LEVELS (the smallest within 2 standard errors of 5% is aggregate.AGGREGATE_CONFIDENCE); the
tables print P's measured rate beside it.

Unpaired part. `fedjax-rl compare` on runs with other seed keys: the tables' rule on two independent
samples of n each (normal, t3, skewed).

    nice .venv/bin/python -m benchmarks.studies.verdict_coverage --part sign        # the tables' rule
    nice .venv/bin/python -m benchmarks.studies.verdict_coverage                    # every part, about 30 CPU-minutes
    nice .venv/bin/python -m benchmarks.studies.verdict_coverage --part aggregate   # one part
    .venv/bin/python -m benchmarks.studies.verdict_coverage --summary               # REPRODUCTION.md's tables

Writes benchmarks/results/studies/verdict_coverage.json through benchmarks/harness.py: a row per part (its
`part` and the study's records of it, `PARTS`), replacing that part's row and keeping the others; the
settings hold the first study's settings, the committed pool and each part's run (command, time, machine).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import numpy as np
import scipy.stats

from benchmarks import common, harness
from benchmarks.studies import mean_intervals
from fedjax_rl.analysis import aggregate, power, stats
from fedjax_rl.analysis.cells import at_most
from fedjax_rl.reproduce import report, row_records, tables

BENCHMARK = "studies.verdict_coverage"
ROOT = harness.ROOT
OUT = harness.default_out(BENCHMARK)
# Each part's row: the study's records of it.
PARTS = {"sign": ("sign",), "rule": ("rule",), "paired": ("paired", "held"), "reps": ("reps_check",),
         "aggregate": ("aggregate", "aggregate_calibration", "aggregate_reps_check"), "unpaired": ("unpaired",)}
# The settings: what the first study's parts ran with, the committed pool and each part's run.
SETTINGS = {"first_study": "settings", "committed_pool": "committed_pool", "runs": "runs"}


def as_result(record: dict) -> tuple[dict, list[dict]]:
    """The study's record (a dict by part, as `summary` reads it) as the harness's settings and rows."""
    rows = [dict(part=part, **{key: record[key] for key in keys if key in record})
            for part, keys in PARTS.items() if keys[0] in record]
    return {name: record[key] for name, key in SETTINGS.items() if key in record}, rows


def as_record(result: dict) -> dict:
    """`as_result`'s inverse, from a result the harness wrote."""
    record = {key: result["settings"][name] for name, key in SETTINGS.items() if name in result["settings"]}
    for row in result["rows"]:
        record.update({key: value for key, value in row.items() if key != "part"})
    return record
SEEDS = (3, 4, 5, 6, 8, 10, 20)
SHIFTS = (0.5, 1.0)
REPS_STUDY = 2000
CHUNK = 500
LEVEL_HELD = 0.06  # issue 40: 5% plus Monte Carlo error
DISTRIBUTIONS = ("normal", "t3", "skewed", "committed")
# Tables with at least 4 reported seeds; table2_5pct_h200's finished rows are table2_5pct's Hopper rows.
COMMITTED = (("table1", "table1_paper_h100"), ("table1", "table1_paper"), ("table2", "table2_5pct"))


def committed_comparisons() -> list[dict]:
    """Every committed comparison with >= 4 seeds: headline FedR* minus each baseline, per metric."""
    out = []
    for table_name, directory in COMMITTED:
        table = tables.get_table(table_name)
        for key, rec in row_records.finished_rows(table, os.path.join(ROOT, "results", directory)).items():
            algs = rec["algorithms"]
            for base in table.baselines:
                for metric in report.METRICS:
                    d = np.subtract(algs[rec["headline"]]["reported"][metric], algs[base]["reported"][metric])
                    out.append(dict(directory=directory, row=key, baseline=base, metric=metric, differences=d))
    return out


def committed_pool(comparisons: list[dict]) -> tuple[np.ndarray, dict]:
    """The standardized differences of every comparison whose differences are not all equal, and
    how skewed the comparisons are (beside the same for simulated normal and exponential samples)."""
    pool = [(c["differences"] - c["differences"].mean()) / c["differences"].std() for c in comparisons
            if c["differences"].std() > 0]
    rng = np.random.default_rng(0)
    skewness = {}
    for n in sorted({c["differences"].size for c in comparisons}):
        for metric in report.METRICS:
            values = [scipy.stats.skew(c["differences"]) for c in comparisons
                      if c["differences"].size == n and c["metric"] == metric and c["differences"].std() > 0]
            skewness[f"{n} seeds, {metric}"] = dict(comparisons=len(values), mean_abs_skewness=float(np.mean(np.abs(values))))
        for name, draw in (("normal", rng.normal), ("exponential", rng.exponential)):
            skewness[f"{n} seeds, simulated {name}"] = dict(
                mean_abs_skewness=float(np.mean(np.abs(scipy.stats.skew(draw(size=(100_000, n)), axis=1)))))
    pool = np.concatenate(pool)
    return pool, dict(values=int(pool.size), comparisons=len(comparisons), skewness=float(scipy.stats.skew(pool)),
                      excess_kurtosis=float(scipy.stats.kurtosis(pool)), per_comparison=skewness)


def draw(distribution: str, shape: tuple, rng: np.random.Generator, pool: np.ndarray) -> np.ndarray:
    """Differences with mean 0 and variance 1."""
    if distribution == "normal":
        return rng.normal(size=shape)
    if distribution == "t3":
        return rng.standard_t(3, size=shape) / np.sqrt(3.0)
    if distribution == "skewed":
        return 1.0 - rng.exponential(size=shape)
    return rng.choice(pool, size=shape)


def _rates(hits: list[np.ndarray]) -> dict:
    """The share of True over all chunks, with the standard error from the spread between chunks."""
    per_chunk = np.array([h.mean() for h in hits])
    return dict(rate=float(np.mean(per_chunk)), se=float(per_chunk.std(ddof=1) / np.sqrt(per_chunk.size)))


def decided(interval: stats.Interval, zero: float = 0.0) -> np.ndarray:
    """The interval excludes `zero` (a verdict, whatever MIN_SEEDS says)."""
    return (np.asarray(interval.low) > zero) | (np.asarray(interval.high) < zero)


# (name, method, nominal level): the four methods at 95%, and the hull of Student t and bootstrap-t at
# rising nominal levels, to find the one that holds 95%; TABLES is the rule the tables then used.
CANDIDATES = ((mean_intervals.T, mean_intervals.T, 0.95), (mean_intervals.PERCENTILE, mean_intervals.PERCENTILE, 0.95), (mean_intervals.BCA, mean_intervals.BCA, 0.95),
              (mean_intervals.BOOTSTRAP_T, mean_intervals.BOOTSTRAP_T, 0.95),
              *((f"{mean_intervals.T_AND_BOOTSTRAP_T} at {level:.0%}", mean_intervals.T_AND_BOOTSTRAP_T, level) for level in (0.95, 0.96)),
              (TABLES := "tables' rule", mean_intervals.T_AND_BOOTSTRAP_T, mean_intervals.HULL_CONFIDENCE))
HULL_LEVELS = {0.95: f"{mean_intervals.T_AND_BOOTSTRAP_T} at 95%", 0.96: f"{mean_intervals.T_AND_BOOTSTRAP_T} at 96%",
               mean_intervals.HULL_CONFIDENCE: TABLES}


def interval_of(d: np.ndarray, method: str | None, level: float | None, reps: int, seed: int) -> stats.Interval:
    """The candidate's interval of the paired differences d (robust - baseline, baseline 0)."""
    return mean_intervals.difference(d, np.zeros_like(d), method=method, confidence=level, reps=reps, seed=seed)


def paired_part(datasets: int, pool: np.ndarray, reps: int) -> dict:
    out = {}
    for dist_index, distribution in enumerate(DISTRIBUTIONS):
        for n in SEEDS:
            cell = {}
            for shift in (0.0, *SHIFTS):
                hits = {name: [] for name, _, _ in CANDIDATES}
                verdicts = []
                count = datasets if shift == 0 else datasets // 4
                for chunk in range(count // CHUNK):
                    rng = np.random.default_rng([dist_index, n, int(shift * 10), chunk])
                    d = draw(distribution, (CHUNK, n), rng, pool) + shift
                    for name, method, level in CANDIDATES:
                        interval = interval_of(d, method, level, reps, chunk)
                        hits[name].append(decided(interval))
                        if name == TABLES:  # the replaced rule gave no verdict below 4 seeds
                            verdicts.append(decided(interval) & (n >= 4))
                name = "null" if shift == 0 else f"shift {shift:g}"
                cell[name] = {m: _rates(h) for m, h in hits.items()}
                cell[name]["tables' verdict (4 seeds or more)"] = _rates(verdicts)
                cell[name]["datasets"] = count // CHUNK * CHUNK
            out.setdefault(distribution, {})[str(n)] = cell
            print(f"{distribution:9s} n={n:2d} false: " + " ".join(
                f"{m} {cell['null'][m]['rate']:.3f}" for m, _, _ in CANDIDATES)
                + " | power at 1 sd: " + " ".join(f"{m} {cell['shift 1'][m]['rate']:.2f}" for m, _, _ in CANDIDATES),
                flush=True)
    return out


def held(paired: dict) -> dict:
    """Per candidate, the seed counts at which its false-verdict rate is <= LEVEL_HELD in every
    distribution, and the hull's calibration: at each nominal level, its largest rate at n >= 4 and
    whether that is within 2 standard errors of 5% (the smallest such level is the tables')."""
    out = {name: [n for n in SEEDS if all(paired[dist][str(n)]["null"][name]["rate"] <= LEVEL_HELD for dist in paired)]
           for name, _, _ in CANDIDATES}
    calibration = {}
    for level, name in HULL_LEVELS.items():
        worst = max(((paired[dist][str(n)]["null"][name], dist, n) for dist in paired for n in SEEDS if n >= 4),
                    key=lambda item: item[0]["rate"])
        calibration[f"{level:g}"] = dict(worst_rate=worst[0]["rate"], se=worst[0]["se"], distribution=worst[1],
                                           seeds=worst[2], holds_5pct=worst[0]["rate"] - 2 * worst[0]["se"] <= 0.05)
    return dict(held_at_seeds=out, hull_calibration=calibration)


def reps_part(pool: np.ndarray, chunks: int = 20, chunk: int = 100) -> dict:
    """The same datasets with REPS_STUDY and with the tables' aggregate.REPS resamples."""
    out = {}
    for distribution in ("normal", "skewed"):
        for n in (4, 6, 10):
            cell = {}
            for name, method, level in CANDIDATES:
                if method == mean_intervals.T:
                    continue  # no resamples
                few, full = [], []
                for c in range(chunks):
                    d = draw(distribution, (chunk, n), np.random.default_rng([99, n, c]), pool)
                    few.append(decided(interval_of(d, method, level, REPS_STUDY, c)))
                    full.append(decided(interval_of(d, method, level, aggregate.REPS, c)))
                cell[name] = dict(rate_study_reps=_rates(few), rate_table_reps=_rates(full),
                                  verdicts_differing=float(np.mean(np.concatenate(few) != np.concatenate(full))),
                                  datasets=chunks * chunk)
            out.setdefault(distribution, {})[str(n)] = cell
            print(f"reps {distribution:7s} n={n:2d} " + " ".join(
                f"{m}: {v['rate_study_reps']['rate']:.3f} vs {v['rate_table_reps']['rate']:.3f} "
                f"({v['verdicts_differing']:.4f} differ)" for m, v in cell.items()), flush=True)
    return dict(study_reps=REPS_STUDY, table_reps=aggregate.REPS, cases=out)


def committed_tables() -> list[dict]:
    """Per committed table, metric and baseline: each row's normalised scores of both algorithms."""
    out = []
    for table_name, directory in COMMITTED:
        table = tables.get_table(table_name)
        records = row_records.finished_rows(table, os.path.join(ROOT, "results", directory))
        for agg in report.aggregates(table, records):
            robust = report.normalised_scores(table, records, "headline", agg["metric"])
            baseline = report.normalised_scores(table, records, agg["baseline"], agg["metric"])
            rows = [np.concatenate([baseline[k], robust[k]]) for k in agg["rows"]]
            out.append(dict(directory=directory, metric=agg["metric"], baseline=agg["baseline"],
                            seeds=[len(baseline[k]) for k in agg["rows"]], rows=rows))
    return out


AGGREGATE_LEVELS = (0.95, 0.98, 0.99, 0.995)


def aggregate_part(datasets: int, reps: int, chunk: int = 100) -> list[dict]:
    """Per committed table, metric and baseline, and per null model: how often the IQM difference's
    stratified percentile interval excludes 0 at each nominal level of AGGREGATE_LEVELS (the levels
    read off the same resamples, `aggregate.stratified_samples`, which `aggregate.stratified_iqm` reads), how
    often its verdict (at aggregate.AGGREGATE_CONFIDENCE) is given, and how often P(X > Y)'s interval excludes 1/2."""
    out = []
    for case_index, case in enumerate(committed_tables()):
        result = dict(directory=case["directory"], metric=case["metric"], baseline=case["baseline"],
                      rows=len(case["rows"]), seeds=case["seeds"])
        for model in ("normal", "resampled"):
            hits = {level: [] for level in AGGREGATE_LEVELS}
            verdicts, poi_hits = [], []
            for c in range(datasets // chunk):
                rng = np.random.default_rng([7, case_index, model == "normal", c])
                pair = []
                for _ in range(2):  # baseline, robust: drawn alike, independently
                    if model == "normal":
                        pair.append([rng.normal(row.mean(), row.std(), size=(chunk, n))
                                     for row, n in zip(case["rows"], case["seeds"])])
                    else:
                        pair.append([rng.choice(row, size=(chunk, n)) for row, n in zip(case["rows"], case["seeds"])])
                samples = aggregate.stratified_samples(pair[0], pair[1], reps=reps, seed=c)
                for level in AGGREGATE_LEVELS:
                    low, high = aggregate.percentile_interval(samples["difference"][1], level)
                    hits[level].append(decided(stats.Interval(samples["difference"][0], low, high)))
                # aggregate.stratified_iqm reads these samples at AGGREGATE_CONFIDENCE (tests/test_stats.py).
                point, resampled = samples["difference"]
                verdicts.append(decided(stats.Interval(point, *aggregate.percentile_interval(
                    resampled, aggregate.AGGREGATE_CONFIDENCE))) & (samples["min_seeds"] >= 4))
                point, resampled = samples["probability_of_improvement"]
                poi_hits.append(decided(stats.Interval(point, *aggregate.percentile_interval(resampled, stats.CONFIDENCE)), 0.5))
            result[model] = dict(iqm_difference_excludes_0={f"{level:g}": _rates(h) for level, h in hits.items()},
                                 verdict_given=_rates(verdicts),
                                 probability_of_improvement_excludes_half=_rates(poi_hits),
                                 datasets=datasets // chunk * chunk)
        out.append(result)
        print(f"aggregate {case['directory']:18s} {case['metric']:8s} {case['baseline']:11s} "
              f"{len(case['rows'])} rows x {'/'.join(map(str, sorted(set(case['seeds']))))}: IQM difference excludes 0 "
              + "; ".join(f"{m} " + " ".join(f"{lv}: {r['rate']:.3f}" for lv, r in result[m]["iqm_difference_excludes_0"].items())
                          for m in ("normal", "resampled"))
              + " | P(X>Y) excludes 1/2 "
              + ", ".join(f"{m} {result[m]['probability_of_improvement_excludes_half']['rate']:.3f}"
                          for m in ("normal", "resampled")), flush=True)
    return out


def aggregate_reps_check(reps: int, datasets: int = 300, chunk: int = 10) -> dict:
    """The verdict at aggregate.AGGREGATE_CONFIDENCE on the same simulated tables with the study's and the
    tables' resamples, for the shape whose rate was highest (Table 2 at 5%, 6 rows x 4 seeds, Average
    against DDPGAvg(2), resampled)."""
    case = next(c for c in committed_tables() if (c["directory"], c["metric"], c["baseline"])
                == ("table2_5pct", "average", "DDPGAvg(2)"))
    few, full = [], []
    for c in range(datasets // chunk):
        rng = np.random.default_rng([13, c])
        pair = [[rng.choice(row, size=(chunk, n)) for row, n in zip(case["rows"], case["seeds"])] for _ in range(2)]
        for count, hits in ((reps, few), (aggregate.REPS, full)):
            hits.append(decided(aggregate.stratified_iqm(pair[0], pair[1], reps=count, seed=c).difference))
    few, full = np.concatenate(few), np.concatenate(full)
    out = dict(case=[case["directory"], case["metric"], case["baseline"], "resampled"], datasets=int(few.size),
               study_reps=reps, table_reps=aggregate.REPS, rate_study_reps=float(few.mean()),
               rate_table_reps=float(full.mean()), verdicts_differing=float(np.mean(few != full)))
    print("aggregate reps check:", out, flush=True)
    return out


def aggregate_calibration(aggregate: list[dict]) -> dict:
    """At each nominal level, the largest rate at which the IQM difference's interval excluded 0 over
    every committed table shape and null model, and whether it is within 2 standard errors of 5%."""
    out = {}
    for level in AGGREGATE_LEVELS:
        worst = max(((case[model]["iqm_difference_excludes_0"][f"{level:g}"], case["directory"], case["metric"],
                      case["baseline"], model) for case in aggregate for model in ("normal", "resampled")),
                    key=lambda item: item[0]["rate"])
        out[f"{level:g}"] = dict(worst_rate=worst[0]["rate"], se=worst[0]["se"], case=list(worst[1:]),
                                   holds_5pct=worst[0]["rate"] - 2 * worst[0]["se"] <= 0.05)
    return out


def unpaired_part(datasets: int, reps: int, pool: np.ndarray) -> dict:
    out = {}
    for dist_index, distribution in enumerate(("normal", "t3", "skewed")):
        for n in (4, 5, 10, 20):
            hits = []
            for c in range(datasets // CHUNK):
                rng = np.random.default_rng([11, dist_index, n, c])
                x, y = draw(distribution, (CHUNK, n), rng, pool), draw(distribution, (CHUNK, n), rng, pool)
                hits.append(decided(mean_intervals.difference(x, y, paired=False, method=mean_intervals.T_AND_BOOTSTRAP_T, reps=reps,
                                                     seed=c)))
            out.setdefault(distribution, {})[str(n)] = dict(_rates(hits), datasets=datasets // CHUNK * CHUNK)
            print(f"unpaired {distribution:7s} n={n:2d}: {out[distribution][str(n)]['rate']:.3f}", flush=True)
    return dict(method=mean_intervals.T_AND_BOOTSTRAP_T, nominal_level=mean_intervals.HULL_CONFIDENCE, cases=out)


RULE_SEEDS = (4, 5, 6, 8, 10, 12, 20)
RULE_CHUNK = 2000
HULL_DATASETS_SHARE = 5  # the replaced rule resamples, so it sees a fifth of the datasets


def _returns(kind: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """Per-seed returns of one algorithm: the same kind for both of an exchangeable pair."""
    if kind == "normal":
        return rng.normal(size=shape)
    if kind == "collapsing":  # a tenth of the seeds fail far below the rest
        return np.where(rng.random(shape) < 0.1, -5.0, 0.0) + rng.normal(size=shape) * np.where(rng.random(shape) < 0.1, 1.0, 0.1)
    if kind == "capped":  # CartPole-like: at the 500 cap on 70% of the seeds, whole returns below it
        return np.where(rng.random(shape) < 0.7, 500.0, rng.integers(100, 500, size=shape).astype(float))
    if kind == "three values":
        return rng.integers(0, 3, size=shape).astype(float)
    raise ValueError(kind)


EXCHANGEABLE = ("normal", "collapsing", "capped", "three values")
# Per-seed differences whose median is 0 without the pair being exchangeable, and the one-size and
# committed differences (random signs: what exchangeable algorithms give).
MEDIAN_ZERO = ("one size", "committed, random signs", "skewed (ln 2 - Exp(1))", "rare gain, frequent loss",
               "ties at 0")
KINDS = EXCHANGEABLE + MEDIAN_ZERO
# The kinds whose mean difference is 0 too (a null for the mean's rules); the last one's median is
# about -0.5 (a true 'behind' for the median rule).
MEAN_ZERO = EXCHANGEABLE + ("one size", "committed, random signs", "equal means, collapsing baseline")


def rule_differences(kind: str, shape: tuple, rng: np.random.Generator, pool: np.ndarray) -> np.ndarray:
    """Paired differences robust - baseline of one KIND, every one with median 0."""
    if kind in EXCHANGEABLE:
        return _returns(kind, shape, rng) - _returns(kind, shape, rng)
    if kind == "one size":
        return rng.choice([-1.0, 1.0], size=shape)
    if kind == "committed, random signs":
        return rng.choice(np.abs(pool), size=shape) * rng.choice([-1.0, 1.0], size=shape)
    if kind == "skewed (ln 2 - Exp(1))":
        return np.log(2.0) - rng.exponential(size=shape)
    if kind == "rare gain, frequent loss":  # half the seeds lose a little, half gain a lot: mean 2.4
        return np.where(rng.random(shape) < 0.5, 5.0 * rng.exponential(size=shape), -0.2 * rng.exponential(size=shape))
    if kind == "ties at 0":  # equal on 60% of the seeds, +3 on 25%, -1 on 15%: median 0, mean 0.6
        u = rng.random(shape)
        return np.where(u < 0.6, 0.0, np.where(u < 0.85, 3.0, -1.0))
    raise ValueError(kind)


def equal_means_collapsing_baseline(shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """The issue's case: the baseline is 0.5 better on 90% of the seeds and collapses by 4.5 on the
    rest, so the means are equal (0) and the median difference is about -0.5."""
    robust = rng.normal(size=shape) * 0.5
    baseline = np.where(rng.random(shape) < 0.9, 0.5, -4.5) + rng.normal(size=shape) * 0.5
    return robust - baseline


def _rule_decided(d: np.ndarray) -> np.ndarray:
    """The median rule: the median difference's order-statistic interval excludes 0 (ties count against
    a direction)."""
    interval = stats.difference(d, np.zeros_like(d))
    return ((interval.low > 0) | (interval.high < 0)) & (stats.order_rank(d.shape[-1]) > 0)


def _hull_decided(d: np.ndarray, seed: int) -> np.ndarray:
    interval = mean_intervals.difference(d, np.zeros_like(d), method=mean_intervals.T_AND_BOOTSTRAP_T, reps=REPS_STUDY, seed=seed)
    return decided(interval)


def _t_decided(d: np.ndarray) -> np.ndarray:
    return decided(mean_intervals.difference(d, np.zeros_like(d), method=mean_intervals.T))


def rule_part(datasets: int, pool: np.ndarray) -> dict:
    """The median rule's false ahead/behind rates (and the mean's hull's, and Student t's) per kind and
    seed count; power; the equivalence level; the whole-table and across-levels tests."""
    out = dict(settings=dict(seeds=RULE_SEEDS, datasets=datasets, hull_datasets=datasets // HULL_DATASETS_SHARE,
                             chunk=RULE_CHUNK, hull_reps=REPS_STUDY, method=stats.METHOD,
                             confidence=stats.CONFIDENCE, min_seeds=stats.MIN_SEEDS,
                             equivalence_confidence=stats.EQUIVALENCE_CONFIDENCE))
    null = {}
    for kind_index, kind in enumerate(KINDS + ("equal means, collapsing baseline",)):
        for n in RULE_SEEDS:
            rule, hull, t = [], [], []
            for c in range(datasets // RULE_CHUNK):
                rng = np.random.default_rng([21, kind_index, n, c])
                d = (equal_means_collapsing_baseline((RULE_CHUNK, n), rng) if kind.startswith("equal means")
                     else rule_differences(kind, (RULE_CHUNK, n), rng, pool))
                rule.append(_rule_decided(d))
                t.append(_t_decided(d))
                if c % HULL_DATASETS_SHARE == 0:
                    hull.append(_hull_decided(d, c))
            null.setdefault(kind, {})[str(n)] = dict(rule=_rates(rule), hull=_rates(hull), t=_rates(t))
        print(f"rule {kind:34s} " + " ".join(f"n={n}: {null[kind][str(n)]['rule']['rate']:.3f}/"
                                             f"{null[kind][str(n)]['hull']['rate']:.3f}/{null[kind][str(n)]['t']['rate']:.3f}"
                                             for n in RULE_SEEDS) + "  (median rule / hull / t)", flush=True)
    out["null"] = null
    power = {}
    for shift in (0.5, 1.0):
        for n in RULE_SEEDS:
            rng = np.random.default_rng([22, int(shift * 10), n])
            d = rng.normal(size=(datasets // 4, n)) + shift
            power.setdefault(f"shift {shift:g}", {})[str(n)] = dict(
                rule=float(_rule_decided(d).mean()), t=float(_t_decided(d).mean()),
                sign_power_exact=power.sign_power(n, float(scipy.stats.norm.cdf(shift))))
    out["power_normal"] = power
    print("rule power at 1 sd: " + " ".join(f"n={n}: {v['rule']:.2f} (t {v['t']:.2f})"
                                            for n, v in power["shift 1"].items()), flush=True)
    out["equivalence"] = equivalence_level(datasets)
    out["whole_table"] = whole_table_level(datasets, pool)
    out["across_levels"] = across_levels_level(datasets)
    return out


def equivalence_level(datasets: int) -> dict:
    """How often 'equivalent' is said where the median difference lies on the margin (1): continuous
    (normal noise) and tied (values 0, 1, 2) differences."""
    out = {}
    for name, draw_fn in (("normal around the margin", lambda rng, shape: 1.0 + rng.normal(size=shape)),
                          ("ties at the margin", lambda rng, shape: rng.integers(0, 3, size=shape).astype(float))):
        for n in RULE_SEEDS:
            rng = np.random.default_rng([23, len(name), n])
            d = draw_fn(rng, (datasets, n))
            zero = np.zeros_like(d)
            interval = stats.difference(d, zero)
            words = stats.verdict(interval.low > 0, interval.high < 0, stats.order_rank(n) > 0,
                                  stats.difference(d, zero, confidence=stats.EQUIVALENCE_CONFIDENCE), margin=1.0)
            out.setdefault(name, {})[str(n)] = float(np.mean(words == stats.EQUIVALENT))
    print("equivalent said at the margin: " + "; ".join(f"{k}: " + " ".join(f"{v:.3f}" for v in c.values())
                                                       for k, c in out.items()), flush=True)
    return out


# Table shapes: tasks x rows per task x seeds, as the committed tables (Table 1: 4 tasks x 2 rows x 5
# seeds; Table 2 at 5%: 3 x 2 x 4) and the confirmatory one (4 x 2 x 20); and 8 independent rows x 5.
TABLE_SHAPES = ((4, 2, 5), (3, 2, 4), (4, 2, 20), (8, 1, 5))
SHARED_SIGN = 0.5
# The whole-table test decides whether wins outnumber losses: "ties at 0" (higher on 25% of the seeds,
# lower on 15%) is a true difference there, not a null.
WHOLE_TABLE_KINDS = tuple(kind for kind in KINDS if kind != "ties at 0")


def whole_table_level(datasets: int, pool: np.ndarray, kinds: tuple = WHOLE_TABLE_KINDS, draw=None) -> dict:
    """The whole-table sign test's false ahead/behind rate (`stats.pooled_signs`, a task's rows grouped) on
    tables of algorithms as likely to win as to lose: each row of one of `kinds` (drawn by `draw`), or of a mix;
    a task's rows share their sign at a seed with probability SHARED_SIGN (a fair coin per task and seed;
    each row's |difference| its own), as rows that share their seeds' keys may: P(difference > 0) stays
    at most 1/2 in every row, the null. Beside it, the same tables with every row counted as its own unit (no grouping): what pooling
    dependent rows would say."""
    draw = draw or rule_differences
    out = {}
    for tasks, per_task, seeds in TABLE_SHAPES:
        cell, ungrouped = {}, {}
        for kind in (*kinds, "mix"):
            hits, naive = [], []
            for c in range(datasets // RULE_CHUNK):
                rng = np.random.default_rng([24, tasks, per_task, seeds, len(kind), c])
                table, groups = [], []
                for t in range(tasks):
                    shared = rng.choice([-1.0, 1.0], size=(RULE_CHUNK, seeds))
                    for _ in range(per_task):
                        own = draw(kinds[t % len(kinds)] if kind == "mix" else kind, (RULE_CHUNK, seeds), rng, pool)
                        if per_task > 1:  # half the time the row takes its task's sign at that seed
                            own = np.where(rng.random(own.shape) < SHARED_SIGN, shared * np.abs(own), own)
                        table.append(own)
                        groups.append(t)
                hits.append(np.isin(stats.pooled_signs(table, groups)["verdict"], (stats.AHEAD, stats.BEHIND)))
                naive.append(np.isin(stats.pooled_signs(table)["verdict"], (stats.AHEAD, stats.BEHIND)))
            cell[kind], ungrouped[kind] = _rates(hits), _rates(naive)
        name = f"{tasks} tasks x {per_task} rows x {seeds} seeds"
        out[name] = cell
        out[f"{name}, rows not grouped"] = ungrouped
        print(f"whole table {name}: " + " ".join(f"{k} {v['rate']:.3f}/{ungrouped[k]['rate']:.3f}"
                                               for k, v in cell.items()) + "  (grouped / not)", flush=True)
    return out


def across_levels_level(datasets: int, levels: int = 5) -> dict:
    """The heterogeneity table's line per row across levels: per seed the mean of its differences over
    the levels, then the median rule. A seed's levels share its keys, so its differences are dependent:
    here a seed effect shared by every level plus noise per level, exchangeable algorithms."""
    out = {}
    for n in (10, 12, 20):
        rng = np.random.default_rng([25, n])
        shared = rng.standard_t(3, size=(datasets, n, 1))
        d = shared * rng.choice([-1.0, 1.0], size=(datasets, n, 1)) + rng.normal(size=(datasets, n, levels))
        out[str(n)] = float(_rule_decided(d.mean(axis=-1)).mean())
    print("across levels: " + " ".join(f"n={n}: {v:.3f}" for n, v in out.items()), flush=True)
    return out


# Paired differences whose wins and losses are equally likely: the sign rule's nulls.
SIGN_NULL = EXCHANGEABLE + ("one size", "committed, random signs", "skewed (ln 2 - Exp(1))",
                            "rare gain, frequent loss", "ties at 0, even signs", "tied on 90%")
SIGN_SEEDS = (4, 5, 6, 8, 10, 12, 16, 20, 25)


def sign_differences(kind: str, shape: tuple, rng: np.random.Generator, pool: np.ndarray) -> np.ndarray:
    """Paired differences of one SIGN_NULL kind: P(difference > 0) = P(difference < 0)."""
    if kind == "ties at 0, even signs":  # equal on 60% of the seeds, +3 on 20%, -1 on 20%
        u = rng.random(shape)
        return np.where(u < 0.6, 0.0, np.where(u < 0.8, 3.0, -1.0))
    if kind == "tied on 90%":  # both at a task's cap on most seeds, +-(1..100) on the rest
        u = rng.random(shape)
        return np.where(u < 0.9, 0.0, rng.integers(1, 101, size=shape) * np.where(u < 0.95, 1.0, -1.0))
    return rule_differences(kind, shape, rng, pool)


def _sign_decided(d: np.ndarray) -> np.ndarray:
    """The tables' verdict (judge.comparison's direction) says ahead or behind, per dataset."""
    ahead, behind = stats.sign_test((d > 0).sum(-1), (d < 0).sum(-1))
    return (ahead | behind) & stats.decidable(d.shape[-1])


# 'Equivalent' where the typical untied difference lies exactly on the margin (1), at either end, with ties
# (zeros) at the given rate: (tie rate, draw of the untied values). Continuous values on the margin are the
# worst case the computed level (`stats.equivalence_level`) allows for; atoms on the margin, and untied seeds
# that are all wins (which must never read equivalent), lie below it.
EQUIVALENCE_NULL = {
    "normal around +margin": (0.0, lambda rng, shape: 1.0 + rng.normal(size=shape)),
    "normal around -margin": (0.0, lambda rng, shape: -1.0 + rng.normal(size=shape)),
    "30% ties, untied around +margin": (0.3, lambda rng, shape: 1.0 + rng.normal(size=shape)),
    "60% ties, untied around -margin": (0.6, lambda rng, shape: -1.0 + rng.normal(size=shape)),
    "40% ties, untied 0.5 / 1 / 1.5": (0.4, lambda rng, shape: rng.choice([0.5, 1.0, 1.5], size=shape)),
    "75% ties, untied all wins of 0.5": (0.75, lambda rng, shape: np.full(shape, 0.5)),
}


def sign_part(datasets: int, pool: np.ndarray) -> dict:
    """The sign rule's false ahead/behind rates per null kind and seed count against its computed bound;
    its power for normal differences against the exact one; 'equivalent' at the margin against its
    computed rate; the whole-table test; what a seed plan delivers, per target."""
    out = dict(settings=dict(seeds=SIGN_SEEDS, datasets=datasets, chunk=RULE_CHUNK, rule=stats.RULE,
                             confidence=stats.CONFIDENCE, min_seeds=stats.MIN_SEEDS,
                             equivalence_confidence=stats.EQUIVALENCE_CONFIDENCE, power=power.POWER,
                             plan_pilots=power.PLAN_PILOTS, plan_higher=power.PLAN_HIGHER, plan_ties=power.PLAN_TIES))
    null = {}
    for kind_index, kind in enumerate(SIGN_NULL):
        for n in SIGN_SEEDS:
            hits = [_sign_decided(sign_differences(kind, (RULE_CHUNK, n), np.random.default_rng([31, kind_index, n, c]),
                                                   pool)) for c in range(datasets // RULE_CHUNK)]
            null.setdefault(kind, {})[str(n)] = dict(**_rates(hits), bound=stats.sign_level(n))
        print(f"sign {kind:28s} " + " ".join(f"n={n}: {null[kind][str(n)]['rate']:.3f}" for n in SIGN_SEEDS), flush=True)
    out["null"] = null
    power_normal = {}
    for shift in (0.5, 1.0):
        for n in SIGN_SEEDS:
            d = np.random.default_rng([32, int(shift * 10), n]).normal(size=(datasets // 4, n)) + shift
            power_normal.setdefault(f"shift {shift:g}", {})[str(n)] = dict(
                rule=float(_sign_decided(d).mean()), exact=power.rule_power(n, float(scipy.stats.norm.cdf(shift))))
    out["power_normal"] = power_normal
    equivalence = {}
    for kind_index, (name, (tie_rate, draw_fn)) in enumerate(EQUIVALENCE_NULL.items()):
        for n in SIGN_SEEDS:
            rng = np.random.default_rng([33, kind_index, n])
            d = draw_fn(rng, (datasets, n))
            d = np.where(rng.random(d.shape) < tie_rate, 0.0, d)
            ahead, behind = stats.sign_test((d > 0).sum(-1), (d < 0).sum(-1))
            words = stats.verdict(ahead, behind, stats.decidable(n), stats.equivalence_interval(d), margin=1.0)
            said = words == stats.EQUIVALENT
            equivalence.setdefault(name, {})[str(n)] = dict(
                rate=float(np.mean(said)), se=float(np.std(said) / np.sqrt(said.size)),
                computed=stats.equivalence_level(n))
        print(f"equivalent {name:40s} " + " ".join(f"n={n}: {equivalence[name][str(n)]['rate']:.3f}" for n in SIGN_SEEDS),
              flush=True)
    out["equivalence"] = equivalence
    out["whole_table"] = whole_table_level(datasets, pool, SIGN_NULL, sign_differences)
    out["plan"] = plan_grid()
    return out


def plan_grid() -> dict:
    """Exactly what `power.planned_seeds` delivers (`power.planned_power`) per pilot count, P(higher) and
    tie rate; per pilot count, the grid's mean power weighted by how often a pilot gets a figure (what
    the plan's expected power promises, `power.expected_power`) and the share of pilots planned."""
    cells, by_pilots = {}, {}
    for pilots in power.PLAN_PILOTS:
        mine = []
        for higher in power.PLAN_HIGHER:
            for tie in power.PLAN_TIES:
                cell = power.planned_power(pilots, higher, tie)
                cells[f"{pilots} pilots, P(higher) {higher:g}, ties {tie:g}"] = cell
                mine.append(cell)
        planned = sum(c["planned"] for c in mine)
        by_pilots[str(pilots)] = dict(power=sum(c["planned"] * c["power"] for c in mine) / planned,
                                      planned=planned / len(mine), smallest_cell=min(c["power"] for c in mine))
        print(f"plan from {pilots} pilots: delivers {by_pilots[str(pilots)]['power']:.3f} on the grid, "
              f"{by_pilots[str(pilots)]['planned']:.0%} of pilots planned", flush=True)
    powers = [v["power"] for v in by_pilots.values()]
    by_higher = {}  # per effect: as `mean`, the pilot counts' mean of the power weighted over tie rates
    for higher in power.PLAN_HIGHER:
        per_pilots = []
        for pilots in power.PLAN_PILOTS:
            mine = [cells[f"{pilots} pilots, P(higher) {higher:g}, ties {tie:g}"] for tie in power.PLAN_TIES]
            per_pilots.append(sum(c["planned"] * c["power"] for c in mine) / sum(c["planned"] for c in mine))
        by_higher[f"{higher:g}"] = float(np.mean(per_pilots))
    print("plan per effect: " + ", ".join(f"P(higher) {h}: {v:.3f}" for h, v in by_higher.items()), flush=True)
    return dict(mean=float(np.mean(powers)), smallest=float(np.min(powers)), by_higher=by_higher, by_pilots=by_pilots,
                cells=cells)


def _rates_table(by_kind: dict, seeds: list[str], bound: str, label: str) -> list[str]:
    """A markdown table of simulated rates per kind and seed count, closed by the computed bound (the
    cells' `bound` field, the same for every kind) rounded up, as an "at most" figure is."""
    lines = ["| kind | " + " | ".join(f"n = {n}" for n in seeds) + " |", "| --- | " + " | ".join("---:" for _ in seeds) + " |"]
    for kind, cells in by_kind.items():
        lines.append(f"| {kind} | " + " | ".join(f"{cells[n]['rate']:.1%}" for n in seeds) + " |")
    first = next(iter(by_kind.values()))
    return lines + [f"| {label} | " + " | ".join(at_most(first[n][bound]) for n in seeds) + " |"]


def sign_summary(sign: dict) -> list[str]:
    """REPRODUCTION.md's tables of the sign part."""
    seeds = [str(n) for n in sign["settings"]["seeds"]]
    lines = [f"Ahead/behind said where wins and losses are equally likely ({sign['settings']['datasets']:,} datasets "
             "per cell), and the computed bound (stats.sign_level):", "",
             *_rates_table(sign["null"], seeds, "bound", "bound")]
    lines += ["", "Power for normal differences (simulated / exact):", "",
              "| shift | " + " | ".join(f"n = {n}" for n in seeds) + " |", "| --- | " + " | ".join("---:" for _ in seeds) + " |"]
    for shift, cells in sign["power_normal"].items():
        lines.append(f"| {shift} sd | " + " | ".join(f"{cells[n]['rule']:.0%} / {cells[n]['exact']:.0%}" for n in seeds) + " |")
    lines += ["", "'Equivalent' said where the typical untied difference lies on the margin, ties set aside (simulated; "
              "the computed bound, over every tie count, `stats.equivalence_level`, in the last row):", "",
              *_rates_table(sign["equivalence"], seeds, "computed", "**bound**")]
    lines += ["", "Whole-table sign test, false ahead/behind (largest over the kinds; a task's rows grouped, as "
              "the tables do, and not): " + "; ".join(
        f"{shape}: {max(v['rate'] for v in cell.values()):.1%}" for shape, cell in sign["whole_table"].items())]
    plan = sign["plan"]
    lines += ["", f"What a plan for {sign['settings']['power']:.0%} power delivers (exact): per pilot count, over the "
              f"grid P(higher | untied) {sign['settings']['plan_higher']} x ties {sign['settings']['plan_ties']} "
              "weighted by how often a pilot gets a figure, and the hardest cell:", "",
              "| pilots | power at the planned count | pilots planned | hardest cell |", "| ---: | ---: | ---: | ---: |"]
    for pilots, v in plan["by_pilots"].items():
        lines.append(f"| {pilots} | {v['power']:.1%} | {v['planned']:.0%} | {v['smallest_cell']:.1%} |")
    lines += ["", "Per effect (the pilot counts' mean, weighted over tie rates as above): " + ", ".join(
        f"P(higher) {h} {v:.1%}" for h, v in plan["by_higher"].items())]
    return lines


def rule_summary(rule: dict) -> list[str]:
    """REPRODUCTION.md's tables of the rule part."""
    seeds = [str(n) for n in rule["settings"]["seeds"]]
    lines = ["Ahead/behind said (median rule / the replaced hull at 97% / Student t at 95%; "
             f"{rule['settings']['datasets']:,} datasets per cell, the hull {rule['settings']['hull_datasets']:,}). "
             "Every kind but the last has median difference 0, so for the median rule each rate is a false one; "
             "the mean difference is 0 only where the second column says so, and only there are the hull's and "
             "t's rates false ones:", "",
             "| kind | mean 0 | " + " | ".join(f"n = {n}" for n in seeds) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in seeds) + " |"]
    for kind, cells in rule["null"].items():
        lines.append(f"| {kind} | {'yes' if kind in MEAN_ZERO else 'no'} | " + " | ".join(
            f"{cells[n]['rule']['rate']:.1%} / {cells[n]['hull']['rate']:.1%} / {cells[n]['t']['rate']:.1%}" for n in seeds) + " |")
    lines += ["", "Power for normal differences (median rule, simulated / exact; Student t):", "",
              "| shift | " + " | ".join(f"n = {n}" for n in seeds) + " |", "| --- | " + " | ".join("---:" for _ in seeds) + " |"]
    for shift, cells in rule["power_normal"].items():
        lines.append(f"| {shift} sd | " + " | ".join(
            f"{cells[n]['rule']:.0%} / {cells[n]['sign_power_exact']:.0%}; {cells[n]['t']:.0%}" for n in seeds) + " |")
    lines += ["", "'Equivalent' said where the median difference lies on the margin: " + "; ".join(
        f"{k}: " + ", ".join(f"n = {n} {v:.1%}" for n, v in c.items()) for k, c in rule["equivalence"].items())]
    lines += ["", "Whole-table sign test, false ahead/behind (largest over the kinds; a task's rows grouped, as "
              "the tables do, and not): " + "; ".join(
        f"{shape}: {max(v['rate'] for v in cell.values()):.1%}" for shape, cell in rule["whole_table"].items())]
    lines += ["", "Across levels (per-seed mean over 5 dependent levels): " + ", ".join(
        f"n = {n}: {v:.1%}" for n, v in rule["across_levels"].items())]
    return lines


def summary(record: dict) -> str:
    """REPRODUCTION.md's tables, from the results file: the rule part's; then the first study's
    false-verdict rates and power per candidate, distribution and n, the calibration, the reps check,
    the aggregates and the unpaired rule."""
    paired, names = record["paired"], [c[0] for c in record["settings"]["candidates"]]
    seeds = [str(n) for n in record["settings"]["seeds"]]
    lines = sign_summary(record["sign"]) + [""] if "sign" in record else []
    lines += (rule_summary(record["rule"]) + ["", "The first study, of rules for the mean:", ""]
              if "rule" in record else [])
    lines += ["False verdicts between equal algorithms (share of datasets whose interval excludes 0; "
             f"{paired['normal'][seeds[0]]['null']['datasets']:,} datasets per cell, standard error at most "
             f"{max(c['null'][m]['se'] for d in paired.values() for c in d.values() for m in names):.1%}):", "",
             "| distribution | method | " + " | ".join(f"n = {n}" for n in seeds) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in seeds) + " |"]
    for dist, cells in paired.items():
        for name in names:
            lines.append(f"| {dist} | {name} | " + " | ".join(f"{cells[n]['null'][name]['rate']:.1%}" for n in seeds) + " |")
    for shift in record["settings"]["shifts_in_sd"]:
        key = f"shift {shift:g}"
        lines += ["", f"Power: the share of datasets decided when every difference is shifted by {shift:g} standard "
                  f"deviation ({paired['normal'][seeds[0]][key]['datasets']:,} datasets per cell):", "",
                  "| distribution | method | " + " | ".join(f"n = {n}" for n in seeds) + " |",
                  "| --- | --- | " + " | ".join("---:" for _ in seeds) + " |"]
        for dist, cells in paired.items():
            for name in (mean_intervals.T, f"{mean_intervals.T_AND_BOOTSTRAP_T} at 95%", "tables' rule"):
                lines.append(f"| {dist} | {name} | " + " | ".join(f"{cells[n][key][name]['rate']:.0%}" for n in seeds) + " |")
    lines += ["", "The hull's calibration (largest false-verdict rate at n >= 4 over the four distributions):", ""]
    lines += [f"- nominal {float(level):.0%}: {c['worst_rate']:.2%} ± {c['se']:.2%} ({c['distribution']}, n = {c['seeds']})"
              + (", within 2 standard errors of 5%" if c["holds_5pct"] else ", above 5%")
              for level, c in record["held"]["hull_calibration"].items()]
    if "reps_check" in record:
        worst = max((v["verdicts_differing"], m, d, n) for d, cells in record["reps_check"]["cases"].items()
                    for n, cell in cells.items() for m, v in cell.items())
        lines += ["", f"Resamples: {record['reps_check']['study_reps']:,} against {record['reps_check']['table_reps']:,} "
                  f"on the same datasets changed at most {worst[0]:.2%} of verdicts ({worst[1]}, {worst[2]}, n = {worst[3]})."]
    if "aggregate" in record:
        levels = list(record["aggregate"][0]["normal"]["iqm_difference_excludes_0"])
        lines += ["", "Across rows (IQM difference's stratified percentile interval excludes 0 between equal algorithms; "
                  "P(X > Y)'s nominal 95% interval excludes 1/2):", "",
                  "| table | metric | baseline | rows x seeds | null model | " + " | ".join(f"nominal {float(v):.1%}" for v in levels)
                  + " | P(X > Y) |", "| --- | --- | --- | --- | --- | " + " | ".join("---:" for _ in levels) + " | ---: |"]
        for case in record["aggregate"]:
            for model in ("normal", "resampled"):
                c = case[model]
                lines.append(f"| {case['directory']} | {case['metric']} | {case['baseline']} | {case['rows']} x "
                             f"{'/'.join(map(str, sorted(set(case['seeds']))))} | {model} | "
                             + " | ".join(f"{c['iqm_difference_excludes_0'][v]['rate']:.1%}" for v in levels)
                             + f" | {c['probability_of_improvement_excludes_half']['rate']:.1%} |")
        check = record["aggregate_reps_check"]
        lines += [f"- resamples: {check['study_reps']:,} against {check['table_reps']:,} on {check['datasets']} simulated "
                  f"tables ({', '.join(check['case'])}) changed {check['verdicts_differing']:.1%} of the verdicts "
                  f"({check['rate_study_reps']:.1%} against {check['rate_table_reps']:.1%})"]
        lines += [f"- nominal {float(level):.1%}: largest {c['worst_rate']:.2%} ± {c['se']:.2%}"
                  + (", within 2 standard errors of 5%" if c["holds_5pct"] else ", above 5%")
                  for level, c in record["aggregate_calibration"].items()]
    if "unpaired" in record:
        cases = record["unpaired"]["cases"]
        lines += ["", "Unpaired (two independent samples of n, the tables' rule): "
                  + "; ".join(f"{d} " + ", ".join(f"n = {n}: {v['rate']:.1%}" for n, v in c.items()) for d, c in cases.items())]
    pool = record["committed_pool"]
    lines += ["", f"Committed pool: {pool['values']} standardized differences from {pool['comparisons']} comparisons, "
              f"skewness {pool['skewness']:+.2f}, excess kurtosis {pool['excess_kurtosis']:+.2f}; mean |sample skewness| "
              + ", ".join(f"{k} {v['mean_abs_skewness']:.2f}" for k, v in pool["per_comparison"].items())]
    runs = record["runs"]
    lines += ["", "Cost: " + "; ".join(f"{r['command']}: {r['cpu_s'] / 60:.1f} CPU-minutes, {r['wall_s'] / 60:.1f} "
                                       f"minutes of wall time" for r in runs.values())]
    return "\n".join(lines)


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__)
    parser.add_argument("--part", default="all", choices=("all", "sign", "rule", "paired", "reps", "aggregate", "unpaired"))
    parser.add_argument("--datasets", type=int, default=20_000, help="null datasets per distribution and n "
                        "(power: a quarter as many; default 20000)")
    parser.add_argument("--aggregate-datasets", type=int, default=1500, help="simulated tables per committed "
                        "table, metric, baseline and null model (default 1500)")
    parser.add_argument("--aggregate-reps", type=int, default=4000, help="bootstrap resamples per simulated "
                        "table (default 4000: the 99.5%% level reads the 10th smallest)")
    parser.add_argument("--summary", action="store_true", help="print REPRODUCTION.md's tables from the results file")
    args = parser.parse_args()
    if args.summary:
        print(summary(as_record(harness.read(args.out))))
        return
    start, cpu_start = time.time(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
    info = common.machine()
    record = as_record(harness.read(args.out)) if os.path.exists(args.out) else {}
    comparisons = committed_comparisons()
    pool, pool_summary = committed_pool(comparisons)
    if args.part in ("all", "sign"):
        record["sign"] = sign_part(args.datasets, pool)
    if args.part in ("all", "rule"):
        record["rule"] = rule_part(args.datasets, pool)
    if args.part not in ("rule", "sign"):  # the first study's settings, which its parts below ran with
        record["committed_pool"] = pool_summary
        record["settings"] = dict(seeds=SEEDS, shifts_in_sd=SHIFTS, study_reps=REPS_STUDY, chunk=CHUNK,
                                  level_held=LEVEL_HELD, confidence=stats.CONFIDENCE,
                                  candidates=[[n, m, lv] for n, m, lv in CANDIDATES],
                                  chosen_method=mean_intervals.T_AND_BOOTSTRAP_T, verdict_confidence=mean_intervals.HULL_CONFIDENCE,
                                  min_seeds=4, aggregate_levels=AGGREGATE_LEVELS,
                                  aggregate_confidence=aggregate.AGGREGATE_CONFIDENCE,
                                  committed_tables=[d for _, d in COMMITTED])
    if args.part in ("all", "paired"):
        record["paired"] = paired_part(args.datasets, pool, REPS_STUDY)
        record["held"] = held(record["paired"])
        print(json.dumps(record["held"], indent=1))
    if args.part in ("all", "reps"):
        record["reps_check"] = reps_part(pool)
    if args.part in ("all", "aggregate"):
        record["aggregate"] = aggregate_part(args.aggregate_datasets, args.aggregate_reps)
        record["aggregate_calibration"] = aggregate_calibration(record["aggregate"])
        record["aggregate_reps_check"] = aggregate_reps_check(args.aggregate_reps)
        print(json.dumps(record["aggregate_calibration"], indent=1))
    if args.part in ("all", "unpaired"):
        record["unpaired"] = unpaired_part(args.datasets // 4, REPS_STUDY, pool)
    record.setdefault("runs", {})[args.part] = dict(
        command=" ".join([f"python -m benchmarks.{BENCHMARK}", *sys.argv[1:]]), wall_s=round(time.time() - start, 1),
        cpu_s=round(resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu_start, 1), machine=info)
    harness.write(args.out, BENCHMARK, *as_result(record), machine=info)


if __name__ == "__main__":
    main()
