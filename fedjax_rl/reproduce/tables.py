"""The declarations that running (`fedjax_rl.reproduce.harness`) and reporting (`fedjax_rl.reproduce.report`)
of `fedjax-rl reproduce` share: the tables (`TABLES`: rows and compiled programs; the command line
takes its choices from it, through the generated flag table), where a row lives in the output
directory, and the omega rule. Both import this module and reporting never imports running, so
the import graph has no cycle (tests/test_layering.py).

A table that maps a comparison over the heterogeneity level (`heterogeneity`, beyond the paper)
declares its levels p (`Table.max_rates`): every program of its rows is a grid over p (the
loop's data, one compiled program, `configs.grid_configs`) and over omega. Its rows (`MapRow`)
name their number of agents K, which shapes the program (one row per K), and the programs they
run and compare (`Family`: FedRDQN against DQNAvg, or FedRDDPG against DDPGAvg(1) and (2)).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np

from fedjax_rl import envs
from fedjax_rl.analysis import power, stats
from fedjax_rl.reproduce import paper
from fedjax_rl.training import run_directory
from fedjax_rl.training.machine import summary as machine_summary

ROW_RESULT = "row.json"
OMEGA_RULE = ("headline omega = argmax over the grid (omega > 0) of the mean Minimum on the tuning seeds "
              "(ties: the smaller omega); never chosen on the reported seeds")


@dataclasses.dataclass(frozen=True)
class Program:
    """One compiled program of a row. name: its sub-directory. zero_label: the baseline name of
    its omega = 0 grid point (None: no omega grid; the whole program is `label`). challenger: a
    registered algorithm a request adds beside the row's own programs (`challenger_program`), judged
    against the row's baselines; one with omega grids over the request's omegas (no omega = 0 point:
    the row's baseline is its reference) and reports the omega chosen by the row's rule, per level p
    in a table that grids over p."""

    name: str
    algo: str
    label: str
    zero_label: str | None = None
    challenger: bool = False


def challenger_program(algorithm) -> Program:
    """The program that runs a registered `agents.Algorithm` as a challenger in a row (its directory is
    its algo name)."""
    return Program(algorithm.name, algorithm.name, algorithm.label, challenger=True)


@dataclasses.dataclass(frozen=True)
class Family:
    """What a row runs and compares: its programs, the robust algorithm's label, its baselines."""

    programs: tuple[Program, ...]
    robust_label: str
    baselines: tuple[str, ...]


DQN = Family((Program("fedrdqn", "fedrdqn", "FedRDQN", zero_label="DQNAvg"),), "FedRDQN", ("DQNAvg",))
DDPG = Family((Program("fedrddpg", "fedrddpg", "FedRDDPG", zero_label="DDPGAvg(1)"),
               Program("ddpgavg2", "ddpgavg2", "DDPGAvg(2)")), "FedRDDPG", ("DDPGAvg(1)", "DDPGAvg(2)"))


@dataclasses.dataclass(frozen=True)
class MapRow(paper.PaperRow):
    """A row of a table that maps a comparison over the heterogeneity level: a task and parameter
    (`paper.PaperRow`, without paper numbers) at `num_agents` agents (K shapes the program, so each K
    is its own row), running `family`. Its key and directory are Table 1's at the paper's K = 5
    ("CartPole-v1/length") and say K otherwise ("CartPole-v1/length/K=10", CartPole-v1__length__K10)."""

    num_agents: int = paper.NUM_AGENTS
    family: Family | None = None

    @property
    def key(self) -> str:
        return super().key + ("" if self.num_agents == paper.NUM_AGENTS else f"/K={self.num_agents}")

    @property
    def dir_name(self) -> str:
        return super().dir_name + ("" if self.num_agents == paper.NUM_AGENTS else f"__K{self.num_agents}")

    @property
    def panel(self) -> str:
        """The task and parameter without K: a figure's panel, with a line per K."""
        return f"{self.env_name}/{self.param}"


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
    # The heterogeneity levels p every program grids over (None: the paper's p alone, no grid over it).
    max_rates: tuple[float, ...] | None = None
    # The table's own defaults of `reproduce`'s num_seeds, tuning_seeds, omegas where not the paper tables'.
    defaults: dict = dataclasses.field(default_factory=dict)
    # Seed indices from here on are confirmatory: fresh seeds added after the first reported ones had been
    # read, at each row's chosen omega (no new tuning). Where a row has any, its verdict is read on them
    # alone and the earlier reported seeds are reported apart, as exploratory (`seed_sets`).
    confirmatory_from: int | None = None

    def family(self, row: paper.PaperRow) -> "Family":
        """The programs `row` runs and the comparison it reports: its own (a `MapRow`), else the table's."""
        return getattr(row, "family", None) or Family(self.programs, self.robust_label, self.baselines)


TABLES = {
    "table1": Table(
        "table1", "Table 1: DQNAvg vs FedRDQN", paper.TABLE1,
        programs=(Program("fedrdqn", "fedrdqn", "FedRDQN", zero_label="DQNAvg"),),
        robust_label="FedRDQN", baselines=("DQNAvg",), paper_baseline="DQNAvg",
        # 3 tuning and 5 reported seeds (0-7) were read first; 8 on are the confirmatory set (REPRODUCTION.md).
        confirmatory_from=8),
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
    # Beyond the paper (REPRODUCTION.md, "Where robustness pays"): FedR* - *Avg over the heterogeneity
    # level p and the number of agents K. p = 0.5 is a level so that the map passes through the
    # paper's point: at K = 5 exactly Table 1's settings (tests/test_heterogeneity_table.py).
    "heterogeneity": Table(
        "heterogeneity", "Where robustness pays: FedR* − *Avg against heterogeneity (beyond the paper)",
        tuple(MapRow(env, param, paper_param, num_agents=k, family=family)
              for env, param, paper_param, family, agent_counts in (
                  ("CartPole-v1", "length", "length", DQN, (5, 10, 20)),
                  ("CartPole-v1", "masscart", "mass cart", DQN, (5, 10, 20)),
                  ("Pendulum-v1", "m", "mass", DDPG, (5,)),
                  ("LunarLander-v3", "gravity", "gravity", DQN, (5,)),
                  ("Hopper-v4", "torso", "torso", DDPG, (5,)))
              for k in agent_counts),
        programs=DQN.programs, robust_label="FedR*", baselines=("*Avg",), paper_baseline="*Avg", in_paper=False,
        max_rates=(0.0, 0.3, 0.5, 0.6, 0.9), defaults=dict(num_seeds=10, tuning_seeds=2, omegas=(0.05, 0.1)),
        missing_hint="its Hopper-v4 row needs the MuJoCo robots registered in fedjax_rl.envs"),
}


def grid_points(grid: dict | None) -> int:
    """How many points a program's grid has (its Cartesian product); 1 without a grid."""
    return math.prod(len(values) for values in grid.values()) if grid else 1


def first_point_dir(grid: dict) -> str:
    """The directory of a grid's first point (`run_directory.point_label`): "omega=0",
    "max_rate=0,omega=0"."""
    return run_directory.point_label({name: values[0] for name, values in grid.items()})


def chosen_omega(tuning_minimum_mean: dict) -> float:
    """OMEGA_RULE: the omega (> 0) of the highest mean Minimum on the tuning seeds, ties to the smaller."""
    best = max(tuning_minimum_mean.values())
    return min(w for w, v in tuning_minimum_mean.items() if v == best)


def get_table(name: str) -> Table:
    """The table declared as `name`; a ValueError listing the tables if there is none."""
    try:
        return TABLES[name]
    except KeyError:
        raise ValueError(f"table must be one of {sorted(TABLES)}, got {name!r}") from None


def row_dir(out_dir: str, table: Table, row: paper.PaperRow) -> str:
    """The directory that holds one row of `table` under `out_dir`: `OUT/<table>/<env>__<param>` (a
    `MapRow` at another K than the paper's: `__K<K>` appended)."""
    return os.path.join(out_dir, table.name, row.dir_name)


# The layout of row.json. A record carries its number from 2 on; `upgrade_row` reads one of any
# number in today's layout.
ROW_SCHEMA = 2


def upgrade_row(record: dict) -> dict:
    """A row.json record in today's layout (ROW_SCHEMA), whichever version wrote it: the one place that
    knows older rows. A record without a number (1) may lack its pieces (the row ran each program
    whole, in its own directory), its per-program batching (every run in one vmap), the wall time of
    the process that wrote it (then `wall_s` was that process's alone: unknown over a resume), and
    its MuJoCo programs' engine (MJX, the only one then). Fields filled so are listed under
    "unrecorded"."""
    if record.get("schema", 1) >= ROW_SCHEMA:
        return record
    record = {**record, "schema": ROW_SCHEMA, "unrecorded": list(record.get("unrecorded", [])),
              "configs": {name: dict(program) for name, program in record["configs"].items()}}
    record.setdefault("pieces", {})
    record.setdefault("run_batch", {})
    if "wall_s_this_process" not in record:
        record["wall_s_this_process"] = record["wall_s"]
        record["wall_s"] = None if record.get("resumed_blocks") else record["wall_s"]
    for program in record["configs"].values():
        config = program["config"]
        if "engine" not in config:
            mujoco = envs.get_spec(config["env_name"]).engines != ("jax",)
            program["config"] = {**config, "engine": "mjx" if mujoco else None}
            if mujoco and "engine" not in record["unrecorded"]:
                record["unrecorded"].append("engine")
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


def read_row(path: str) -> dict:
    """The row.json at `path`, in today's layout (`upgrade_row`)."""
    with open(path) as f:
        return upgrade_row(json.load(f))


def finished_rows(table: Table, out_dir: str) -> dict:
    """{row key: row record} for every row of `table` with a row.json in `out_dir`, in the table's order."""
    out = {}
    for row in table.rows:
        path = os.path.join(row_dir(out_dir, table, row), ROW_RESULT)
        if os.path.exists(path):
            out[row.key] = read_row(path)
    return out


def load_run(path: str) -> dict:
    """The metrics.json of the loop.run directory `path`."""
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
    ROW/PROGRAM/ in seed order ("" for PROGRAM/ itself); None is PROGRAM/ alone (a program run whole)."""
    program, _, point = rel.partition("/")
    return merge_runs([load_run(os.path.join(row_path, program, piece, point)) for piece in (pieces or [""])])


def pieces_holding(pieces: list[dict], point: dict | None) -> list[dict]:
    """The pieces of a row's program (row.json's "pieces" records, in seed order) that hold the grid
    point `point` ({axis: value}; None: every piece), as far as they run on from seed 0 without one that
    lacks it: a piece that trained a part of the grid records it ("grid"), a piece of the whole grid
    does not. A point's seeds are those pieces' seeds."""
    out = []
    for piece in pieces:
        grid = piece.get("grid")
        if grid is not None and point is not None and any(
                float(value) not in map(float, grid.get(axis, ())) for axis, value in point.items()):
            break
        out.append(piece)
    return out


def load_algorithm(row_path: str, record: dict, label: str) -> dict:
    """The merged metrics of algorithm `label` ("DDPGAvg(1)", "FedRDDPG (ω=0.1)") of the finished row
    whose row.json is `record`, over the seed pieces it lists that hold it."""
    algorithm = record["algorithms"][label]
    rel = algorithm["dir"]
    pieces = record["pieces"].get(rel.partition("/")[0])
    if pieces is not None:
        pieces = pieces_holding(pieces, None if algorithm["omega"] is None else {"omega": algorithm["omega"]})
    run = load_program_run(row_path, rel, None if pieces is None else [p["dir"] for p in pieces])
    if pieces is None:
        return run
    # The row's seeds, [0, n): a program may hold more than the others (pieces are whole).
    n = len(record["seeds"]["tuning"]) + len(record["seeds"]["reported"])
    return {**run, **{part: {k: v[:n] for k, v in run[part].items()} for part in ("curve", "final")}}


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


EXPLORATORY, CONFIRMATORY, REPORTED = "exploratory", "confirmatory", "reported"
# The whole-table line read on the rows' confirmatory seeds alone: every row's fresh seeds at the omega it
# had already chosen, the one test of a table declared before those seeds existed.
CONFIRMATORY_TABLE = "**Whole table, confirmatory seeds alone**"


def seed_sets(table: Table, record: dict) -> dict[str, np.ndarray]:
    """{name: positions among the row's reported seeds}: every reported seed under REPORTED, or, where
    the row holds seeds from `table.confirmatory_from` on, those under CONFIRMATORY (the verdict's) and
    the earlier ones under EXPLORATORY."""
    indices = np.asarray(record["seeds"]["reported"])
    if table.confirmatory_from is None or not (indices >= table.confirmatory_from).any():
        return {REPORTED: np.arange(indices.size)}
    return {CONFIRMATORY: np.flatnonzero(indices >= table.confirmatory_from),
            EXPLORATORY: np.flatnonzero(indices < table.confirmatory_from)}
