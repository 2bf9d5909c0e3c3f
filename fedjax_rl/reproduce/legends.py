"""The words and records the reports print beside the numbers: where a row ran, seed ranges, the
legends' notes on return ranges, margins and the seed plan, a comparison as a CSV record, and the
CSV files themselves."""

from __future__ import annotations

import os

from fedjax_rl import envs
from fedjax_rl.analysis import power, stats
from fedjax_rl.training.machine import summary as machine_summary

# The whole-table line read on the rows' confirmatory seeds alone: every row's fresh seeds at the omega it
# had already chosen, the one test of a table declared before those seeds existed.
CONFIRMATORY_TABLE = "**Whole table, confirmatory seeds alone**"


def ran_on(record: dict) -> str:
    """Where a finished row trained, in words. A row run in seed pieces (row.json's "pieces") names
    each piece's own machine, and where its pieces ran on several, which seeds of which program ran on
    each, so that a row assembled on several machines does not read as one machine's; a row without
    pieces (or whose pieces did not record theirs) names the machine of the process that wrote it."""
    unrecorded = "a machine it did not record"
    seeds_by_machine: dict[str, dict[str, list[int]]] = {}
    for program, found in record["pieces"].items():
        for piece in found:
            machine = piece["machine"] or unrecorded
            seeds_by_machine.setdefault(machine, {}).setdefault(program, []).extend(range(*piece["seeds"]))
    if not seeds_by_machine or list(seeds_by_machine) == [unrecorded]:
        return machine_summary(record["machine"])
    if len(seeds_by_machine) == 1:
        return next(iter(seeds_by_machine))
    where = []
    for machine, programs in seeds_by_machine.items():
        seeds = "; ".join(f"{program} seeds {seed_runs(indices)}" for program, indices in programs.items())
        where.append(f"{machine} ({seeds})")
    return ", ".join(where)


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
    """The legends' statement of each task's equivalence margin (`envs.equivalence_margin`)."""
    named, without = [], []
    for name in dict.fromkeys(env_names):
        margin = envs.equivalence_margin(name)
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
                plan_smallest=power.PLAN_DELIVERY["smallest"])


def comparison_record(table_name: str, line: dict, metrics) -> dict:
    """A `judge.comparison` line as a comparisons-CSV record: per metric the median difference with its
    interval, the mean difference and P(robust > baseline); on the deciding metric the seeds higher,
    lower and equal, the share of wins among the untied ones with its interval, the equivalence interval
    and margin; the verdict (with `within_margin`), the seeds for power, and the rule with its levels
    (`false_rate_at_most`: the direction test's largest false rate at that seed count, `stats.sign_level`;
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
                  coverage_at_least=round(stats.order_coverage(line["seeds"]), 6))
    return record


def write_csvs(out_dir: str, tables: dict[str, list[dict]]) -> list[str]:
    """Each {name: rows} as out_dir/NAME.csv, its header the first row's keys; returns the paths."""
    import csv

    paths = []
    for name, rows in tables.items():
        path = os.path.join(out_dir, f"{name}.csv")
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        paths.append(path)
    return paths
