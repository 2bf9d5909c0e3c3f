"""Reporting of `fedjax-rl reproduce`: the finished rows of a table (`DIR/<table>/<row>/row.json`,
written by `fedjax_rl.reproduce.harness`; the tables are declared in `fedjax_rl.reproduce.tables`) as the markdown and CSV tables beside the paper's numbers, the
paired comparisons with intervals whose level was measured and the IQM across rows (`fedjax_rl.analysis.stats`), and the
figures. Computes no training; `write_outputs` is `fedjax-rl reproduce TABLE --report-only`.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence

import numpy as np

from fedjax_rl import envs
from fedjax_rl.analysis import aggregate, cells, judge, power, stats
from fedjax_rl.reproduce import attacks, heterogeneity, paper
from fedjax_rl.reproduce.tables import OMEGA_RULE, ROW_RESULT, Table, row_dir, rules_on_disk, with_rules
from fedjax_rl.reproduce.row_records import CONFIRMATORY, EXPLORATORY, finished_rows, load_algorithm, seed_sets
from fedjax_rl.reproduce.legends import (
    AGGREGATE_LEGEND, CHALLENGER_NOTE, COMPARISON_LEGEND, CONFIRMATORY_NOTE, CONFIRMATORY_TABLE, NORMALISATION,
    NORMALISATION_BEYOND, WHOLE_TABLE_LEGEND, comparison_record, margin_note, plan_words, ran_on, range_note, seed_runs,
    Report, write_csvs)


def _stats(values) -> tuple[float, float]:
    return float(np.mean(np.asarray(values, float))), float(np.std(np.asarray(values, float)))


def _fmt(mean_std) -> str:
    return f"{mean_std[0]:.1f} ± {mean_std[1]:.1f}"


def _paper_cell(value, spread) -> str:
    if value is None:
        return paper.NOT_REPORTED
    return f"{value:.1f}" if spread is None else f"{value:.1f} ± {spread:.1f}"  # as the paper prints them


def _sign(value: float) -> str:
    return "+" if value > 0 else "-" if value < 0 else "0"


METRICS = ("minimum", "average")


def comparison_legend(robust: str, env_names: Sequence[str], seed_counts: Sequence[int]) -> str:
    """COMPARISON_LEGEND for these tasks and seed counts, with the levels it quotes computed for them."""
    env_names, counts = list(env_names), sorted(set(seed_counts))
    return COMPARISON_LEGEND.format(
        robust=robust, range_note=range_note(env_names), margins=margin_note(env_names),
        equivalence_level=stats.EQUIVALENCE_CONFIDENCE, min_seeds=stats.MIN_SEEDS, power=power.POWER,
        rule_level=cells.at_most(max(stats.sign_level(n) for n in counts)), counts=", ".join(map(str, counts)),
        equivalence_rate=cells.at_most(max(stats.equivalence_level(n) for n in counts)), **plan_words(),
        hull_false_rate=stats.MEAN_RULE_FALSE_RATE)


def whole_table_lines(table: Table, lines: list[dict], records: dict, robust: str | None = None,
                      legend: bool = True, references: Sequence[str] | None = None) -> list[str]:
    """One line per baseline beginning '**Whole table**': the sign test over the (task, seed) units of
    the rows' Minimum differences (`stats.pooled_signs`, a task's rows grouped), exploratory lines left
    out; where rows hold confirmatory seeds, a second line on those alone (CONFIRMATORY_TABLE), the
    one test of the table declared before its data existed; then (`legend`) what the test is.
    `robust`: the algorithm the lines judge (default: the table's FedR*); `references`: what it is
    judged against (default: the table's baselines)."""
    robust = robust or table.robust_label
    md, units = [], []
    for base in references or table.baselines:
        deciding = [line for line in lines if line["baseline"] == base and line["seed_set"] != EXPLORATORY]
        confirmatory = [line for line in deciding if line["seed_set"] == CONFIRMATORY]
        for title, mine in (("**Whole table**", deciding), (CONFIRMATORY_TABLE, confirmatory)):
            if not mine:
                continue
            pooled = stats.pooled_signs([line["differences"] for line in mine],
                                        groups=[records[line["row"]]["env_name"] for line in mine],
                                        seeds=[line["seed_indices"] for line in mine])
            share = (f"share of wins {_unsigned(pooled['win_share'])}" if pooled["even"] < pooled["units"]
                     else "no unit won or lost")
            md.append(f"{title} against {base}: over {pooled['units']} (task, seed) units ({pooled['rows']} rows "
                      f"of {pooled['groups']} tasks), {robust} wins {pooled['higher']}, loses {pooled['lower']}, "
                      f"even {pooled['even']}; {share}: {cells.verdict_cell(pooled['verdict'], pooled['units'])}.")
            md.append("")
            units.append(pooled["units"])
    if not md:
        return []
    return (["", *md, WHOLE_TABLE_LEGEND.format(robust=robust, units=max(units),
                                                whole_level=cells.at_most(stats.sign_level(max(units))))]
            if legend else ["", *md[:-1]])


def robust_reference(table: Table) -> str:
    """How a challenger's comparisons name the row's own robust algorithm at its headline omega."""
    return f"{table.robust_label} (headline ω)"


def references(table: Table, challenger: str | None = None) -> tuple[str, ...]:
    """What the table judges an algorithm against: the baselines, and for a challenger the row's own
    robust algorithm (`robust_reference`) too."""
    return table.baselines if challenger is None else (*table.baselines, robust_reference(table))


def comparisons(table: Table, records: dict, challenger: str | None = None) -> list[dict]:
    """Per finished row and baseline: the headline FedR* (or the `challenger`'s headline, in the rows
    that ran it, against the row's headline FedR* as well: `references`) on the reported seeds,
    paired by seed (one program's grid, or programs with the same seed keys), on Minimum and on
    Average, as judge.comparison judges it (within the task's return range where it has one);
    and the paper's own Minimum difference where its table reports both. A row with confirmatory seeds
    (`seed_sets`) gives a line on those, which the verdicts count, and one on its exploratory seeds."""
    rows_by_key = {row.key: row for row in table.rows}
    out = []
    for key, rec in records.items():
        if challenger is not None and challenger not in rec.get("challengers", {}):
            continue
        prow, algs = rows_by_key[key], rec["algorithms"]
        headline = rec["headline"] if challenger is None else rec["challengers"][challenger]["headline"]
        bounds = envs.return_range(prow.env_name)
        for (seed_set, positions), base in itertools.product(seed_sets(table, rec).items(),
                                                             references(table, challenger)):
            reference = rec["headline"] if base == robust_reference(table) else base
            robust, baseline = ({metric: np.asarray(values, float)[positions] for metric, values in algs[name]["reported"].items()}
                                for name in (headline, reference))
            line = dict(row=key, baseline=base, robust=headline, seed_set=seed_set,
                        seed_indices=np.asarray(rec["seeds"]["reported"])[positions].tolist(),
                        **judge.comparison(robust, baseline, METRICS, value_range=bounds,
                                           margin=judge.equivalence_margin(prow.env_name)))
            # The paper's difference is its robust algorithm's against a baseline, not a challenger's.
            p_robust, p_base = ((None, None) if challenger is not None else
                                (prow.paper_numbers(table.robust_label)[1], prow.paper_numbers(base)[1]))
            # Rounded as the paper prints its numbers (one decimal), so that -4.7 is not -4.700000000000017.
            line["paper_minimum_difference"] = None if p_robust is None or p_base is None else round(p_robust - p_base, 1)
            line["sign_agrees"] = (None if line["paper_minimum_difference"] is None
                                   else _sign(line["minimum_mean"]) == _sign(line["paper_minimum_difference"]))
            out.append(line)
    return out


def _anchors(table: Table, row: paper.PaperRow, metric: str, record: dict | None = None) -> tuple[float, float | None]:
    """(random-policy return, the reference baseline's `metric`) of a row: NORMALISATION's 0 and 1.
    The reference is the paper's number, or for a table beyond the paper our baseline's mean over the
    reported seeds of `record` (NORMALISATION_BEYOND)."""
    if table.in_paper:
        reference = dict(zip(("average", "minimum"), row.paper_numbers(table.paper_baseline)))[metric]
    else:
        reference = None if record is None else float(np.mean(record["algorithms"][table.paper_baseline]["reported"][metric]))
    return envs.random_return(row.env_name, (row.param,)), reference


def _label_in(rec: dict, algorithm: str, table: Table) -> str:
    """The label in row `rec` of `algorithm`: "headline" (or `robust_reference`) is the row's headline
    FedR*, "challenger:NAME" that challenger's headline, anything else a label."""
    if algorithm in ("headline", robust_reference(table)):
        return rec["headline"]
    if algorithm.startswith("challenger:"):
        return rec["challengers"][algorithm.partition(":")[2]]["headline"]
    return algorithm


def normalised_scores(table: Table, records: dict, algorithm: str, metric: str) -> dict:
    """{row key: the reported seeds' `metric` of `algorithm` (`_label_in`), normalised by the random
    policy and the paper's reference baseline (NORMALISATION)}; rows without the paper's reference
    number are left out."""
    rows_by_key = {row.key: row for row in table.rows}
    out = {}
    for key, rec in records.items():
        random_return, reference = _anchors(table, rows_by_key[key], metric, rec)
        if reference is not None:
            label = _label_in(rec, algorithm, table)
            out[key] = aggregate.normalise(rec["algorithms"][label]["reported"][metric], random_return, reference)
    return out


def paper_robust_iqm(table: Table, keys: Sequence[str], metric: str) -> float:
    """IQM over the rows `keys` of the paper's own FedR* number, normalised as `normalised_scores`."""
    rows_by_key = {row.key: row for row in table.rows}
    index = ("average", "minimum").index(metric)  # paper_numbers' order
    return aggregate.iqm([float(aggregate.normalise(rows_by_key[k].paper_numbers(table.robust_label)[index],
                                            *_anchors(table, rows_by_key[k], metric))) for k in keys])


def aggregates(table: Table, records: dict, challenger: str | None = None) -> list[dict]:
    """Per metric and baseline: the IQM over every (row, reported seed) of the normalised scores of
    the baseline and of the headline FedR* (or of the `challenger`'s headline, against the headline
    FedR* as well: `references`), their difference and the mean P(FedR* > baseline), with
    stratified bootstrap intervals (rows are the strata; `aggregate.stratified_iqm`)."""
    out = []
    for metric in METRICS:
        robust = normalised_scores(table, records, "headline" if challenger is None else f"challenger:{challenger}",
                                   metric)
        for base in references(table, challenger):
            baseline = normalised_scores(table, records, base, metric)
            keys = [k for k in robust if k in baseline]
            if keys:
                out.append(dict(metric=metric, baseline=base, rows=keys,
                                aggregate=aggregate.stratified_iqm([baseline[k] for k in keys], [robust[k] for k in keys])))
    return out


def table_lines(table: Table, records: dict) -> tuple[list[str], list[dict], list[dict]]:
    """Markdown lines, CSV records (one per row and algorithm) and comparison CSV records (one per
    row and baseline) for the finished rows."""
    md = _preamble_lines(table, records)
    rows_md, csv_rows = _algorithm_rows(table, records)
    comparison_md, comparison_rows = _comparison_section(table, records)
    challenger_md, challenger_rows = _challenger_sections(table, records)
    md += (rows_md + comparison_md + challenger_md + _aggregate_section(table, records)
           + _per_row_section(table, records))
    return md, csv_rows, comparison_rows + challenger_rows


def _preamble_lines(table: Table, records: dict) -> list[str]:
    """The title, where the paper's numbers come from, the budget and overridden settings, and the
    head of the per-algorithm table."""
    unreported = [b for b in table.baselines if b != table.paper_baseline]
    theirs = sorted({c["label"] for rec in records.values() for c in rec.get("challengers", {}).values()})
    title = table.title + (f", with challenger{'s' if len(theirs) > 1 else ''} {', '.join(theirs)}" if theirs else "")
    if table.in_paper:
        md = [f"# {title}", "",
              f"Source of the paper's numbers: {paper.SOURCE} ({paper.URL}), transcribed in fedjax_rl/reproduce/paper.py "
              "with their \"±\" as printed (the paper does not say over what)."
              + (f" The paper's table does not report {', '.join(unreported)} (its figures do)." if unreported else ""), ""]
    else:
        md = [f"# {title}", "",
              f"**Beyond the paper**: {paper.SOURCE} reports no numbers for {table.robust_label} or "
              f"{', '.join(table.baselines)}, so this table has no paper columns. It tests the paper's claim, "
              f"{paper.CLAIM}, on these algorithms.", ""]
    budgets = sorted({r["request"]["budget"] for r in records.values()})
    if budgets != [1.0]:
        # The steps each row ran, not only the fraction: a fraction is rounded to whole evaluation
        # blocks of at least one round (--budget 1e-6 runs 100 steps, not 0.05).
        full = "paper" if table.in_paper else "RL-Zoo3"  # beyond the paper the full budget is RL-Zoo3's
        ran = {key: f"{_steps(r['budget']['steps_per_agent'])} steps per agent ({full} "
                    f"{_steps(r['budget']['paper_steps_per_agent'])})" for key, r in records.items()}
        ran = (f"{next(iter(ran.values()))} in every row" if len(set(ran.values())) == 1
               else "; ".join(f"{key}: {text}" for key, text in ran.items()))
        md += [f"**REDUCED BUDGET**: {ran} (requested fraction(s) {', '.join(f'{b:g}' for b in budgets)} of the "
               + ("paper's RL-Zoo3 steps" if table.in_paper else "RL-Zoo3's steps")
               + ", rounded to whole evaluation blocks). These numbers are not the "
               + ("paper's setting." if table.in_paper else "full budget."), ""]
    overrides = {k: r["request"][k] for r in records.values() for k in ("agent_overrides", "train_overrides") if r["request"][k]}
    if overrides:
        md += [f"**Settings overridden** (not the paper's): {json.dumps(overrides)}", ""]
    md += [f"Average / Minimum: the final global policy's mean / lowest return over the K = {paper.NUM_AGENTS} "
           "local environments, mean ± std (numpy, ddof 0) over the reported seeds. "
           f"{table.baselines[0]} is the omega = 0 point of the {table.programs[0].label} grid (same program, "
           "same seeds; see fedjax_rl/reproduce/harness.py). Omega rule: " + OMEGA_RULE + ".", "",
           "| row | algorithm | seeds | Average | Minimum |" + (" paper Average | paper Minimum |" if table.in_paper else ""),
           "| --- | --- | --- | --- | --- |" + (" --- | --- |" if table.in_paper else "")]
    return md


def _algorithm_rows(table: Table, records: dict) -> tuple[list[str], list[dict]]:
    """One markdown line and one CSV record per row and algorithm: the baselines, the headline FedR*,
    then the rest of the omega grid."""
    rows_by_key = {row.key: row for row in table.rows}
    md, csv_rows = [], []
    for key, rec in records.items():
        prow = rows_by_key[key]
        algs = rec["algorithms"]
        headline = rec["headline"]
        challengers = rec.get("challengers", {}).values()
        theirs = {lab for c in challengers for lab in c["labels"]}
        order = [*table.baselines, headline] + [lab for lab in algs
                                                if lab not in table.baselines and lab != headline and lab not in theirs]
        roles = {lab: "baseline" if lab in table.baselines else ("headline" if lab == headline else "omega grid")
                 for lab in order}
        for c in challengers:
            order += [c["headline"]] + [lab for lab in c["labels"] if lab != c["headline"]]
            roles |= {lab: "challenger" if lab == c["headline"] else "challenger omega grid" for lab in c["labels"]}
        for lab in order:
            a = algs[lab]
            role = roles[lab]
            paper_label = table.robust_label if role == "headline" else lab
            papers = role in ("baseline", "headline")
            p_avg, p_min = prow.paper_numbers(paper_label) if papers else (None, None)
            s_avg, s_min = prow.paper_spread(paper_label) if papers else (None, None)
            avg, mn = _stats(a["reported"]["average"]), _stats(a["reported"]["minimum"])
            shown = f"**{lab}** ({role})" if role in ("headline", "challenger") else lab
            paper_cells = (_paper_cell(p_avg, s_avg), _paper_cell(p_min, s_min)) if papers else ("", "")
            md.append(f"| {key} | {shown} | {len(a['reported']['average'])} | {_fmt(avg)} | {_fmt(mn)} |"
                      + (f" {paper_cells[0]} | {paper_cells[1]} |" if table.in_paper else ""))
            csv_rows.append(dict(table=table.name, row=key, env_name=rec["env_name"], param=rec["param"], algorithm=lab,
                                 role=role, omega="" if a["omega"] is None else a["omega"],
                                 seeds=len(a["reported"]["average"]), average_mean=avg[0], average_std=avg[1],
                                 minimum_mean=mn[0], minimum_std=mn[1], paper_average=p_avg, paper_minimum=p_min,
                                 paper_average_spread=s_avg, paper_minimum_spread=s_min,
                                 budget_fraction=rec["request"]["budget"],
                                 steps_per_agent=next(iter(rec["budget"]["steps_per_agent"].values()))))
    return md, csv_rows


def _comparison_section(table: Table, records: dict) -> tuple[list[str], list[dict]]:
    """The paired comparisons: how they are judged, one line per row and baseline, and what they
    add up to for the paper's claim."""
    lines = comparisons(table, records)
    robust = table.robust_label
    md = ["", f"## {robust} (headline ω) − baseline, paired by seed", "",
          comparison_legend(robust, [records[line["row"]]["env_name"] for line in lines], [line["seeds"] for line in lines])
          + (" Paper: the paper's own Minimum difference in that row (a difference of means); sign agrees: our "
             "mean difference has the paper's sign." if table.in_paper else ""), "",
          *_comparison_head(robust, table.in_paper)]
    md += [_comparison_cells(line, table.in_paper) for line in lines]
    comparison_rows = [_comparison_csv(table, line) for line in lines]
    if any(line["seed_set"] == EXPLORATORY for line in lines):
        md += ["", CONFIRMATORY_NOTE.format(first=table.confirmatory_from)]
    return md + [""] + _claim_lines(table, records, lines), comparison_rows


def _comparison_cells(line: dict, paper_columns: bool) -> str:
    """One comparison as a markdown table line."""
    paper_diff = line["paper_minimum_difference"]
    agrees = "—" if line["sign_agrees"] is None else ("yes" if line["sign_agrees"] else "no")
    return (f"| {line['row']} | {line['baseline']} | {_seeds_cell(line)} | "
            f"{line['higher']} / {line['lower']} / {line['equal']} | {cells.share_cell(line['win_share'])} | "
            f"{line['minimum'].format()} | {line['average'].format()} | {line['minimum_mean']:+.1f} | "
            f"{cells.verdict_cell(line['verdict'], line['seeds'], line['within_margin'])} | "
            f"{cells.seeds_cell(line)} |"
            + (f" {paper.NOT_REPORTED if paper_diff is None else f'{paper_diff:+.1f}'} | {agrees} |" if paper_columns else ""))


def _comparison_csv(table: Table, line: dict) -> dict:
    return comparison_record(table.name, line, METRICS) | dict(
        seed_set=line["seed_set"], seed_indices=seed_runs(line["seed_indices"]),
        paper_minimum_difference=line["paper_minimum_difference"], sign_agrees=line["sign_agrees"])


def _comparison_head(robust: str, paper_columns: bool, reference: str = "baseline") -> list[str]:
    return [f"| row | {reference} | seeds | Minimum: {robust} higher / lower / equal | Minimum: share of wins [95% CI] | "
            "Minimum: median difference [95% CI] | Average: median difference [95% CI] | Minimum: mean difference | "
            f"verdict | seeds for {power.POWER:.0%} power |"
            + (" paper's Minimum difference | sign agrees |" if paper_columns else ""),
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if paper_columns else "")]


def _verdict_counts(baselines, lines: list[dict], robust: str) -> list[str]:
    """Per baseline, how many rows give each verdict."""
    md = []
    for base in baselines:
        verdicts = [line["verdict"] for line in lines if line["baseline"] == base]
        md.append(f"- Against {base}: {robust} is " + ", ".join(
            f"{word} in {verdicts.count(word)}" for word in stats.VERDICTS
            if word not in (stats.TOO_FEW, stats.EQUIVALENT) or word in verdicts)
            + f" of {len(verdicts)} rows.")
    return md


def _challenger_sections(table: Table, records: dict) -> tuple[list[str], list[dict]]:
    """Per challenger (`--challenger`): its paired comparisons with the baselines, verdict counts and
    the whole-table line, over the rows that ran it."""
    md, csv_rows = [], []
    for name in sorted({name for rec in records.values() for name in rec.get("challengers", {})}):
        mine = {key: rec for key, rec in records.items() if name in rec.get("challengers", {})}
        summaries = [rec["challengers"][name] for rec in mine.values()]
        label = summaries[0]["label"]
        omega = (", its omega chosen by the same rule on the same tuning seeds"
                 if any(s["tuning_minimum_mean"] for s in summaries) else " (it has no omega to choose)")
        lines = comparisons(table, mine, challenger=name)
        against = references(table, name)
        md += ["", f"## Challenger: {label} (headline ω) − {' and '.join(against)}, paired by seed", "",
               CHALLENGER_NOTE.format(label=label, rows=len(mine), omega=omega, robust=table.robust_label), "",
               *_comparison_head(label, False, reference="against"),
               *[_comparison_cells(line, False) for line in lines], ""]
        decisive = [line for line in lines if line["seed_set"] != EXPLORATORY]
        md += (_verdict_counts(against, decisive, label)
               + whole_table_lines(table, decisive, mine, label, legend=False, references=against)
               + _aggregate_rows(table, mine, aggregates(table, mine, name), label, title=f"{label}: IQM across rows"))
        csv_rows += [_comparison_csv(table, line) for line in lines]
    return md, csv_rows


def _seeds_cell(line: dict) -> str:
    """The seed count, naming the seed set where a row holds confirmatory seeds."""
    if line["seed_set"] == "reported":
        return str(line["seeds"])
    return f"{line['seeds']} {line['seed_set']} ({seed_runs(line['seed_indices'])})"


def _claim_lines(table: Table, records: dict, lines: list[dict]) -> list[str]:
    """The verdicts counted per baseline, then per row for the paper's claim, then the signs alone, on
    every line but the exploratory ones."""
    robust = table.robust_label
    lines = [line for line in lines if line["seed_set"] != EXPLORATORY]
    md = _verdict_counts(table.baselines, lines, robust)
    by_row = {key: [line for line in lines if line["row"] == key] for key in records}
    supported = sum(all(line["verdict"] == stats.AHEAD for line in row) for row in by_row.values())
    equivalent = sum(all(line["verdict"] == stats.EQUIVALENT for line in row) for row in by_row.values())
    contradicted = sum(any(line["verdict"] == stats.BEHIND for line in row) for row in by_row.values())
    signs = sum(all(line["minimum_mean"] > 0 for line in row) for row in by_row.values())
    judged = [line for line in lines if line["sign_agrees"] is not None]
    too_few = sum(all(line["verdict"] == stats.TOO_FEW for line in row) for row in by_row.values())
    claim = f"The paper's claim ({paper.CLAIM})" if table.in_paper else f"The paper's claim carried to {robust} ({paper.CLAIM})"
    return md + [
        f"- {claim}: the intervals support it in **{supported}**, contradict it "
        f"(behind some baseline) in **{contradicted}**, find no difference that matters (equivalent to every "
        f"baseline) in **{equivalent}**, and cannot tell in **{len(records) - supported - contradicted - equivalent}** "
        f"of {len(records)} finished rows (of {len(table.rows)} in the table)"
        + (f", {too_few} of them for too few seeds." if too_few else "."),
        f"- Signs alone, a secondary fact: {robust}'s mean Minimum is above every baseline's in {signs} of "
        f"{len(records)} rows"
        + (f"; our sign agrees with the paper's own in {sum(line['sign_agrees'] for line in judged)} "
           f"of the {len(judged)} comparisons its table reports." if table.in_paper else ".")] + whole_table_lines(table, lines, records)


def _aggregate_section(table: Table, records: dict) -> list[str]:
    """The IQM of normalised scores across rows, per metric and baseline."""
    robust, reference = table.robust_label, table.paper_baseline
    md = ["", "## Across rows: IQM of normalised scores", "",
          (NORMALISATION if table.in_paper else NORMALISATION_BEYOND).format(ref=reference) + ". "
          + AGGREGATE_LEGEND.format(robust=robust, reps=aggregate.REPS, level=aggregate.AGGREGATE_CONFIDENCE,
                                    **{**aggregate.MEASURED,
                                       "aggregate_false_rate": cells.at_most(aggregate.MEASURED["aggregate_false_rate"])})]
    aggs = aggregates(table, records)
    md += _aggregate_rows(table, records, aggs, robust)
    paper_iqm = [f"{paper_robust_iqm(table, agg['rows'], agg['metric']):.2f} on {agg['metric'].capitalize()}"
                 for agg in aggs if agg["baseline"] == reference and table.in_paper]
    if paper_iqm:
        md += ["", f"For scale: in these units the paper's own {robust} means over the same rows have an IQM of "
               f"{' and '.join(paper_iqm)} (its {reference} is 1 by construction)."]
    return md


def _aggregate_rows(table: Table, records: dict, aggs: list[dict], robust: str, title: str | None = None) -> list[str]:
    """`aggregates` as a markdown table of `robust` against each reference (under `title`, if given)."""
    md = ["", *([title, ""] if title else []),
          f"| metric | baseline | rows x seeds | baseline IQM [nominal 95%] | {robust} IQM [nominal 95%] | "
          f"{robust} − baseline [nominal {aggregate.AGGREGATE_CONFIDENCE:.1%}] | "
          f"P({robust} > baseline) [nominal 95%] |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
    for agg in aggs:
        a = agg["aggregate"]
        seeds = sorted({len(records[k]["algorithms"][records[k]["headline"]]["reported"]["minimum"]) for k in agg["rows"]})
        md.append(f"| {agg['metric'].capitalize()} | {agg['baseline']} | {a.num_rows} x {'/'.join(map(str, seeds))} | "
                  f"{_unsigned(a.baseline)} | {_unsigned(a.robust)} | "
                  f"{a.difference.format(2)} | {_unsigned(a.probability_of_improvement)} |")
    return md


def _per_row_section(table: Table, records: dict) -> list[str]:
    """Per row: steps, the omega choice on the tuning seeds, wall time, machine and software."""
    md = ["", "## Per row", ""]
    for key, rec in records.items():
        chosen = ", ".join(f"ω={w}: {float(v):.1f}" for w, v in rec["tuning_minimum_mean"].items())
        theirs = "".join(
            f"; {c['label']}: tuning-seed mean Minimum {{"
            + ", ".join(f"ω={w}: {float(v):.1f}" for w, v in c["tuning_minimum_mean"].items())
            + f"}} -> ω = {c['chosen_omega']:g}"
            for c in rec.get("challengers", {}).values() if c["tuning_minimum_mean"])
        md.append(f"- {key}: steps per agent {rec['budget']['steps_per_agent']} "
                  f"({'paper' if table.in_paper else 'RL-Zoo3'} {rec['budget']['paper_steps_per_agent']}), "
                  f"tuning-seed mean Minimum {{{chosen}}} -> ω = {rec['chosen_omega']:g}{theirs}; {_wall(rec)} "
                  f"on {ran_on(rec)}, "
                  f"{_batching(rec)}{_physics_engine(rec)}; "
                  f"exact configs, versions, machine: {table.name}/{rec['env_name']}__{rec['param']}/{ROW_RESULT}")
    return md


def _unsigned(interval: stats.Interval) -> str:
    return f"{interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}]"


def _steps(per_program: dict) -> str:
    """'100' or '100/200': the distinct steps per agent of a row's programs."""
    return "/".join(f"{n:,}" for n in sorted(set(per_program.values())))


def _physics_engine(rec: dict) -> str:
    """', physics: MuJoCo's C engine' for a MuJoCo row, saying so where the row did not record it
    (`row_records.upgrade_row`)."""
    config = next(iter(rec["configs"].values()))["config"]
    if envs.get(config["env_name"]).engines == ("jax",):
        return ""
    engine = config["engine"]
    return f", physics: {ENGINE_NAMES.get(engine, engine)}" + (
        " (written before engines)" if "engine" in rec.get("unrecorded", []) else "")


ENGINE_NAMES = {"c": "MuJoCo's C engine", "mjx": "MuJoCo-MJX", "warp": "MuJoCo Warp"}


def _batching(rec: dict) -> str:
    """How the row's runs were vmapped (a program in pieces batched differently lists each piece's)."""
    per_program = rec["run_batch"].values()
    batches = {n for value in per_program for n in (value if isinstance(value, list) else [value])}
    sizes = sorted(n for n in batches if n is not None)
    if not sizes:
        return "all runs in one vmap"
    return f"{'/'.join(map(str, sizes))} runs per vmap{', or all in one' if None in batches else ''}"


def _wall(rec: dict) -> str:
    this, total = rec["wall_s_this_process"], rec["wall_s"]
    if total is not None:
        return f"wall {total:.0f} s"
    return (f"wall {this:.0f} s after resuming at block {rec['resumed_blocks']} "
            "(the time before the resume was not recorded)")


def paper_report(table: Table, out_dir: str, records: dict) -> Report:
    """The `Report` of a table of the paper's shape (Tables 1 and 2, and those built like them)."""
    md, csv_rows, comparison_rows = table_lines(table, records)
    return Report(md, csv_rows, comparison_rows, lambda: write_figures(table, out_dir, records))


def write_outputs(table: Table, out_dir: str, figures: bool = True) -> dict:
    """Rebuild DIR/<table>.md, .csv, _comparisons.csv and (with `figures`) the figures from every
    finished row, with the report of the table's kind; trains nothing (`fedjax-rl reproduce TABLE --out
    DIR --report-only`). The attacks table reads the rows of every rule found under `out_dir`, a user's
    rule's too (`tables.rules_on_disk`). Returns {"rows": {key: record}, "paths": [written files]}."""
    table = with_rules(table, rules_on_disk(table, out_dir), check=False)
    records = finished_rows(table, out_dir)
    if not records:
        return {"rows": records, "paths": []}
    kind = attacks.report if table.kind == "attacks" else heterogeneity.report if table.max_rates else paper_report
    made = kind(table, out_dir, records)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{table.name}.md")
    with open(path, "w") as f:
        f.write("\n".join(made.markdown) + "\n")
    paths = [path, *write_csvs(out_dir, {table.name: made.rows, f"{table.name}_comparisons": made.comparisons})]
    if figures:
        paths += made.figures()
    return {"rows": records, "paths": paths}


def write_figures(table: Table, out_dir: str, records: dict) -> list[str]:
    """Nominal learning curves and robustness sweeps as 2 x 4 grids (reported seeds only; the
    baselines and the headline FedR*), the training range 1 ± p shaded on the sweeps."""
    from fedjax_rl.analysis import plots

    curves, sweeps, spans = [], [], set()
    for row in table.rows:
        rec = records.get(row.key)
        title = f"{row.env_name} ({row.paper_param})"
        if rec is None:
            curves.append((title, []))
            sweeps.append((title, []))
            continue
        t = len(rec["seeds"]["tuning"])
        row_path = row_dir(out_dir, table, row)
        c_lines, s_lines = [], []
        for lab in (*table.baselines, rec["headline"], *(c["headline"] for c in rec.get("challengers", {}).values())):
            m = load_algorithm(row_path, rec, lab)
            (curve, curve_span), (sweep, sweep_span) = (plots.band_values(m, "curve", "nominal_return"),
                                                        plots.band_values(m, "final", "sweep_returns"))
            spans |= {curve_span, sweep_span}
            c_lines.append((lab, np.asarray(m["curve"]["env_steps"][0]), curve[t:]))
            s_lines.append((lab, np.asarray(m["final"]["sweep_scales"][0]), sweep[t:]))
        curves.append((title, c_lines))
        sweeps.append((title, s_lines))
    reduced = "" if all(r["request"]["budget"] == 1.0 for r in records.values()) else " — REDUCED BUDGET"
    rate = next(iter(records.values()))["configs"][table.programs[0].name]["config"]["max_rate"]
    band = plots.band_description(spans, seeds="reported seeds")
    return [
        plots.grid_figure(curves, os.path.join(out_dir, f"{table.name}_curves.png"),
                          xlabel="environment steps per agent", ylabel="return (nominal env)",
                          title=f"{table.title}: learning curves{reduced}\n({band}, "
                                f"{plots.PAPER_SMOOTHING}-evaluation moving average)",
                          smooth=plots.PAPER_SMOOTHING),
        plots.grid_figure(sweeps, os.path.join(out_dir, f"{table.name}_sweeps.png"),
                          xlabel="scale c of the nominal parameter", ylabel="return",
                          title=f"{table.title}: robustness sweeps{reduced}\n({band})",
                          shade=(1 - rate, 1 + rate)),
    ]
