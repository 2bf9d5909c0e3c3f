"""How often a verdict is false when the two algorithms are equal, and how often it is given when they
differ: the coverage study behind `fedjax_rl.stats.METHOD`, `VERDICT_CONFIDENCE`, `MIN_SEEDS` and
`AGGREGATE_CONFIDENCE`.

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
batched (`fedjax_rl.stats` takes datasets on leading axes), for each of CANDIDATES: the percentile
bootstrap, BCa, Student t and the bootstrap-t at nominal 95%, the hull of Student t and bootstrap-t at
95% and 96%, and the tables' own call with its defaults (the hull at stats.VERDICT_CONFIDENCE, then
`stats.verdict`). The false-verdict rate is the share of datasets whose interval excludes 0; the
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
AGGREGATE_LEVELS (the smallest within 2 standard errors of 5% is stats.AGGREGATE_CONFIDENCE); the
tables print P's measured rate beside it.

Unpaired part. `fedjax-rl compare` on runs with other seed keys: the tables' rule on two independent
samples of n each (normal, t3, skewed).

    nice .venv/bin/python benchmarks/verdict_coverage.py                    # every part, about 30 CPU-minutes
    nice .venv/bin/python benchmarks/verdict_coverage.py --part aggregate   # one part
    .venv/bin/python benchmarks/verdict_coverage.py --summary               # REPRODUCTION.md's tables

Writes benchmarks/results/verdict_coverage.json (each part into its own key, keeping the others).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import scipy.stats

sys.path.insert(0, os.path.dirname(__file__))
from common import machine  # noqa: E402

from fedjax_rl import reproduce, reproduce_report, stats  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")
OUT = os.path.join(os.path.dirname(__file__), "results", "verdict_coverage.json")
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
        table = reproduce.get_table(table_name)
        for key, rec in reproduce_report.finished_rows(table, os.path.join(ROOT, "results", directory)).items():
            algs = rec["algorithms"]
            for base in table.baselines:
                for metric in reproduce_report.METRICS:
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
        for metric in reproduce_report.METRICS:
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
# rising nominal levels, to find the one that holds 95%; None is the tables' own call
# (stats.difference's defaults: stats.METHOD at stats.VERDICT_CONFIDENCE).
CANDIDATES = ((stats.T, stats.T, 0.95), (stats.PERCENTILE, stats.PERCENTILE, 0.95), (stats.BCA, stats.BCA, 0.95),
              (stats.BOOTSTRAP_T, stats.BOOTSTRAP_T, 0.95),
              *((f"{stats.T_AND_BOOTSTRAP_T} at {level:.0%}", stats.T_AND_BOOTSTRAP_T, level) for level in (0.95, 0.96)),
              (TABLES := "tables' rule", None, None))
HULL_LEVELS = {0.95: f"{stats.T_AND_BOOTSTRAP_T} at 95%", 0.96: f"{stats.T_AND_BOOTSTRAP_T} at 96%",
               stats.VERDICT_CONFIDENCE: TABLES}


def interval_of(d: np.ndarray, method: str | None, level: float | None, reps: int, seed: int) -> stats.Interval:
    """The candidate's interval of the paired differences d (robust - baseline, baseline 0)."""
    if method is None:
        return stats.difference(d, np.zeros_like(d), reps=reps, seed=seed)
    return stats.difference(d, np.zeros_like(d), method=method, confidence=level, reps=reps, seed=seed)


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
                        if method is None:  # and the tables' verdict word, MIN_SEEDS included
                            verdicts.append(np.isin(stats.verdict(interval, n), (stats.AHEAD, stats.BEHIND)))
                name = "null" if shift == 0 else f"shift {shift:g}"
                cell[name] = {m: _rates(h) for m, h in hits.items()}
                cell[name]["tables' verdict (stats.verdict)"] = _rates(verdicts)
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
    """The same datasets with REPS_STUDY and with the tables' stats.REPS resamples."""
    out = {}
    for distribution in ("normal", "skewed"):
        for n in (4, 6, 10):
            cell = {}
            for name, method, level in CANDIDATES:
                if method == stats.T:
                    continue  # no resamples
                few, full = [], []
                for c in range(chunks):
                    d = draw(distribution, (chunk, n), np.random.default_rng([99, n, c]), pool)
                    few.append(decided(interval_of(d, method, level, REPS_STUDY, c)))
                    full.append(decided(interval_of(d, method, level, stats.REPS, c)))
                cell[name] = dict(rate_study_reps=_rates(few), rate_table_reps=_rates(full),
                                  verdicts_differing=float(np.mean(np.concatenate(few) != np.concatenate(full))),
                                  datasets=chunks * chunk)
            out.setdefault(distribution, {})[str(n)] = cell
            print(f"reps {distribution:7s} n={n:2d} " + " ".join(
                f"{m}: {v['rate_study_reps']['rate']:.3f} vs {v['rate_table_reps']['rate']:.3f} "
                f"({v['verdicts_differing']:.4f} differ)" for m, v in cell.items()), flush=True)
    return dict(study_reps=REPS_STUDY, table_reps=stats.REPS, cases=out)


def committed_tables() -> list[dict]:
    """Per committed table, metric and baseline: each row's normalised scores of both algorithms."""
    out = []
    for table_name, directory in COMMITTED:
        table = reproduce.get_table(table_name)
        records = reproduce_report.finished_rows(table, os.path.join(ROOT, "results", directory))
        for agg in reproduce_report.aggregates(table, records):
            robust = reproduce_report.normalised_scores(table, records, "headline", agg["metric"])
            baseline = reproduce_report.normalised_scores(table, records, agg["baseline"], agg["metric"])
            rows = [np.concatenate([baseline[k], robust[k]]) for k in agg["rows"]]
            out.append(dict(directory=directory, metric=agg["metric"], baseline=agg["baseline"],
                            seeds=[len(baseline[k]) for k in agg["rows"]], rows=rows))
    return out


AGGREGATE_LEVELS = (0.95, 0.98, 0.99, 0.995)


def aggregate_part(datasets: int, reps: int, chunk: int = 100) -> list[dict]:
    """Per committed table, metric and baseline, and per null model: how often the IQM difference's
    stratified percentile interval excludes 0 at each nominal level of AGGREGATE_LEVELS (the levels
    read off the same resamples, `stats.stratified_samples`, which `stats.stratified_iqm` reads), how
    often its verdict (at stats.AGGREGATE_CONFIDENCE) is given, and how often P(X > Y)'s interval excludes 1/2."""
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
                samples = stats.stratified_samples(pair[0], pair[1], reps=reps, seed=c)
                for level in AGGREGATE_LEVELS:
                    low, high = stats.percentile_interval(samples["difference"][1], level)
                    hits[level].append(decided(stats.Interval(samples["difference"][0], low, high)))
                # stats.stratified_iqm reads these samples at AGGREGATE_CONFIDENCE (tests/test_stats.py).
                point, resampled = samples["difference"]
                verdict = stats.verdict(stats.Interval(point, *stats.percentile_interval(
                    resampled, stats.AGGREGATE_CONFIDENCE)), samples["min_seeds"])
                verdicts.append(np.isin(verdict, (stats.AHEAD, stats.BEHIND)))
                point, resampled = samples["probability_of_improvement"]
                poi_hits.append(decided(stats.Interval(point, *stats.percentile_interval(resampled, stats.CONFIDENCE)), 0.5))
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
    """The verdict at stats.AGGREGATE_CONFIDENCE on the same simulated tables with the study's and the
    tables' resamples, for the shape whose rate was highest (Table 2 at 5%, 6 rows x 4 seeds, Average
    against DDPGAvg(2), resampled)."""
    case = next(c for c in committed_tables() if (c["directory"], c["metric"], c["baseline"])
                == ("table2_5pct", "average", "DDPGAvg(2)"))
    few, full = [], []
    for c in range(datasets // chunk):
        rng = np.random.default_rng([13, c])
        pair = [[rng.choice(row, size=(chunk, n)) for row, n in zip(case["rows"], case["seeds"])] for _ in range(2)]
        for count, hits in ((reps, few), (stats.REPS, full)):
            hits.append(decided(stats.stratified_iqm(pair[0], pair[1], reps=count, seed=c).difference))
    few, full = np.concatenate(few), np.concatenate(full)
    out = dict(case=[case["directory"], case["metric"], case["baseline"], "resampled"], datasets=int(few.size),
               study_reps=reps, table_reps=stats.REPS, rate_study_reps=float(few.mean()),
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
                hits.append(decided(stats.difference(x, y, paired=False, reps=reps, seed=c)))  # the tables' defaults
            out.setdefault(distribution, {})[str(n)] = dict(_rates(hits), datasets=datasets // CHUNK * CHUNK)
            print(f"unpaired {distribution:7s} n={n:2d}: {out[distribution][str(n)]['rate']:.3f}", flush=True)
    return dict(method=stats.METHOD, nominal_level=stats.VERDICT_CONFIDENCE, cases=out)


def summary(record: dict) -> str:
    """REPRODUCTION.md's tables, from the results file: false-verdict rates and power per candidate,
    distribution and n; the calibration; the reps check; the aggregates; the unpaired rule."""
    paired, names = record["paired"], [c[0] for c in record["settings"]["candidates"]]
    seeds = [str(n) for n in record["settings"]["seeds"]]
    lines = ["False verdicts between equal algorithms (share of datasets whose interval excludes 0; "
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
            for name in (stats.T, f"{stats.T_AND_BOOTSTRAP_T} at 95%", "tables' rule"):
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", default="all", choices=("all", "paired", "reps", "aggregate", "unpaired"))
    parser.add_argument("--datasets", type=int, default=20_000, help="null datasets per distribution and n "
                        "(power: a quarter as many; default 20000)")
    parser.add_argument("--aggregate-datasets", type=int, default=1500, help="simulated tables per committed "
                        "table, metric, baseline and null model (default 1500)")
    parser.add_argument("--aggregate-reps", type=int, default=4000, help="bootstrap resamples per simulated "
                        "table (default 4000: the 99.5%% level reads the 10th smallest)")
    parser.add_argument("--summary", action="store_true", help="print REPRODUCTION.md's tables from the results file")
    args = parser.parse_args()
    if args.summary:
        with open(OUT) as f:
            print(summary(json.load(f)))
        return
    start, cpu_start = time.time(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
    record = {}
    if os.path.exists(OUT):
        with open(OUT) as f:
            record = json.load(f)
    comparisons = committed_comparisons()
    pool, pool_summary = committed_pool(comparisons)
    record["committed_pool"] = pool_summary
    record["settings"] = dict(seeds=SEEDS, shifts_in_sd=SHIFTS, study_reps=REPS_STUDY, chunk=CHUNK,
                              level_held=LEVEL_HELD, confidence=stats.CONFIDENCE,
                              candidates=[[n, m, lv] for n, m, lv in CANDIDATES], chosen_method=stats.METHOD,
                              verdict_confidence=stats.VERDICT_CONFIDENCE, min_seeds=stats.MIN_SEEDS,
                              aggregate_levels=AGGREGATE_LEVELS, aggregate_confidence=stats.AGGREGATE_CONFIDENCE,
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
        command=" ".join(["benchmarks/verdict_coverage.py", *sys.argv[1:]]), wall_s=round(time.time() - start, 1),
        cpu_s=round(resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu_start, 1), machine=machine())
    with open(OUT, "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
