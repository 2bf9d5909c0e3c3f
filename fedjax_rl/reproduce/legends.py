"""The words and records the reports print beside the numbers: where a row ran, seed ranges, the
legends' notes on return ranges, margins and the seed plan, a comparison as a CSV record, and the
CSV files themselves; and `Report`, what every kind of table's writer hands back to be written."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from fedjax_rl import envs
from fedjax_rl.analysis import cells, judge, power, stats
from fedjax_rl.training.machine import summary as machine_summary

# The whole-table line read on the rows' confirmatory seeds alone: every row's fresh seeds at the omega it
# had already chosen, the one test of a table declared before those seeds existed.
CONFIRMATORY_TABLE = "**Whole table, confirmatory seeds alone**"


def per_row_line(key: str, record: dict, detail: str, configs: str) -> str:
    """A finished row's line in a report's "Per row" list: its steps per agent ("50,000", or
    "5,000/50,000" where its programs differ), then `detail`, its wall time, where it ran, and the path of
    its exact configs."""
    steps = "/".join(f"{n:,}" for n in sorted(set(record["budget"]["steps_per_agent"].values())))
    wall = "wall not recorded" if record.get("wall_s") is None else f"wall {record['wall_s']:,.0f} s"
    return f"- {key}: {steps} steps per agent{detail}; {wall} on {ran_on(record)}; exact configs: {configs}"


def ran_on(record: dict) -> str:
    """Where a finished row trained, and with which jax, in words. A row run in seed pieces (row.json's
    "pieces") names each piece's own machine, and where its pieces ran on several, which seeds of which
    program ran on each, so that a row assembled on several machines does not read as one machine's;
    where they ran on several jax versions, each machine's. A row without pieces (or whose pieces did
    not record theirs) names the machine of the process that wrote it."""
    unrecorded = "a machine it did not record"
    written_with = record["versions"].get("jax")
    seeds_by_machine: dict[str, dict[str, list[int]]] = {}
    jax_by_machine: dict[str, set] = {}
    for program, found in record["pieces"].items():
        for piece in found:
            machine = piece["machine"] or unrecorded
            seeds_by_machine.setdefault(machine, {}).setdefault(program, []).extend(range(*piece["seeds"]))
            jax_by_machine.setdefault(machine, set()).add(piece.get("jax", written_with))
    if not seeds_by_machine or list(seeds_by_machine) == [unrecorded]:
        return f"{machine_summary(record['machine'])}, jax {written_with}"
    one_jax = len(set().union(*jax_by_machine.values())) == 1
    if len(seeds_by_machine) == 1:
        return f"{next(iter(seeds_by_machine))}, jax {next(iter(jax_by_machine.values())).pop()}"
    where = []
    for machine, programs in seeds_by_machine.items():
        seeds = "; ".join(f"{program} seeds {seed_runs(indices)}" for program, indices in programs.items())
        jax = "" if one_jax else ", jax " + "/".join(sorted(map(str, jax_by_machine[machine])))
        where.append(f"{machine}{jax} ({seeds})")
    return ", ".join(where) + (f", jax {next(iter(jax_by_machine.values())).pop()}" if one_jax else "")


def seed_runs(seeds: list[int]) -> str:
    """Seed indices as runs of consecutive ones: [0, 1, 2, 5] -> '0-2, 5'."""
    runs, seeds = [], sorted(seeds)
    for seed in seeds:
        if runs and seed == runs[-1][1] + 1:
            runs[-1][1] = seed
        else:
            runs.append([seed, seed])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def range_note(env_names) -> str:
    """The legends' sentence on the intervals cut to a task's return range (`stats.difference`'s
    `value_range`), naming the ranges of these tasks; empty where none has one."""
    named = []
    for name in dict.fromkeys(env_names):  # each task once, in the rows' order
        bounds = envs.return_range(name)
        if bounds is not None:
            named.append(f"{name} [{bounds[0]:g}, {bounds[1]:g}]")
    if not named:
        return ""
    return ("An interval is cut to the differences the task's return range allows (" + ", ".join(named)
            + "; fedjax_rl.envs.return_range): the true difference lies inside, so its level and the verdict "
            "stay, and an end at that bound means the seeds set no limit on that side. ")


def margin_note(env_names) -> str:
    """The legends' statement of each task's equivalence margin (`judge.equivalence_margin`)."""
    named, without = [], []
    for name in dict.fromkeys(env_names):
        margin = judge.equivalence_margin(name)
        if margin is None:
            without.append(name)
        else:
            named.append(f"{name} ±{margin:.1f}")
    return (", ".join(named) + (f"; none for {', '.join(without)}, where gymnasium sets no solved return, so "
                                 "nothing there is called equivalent" if without else ""))


def plan_words() -> dict:
    """The seed plan's measured delivery (`power.PLAN_DELIVERY`) as the legends word it."""
    def span(values, unit=""):
        return f"{values[0]:g}{unit}-{values[-1]:g}{unit}" if len(values) > 1 else f"{values[0]:g}{unit}"

    return dict(plan_pilots=", ".join(map(str, power.PLAN_PILOTS)), plan_higher=span(power.PLAN_HIGHER),
                plan_ties=span([100 * t for t in power.PLAN_TIES], "%"), plan_mean=power.PLAN_DELIVERY["mean"],
                plan_smallest=power.PLAN_DELIVERY["smallest"],
                plan_by_effect=cells.plan_by_effect(power.PLAN_DELIVERY["by_higher"]))


def comparison_record(table_name: str, line: dict, metrics) -> dict:
    """A `judge.comparison` line as a comparisons-CSV record: per metric the median difference with its
    interval, the mean difference and P(robust > baseline); on the deciding metric the seeds higher,
    lower and equal, the share of wins among the untied ones with its interval, the equivalence interval
    and margin; the verdict (with `within_margin`), the seeds for power, and the rule with its levels
    (`false_rate_at_most`: the direction test's largest false rate at that seed count, `stats.sign_level`;
    `equivalence_rate_at_most`: how often 'equivalent' is said on the margin, exact given the row's untied
    seeds, `stats.equivalence_level_given`;
    `coverage_at_least`: the median interval's exact coverage)."""
    record = dict(table=table_name, **{k: line[k] for k in ("row", "num_agents", "max_rate", "robust", "omega",
                                                              "baseline", "seeds") if k in line})
    for metric in metrics:
        interval = line[metric]
        record.update({f"{metric}_median_difference": interval.estimate, f"{metric}_low": interval.low,
                       f"{metric}_high": interval.high, f"{metric}_mean_difference": line[f"{metric}_mean"],
                       f"{metric}_improvement": line[f"{metric}_improvement"]})
    equivalence = line["equivalence"]
    share = line["win_share"]
    record.update(higher=line["higher"], lower=line["lower"], equal=line["equal"], win_share=share.estimate,
                  win_share_low=share.low, win_share_high=share.high, margin=line["margin"],
                  equivalence_low=None if equivalence is None else equivalence.low,
                  equivalence_high=None if equivalence is None else equivalence.high,
                  verdict=line["verdict"], within_margin=line["within_margin"],
                  seeds_for_power=line["seeds_for_power"], method=stats.RULE, confidence=stats.CONFIDENCE,
                  false_rate_at_most=round(stats.sign_level(line["seeds"]), 6),
                  equivalence_rate_at_most=round(stats.equivalence_level_given(line["higher"] + line["lower"]), 6),
                  coverage_at_least=round(stats.order_coverage(line["seeds"]), 6))
    return record


class Report(NamedTuple):
    """What a table's report writes, made by its kind's writer (`paper_report` for the tables with the
    paper's shape, `heterogeneity.report` for a map over the heterogeneity level, `attacks.report` for
    the table of attacks): the markdown's lines, the CSV's records (one per row and algorithm), the
    comparisons CSV's records, and the figures, drawn (their paths returned) only when asked for."""

    markdown: list[str]
    rows: list[dict]
    comparisons: list[dict]
    figures: Callable[[], list[str]]


def write_csvs(out_dir: str, tables: dict[str, list[dict]]) -> list[str]:
    """Each {name: rows} as out_dir/NAME.csv, its header the first row's keys; returns the paths. A
    table with no rows yet (a report of the first finished rows, before any comparison has both its
    sides) is an empty file, so that no earlier report's rows are left standing in it."""
    import csv

    paths = []
    for name, rows in tables.items():
        path = os.path.join(out_dir, f"{name}.csv")
        with open(path, "w", newline="") as f:
            if rows:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        paths.append(path)
    return paths


# The reports' legends: what a table's columns, verdicts and scales are, with the levels they quote
# left as fields that `report` computes for the seeds at hand.
NORMALISATION = (
    "normalised score = (return - random-policy return) / (the paper's {ref} return - random-policy return), "
    "per row and per metric (the paper's {ref} Minimum for Minimum, its Average for Average): 0 is a "
    "uniformly random policy and 1 the paper's {ref} in that row. Why: the rows' returns differ in scale "
    "and sign (Acrobot -500..0, CartPole 0..500, HalfCheetah thousands), so they can only be pooled on a "
    "common scale; the random policy is a floor every task has (fedjax_rl.envs.random_return, measured at "
    "the nominal physics of the row's variant), and the paper's {ref} is the one reference every row has "
    "from outside this reproduction, so it cannot move with our own results")

NORMALISATION_BEYOND = (
    "normalised score = (return - random-policy return) / (our {ref}'s mean return - random-policy return), "
    "per row and per metric, over the row's reported seeds: 0 is a uniformly random policy and 1 our {ref} "
    "in that row. The paper has no {ref} numbers to anchor the scale from outside, so our own baseline is "
    "the reference: its IQM is near 1 by construction, and the robust algorithm's is read against it")

COMPARISON_LEGEND = (
    "Per row and baseline, over the reported seeds, paired by seed, on Minimum: on how many seeds {robust} is "
    "higher / lower / equal, and its share of wins among the seeds that are not equal, with its Clopper-Pearson 95% "
    "interval; on Minimum and Average, the median of the per-seed differences with its 95% interval, the "
    "order-statistic interval [d_(k), d_(n+1-k)] (distribution-free, exact whatever the shape of the differences; "
    "fedjax_rl/analysis/stats.py), the size of a typical difference; and the mean difference on Minimum, a "
    "description (the paper's numbers are means), judged by nothing. {range_note}**What the verdict asks**: does "
    "{robust} do better than the baseline on more seeds than it does worse, on Minimum (the paper's claim)? A seed "
    "where both reach the same return (CartPole's cap of 500 on most seeds) says nothing either way and is set "
    "aside. **Verdict**: *ahead* if, of the seeds that are not equal, {robust} is higher on more than a fair coin "
    "gives with probability 2.5% (the sign test with ties set aside: exact given the number of ties, whatever the "
    "returns' distribution), *behind* likewise; otherwise *equivalent* if, on the same seeds, ties set aside as the "
    "direction test sets them aside, the median of the untied seeds' differences has its interval at "
    "{equivalence_level:.0%} (two one-sided tests at 5%) strictly inside ± the task's margin, 5% of the way "
    "from a random policy to gymnasium's solved return, declared before looking ({margins}; "
    "fedjax_rl.analysis.judge.equivalence_margin), with at least {min_seeds} seeds untied, so that a direction could have "
    "been found (a row whose untied seeds all win is never equivalent); *too few seeds* below {min_seeds} seeds, "
    "where no count of wins decides; otherwise *inconclusive*. A direction found whose typical size lies inside "
    "the margin too reads *ahead, within the margin*. **Levels, computed** (stats.sign_level, "
    "stats.equivalence_level): where winning and losing are equally likely, the verdict says ahead or behind in at "
    "most {rule_level} of datasets at these seed counts ({counts}), whatever the tie rate; *equivalent* is said of a "
    "typical untied difference exactly on the margin in at most {equivalence_rate}, whatever the tie rate (exact "
    "given the row's ties: stats.equivalence_level_given). A rule for the mean (the hull of Student t and bootstrap-t intervals) said "
    "ahead or behind of equal means in up to {hull_false_rate:.0%} of simulated datasets "
    "(benchmarks/studies/verdict_coverage.py). **Seeds for {power:.0%} power**: for an undecided comparison, about how many "
    "seeds would decide it that often: the verdict's exact power given wins and ties, averaged over effects with "
    "P(higher) {plan_higher} among untied seeds, either way, and {plan_ties} ties, each weighted by how likely it "
    "makes the seeds seen. Over those effects the figure delivers {plan_mean:.0%} power on average (exact; at least "
    "{plan_smallest:.0%} from pilots of each of {plan_pilots} seeds), not {power:.0%} for each effect: averaged over "
    "the tie rates it delivers {plan_by_effect}; *more than 2,000* where the seeds are too unsure of the direction "
    "for any count to get there.")

WHOLE_TABLE_LEGEND = (
    "**Whole table**: a row's question and test over the table's independent units. A unit is one task at one "
    "reported seed: a task's rows (two perturbed parameters) share their seeds' keys, so they are not independent "
    "draws and count as one unit, on which {robust} wins where it is higher on more of the task's rows than lower, "
    "loses the other way, and is even otherwise; different tasks' runs are independent. *Ahead* if, of the units "
    "that are not even, {robust} wins more than a fair coin gives with probability 2.5% or less, *behind* likewise "
    "(the sign test with ties set aside, as in a row). Where winning and losing are equally likely it says ahead or "
    "behind in at most {whole_level} of tables of {units} units (computed, stats.sign_level); counting each row "
    "as its own unit instead said so in up to 8% of simulated tables whose rows share their signs "
    "(benchmarks/studies/verdict_coverage.py). The share of wins comes with its Clopper-Pearson 95% interval.")

AGGREGATE_LEGEND = (
    "IQM: the mean of the middle half of all (row, reported seed) scores (rliable's interquartile mean). "
    "Intervals: stratified percentile bootstrap, the rows are the strata (seeds are resampled within each row, "
    "the same draw for both algorithms, so the difference stays paired), {reps:,} resamples. A description of the "
    "table's scale, not its verdict (the whole-table line above is). With 4-5 seeds per row such an interval is "
    "narrower than its nominal level, so the difference's is printed at nominal {level:.1%}: on simulated tables "
    "of two equal algorithms shaped like the committed ones, {aggregate_shapes} "
    "(benchmarks/studies/verdict_coverage.py), it excluded 0 in at most {aggregate_false_rate} of them, where a nominal "
    "95% one did in up to {aggregate_nominal_false_rate:.0%}. The IQMs' and P({robust} > baseline)'s intervals are "
    "nominal 95%, not measured as intervals (P's excluded 1/2 in up to {improvement_excludes_half:.0%} of those "
    "tables); P is averaged over the rows.")

CONFIRMATORY_NOTE = (
    "Rows with confirmatory seeds (seed indices {first} on: fresh seeds added after the first reported ones had "
    "been read, at the omega the row had already chosen) have two lines per baseline: the verdict and the counts "
    "below are read on the confirmatory seeds alone, and so is their row's part of the whole-table line; the "
    "exploratory line (the earlier reported seeds) is shown apart and decides nothing. A second whole-table line "
    "reads the confirmatory seeds of every row that has them, and nothing else: the one test of the table "
    "declared before its data existed.")

CHALLENGER_NOTE = (
    "{label} ran as a challenger in {rows} of these rows: a registered algorithm added beside the row's own "
    "programs, on the same seeds (the same keys), budget and settings{omega}. It is judged against the same "
    "baselines, by the same rule, as {robust} above; the row's other programs were read back, not run again.")
