"""The declarations that running (`fedjax_rl.reproduce.harness`) and reporting (`fedjax_rl.reproduce.report`)
of `fedjax-rl reproduce` share: the tables (`TABLES`: rows and compiled programs; the command line
takes its choices from it, through the generated flag table), where a row lives in the output
directory, and the omega rule. Both import this module and reporting never imports running, so
the import graph has no cycle (tests/test_layering.py). A finished row read back from disk is
`fedjax_rl.reproduce.row_records`; the words and records the reports print beside the numbers are
`fedjax_rl.reproduce.legends`.

A table that maps a comparison over the heterogeneity level (`heterogeneity`, beyond the paper)
declares its levels p (`Table.max_rates`): every program of its rows is a grid over p (the
loop's data, one compiled program, `configs.grid_configs`) and over omega. Its rows (`MapRow`)
name their number of agents K, which shapes the program (one row per K), and the programs they
run and compare (`Family`: FedRDQN against DQNAvg, or FedRDDPG against DDPGAvg(1) and (2)).

A table of attacks (`attacks`, beyond the paper) has rows (`AttackRow`) that each fix an aggregation
rule, an attack and a number of attackers: the run settings they mean (`AttackRow.train_overrides`)
enter every program of the row, and its report (`fedjax_rl.reproduce.attacks`, `Table.kind`) compares
each attacked row with its rule's row without attackers, paired by seed.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os

from fedjax_rl.core import attacks
from fedjax_rl.reproduce import paper
from fedjax_rl.training import run_directory

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


NO_ATTACK = "none"  # an AttackRow's attack where nobody attacks
# Krum built for up to 3 faulty agents, the most an attacks row has: K = 10 >= 2 x 3 + 3, its bound.
ATTACK_KRUM_BYZANTINE = 3


@dataclasses.dataclass(frozen=True)
class AttackRow(MapRow):
    """A row of a table of attacks: a task and parameter at `num_agents` agents running `family`
    (`MapRow`) under the server's `aggregation` rule, with `attackers` of the K agents replacing their
    upload every round by `attack` (`fedjax_rl.core.attacks`; NO_ATTACK with 0 attackers: the rule's
    federation without attacks, every attacked row's reference). Krum is built for ATTACK_KRUM_BYZANTINE
    faulty agents, the trimmed mean trims the library's default fraction, an attack scales by the
    library's default `attack_scale`. Key "CartPole-v1/length/K=10/median/sign_flip/2", directory
    CartPole-v1__length__K10__median__sign_flip__2."""

    aggregation: str = "mean"
    attack: str = NO_ATTACK
    attackers: int = 0

    def __post_init__(self):
        if (self.attack == NO_ATTACK) != (self.attackers == 0):
            raise ValueError(f"an attacks row has attack {NO_ATTACK!r} exactly when it has 0 attackers, got "
                             f"attack={self.attack!r} with attackers={self.attackers}")

    @property
    def key(self) -> str:
        return f"{self.env_name}/{self.param}/K={self.num_agents}/{self.aggregation}/{self.attack}/{self.attackers}"

    @property
    def dir_name(self) -> str:
        return (f"{self.env_name}__{self.param}__K{self.num_agents}__{self.aggregation}__{self.attack}__"
                f"{self.attackers}")

    @property
    def no_attack(self) -> "AttackRow":
        """The row of the same task, K and rule without attackers: what this row is compared with."""
        return dataclasses.replace(self, attack=NO_ATTACK, attackers=0)

    @property
    def train_overrides(self) -> dict:
        """The run settings the row means: its rule (Krum with `krum_byzantine` ATTACK_KRUM_BYZANTINE), and
        where it has attackers, their number and attack; checked with the rest of the config before
        anything compiles (`configs.TrainConfig.validate`)."""
        out = dict(aggregation=self.aggregation)
        if self.aggregation == "krum":
            out["krum_byzantine"] = ATTACK_KRUM_BYZANTINE
        if self.attackers:
            out.update(attackers=self.attackers, attack=self.attack)
        return out


ATTACK_RULES = ("mean", "median", "trimmed_mean", "krum")
# The table's attacks: those a party can mount alone (a Flower client too). The omniscient ones
# (`attacks.OMNISCIENT`) are the compiled program's setting, not rows of this table.
ATTACK_KINDS = attacks.ON_ITS_OWN
ATTACKER_COUNTS = (1, 2, 3)


def attack_rows(env_name: str, param: str, paper_param: str, num_agents: int = 10,
                family: "Family | None" = None, rules: tuple[str, ...] = ATTACK_RULES) -> tuple[AttackRow, ...]:
    """Per rule: its row without attackers, then one per attack and number of attackers."""
    family = family or DQN
    return tuple(AttackRow(env_name, param, paper_param, num_agents=num_agents, family=family, aggregation=rule,
                           attack=attack, attackers=count)
                 for rule in rules
                 for attack, count in ((NO_ATTACK, 0), *((a, n) for a in ATTACK_KINDS for n in ATTACKER_COUNTS)))


def attack_rules(table: "Table") -> tuple[str, ...]:
    """The aggregation rules of a table of attacks' rows, in its order (none for another table)."""
    return tuple(dict.fromkeys(row.aggregation for row in table.rows if isinstance(row, AttackRow)))


def with_rules(table: "Table", rules, check: bool = True) -> "Table":
    """`table` with the rows of each aggregation rule of `rules` it lacks, as its own rules have them: per
    task, the rule's row without attackers and one per attack and number of attackers, after the declared
    rows. So that a user's rule (`aggregation.AGGREGATORS.register`, or an installed plugin) is measured
    beside the library's, with the same seeds, attacks and verdicts. `check`: refuse a rule that is not
    registered (ValueError naming the registered ones); a report reading finished rows needs no rule."""
    have = attack_rules(table)
    new = tuple(rule for rule in dict.fromkeys(rules) if rule not in have)
    if not new:
        return table
    if table.kind != "attacks":
        raise ValueError(f"aggregation rules {list(new)} make rows of the attacks table only, not {table.name}'s")
    if check:
        from fedjax_rl.core import aggregation

        unknown = [rule for rule in new if not aggregation.AGGREGATORS.known(rule)]
        if unknown:
            raise ValueError(f"unknown aggregation rule(s) {unknown} in attacks rows; registered: "
                             f"{list(aggregation.AGGREGATORS.names())} (a rule of your own: "
                             "aggregation.AGGREGATORS.register, or an entry point in fedjax_rl.aggregators)")
    tasks = dict.fromkeys((row.env_name, row.param, row.paper_param, row.num_agents, row.family)
                          for row in table.rows)
    extra = tuple(row for env, param, paper_param, k, family in tasks
                  for row in attack_rows(env, param, paper_param, k, family, new))
    return dataclasses.replace(table, rows=table.rows + extra)


def rules_named(table: "Table", keys) -> list[str]:
    """The aggregation rules that requested row keys (`--rows`) name beyond a table of attacks' own: the
    rule place of a whole key ("CartPole-v1/length/K=10/RULE/sign_flip/1"), and any part of a key with a
    wildcard that is a registered rule ("CartPole-v1/*/RULE/*")."""
    if table.kind != "attacks" or not keys:
        return []
    from fedjax_rl.core import aggregation

    have, out = attack_rules(table), []
    for key in keys:
        parts = key.split("/")
        if any(c in key for c in "*?["):
            out += [part for part in parts if part not in have and aggregation.AGGREGATORS.known(part)]
        elif len(parts) == 6 and parts[3] not in have:
            out.append(parts[3])
    return out


def rules_on_disk(table: "Table", out_dir: str) -> list[str]:
    """The aggregation rules of the rows (finished or not) of a table of attacks under `out_dir` that the
    table does not declare: a user's rules, whose rows a report must read whether or not they are
    registered where it runs."""
    if table.kind != "attacks":
        return []
    have, out = attack_rules(table), []
    for path in sorted(glob.glob(os.path.join(out_dir, table.name, "*"))):
        parts = os.path.basename(path).split("__")
        if os.path.isdir(path) and len(parts) >= 6:
            rule = "__".join(parts[3:-2])  # a rule's own name may hold "__"
            if rule not in have:
                out.append(rule)
    return out


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
    # The kind of report the table gets where not its shape's (`report.write_outputs`): "attacks".
    kind: str | None = None
    # What a run of the table does at a non-finite loss or parameter (`loop.run`'s `on_nonfinite`): stop
    # (a paper's table: a diverged run is a fault to see), or record it and train on (the attacks table,
    # whose question includes whether an attack breaks the federation: its row needs the broken
    # federation's returns, not a stopped run).
    on_nonfinite: str = "stop"

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
    # Beyond the paper (issue 87): what attackers do to each aggregation rule, and what each rule costs when
    # nobody attacks, for DQNAvg and FedRDQN (its omega 0 point, the same seeds) at K = 10. One omega, declared
    # here for every row rather than tuned per row (a per-row choice would compare different FedRDQNs across
    # rows): 0.05, the largest omega Acrobot-v1 length does not collapse at on Table 1's tuning seeds (CPU:
    # 0.01 -92.9, 0.05 -94.5, 0.1 -365.5, 0.2 -500), and the heterogeneity table's choice for CartPole-v1
    # length at p = 0.5 and at 3 of its 5 levels (Table 1's CartPole tuning seeds disagree between machines:
    # 0.05 lowest on the CPU, 0.01-0.1 all at 500 on the H100). With one omega the rule has nothing to choose,
    # so the tuning seeds are the fewest it allows (1); 10 reported seeds, as the heterogeneity table, so that
    # the sign test can decide (9 of 10 untied seeds one way).
    "attacks": Table(
        "attacks", "Attacks: each aggregation rule under attackers, DQNAvg and FedRDQN at K = 10 (beyond the paper)",
        attack_rows("CartPole-v1", "length", "length") + attack_rows("Acrobot-v1", "length", "length"),
        programs=DQN.programs, robust_label="FedRDQN", baselines=("DQNAvg",), paper_baseline="DQNAvg", in_paper=False,
        defaults=dict(num_seeds=10, tuning_seeds=1, omegas=(0.05,)), kind="attacks", on_nonfinite="record"),
}


def grid_points(grid: dict | None) -> int:
    """How many points a program's grid has (its Cartesian product); 1 without a grid."""
    return math.prod(len(values) for values in grid.values()) if grid else 1


def first_point_dir(grid: dict) -> str:
    """The directory of a grid's first point (`RunDirectory.point_name`): "omega=0",
    "max_rate=0,omega=0"."""
    return run_directory.RunDirectory.point_name({name: values[0] for name, values in grid.items()})


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
