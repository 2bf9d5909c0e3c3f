"""The declarations that running (`fedjax_rl.reproduce`) and reporting (`fedjax_rl.reproduce_report`)
of `fedjax-rl reproduce` share: the tables (`TABLES`: rows and compiled programs; the command line
takes its choices from it, through the generated flag table), where a row lives in the output
directory, and the omega rule. Both import this module and reporting never imports running, so
the import graph has no cycle (tests/test_layering.py).
"""

from __future__ import annotations

import dataclasses
import json
import os

from fedjax_rl import paper

ROW_RESULT = "row.json"
OMEGA_RULE = ("headline omega = argmax over the grid (omega > 0) of the mean Minimum on the tuning seeds "
              "(ties: the smaller omega); never chosen on the reported seeds")


@dataclasses.dataclass(frozen=True)
class Program:
    """One compiled program of a row. name: its sub-directory. zero_label: the baseline name of
    its omega = 0 grid point (None: no omega grid; the whole program is `label`)."""

    name: str
    algo: str
    label: str
    zero_label: str | None = None


@dataclasses.dataclass(frozen=True)
class Table:
    """One reproducible table: its rows, the programs each row runs, and how the report names and normalises
    the algorithms."""

    name: str
    title: str
    rows: tuple[paper.PaperRow, ...]
    programs: tuple[Program, ...]
    robust_label: str
    baselines: tuple[str, ...]
    paper_baseline: str  # the baseline the paper's table reports (beyond the paper: ours): the normalisation's reference
    missing_hint: str = ""
    in_paper: bool = True  # False: the paper has no numbers for these algorithms (no paper columns)


TABLES = {
    "table1": Table(
        "table1", "Table 1: DQNAvg vs FedRDQN", paper.TABLE1,
        programs=(Program("fedrdqn", "fedrdqn", "FedRDQN", zero_label="DQNAvg"),),
        robust_label="FedRDQN", baselines=("DQNAvg",), paper_baseline="DQNAvg"),
    "table2": Table(
        "table2", "Table 2: DDPGAvg(1), DDPGAvg(2) vs FedRDDPG", paper.TABLE2,
        programs=(Program("fedrddpg", "fedrddpg", "FedRDDPG", zero_label="DDPGAvg(1)"),
                  Program("ddpgavg2", "ddpgavg2", "DDPGAvg(2)")),
        robust_label="FedRDDPG", baselines=("DDPGAvg(1)", "DDPGAvg(2)"), paper_baseline="DDPGAvg(2)",
        missing_hint=("Table 2 needs the MuJoCo robots Ant-v4, Hopper-v4, HalfCheetah-v4 and Walker2d-v4 "
                      "with body-part physical parameters (torso, thigh, left_leg, left_foot, front_foot, "
                      "front_shin, back_left_leg, front_right_leg) registered in fedjax_rl.envs")),
    # Beyond the paper (REPRODUCTION.md): the robust term on SAC, on two of Table 2's rows. The paper
    # has no numbers for it; omega = 0 of the FedRSAC grid is SACAvg (its target's omega term vanishes).
    "beyond_sac": Table(
        "beyond_sac", "Beyond the paper: SACAvg vs FedRSAC",
        (paper.PaperRow("Hopper-v4", "torso", "torso"), paper.PaperRow("Walker2d-v4", "left_foot", "left foot")),
        programs=(Program("fedrsac", "fedrsac", "FedRSAC", zero_label="SACAvg"),),
        robust_label="FedRSAC", baselines=("SACAvg",), paper_baseline="SACAvg", in_paper=False),
}


def get_table(name: str) -> Table:
    """The table declared as `name`; a ValueError listing the tables if there is none."""
    try:
        return TABLES[name]
    except KeyError:
        raise ValueError(f"table must be one of {sorted(TABLES)}, got {name!r}") from None


def row_dir(out_dir: str, table: Table, row: paper.PaperRow) -> str:
    """The directory that holds one row of `table` under `out_dir`: `OUT/<table>/<env>__<param>`."""
    return os.path.join(out_dir, table.name, f"{row.env_name}__{row.param}")


def load_run(path: str) -> dict:
    """The metrics.json of the experiment.run directory `path`."""
    with open(os.path.join(path, "metrics.json")) as f:
        return json.load(f)


def merge_runs(runs: list[dict]) -> dict:
    """metrics.json records of consecutive seed pieces of one run, as the run: every curve and final
    array concatenated along its leading (seed) axis, the wall times summed, the rest the first's."""
    if len(runs) == 1:
        return runs[0]
    merged = dict(runs[0])
    for part in ("curve", "final"):
        merged[part] = {name: [row for run in runs for row in run[part][name]] for name in runs[0][part]}
    walls = [run.get("timing", {}).get("wall_s") for run in runs]
    merged["timing"] = dict(runs[0].get("timing", {}), wall_s=None if None in walls else sum(walls))
    merged["seed_indices"] = [i for run in runs for i in run.get("seed_indices", range(len(run["final"]["local_average"])))]
    return merged


def load_program_run(row_path: str, rel: str, pieces: list[str] | None = None) -> dict:
    """The metrics of one algorithm of a row, `rel` = PROGRAM or PROGRAM/POINT (a grid point such as
    omega=0.1), merged over the program's seed pieces: `pieces` are their directories relative to
    ROW/PROGRAM/ in seed order ("" for PROGRAM/ itself); None is PROGRAM/ alone (every row written
    before pieces existed)."""
    program, _, point = rel.partition("/")
    return merge_runs([load_run(os.path.join(row_path, program, piece, point)) for piece in (pieces or [""])])


def load_algorithm(row_path: str, record: dict, label: str) -> dict:
    """The merged metrics of algorithm `label` ("DDPGAvg(1)", "FedRDDPG (ω=0.1)") of the finished row
    whose row.json is `record`, over the seed pieces it lists."""
    rel = record["algorithms"][label]["dir"]
    pieces = record.get("pieces", {}).get(rel.partition("/")[0])
    run = load_program_run(row_path, rel, None if pieces is None else [p["dir"] for p in pieces])
    if pieces is None:
        return run
    # The row's seeds, [0, n): a program may hold more than the others (pieces are whole).
    n = len(record["seeds"]["tuning"]) + len(record["seeds"]["reported"])
    return {**run, **{part: {k: v[:n] for k, v in run[part].items()} for part in ("curve", "final")}}
