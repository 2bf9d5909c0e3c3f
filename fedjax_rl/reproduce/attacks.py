"""The report of the `attacks` table (beyond the paper, issue 87): what attackers do to each aggregation
rule, and what each rule costs when nobody attacks, for DQNAvg and FedRDQN.

A finished row (`DIR/attacks/<env>__<param>__K<K>__<rule>__<attack>__<attackers>/row.json`, written by
`fedjax_rl.reproduce.harness`; its programs' settings are `tables.AttackRow.train_overrides`) holds one
FedRDQN program over omega [0, omega]: DQNAvg is its omega 0 point, FedRDQN the table's one omega, on
the same seeds. Every row of a task has the same seed keys, so the same agents' physics per seed, and
the attackers of a seed are the first 1, 2 or 3 of one permutation drawn from its server key
(`core.attacks.attacker_mask`), recorded in the run's final evaluation ("attackers", [K] bool). This
module reads each algorithm's return in every agent's own environment (`local_returns`) and computes,
with `judge.comparison` (the tables' rule: the sign test with ties set aside, equivalence against the
task's margin):

- per attacked row and algorithm, attacked − no attack (the same task and rule without attackers),
  paired by seed, on the honest agents' Minimum: the lowest return over the agents that did not attack,
  in both runs over the same agents' environments (`paired_minimum`);
- per rule other than the mean and algorithm, rule − mean without attackers, on the Minimum over every
  agent: what the rule costs when nobody attacks;

and writes DIR/attacks.md, DIR/attacks.csv (per row and algorithm), DIR/attacks_comparisons.csv and
DIR/attacks.png (per task and algorithm, attacked − no attack against the number of attackers, a panel per
attack and a line per rule). An attacked row whose reference is not finished (or was run with other settings) reads
"no baseline yet". Computes no training; `report.write_outputs` writes it for a table of kind "attacks".
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from fedjax_rl import envs
from fedjax_rl.analysis import cells, judge, power, stats
from fedjax_rl.reproduce import paper
from fedjax_rl.reproduce.legends import Report, comparison_record, margin_note, per_row_line, range_note
from fedjax_rl.reproduce.row_records import load_algorithm
from fedjax_rl.reproduce.tables import (
    ATTACK_KRUM_BYZANTINE, ATTACK_RULES, ATTACKER_COUNTS, ROW_RESULT, Table, attack_rules, row_dir)

NO_BASELINE = "no baseline yet"
ATTACK, COST = "attack", "rule cost"
_GROWS = ("num_seeds",)  # what two rows' requests may differ in and still pair (`_same_request`)


def honest_minimum(local_returns, attackers=None) -> np.ndarray:
    """[seeds] the lowest return over each seed's honest agents: `local_returns` [seeds, K] the global
    policy's return in each agent's own environment, `attackers` [seeds, K] bool who attacked (None: nobody)."""
    returns = np.asarray(local_returns, float)
    if attackers is None:
        return returns.min(axis=-1)
    mask = np.broadcast_to(np.asarray(attackers, bool), returns.shape)
    if mask.all(axis=-1).any():
        raise ValueError("a seed without an honest agent has no honest Minimum")
    return np.where(mask, np.inf, returns).min(axis=-1)


def attacker_masks(seed: int, seed_indices, num_agents: int, attackers: int) -> np.ndarray:
    """[seeds, K] bool: who attacks in the runs of seed indices `seed_indices` of `seed`'s sequence, as
    the compiled program draws it (`program.seed_keys`, `program.server_key`, `attacks.attacker_mask`):
    for runs that did not record it."""
    from fedjax_rl.core import attacks
    from fedjax_rl.training import program

    indices = np.asarray(seed_indices, int)
    keys = program.seed_keys(seed, int(indices.max()) + 1 if indices.size else 0)
    return np.asarray([attacks.attacker_mask(program.server_key(keys[i]), num_agents, attackers) for i in indices], bool)


def row_values(table: Table, out_dir: str, row, record: dict) -> dict:
    """{algorithm label: its reported seeds' indices, `local_returns` [seeds, K], attackers [seeds, K]
    and physics `rates`} of a finished row: the baselines (DQNAvg) and the headline FedRDQN."""
    family, tuning = table.family(row), len(record["seeds"]["tuning"])
    indices = np.asarray(record["seeds"]["reported"], int)
    out = {}
    for label in (*family.baselines, record["headline"]):
        run = load_algorithm(row_dir(out_dir, table, row), record, label)
        final = run["final"]
        stop = tuning + indices.size
        if "attackers" in final:
            mask = np.asarray(final["attackers"], bool)[tuning:stop]
        elif row.attackers:
            mask = attacker_masks(record["seeds"]["seed"], indices, row.num_agents, row.attackers)
        else:
            mask = np.zeros((indices.size, row.num_agents), bool)
        out[label] = dict(seeds=indices, returns=np.asarray(final["local_returns"], float)[tuning:stop],
                          attackers=mask, rates=np.asarray(final["rates"], float)[tuning:stop],
                          nonfinite=went_nonfinite(run["curve"], indices.size + tuning)[tuning:stop])
    return out


def went_nonfinite(curve: dict, num_seeds: int) -> np.ndarray:
    """[seeds] whether a run's training ever reported a non-finite loss or parameter (`nonfinite_step/*`
    of any block > 0): a federation the attack broke, whose final returns are a broken global policy's
    (the table trains on through it: `Table.on_nonfinite`)."""
    steps = [np.asarray(v) for k, v in curve.items() if k.startswith("nonfinite_step/")]
    if not steps:
        return np.zeros(num_seeds, bool)
    return np.any([(s > 0).reshape(s.shape[0], -1).any(axis=1) for s in steps], axis=0)


def _same_request(a: dict, b: dict) -> list[str]:
    """The request settings two rows differ in beyond their seeds' number: they pair only without any."""
    return sorted(k for k in set(a) | set(b) if k not in _GROWS and a.get(k) != b.get(k))


def paired_minimum(compared: dict, reference: dict) -> tuple[np.ndarray, ...]:
    """(seed indices, compared's values, reference's values) on the seeds both hold (`row_values`'
    entries): each the Minimum over the honest agents of `compared` (an attacked row's; every agent where
    nobody attacked), in both runs over the same agents' environments, so that the attackers' own
    environments leave both sides alike. A ValueError where the two runs' agents had other physics on a
    seed (not paired)."""
    common = np.intersect1d(compared["seeds"], reference["seeds"])
    mine = np.searchsorted(compared["seeds"], common)
    theirs = np.searchsorted(reference["seeds"], common)
    if not np.allclose(compared["rates"][mine], reference["rates"][theirs], rtol=1e-6, atol=0):
        raise ValueError("the two rows' agents have other physics on the same seed: they are not paired by seed")
    mask = compared["attackers"][mine]
    return (common, honest_minimum(compared["returns"][mine], mask),
            honest_minimum(reference["returns"][theirs], mask))


def comparisons(table: Table, out_dir: str, records: dict) -> list[dict]:
    """Per finished attacked row and algorithm: attacked − the same rule without attackers (ATTACK); per
    finished rule other than the mean at 0 attackers: rule − mean (COST); each `judge.comparison` on the
    honest agents' Minimum, or a line saying NO_BASELINE where the reference row is not finished with the
    same settings."""
    rows_by_key = {row.key: row for row in table.rows}
    values = {key: row_values(table, out_dir, rows_by_key[key], rec) for key, rec in records.items()}
    out = []
    for key, rec in records.items():
        row = rows_by_key[key]
        if row.attackers:
            kind, reference = ATTACK, row.no_attack
        elif row.aggregation != "mean":
            kind, reference = COST, dataclasses.replace(row, aggregation="mean")
        else:
            continue
        for label in values[key]:
            algorithm = label.split(" (")[0]
            line = dict(kind=kind, row=key, panel=row.panel, env_name=row.env_name, num_agents=row.num_agents,
                        rule=row.aggregation, attack=row.attack, attackers=row.attackers, algorithm=algorithm,
                        robust=label, omega=_omega(rec, label), baseline=reference.key)
            there = records.get(reference.key)
            theirs = None if there is None else values[reference.key].get(label)
            if there is None or theirs is None or _same_request(rec["request"], there["request"]):
                out.append(dict(line, verdict=NO_BASELINE))
                continue
            seeds, x, y = paired_minimum(values[key][label], theirs)
            out.append(dict(line, seed_indices=seeds.tolist(), compared_minimum=float(x.mean()),
                            baseline_minimum=float(y.mean()),
                            **judge.comparison(dict(minimum=x), dict(minimum=y), ("minimum",),
                                               value_range=envs.return_range(row.env_name),
                                               margin=judge.equivalence_margin(row.env_name))))
    return out


def _omega(record: dict, label: str):
    omega = record["algorithms"][label]["omega"]
    return "" if omega is None else omega


LEGEND = (
    "Both tables compare two rows of one task, paired by seed: every row of a task runs the same seed keys, so "
    "on a seed its K = {k} agents have the same physics in every row, and the attackers of a seed are the first "
    "1, 2 or 3 of one draw from its server key (fedjax_rl/core/attacks.py), so 1 attacker's agent attacks in the "
    "rows of 2 and 3 as well. An attacker trains as any agent and receives the global model; only its upload is "
    "replaced, every round: sign_flip (−x), scale (x × {scale:g}), noise (x plus Gaussian noise of standard "
    "deviation {scale:g}) or stale (its own initial model). The rules: mean (FedAvg), the coordinate-wise median, "
    "the trimmed mean dropping floor({trim:g} × K) = {trimmed} agents at each end (so beyond its bound at 3 "
    "attackers of one side), and Krum built for f = {krum} faulty agents (n ≥ 2f + 3). **Honest Minimum**: the "
    "lowest return of the final global policy over the environments of the agents that did not attack; in "
    "attacked − no attack the no-attack row's Minimum is taken over the same agents' environments, so that the "
    "attackers' environments leave both sides alike and fewer environments lift neither. Rule − mean, at 0 "
    "attackers, is the Minimum over every agent. DQNAvg is the omega 0 point of the FedRDQN program and FedRDQN "
    "the table's one omega ({omegas}), declared for every row (not tuned per row, so that every row compares the "
    "same algorithm). Per comparison, over the reported seeds: the seeds where the first row is higher / lower / "
    "equal, and the median of the per-seed differences with its 95% interval (the order-statistic interval, "
    "distribution-free). {range_note}**Verdict** (Tables 1 and 2's rule, on the honest Minimum): *ahead* (the "
    "attack raised the honest Minimum, or the rule beats the mean) if, of the seeds that are not equal, the first "
    "row is higher on more than a fair coin gives with probability 2.5% (the sign test with ties set aside), "
    "*behind* (the attack hurt the honest agents, or the rule costs) likewise; otherwise *equivalent* if the "
    "untied seeds' median difference has its 90% interval strictly inside ± the task's margin ({margins}) with at "
    "least {min_seeds} seeds untied; *too few seeds* below {min_seeds}; *inconclusive* otherwise. Where winning "
    "and losing are equally likely the rule says ahead or behind in at most {rule_level} of comparisons at these "
    "seed counts ({counts}). *{no_baseline}*: the reference row (the same rule without attackers, or the mean) is "
    "not finished with the same settings. **Seeds for {power:.0%} power**: about how many seeds would decide an "
    "undecided comparison that often.")


def _legend(table: Table, records: dict, lines: list[dict]) -> str:
    from fedjax_rl.core import aggregation, attacks

    config = next(iter(next(iter(records.values()))["configs"].values()))["config"]
    k = int(config["num_agents"])
    counts = sorted({line["seeds"] for line in lines if "seeds" in line}) or [0]
    trim = aggregation.TRIM.default
    return LEGEND.format(
        k=k, scale=attacks.ATTACK_SCALE.default, trim=trim, trimmed=aggregation.trimmed_count(trim, k),
        krum=ATTACK_KRUM_BYZANTINE,
        omegas=", ".join(f"{w:g}" for w in next(iter(records.values()))["request"]["omegas"]),
        range_note=range_note(rec["env_name"] for rec in records.values()),
        margins=margin_note(rec["env_name"] for rec in records.values()), min_seeds=stats.MIN_SEEDS,
        rule_level=cells.at_most(max(stats.sign_level(n) for n in counts)), counts=", ".join(map(str, counts)),
        no_baseline=NO_BASELINE, power=power.POWER) + _other_rules(table, records)


def _other_rules(table: Table, records: dict) -> str:
    """The legend's words on rules beyond the library's four that the finished rows ran (`tables.with_rules`)."""
    rows_by_key = {row.key: row for row in table.rows}
    others = list(dict.fromkeys(rows_by_key[key].aggregation for key in records
                                if rows_by_key[key].aggregation not in ATTACK_RULES))
    if not others:
        return ""
    return (f" Beyond the library's rules: {', '.join(others)}, registered aggregation rule(s) run with their own "
            "defaults (`--aggregation NAME`), on the same seeds, attacks and verdicts.")


def _head(compared: str) -> list[str]:
    return [f"| task | rule | attack | attackers | algorithm | seeds | reference Minimum | {compared} Minimum | "
            "higher / lower / equal | median difference [95% CI] | verdict | "
            f"seeds for {power.POWER:.0%} power |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]


def _cells(line: dict) -> str:
    where = f"| {line['panel']} | {line['rule']} | {line['attack']} | {line['attackers']} | {line['algorithm']} |"
    if line["verdict"] == NO_BASELINE:
        return where + f" — | — | — | — | — | *{NO_BASELINE}* ({line['baseline']}) | — |"
    return (where + f" {line['seeds']} | {line['baseline_minimum']:.1f} | {line['compared_minimum']:.1f} | "
            f"{line['higher']} / {line['lower']} / {line['equal']} | {line['minimum'].format()} | "
            f"{cells.verdict_cell(line['verdict'], line['seeds'], line['within_margin'])} | {cells.seeds_cell(line)} |")


def table_lines(table: Table, records: dict, lines: list[dict], rows: list[dict]) -> list[str]:
    """The markdown: what the table is, the legend, what each rule costs, attacked − no attack, the
    verdicts counted, and per row its budget, wall time and machine."""
    md = [f"# {table.title}", "",
          f"**Beyond the paper**: the paper ({paper.SOURCE}) has no attackers and averages by the mean. Each row "
          "trains FedRDQN over omega [0, ω] (DQNAvg its omega 0 point) under one aggregation rule with 0-3 of the "
          "K agents attacking; the tables below judge each attacked row against its rule without attackers, "
          "and each rule against the mean when nobody attacks.", ""]
    budgets = sorted({r["request"]["budget"] for r in records.values()})
    if budgets != [1.0]:
        steps = sorted({n for r in records.values() for n in r["budget"]["steps_per_agent"].values()})
        md += [f"**REDUCED BUDGET**: {'/'.join(f'{n:,}' for n in steps)} steps per agent (fraction(s) "
               f"{', '.join(f'{b:g}' for b in budgets)} of RL-Zoo3's). These numbers are not the full budget.", ""]
    overrides = {k: r["request"][k] for r in records.values() for k in ("agent_overrides", "train_overrides")
                 if r["request"][k]}
    if overrides:
        md += [f"**Settings overridden** (not the paper's): {json.dumps(overrides)}", ""]
    md += [_legend(table, records, lines), ""]
    for kind, title, compared in ((COST, "What each rule costs when nobody attacks: rule − mean, paired by seed", "rule"),
                                  (ATTACK, "Attacked − no attack, the same rule, paired by seed (honest agents' "
                                           "Minimum)", "attacked")):
        mine = [_cells(line) for line in lines if line["kind"] == kind]
        md += [f"## {title}", "", *(_head(compared) + mine if mine else ["No such row has finished yet."]), ""]
    md += ["## Verdicts counted", "",
           "Per task, rule and algorithm, over its attacks and attacker counts. The cells of a rule share their "
           "reference row, so the counts describe the table; they are not a test of their own.", ""]
    for panel in dict.fromkeys(line["panel"] for line in lines):
        for kind in (ATTACK, COST):
            for rule in dict.fromkeys(line["rule"] for line in lines if line["kind"] == kind):
                for algorithm in dict.fromkeys(line["algorithm"] for line in lines):
                    mine = [line["verdict"] for line in lines if (line["panel"], line["kind"], line["rule"],
                                                                  line["algorithm"]) == (panel, kind, rule, algorithm)]
                    if mine:
                        md.append(f"- {panel}, {kind}, {rule}, {algorithm}: " + ", ".join(
                            f"{word} in {mine.count(word)}" for word in (*stats.VERDICTS, NO_BASELINE)
                            if word in mine) + f" of {len(mine)}.")
    return md + _broken(rows) + _per_row(table, records)


def _broken(rows: list[dict]) -> list[str]:
    """Which rows' federations an attack broke, from `csv_records`' `rows`: runs whose training went
    non-finite, kept training to their final evaluation (`Table.on_nonfinite`)."""
    found = [r for r in rows if r["nonfinite_seeds"]]
    md = ["", "## Federations the attack broke", "",
          "Runs whose training reported a non-finite loss or parameter on some block. The table does not stop "
          "them: they train on to the final evaluation, whose returns are those of the broken global policy "
          "(its Q values not finite, it still acts), the model every honest party would have received."]
    if not found:
        return md + ["", "None so far."]
    return md + [""] + [f"- {r['row']}, {r['algorithm']}: {r['nonfinite_seeds']} of {r['seeds']} reported seeds"
                        for r in found]


def _per_row(table: Table, records: dict) -> list[str]:
    md = ["", "## Per row", ""]
    rows_by_key = {row.key: row for row in table.rows}
    for key, rec in records.items():
        seeds = f", seeds {len(rec['seeds']['tuning'])} tuning + {len(rec['seeds']['reported'])} reported"
        md.append(per_row_line(key, rec, seeds, f"{table.name}/{rows_by_key[key].dir_name}/{ROW_RESULT}"))
    return md


def csv_records(table: Table, out_dir: str, records: dict) -> list[dict]:
    """One record per finished row and algorithm: its honest Minimum, Minimum and Average over the
    reported seeds (mean and std, numpy ddof 0)."""
    rows_by_key = {row.key: row for row in table.rows}
    out = []
    for key, rec in records.items():
        row = rows_by_key[key]
        for label, value in row_values(table, out_dir, row, rec).items():
            honest = honest_minimum(value["returns"], value["attackers"])
            metrics = dict(honest_minimum=honest, minimum=value["returns"].min(axis=-1),
                           average=value["returns"].mean(axis=-1))
            out.append(dict(table=table.name, row=key, env_name=row.env_name, param=row.param,
                            num_agents=row.num_agents, aggregation=row.aggregation, attack=row.attack,
                            attackers=row.attackers, algorithm=label, omega=_omega(rec, label), seeds=honest.size,
                            **{f"{m}_{s}": float(getattr(np, s)(v)) for m, v in metrics.items() for s in ("mean", "std")},
                            nonfinite_seeds=int(value["nonfinite"].sum()), budget_fraction=rec["request"]["budget"],
                            steps_per_agent=next(iter(rec["budget"]["steps_per_agent"].values()))))
    return out


def comparison_records(table: Table, lines: list[dict]) -> list[dict]:
    """The comparisons as CSV records (those without a baseline last: the CSV's header is the first's)."""
    where = ("kind", "rule", "attack", "attackers", "algorithm")
    full = [dict(comparison_record(table.name, line, ("minimum",)), **{k: line[k] for k in where},
                 compared_minimum=line["compared_minimum"], baseline_minimum=line["baseline_minimum"])
            for line in lines if line["verdict"] != NO_BASELINE]
    pending = [dict(table=table.name, row=line["row"], num_agents=line["num_agents"], robust=line["robust"],
                    omega=line["omega"], baseline=line["baseline"], verdict=NO_BASELINE, **{k: line[k] for k in where})
               for line in lines if line["verdict"] == NO_BASELINE]
    return full + pending


def write_figure(table: Table, out_dir: str, records: dict, lines: list[dict]) -> str:
    """DIR/attacks.png: per task and algorithm a row of panels, one per attack: the honest agents' Minimum,
    attacked − no attack (the median of the paired differences, with its 95% interval) against the number
    of attackers, a line per rule (0 attackers: 0); a filled marker where the verdict is ahead or behind.
    The rules' markers sit side by side around each count, so that their intervals do not hide each other,
    and a task and algorithm's panels share their y axis, so that the attacks compare at a glance.
    The change rather than the level: a Minimum over fewer agents' environments rises by itself, so the
    levels of rows with more attackers do not compare; their paired differences do."""
    import matplotlib.pyplot as plt

    kinds = tuple(dict.fromkeys(row.attack for row in table.rows if row.attackers))  # a panel per attack
    judged = [line for line in lines if line["kind"] == ATTACK and line["verdict"] != NO_BASELINE]
    series = list(dict.fromkeys((line["panel"], line["algorithm"]) for line in judged)) or [("", "")]
    rules = attack_rules(table)  # the library's, then a user's (`tables.with_rules`)
    colors = {rule: f"C{i % 10}" for i, rule in enumerate(rules)}
    step = min(0.08, 0.32 / max(len(rules) - 1, 1))  # every rule's marker within ±0.16 of its count
    dodge = {rule: step * (i - (len(rules) - 1) / 2) for i, rule in enumerate(rules)}
    fig, axes = plt.subplots(len(series), len(kinds), figsize=(4 * len(kinds), 3.2 * len(series)), squeeze=False,
                             sharey="row")
    for i, (panel, algorithm) in enumerate(series):
        for j, attack in enumerate(kinds):
            ax = axes[i][j]
            ax.axhline(0.0, color="0.6", lw=0.8)
            for rule in rules:
                mine = sorted((line for line in judged if (line["panel"], line["algorithm"], line["rule"],
                                                            line["attack"]) == (panel, algorithm, rule, attack)),
                              key=lambda line: line["attackers"])
                if not mine:
                    continue
                x = [0, *(line["attackers"] + dodge[rule] for line in mine)]
                y = [0.0, *(line["minimum"].estimate for line in mine)]
                ax.plot(x, y, "-", color=colors[rule], label=rule)
                for line in mine:
                    interval, decided = line["minimum"], line["verdict"] in (stats.AHEAD, stats.BEHIND)
                    ax.errorbar(line["attackers"] + dodge[rule], interval.estimate, color=colors[rule], fmt="o", capsize=3,
                                yerr=[[interval.estimate - interval.low], [interval.high - interval.estimate]],
                                markerfacecolor=colors[rule] if decided else "white")
            ax.set_title(f"{panel}, {algorithm}: {attack}", fontsize=9)
            ax.set_xticks([0, *ATTACKER_COUNTS])
            ax.set_xlabel("attackers")
            if j == 0:
                ax.set_ylabel("honest Minimum: attacked − no attack")
            else:
                ax.tick_params(labelleft=True)
    from matplotlib.lines import Line2D

    shown = [rule for rule in rules if any(line["rule"] == rule for line in judged)]
    if shown:
        fig.legend([Line2D([], [], color=colors[rule]) for rule in shown], shown, loc="lower center",
                   ncol=len(shown), fontsize=9, frameon=False)
    reduced = "" if all(r["request"]["budget"] == 1.0 for r in records.values()) else " — REDUCED BUDGET"
    fig.suptitle(f"{table.title}{reduced}\nthe honest agents' Minimum, attacked − the same rule without attackers "
                 "(median of the paired per-seed differences, 95% interval); filled: ahead or behind", fontsize=10)
    fig.tight_layout(rect=(0, 0.05 / len(series), 1, 1))  # room below for the legend
    path = os.path.join(out_dir, f"{table.name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(table: Table, out_dir: str, records: dict) -> Report:
    """The `Report` of the attacks table from its finished rows `records`."""
    lines = comparisons(table, out_dir, records)
    rows = csv_records(table, out_dir, records)
    return Report(table_lines(table, records, lines, rows), rows, comparison_records(table, lines),
                  lambda: [write_figure(table, out_dir, records, lines)])
