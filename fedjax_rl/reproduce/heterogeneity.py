"""The report of a table that maps a comparison over the heterogeneity level (`heterogeneity`, beyond
the paper): where `FedR* − *Avg` on Minimum pays, against the level p and the number of agents K.

A finished row (`DIR/heterogeneity/<env>__<param>[__K<K>]/row.json`, written by
`fedjax_rl.reproduce.harness`) holds one summary per level p ("points"): each level's headline FedR* omega,
chosen on the tuning seeds at that level (the omega rule), and every algorithm's tuning and reported
numbers. For each row, level and baseline this module computes the paired difference FedR* − baseline
on the reported seeds with `fedjax_rl.analysis.stats` (the verdicts' interval, verdict and seeds for 80% power),
on Minimum, on Average and on the robustness sweep's mean return over 0.1m-1.9m, and writes:

- DIR/heterogeneity.md: the differences per row, level and baseline, and what they add up to;
- DIR/heterogeneity.csv: per row, level and algorithm, Average, Minimum and sweep mean (mean and std);
- DIR/heterogeneity_comparisons.csv: per row, level and baseline, the differences and the verdict;
- DIR/heterogeneity_map.png: one panel per task and parameter, FedR* − baseline on Minimum with its
  interval against p, one line per K (and per baseline where a row has two).

`fedjax_rl.reproduce.report.write_outputs` writes a table with levels (`Table.max_rates`) from the
`report` here. Computes no training.
"""

from __future__ import annotations

import json
import os

import numpy as np

from fedjax_rl import envs
from fedjax_rl.analysis import cells, judge, power, stats
from fedjax_rl.reproduce import paper
from fedjax_rl.reproduce.tables import OMEGA_RULE, ROW_RESULT, Table, row_dir
from fedjax_rl.reproduce.row_records import load_program_run
from fedjax_rl.reproduce.legends import Report, comparison_record, margin_note, per_row_line, range_note

METRICS = ("minimum", "average", "sweep")
METRIC_NAMES = {"minimum": "Minimum", "average": "Average", "sweep": "Sweep mean"}


def reported_values(row_path: str, record: dict, algorithm: dict) -> dict:
    """{metric: the reported seeds' values} of one algorithm of one level of a finished row: Average
    and Minimum from row.json, the sweep's mean return over its scales (0.1m-1.9m) from the metrics
    files of the algorithm's seed pieces."""
    program = algorithm["dir"].partition("/")[0]
    pieces = [piece["dir"] for piece in record["pieces"][program]]
    tuning, total = len(record["seeds"]["tuning"]), len(record["seeds"]["tuning"]) + len(record["seeds"]["reported"])
    sweep = np.asarray(load_program_run(row_path, algorithm["dir"], pieces)["final"]["sweep_returns"], float)
    return dict(minimum=np.asarray(algorithm["reported"]["minimum"], float),
                average=np.asarray(algorithm["reported"]["average"], float),
                sweep=sweep[tuning:total].mean(axis=-1))


def level_points(table: Table, records: dict, out_dir: str):
    """(row key, row, its directory, its record, one level's summary) for every level of every
    finished row: what `reported_values` reads a level's algorithms from."""
    rows_by_key = {row.key: row for row in table.rows}
    for key, rec in records.items():
        row = rows_by_key[key]
        row_path = row_dir(out_dir, table, row)
        for point in rec["points"]:
            yield key, row, row_path, rec, point


# How a challenger's comparisons name the row's own robust algorithm at the level's headline omega.
ROBUST_REFERENCE = "FedR* (headline ω)"


def comparisons(table: Table, records: dict, out_dir: str, challenger: str | None = None) -> list[dict]:
    """Per finished row, level p and baseline: the level's headline FedR* (or the `challenger`'s
    headline, at the levels of the rows that ran it, against the level's headline FedR* as well,
    `ROBUST_REFERENCE`) against the baseline on the reported seeds (judge.comparison), with both
    algorithms' mean Minimum."""
    out = []
    for key, row, row_path, rec, point in level_points(table, records, out_dir):
        if challenger is not None and challenger not in point.get("challengers", {}):
            continue
        algs = point["algorithms"]
        ours = point if challenger is None else point["challengers"][challenger]
        robust = reported_values(row_path, rec, algs[ours["headline"]])
        # A challenger is judged against the row's own FedR* at the level's headline omega as well.
        against = {base: base for base in table.family(row).baselines}
        if challenger is not None:
            against[ROBUST_REFERENCE] = point["headline"]
        for base, label in against.items():
            baseline = reported_values(row_path, rec, algs[label])
            out.append(dict(row=key, panel=row.panel, num_agents=row.num_agents, max_rate=point["max_rate"],
                            robust=ours["headline"], omega=ours["chosen_omega"], baseline=base,
                            robust_minimum=float(robust["minimum"].mean()),
                            baseline_minimum=float(baseline["minimum"].mean()),
                            **judge.comparison(robust, baseline, METRICS, value_range=envs.return_range(row.env_name),
                                               margin=judge.equivalence_margin(row.env_name))))
    return out


def _levels(values: list[float]) -> str:
    return "{" + ", ".join(f"{p:g}" for p in values) + "}"


LEGEND = (
    "Per row (task, parameter, K agents), level p and baseline, over the reported seeds, paired by seed: the "
    "seeds where FedR* is higher / lower / equal on Minimum, and the median of the per-seed differences "
    "FedR* − baseline with its 95% interval (the order-statistic interval, distribution-free; fedjax_rl/analysis/stats.py "
    "and REPRODUCTION.md, \"How the tables judge a comparison\"), on Minimum and Average over the K local "
    "environments and on the robustness sweep's mean return over 0.1m-1.9m. {range_note}FedR* is the level's "
    "headline: the omega chosen on the tuning seeds at that level ({omega_rule}). **Verdict** (Tables 1 and 2's "
    "rule, on Minimum): *ahead* if, of the seeds that are not equal, FedR* is higher on more than a fair coin gives "
    "with probability 2.5% (the sign test with ties set aside), *behind* likewise; otherwise *equivalent* if, ties "
    "set aside as well, the untied seeds' median difference has its 90% interval strictly inside ± the task's margin "
    "({margins}) with at least {min_seeds} seeds untied; *too few seeds* below "
    "{min_seeds}; *inconclusive* otherwise. **Seeds for {power:.0%} power**: about how many seeds would decide it "
    "that often (the verdict's exact power with the wins and ties the seeds show, averaged over what they say of "
    "both). **Across levels**: per row, each seed's Minimum differences averaged over the levels (a seed's levels "
    "share its keys, so they are not independent; its mean over them is one value per seed), and the same rule on "
    "those means.")


def _preamble(table: Table, records: dict) -> list[str]:
    """Title, what the table is, its budget and overridden settings."""
    # A "*" before a word opens emphasis in Markdown ("*Avg"): escaped wherever the text names *Avg.
    title = table.title.replace(" *", " \\*")
    md = [f"# {title}", "",
          f"**Beyond the paper**: the paper ({paper.SOURCE}) tests one heterogeneity level, p = {paper.MAX_RATE:g} with "
          f"K = {paper.NUM_AGENTS} agents. This table maps the robust algorithm's difference from plain averaging "
          "on Minimum against the level p (agent k's parameter m (1 + n_k), n_k ~ U(−p, p)) and the number of "
          "agents K. Each program trains every level, omega and seed at once (p is data of the compiled "
          "program); a seed draws the same u_k ~ U(−1, 1) at every level (n_k = p u_k), and \\*Avg is omega 0 of "
          "the same program (DDPGAvg(2) its own program with the same seed keys), so every comparison is paired "
          "by seed. p = 0 is the homogeneous federation (every agent at the nominal physics); at p = 0.5, K = 5 "
          "a CartPole row has exactly Table 1's settings.", ""]
    budgets = sorted({r["request"]["budget"] for r in records.values()})
    if budgets != [1.0]:
        ran = "; ".join(f"{key}: {'/'.join(f'{n:,}' for n in sorted(set(r['budget']['steps_per_agent'].values())))} "
                        f"steps per agent (RL-Zoo3 {'/'.join(f'{n:,}' for n in sorted(set(r['budget']['paper_steps_per_agent'].values())))})"
                        for key, r in records.items())
        md += [f"**REDUCED BUDGET**: {ran}. These numbers are not the full budget.", ""]
    overrides = {k: r["request"][k] for r in records.values() for k in ("agent_overrides", "train_overrides")
                 if r["request"][k]}
    if overrides:
        md += [f"**Settings overridden** (not the paper's): {json.dumps(overrides)}", ""]
    return md


def table_lines(table: Table, records: dict, lines: list[dict],
                challengers: dict[str, list[dict]] | None = None) -> list[str]:
    """The markdown: preamble, the comparisons per row, level and baseline, where FedR* is ahead, each
    challenger's (`challengers`: {name: its `comparisons`}), and per row its omega choices, wall time
    and machine."""
    md = _preamble(table, records) + [
        "## FedR* − baseline, paired by seed, per level p", "",
        LEGEND.format(omega_rule=OMEGA_RULE, min_seeds=stats.MIN_SEEDS, power=power.POWER,
                      range_note=range_note(rec["env_name"] for rec in records.values()),
                      margins=margin_note(rec["env_name"] for rec in records.values())), ""]
    md += _comparison_table(lines, "FedR*")
    md += (["", "## Where FedR* pays", ""] + answer_lines(lines) + [""] + across_levels_lines(lines)
           + [""] + whole_table_lines(table, lines) + ["", WHOLE_TABLE_LEGEND])
    for name, theirs in (challengers or {}).items():
        label = _challenger_label(records, name)
        md += ["", f"## Challenger: {label} − each baseline and {ROBUST_REFERENCE}, paired by seed, per level p", "",
               CHALLENGER_NOTE.format(label=label), "", *_comparison_table(theirs, label), "",
               *answer_lines(theirs, label), "", *across_levels_lines(theirs, label), "",
               *whole_table_lines(table, theirs, label)]
    return md + _per_row(table, records)


CHALLENGER_NOTE = (
    "{label} ran as a challenger: a registered algorithm added beside each row's own programs, on the same seeds "
    "(the same keys), levels, budget and settings, its omega chosen at each level by the same rule on the same "
    "tuning seeds, and judged against the same baselines by the same rules as FedR* above; the rows' other "
    "programs were read back, not run again.")


def _challenger_label(records: dict, name: str) -> str:
    return next(point["challengers"][name]["label"] for rec in records.values() for point in rec["points"]
                if name in point.get("challengers", {}))


def challenger_names(records: dict) -> list[str]:
    """The challengers of the finished rows (`--challenger`), sorted."""
    return sorted({name for rec in records.values() for point in rec["points"] for name in point.get("challengers", {})})


def _comparison_table(lines: list[dict], robust: str) -> list[str]:
    """The comparisons per row, level and baseline as a markdown table; `robust` names the judged algorithm."""
    md = [f"| row | K | p | baseline | seeds | {robust} (headline ω) | baseline Minimum | {robust} Minimum | "
          f"Minimum: {robust} higher / lower / equal | Minimum: share of wins [95% CI] | Minimum: median difference [95% CI] | "
          "Average: median difference [95% CI] | Sweep mean: median difference [95% CI] | "
          f"verdict | seeds for {power.POWER:.0%} power |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for line in lines:
        md.append(f"| {line['panel']} | {line['num_agents']} | {line['max_rate']:g} | {line['baseline']} | "
                  f"{line['seeds']} | {line['robust']} | {line['baseline_minimum']:.1f} | {line['robust_minimum']:.1f} | "
                  f"{line['higher']} / {line['lower']} / {line['equal']} | {cells.share_cell(line['win_share'])} | "
                  f"{line['minimum'].format()} | {line['average'].format()} | {line['sweep'].format()} | "
                  f"{cells.verdict_cell(line['verdict'], line['seeds'], line['within_margin'])} | "
                  f"{cells.seeds_cell(line)} |")
    return md


WHOLE_TABLE_LEGEND = (
    "Whole row and whole table: a seed's levels (and a task's rows) share its keys, so they are not "
    "independent and cannot be pooled as separate draws. Per row, each seed gives one value, its mean Minimum "
    "difference over the levels, and the rows' rule (the sign test with ties set aside, "
    "and equivalence on the same untied seeds) judges those values; for the table, each (task, "
    "seed) unit is won, lost or even by the mean sign of its differences over the task's rows and levels, and the "
    "whole-table sign test of Tables 1 and 2 (ties set aside) judges the units: a row's question over the table. "
    "Both are exact whatever the shape of the differences.")


def across_levels(lines: list[dict]) -> list[dict]:
    """Per row and baseline: each reported seed's Minimum difference averaged over the row's levels,
    judged by the rows' rule (`judge.comparison` on those means, against the task's margin)."""
    out = []
    for key in dict.fromkeys(line["row"] for line in lines):
        for base in dict.fromkeys(line["baseline"] for line in lines if line["row"] == key):
            mine = [line for line in lines if (line["row"], line["baseline"]) == (key, base)]
            means = np.mean([line["differences"] for line in mine], axis=0)
            out.append(dict(row=key, baseline=base, levels=[line["max_rate"] for line in mine],
                            **judge.comparison(dict(minimum=means), dict(minimum=np.zeros_like(means)), ("minimum",),
                                               margin=mine[0]["margin"])))
    return out


def whole_table_lines(table: Table, lines: list[dict], robust: str = "FedR*") -> list[str]:
    """One line per baseline beginning '**Whole table**': the sign test over (task, seed) units, each
    the mean sign of a seed's Minimum differences over its task's rows and levels (`stats.pooled_signs`
    with the task as the group), as Tables 1 and 2 judge theirs."""
    rows_by_key = {row.key: row for row in table.rows}
    md = []
    for base in dict.fromkeys(line["baseline"] for line in lines):
        mine = [line for line in lines if line["baseline"] == base]
        tasks = [rows_by_key[line["row"]].env_name for line in mine]
        pooled = stats.pooled_signs([line["differences"] for line in mine], groups=tasks)
        md.append(f"**Whole table** against {base}, over {len({line['row'] for line in mine})} rows and "
                  f"{len(mine)} (row, level) points, {pooled['units']} (task, seed) units: {robust} wins "
                  f"{pooled['higher']} (higher at more of its task's points than lower), loses {pooled['lower']}, "
                  f"even {pooled['even']}: {cells.verdict_cell(pooled['verdict'], pooled['units'])} (the sign test "
                  "of Tables 1 and 2's whole-table line).")
    return md


def across_levels_lines(lines: list[dict], robust: str = "FedR*") -> list[str]:
    """One line per row and baseline beginning '**Whole row**': `across_levels`."""
    return [f"**Whole row** {line['row']} against {line['baseline']}, across p = {_levels(line['levels'])}: "
            f"{robust} higher on {line['higher']} of {line['seeds']} seeds on the mean over levels, lower on "
            f"{line['lower']}, equal on {line['equal']}; median {line['minimum'].format()}: "
            f"{cells.verdict_cell(line['verdict'], line['seeds'], line['within_margin'])}" + (
                "" if line["verdict"] in (stats.AHEAD, stats.BEHIND, stats.EQUIVALENT)
                else f" (seeds for {power.POWER:.0%} power: {cells.seeds_cell(line)})") + "."
            for line in across_levels(lines)]


def answer_lines(lines: list[dict], robust: str = "FedR*") -> list[str]:
    """Per row and baseline, the levels at which each verdict fell; then the counts over every point."""
    md = []
    for key in dict.fromkeys(line["row"] for line in lines):
        for base in dict.fromkeys(line["baseline"] for line in lines if line["row"] == key):
            mine = [line for line in lines if (line["row"], line["baseline"]) == (key, base)]
            parts = [f"{word} at p = {_levels([line['max_rate'] for line in mine if line['verdict'] == word])}"
                     for word in stats.VERDICTS if any(line["verdict"] == word for line in mine)]
            md.append(f"- {key}, against {base}: " + "; ".join(parts) + ".")
    counts = {word: sum(line["verdict"] == word for line in lines) for word in stats.VERDICTS}
    md.append(f"- Over all {len(lines)} (row, level, baseline) comparisons: "
              + ", ".join(f"{word} in {n}" for word, n in counts.items() if n) + ".")
    if not counts[stats.AHEAD]:
        undecided = counts[stats.INCONCLUSIVE] + counts[stats.TOO_FEW]
        md.append(f"- {robust}'s Minimum is ahead of its baseline at no level of any finished row"
                  + (f" ({undecided} of the {len(lines)} comparisons undecided)." if undecided else "."))
    return md


def _per_row(table: Table, records: dict) -> list[str]:
    md = ["", "## Per row", ""]
    rows_by_key = {row.key: row for row in table.rows}
    for key, rec in records.items():
        choices = "; ".join(f"p = {point['max_rate']:g}: " + ", ".join(
            f"ω={w}: {float(v):.1f}" for w, v in point["tuning_minimum_mean"].items())
            + f" -> ω = {point['chosen_omega']:g}" + "".join(
                f", {c['label']}: " + ", ".join(f"ω={w}: {float(v):.1f}" for w, v in c["tuning_minimum_mean"].items())
                + f" -> ω = {c['chosen_omega']:g}" for c in point.get("challengers", {}).values()
                if c["tuning_minimum_mean"]) for point in rec["points"])
        md.append(per_row_line(key, rec, f"; tuning-seed mean Minimum {{{choices}}}",
                               f"{table.name}/{rows_by_key[key].dir_name}/{ROW_RESULT}"))
    return md


def csv_records(table: Table, records: dict, out_dir: str) -> list[dict]:
    """One record per finished row, level and algorithm: its Average, Minimum and sweep mean, mean
    and std (numpy, ddof 0) over the reported seeds."""
    out = []
    for key, row, row_path, rec, point in level_points(table, records, out_dir):
        for label, alg in point["algorithms"].items():
            values = reported_values(row_path, rec, alg)
            theirs = {lab: c for c in point.get("challengers", {}).values() for lab in c["labels"]}
            role = ("baseline" if label in table.family(row).baselines
                    else "headline" if label == point["headline"]
                    else "omega grid" if label not in theirs
                    else "challenger" if label == theirs[label]["headline"] else "challenger omega grid")
            out.append(dict(table=table.name, row=key, env_name=row.env_name, param=row.param,
                            num_agents=row.num_agents, max_rate=point["max_rate"], algorithm=label, role=role,
                            omega="" if alg["omega"] is None else alg["omega"], seeds=len(values["minimum"]),
                            **{f"{m}_{s}": float(getattr(np, s)(values[m])) for m in METRICS for s in ("mean", "std")},
                            budget_fraction=rec["request"]["budget"],
                            steps_per_agent=next(iter(rec["budget"]["steps_per_agent"].values()))))
    return out


def comparison_records(table: Table, lines: list[dict]) -> list[dict]:
    """The comparisons as CSV records."""
    return [comparison_record(table.name, line, METRICS) for line in lines]


def write_figure(table: Table, out_dir: str, lines: list[dict], records: dict) -> str:
    """DIR/<table>_map.png: one panel per task and parameter with a finished row, FedR* − baseline on
    Minimum with its interval against p, one line per K (and baseline, where a row has two)."""
    from fedjax_rl.analysis import plots

    panels = {}
    for line in lines:
        series = panels.setdefault(line["panel"], {}).setdefault((line["num_agents"], line["baseline"]), [])
        series.append(line)
    rows_by_panel = {row.panel: row for row in table.rows}
    drawn = []
    for panel, by_series in panels.items():
        baselines = {base for _, base in by_series}
        curves = []
        for (k, base), series in sorted(by_series.items()):
            name = f"K = {k}" + (f", vs {base}" if len(baselines) > 1 else f" (vs {base})")
            curves.append((name, [s["max_rate"] for s in series], [s["minimum"].estimate for s in series],
                           [s["minimum"].low for s in series], [s["minimum"].high for s in series],
                           [s["verdict"] in (stats.AHEAD, stats.BEHIND) for s in series]))
        row = rows_by_panel[panel]
        drawn.append((f"{row.env_name} ({row.paper_param})", curves))
    seeds = sorted({line["seeds"] for line in lines})
    reduced = "" if all(r["request"]["budget"] == 1.0 for r in records.values()) else " — REDUCED BUDGET"
    title = (f"FedR* − *Avg on Minimum against the heterogeneity level p{reduced}\n(median of the paired per-seed "
             f"differences over {'/'.join(map(str, seeds))} reported seeds, 95% interval, within the task's "
             "return range; filled: interval excludes 0")
    return plots.interval_lines_figure(drawn, os.path.join(out_dir, f"{table.name}_map.png"),
                                       xlabel="heterogeneity level p (max perturbation rate)",
                                       ylabel="FedR* − baseline, Minimum", title=title + ")",
                                       beyond_note=" ▲▼: an interval runs beyond the panel.")


def report(table: Table, out_dir: str, records: dict) -> Report:
    """The `Report` of a map over the heterogeneity level: its markdown, CSV records and map
    figure, from the finished rows `records`."""
    lines = comparisons(table, records, out_dir)
    challengers = {name: comparisons(table, records, out_dir, name) for name in challenger_names(records)}
    every = lines + [line for theirs in challengers.values() for line in theirs]
    return Report(table_lines(table, records, lines, challengers), csv_records(table, records, out_dir),
                  comparison_records(table, every), lambda: [write_figure(table, out_dir, lines, records)])
