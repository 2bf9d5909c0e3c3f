"""A reproduction request as one typed value (`Request`), and what it resolves to before anything
compiles (`Plan`): the table, its selected rows, each row's programs with their configs and grids,
the record each row keeps of the request, and how many runs are vmapped at a time. A request is
validated here, once, and spelled as command-line flags here, once (`Request.args`), for the
processes an executor starts."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from fedjax_rl import agents
from fedjax_rl.reproduce import paper
from fedjax_rl.reproduce.tables import (
    ROW_RESULT, TABLES, Program, Table, challenger_program, get_table, row_dir, rules_named, with_rules)
from fedjax_rl.reproduce.row_records import read_row
from fedjax_rl.training import configs

DEFAULT_OMEGAS = (0.01, 0.05, 0.1, 0.2)
DEFAULT_SEEDS = paper.NUM_SEEDS
DEFAULT_TUNING_SEEDS = 3
# The run settings a row decides itself (its algorithm, environment and perturbed parameter): a
# request cannot replace them.
ROW_DECIDES = ("algo", "env_name", "physics", "agent")
CPU_RUN_BATCH = 20  # runs per vmap on a CPU (default_run_batch)


def default_run_batch() -> int | None:
    """Runs vmapped at a time when the caller does not say: on a CPU, CPU_RUN_BATCH (a 40-run Table 1
    row trains faster in batches whose parameters and optimizer states stay in cache,
    benchmarks/throughput/run_batch.py); on an accelerator, every run in one vmap."""
    import jax

    return CPU_RUN_BATCH if jax.default_backend() == "cpu" else None


def parse_budget(text: str | float) -> float:
    """'paper' -> 1.0; otherwise a fraction of the paper's budget in (0, 1]."""
    if isinstance(text, str) and text.strip().lower() == "paper":
        return 1.0
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"budget must be 'paper' or a fraction in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise ValueError(f"budget must be 'paper' or a fraction in (0, 1], got {value}")
    return value


def budget_steps(algo: str, env_name: str, fraction: float, sync_every: int = paper.SYNC_EVERY) -> tuple[int, int]:
    """(steps_per_agent, eval_every_rounds) for `fraction` of RL-Zoo3's budget: whole evaluation
    blocks of sync_every * eval_every_rounds steps, about `configs.EVAL_POINTS` evaluations, at least one."""
    full_rounds = agents.get(algo).steps(env_name) // sync_every
    rounds = max(1, round(full_rounds * fraction))
    eval_every = max(1, rounds // configs.EVAL_POINTS)
    rounds = max(1, round(rounds / eval_every)) * eval_every
    return rounds * sync_every, eval_every


def table_for(name: str, keys: Sequence[str] | None) -> Table:
    """The table `name` as a request for rows `keys` sees it: the attacks table gains the rows of every
    registered aggregation rule the keys name beyond its own (`tables.with_rules`), so that
    "CartPole-v1/length/K=10/my_rule/sign_flip/1" runs as a built-in rule's row does."""
    table = get_table(name)
    return with_rules(table, rules_named(table, keys))


def select_rows(table: Table, keys: Sequence[str] | None) -> list[paper.PaperRow]:
    """The table's rows named by `keys` ("CartPole-v1/length"), in the paper's order; all if None. A key
    with a shell wildcard (`*`, `?` or `[...]`, `fnmatch`'s, where `*` also spans a "/") names every row it
    matches, so that a table of many rows can be asked for a slice: "Acrobot-v1/*", or every attacks row of
    two attackers, "*/K=10/*/*/2". A key that names no row is refused, a wildcard included."""
    if not keys:
        return list(table.rows)
    by_key = {row.key: row for row in table.rows}
    chosen, unknown = set(), []
    for key in keys:
        named = fnmatch.filter(by_key, key) if any(c in key for c in "*?[") else [key] if key in by_key else []
        chosen.update(named)
        if not named:
            unknown.append(key)
    if unknown:
        raise ValueError(f"unknown {table.name} rows {unknown}; allowed: {', '.join(by_key)}, or a shell "
                         f"wildcard that matches at least one of them")
    return [row for row in table.rows if row.key in chosen]


def check_omegas(omegas: Sequence[float]) -> tuple[float, ...]:
    """The omega grid, sorted; raises a ValueError unless it is distinct values in (0, 1]."""
    omegas = tuple(float(w) for w in omegas)
    if not omegas:
        raise ValueError("omegas needs at least one value")
    if any(not 0 < w <= 1 for w in omegas) or len(set(omegas)) != len(omegas):
        raise ValueError(f"omegas must be distinct values in (0, 1] (omega = 0 is the baseline, always run), got {list(omegas)}")
    return tuple(sorted(omegas))


# What the seeds a finished row gains train (`Request.new_seeds_at`): its programs' whole grids, or only
# what a confirmatory verdict reads, the baseline and the omega the row chose on its tuning seeds.
NEW_SEEDS_AT = ("grid", "chosen")


class Planned(NamedTuple):
    """One program of a row as a request runs it: its config, its whole grid (None: none), which every
    piece's grid is a part of, and the grid a piece still to run trains (`Plan.at`: the whole grid, or the
    part `new_seeds_at` = "chosen" leaves)."""

    program: Program
    config: Any
    grid: dict | None
    piece_grid: dict | None


def row_programs(table: Table, row: paper.PaperRow, budget: float, omegas: Sequence[float],
                 agent_overrides: dict | None = None, train_overrides: dict | None = None,
                 max_rates: Sequence[float] | None = None, challengers: Sequence[Program] = (),
                 challenger_overrides: dict | None = None) -> list[Planned]:
    """The `Planned` programs of one row; raises a ValueError naming what this
    installation lacks (an environment, a parameter, an algorithm's task defaults) before compiling.
    `max_rates`: the heterogeneity levels p every program grids over, outermost (None: the paper's
    p alone); the config's own max_rate stays the paper's, so that at p = 0.5 a grid point is the
    paper table's config exactly. `challengers`: programs run after the row's own (`challenger_program`),
    each with those of `challenger_overrides` its algorithm declares (`check_challenger_overrides`). A row
    that decides run settings itself (`tables.AttackRow.train_overrides`) adds them to every program's, and
    a request's `train_overrides` naming one of them is refused."""
    out = []
    # The run settings the row decides (an attacks row's rule and attack): a request may not replace them.
    own = dict(getattr(row, "train_overrides", {}))
    clash = sorted(set(train_overrides or {}) & set(own))
    if clash:
        raise ValueError(f"{table.name} row {row.key} decides {clash} itself (its rows differ in them); "
                         "request other rows (--rows) rather than --set-run them")
    try:
        for program in (*table.family(row).programs, *challengers):
            steps, eval_every = budget_steps(program.algo, row.env_name, budget)
            fields = dict(physics=(row.param,), steps_per_agent=steps, eval_every_rounds=eval_every,
                          eval_episodes=paper.EVAL_EPISODES, num_agents=getattr(row, "num_agents", paper.NUM_AGENTS),
                          sync_every=paper.SYNC_EVERY, max_rate=paper.MAX_RATE)
            fields.update(train_overrides or {}, **own)
            overrides = dict(agent_overrides or {})
            if program.challenger:
                overrides.update(declared_by(program.algo, challenger_overrides or {}))
            config = configs.train_config(program.algo, row.env_name, agent_overrides=overrides, **fields)
            tuned = program.zero_label or (program.challenger and agents.get(program.algo).has_omega)
            grid = {**({"max_rate": [float(p) for p in max_rates]} if max_rates is not None else {}),
                    **({"omega": [0.0, *omegas] if program.zero_label else list(omegas)} if tuned else {})} or None
            out.append(Planned(program, config, grid, grid))
    except ValueError as error:
        hint = f" ({table.missing_hint})" if table.missing_hint else ""
        raise ValueError(f"{table.name} row {row.key} cannot run in this installation: {error}{hint}") from None
    return out


def request_record(budget, num_seeds, tuning_seeds, omegas, seed, agent_overrides, train_overrides,
                   max_rates=None, challengers: Sequence[str] = (), new_seeds_at: str = "grid",
                   challenger_overrides: dict | None = None) -> dict:
    """What a row records of the request it ran (another request on a finished row is refused). Run
    settings that change no number (`--no-tensorboard`) are left out, as config.json leaves them;
    `max_rates` only for a table with a heterogeneity grid (the paper tables' rows record no levels);
    `challengers` only when there are some (a row without records none, and may gain them), and their
    `challenger_overrides` likewise;
    `new_seeds_at` only when it is not the whole grid."""
    extra = {} if max_rates is None else {"max_rates": list(max_rates)}
    if challengers:
        extra["challengers"] = sorted(challengers)
    if challenger_overrides:
        extra["challenger_overrides"] = dict(sorted(challenger_overrides.items()))
    if new_seeds_at != "grid":
        extra["new_seeds_at"] = new_seeds_at
    return json.loads(json.dumps(dict(budget=budget, num_seeds=num_seeds, tuning_seeds=tuning_seeds,
                                      omegas=list(omegas), seed=seed, agent_overrides=agent_overrides or {},
                                      train_overrides=configs.identity_fields(train_overrides or {}), **extra)))


def declared_by(algo: str, overrides: dict) -> dict:
    """The settings of `overrides` that the algorithm `algo` declares."""
    declared = {s.name for s in agents.get(algo).config.SETTINGS}
    return {name: value for name, value in overrides.items() if name in declared}


def challenger_settings(algos: Sequence[str]) -> dict:
    """{name: Setting} of every setting the challengers `algos` declare (the first declaration of a
    name wins): what `--challenger-set` parses, checks and spells by."""
    declared = {}
    for algo in algos:
        for setting in agents.get(algo).config.SETTINGS:
            declared.setdefault(setting.name, setting)
    return declared


def check_challenger_overrides(challengers: Sequence[Program], overrides: dict | None) -> dict:
    """`overrides` ({setting: value}, each for every challenger that declares it) checked before
    anything compiles: a ValueError for overrides without a challenger, a setting no challenger
    declares (naming theirs), or a value outside its setting's range."""
    if not overrides:
        return {}
    if not challengers:
        raise ValueError("challenger_overrides (--challenger-set) set a challenger's settings: add --challenger ALGO")
    declared = challenger_settings([program.algo for program in challengers])
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise ValueError(f"unknown challenger settings {unknown} for --challenger-set; the challengers' "
                         f"({', '.join(p.algo for p in challengers)}): {sorted(declared)}")
    for name, value in overrides.items():
        declared[name].validate(value)
    return dict(overrides)


def check_challengers(table: Table, rows: Sequence[paper.PaperRow], names: Sequence[str]) -> tuple[Program, ...]:
    """The challenger programs for `names` (registered algorithms or installed plugins, loaded here);
    a ValueError, before anything compiles, for a name twice, or one that is already a row's program or
    whose label a row's algorithm has (DQNAvg is Table 1's omega = 0 point: its numbers would be
    overwritten)."""
    if not names:
        return ()
    if len(set(names)) != len(names):
        raise ValueError(f"challengers must be distinct, got {list(names)}")
    families = [table.family(row) for row in rows]
    own = {program.algo for family in families for program in family.programs}
    labels = {label for family in families for label in (family.robust_label, *family.baselines)}
    for name in names:
        algorithm = agents.get(name)
        if name in own or algorithm.label in labels:
            raise ValueError(f"challenger {name!r} is already a program of these {table.name} rows "
                             f"(their algorithms: {', '.join(sorted(labels))})")
    return tuple(challenger_program(agents.get(name)) for name in names)


def table_defaults(table: Table) -> dict:
    """The request settings a table uses when the caller gives none: the paper tables' (DEFAULT_SEEDS,
    DEFAULT_TUNING_SEEDS, DEFAULT_OMEGAS) and its levels p, then the table's own (`Table.defaults`)."""
    return {**dict(num_seeds=DEFAULT_SEEDS, tuning_seeds=DEFAULT_TUNING_SEEDS, omegas=DEFAULT_OMEGAS,
                   max_rates=table.max_rates), **table.defaults}


def check_max_rates(table: Table, max_rates) -> tuple[float, ...] | None:
    """The heterogeneity levels p, sorted (None: the paper's p alone); raises a ValueError for a table
    without a heterogeneity grid or levels outside [0, 1)."""
    if max_rates is None:
        return None
    if table.max_rates is None:
        raise ValueError(f"{table.name} has no heterogeneity grid (max_rates): its rows run the paper's "
                         f"p = {paper.MAX_RATE}; tables with one: {[t.name for t in TABLES.values() if t.max_rates]}")
    levels = tuple(float(p) for p in max_rates)
    if not levels or any(not 0 <= p < 1 for p in levels) or len(set(levels)) != len(levels):
        raise ValueError(f"max_rates must be distinct heterogeneity levels p in [0, 1), got {list(max_rates)}")
    return tuple(sorted(levels))


class Plan(NamedTuple):
    """A request resolved: its table, the selected rows in the paper's order, the record each row
    keeps of the request (`request_record`), each row's programs {row key: [`Planned`]}, the runs
    vmapped at a time (None: all), and the first seed. `at` resolves it against the rows on disk."""

    table: Table
    rows: list
    record: dict
    programs: dict
    run_batch: int | None
    seed: int

    @property
    def total_seeds(self) -> int:
        """Tuning and reported seeds: the seed indices [0, total) every program of a row holds."""
        return self.record["tuning_seeds"] + self.record["num_seeds"]

    def at(self, out_dir: str) -> "Plan":
        """The plan as it runs on the rows in `out_dir` (a reading of files; nothing compiles): a row
        grows by the algorithm its finished pieces ran (their agent revision, unless the request sets
        `revision`), and with `new_seeds_at` = "chosen" a piece still to run trains the baseline and the
        row's headline omega alone, read from its row.json; a row without one is refused (ValueError)."""
        programs = {}
        for row in self.rows:
            directory = row_dir(out_dir, self.table, row)
            path = os.path.join(directory, ROW_RESULT)
            written = read_row(path) if os.path.exists(path) else None
            programs[row.key] = [self._on_disk(directory, row, written, planned) for planned in self.programs[row.key]]
        return self._replace(programs=programs)

    def _on_disk(self, directory: str, row, written: dict | None, planned: Planned) -> Planned:
        config = same_revision(os.path.join(directory, planned.program.name), planned, self.total_seeds, self.seed,
                               self.record["agent_overrides"])
        piece_grid = planned.grid
        if self.record.get("new_seeds_at") == "chosen" and planned.grid and "omega" in planned.grid:
            if written is None:
                raise ValueError(f"{self.table.name} row {row.key} has no headline omega yet (no "
                                 f"{os.path.join(directory, 'row.json')}): its tuning seeds choose it, so run the row "
                                 "with its whole grid first (--new-seeds-at grid)")
            program = planned.program
            chosen = (written["chosen_omega"] if program.zero_label
                      else written.get("challengers", {}).get(program.name, {}).get("chosen_omega"))
            if chosen is None:
                raise ValueError(f"{self.table.name} row {row.key} has no headline omega for {program.label} yet: "
                                 "run it with its whole grid first (--new-seeds-at grid)")
            piece_grid = {"omega": [0.0, float(chosen)] if program.zero_label else [float(chosen)]}
        return planned._replace(config=config, piece_grid=piece_grid)


def same_revision(program_dir: str, planned: Planned, total: int, seed: int, agent_overrides: dict):
    """`planned.config` at the agent revision its program's finished pieces in `program_dir` ran, where
    they all ran one other than the config's and otherwise hold its settings: a row grows by the same
    algorithm. A request that sets `revision` itself keeps it (the pieces then refuse to merge)."""
    from fedjax_rl.agents.base import AGENT_REVISION
    from fedjax_rl.reproduce import seed_pieces
    from fedjax_rl.training import records

    config = planned.config
    if AGENT_REVISION.name in agent_overrides or not hasattr(config.agent, AGENT_REVISION.name):
        return config

    def settings_of(identity: dict) -> dict:
        return {k: v for k, v in identity.items() if k != "agent_revision"}

    expected = records.recorded_config(config, total, seed, planned.grid)[0]
    mine = settings_of(seed_pieces.identity(expected))
    revisions = {f.identity["agent_revision"] for f in seed_pieces.found(program_dir, planned.program.name)
                 if f.finished and settings_of(f.identity) == mine}
    if len(revisions) != 1 or revisions == {expected["agent_revision"]}:
        return config
    return config.replace(agent=config.agent.replace(**{AGENT_REVISION.name: revisions.pop()}))


@dataclasses.dataclass(frozen=True)
class Request:
    """What `fedjax-rl reproduce TABLE` asks for, as `harness.reproduce` takes it: None for
    `num_seeds`, `tuning_seeds`, `omegas` or `max_rates` is the table's default (`table_defaults`),
    `budget` is 'paper' or a fraction of it, `run_batch` "auto" is `default_run_batch()`.
    `agent_overrides` / `train_overrides` replace the paper's settings of every program.
    `new_seeds_at`: what the seeds a finished row gains train (NEW_SEEDS_AT): "grid", every program's whole
    omega grid; "chosen", the baseline and the headline omega the row chose on its tuning seeds alone,
    which is what a confirmatory verdict reads (`Plan.at`)."""

    table: str
    rows: Sequence[str] | None = None
    num_seeds: int | None = None
    tuning_seeds: int | None = None
    omegas: Sequence[float] | None = None
    budget: float | str = 1.0
    seed: int = 0
    agent_overrides: Mapping | None = None
    train_overrides: Mapping | None = None
    run_batch: int | str | None = "auto"
    max_rates: Sequence[float] | None = None
    challengers: Sequence[str] = ()
    new_seeds_at: str = "grid"
    challenger_overrides: Mapping | None = None

    @classmethod
    def of(cls, table: str, **settings) -> "Request":
        """A request from keyword settings; an unknown one is refused, naming the allowed."""
        allowed = [f.name for f in dataclasses.fields(cls) if f.name != "table"]
        unknown = sorted(set(settings) - set(allowed))
        if unknown:
            raise TypeError(f"unknown reproduction settings {unknown}; allowed: {allowed}")
        return cls(table, **settings)

    def plan(self) -> Plan:
        """Validate the request and resolve its rows' programs, before anything compiles (a missing
        environment stops here)."""
        run_batch = default_run_batch() if self.run_batch == "auto" else self.run_batch
        configs.check_run_batch(run_batch)
        table = table_for(self.table, self.rows)
        given = dict(num_seeds=self.num_seeds, tuning_seeds=self.tuning_seeds, omegas=self.omegas,
                     max_rates=self.max_rates)
        resolved = {**table_defaults(table), **{k: v for k, v in given.items() if v is not None}}
        num_seeds, tuning_seeds = resolved["num_seeds"], resolved["tuning_seeds"]
        budget = parse_budget(self.budget)
        omegas = check_omegas(resolved["omegas"])
        max_rates = check_max_rates(table, resolved["max_rates"])
        if num_seeds < 1:
            raise ValueError(f"num_seeds (reported seeds) must be >= 1, got {num_seeds}")
        if tuning_seeds < 1:
            raise ValueError(f"tuning_seeds must be >= 1 (the headline omega is chosen on them), got {tuning_seeds}")
        if self.new_seeds_at not in NEW_SEEDS_AT:
            raise ValueError(f"new_seeds_at must be one of {list(NEW_SEEDS_AT)}, got {self.new_seeds_at!r}")
        if self.new_seeds_at == "chosen" and max_rates is not None:
            raise ValueError(f"new_seeds_at='chosen' needs one headline omega per row; {table.name} chooses one per "
                             "heterogeneity level p, so its new seeds train the whole grid (--new-seeds-at grid)")
        selected = select_rows(table, self.rows)
        challengers = check_challengers(table, selected, self.challengers)
        theirs = check_challenger_overrides(challengers, self.challenger_overrides)
        record = request_record(budget, num_seeds, tuning_seeds, omegas, self.seed, self.agent_overrides,
                                self.train_overrides, max_rates, [c.name for c in challengers], self.new_seeds_at,
                                theirs)
        programs = {row.key: row_programs(table, row, budget, omegas, self.agent_overrides, self.train_overrides,
                                          max_rates, challengers, theirs) for row in selected}
        return Plan(table, selected, record, programs, run_batch, self.seed)

    def args(self) -> list[str]:
        """The request (its rows aside) as the command line's flags that read back to it: each value
        spelled by its setting's declaration (`Setting.text`; a float by its shortest exact decimal),
        agent settings as --set, run settings as --set-run; None (the table's default) as no flag.
        Raises a ValueError for a setting the command line cannot carry."""
        from fedjax_rl.core import settings
        from fedjax_rl.training.configs import TRAIN_SETTINGS

        def floats(values):
            return ",".join(repr(float(v)) for v in values)

        args = []
        for flag, value, spell in (("--seeds", self.num_seeds, lambda n: str(int(n))),
                                   ("--tuning-seeds", self.tuning_seeds, lambda n: str(int(n))),
                                   ("--omegas", self.omegas, floats), ("--max-rates", self.max_rates, floats)):
            if value is not None:
                args += [flag, spell(value)]
        for name in self.challengers:
            args += ["--challenger", name]
        theirs = challenger_settings(self.challengers) if self.challenger_overrides else {}
        for name, value in (self.challenger_overrides or {}).items():
            if name not in theirs:
                raise ValueError(f"unknown challenger setting {name!r}; the challengers': {sorted(theirs)}")
            args += ["--challenger-set", f"{name}={theirs[name].text(value)}"]
        if self.new_seeds_at != "grid":
            args += ["--new-seeds-at", self.new_seeds_at]
        args += ["--budget", repr(parse_budget(self.budget)), "--seed", str(int(self.seed)),
                 "--run-batch", spell_run_batch(self.run_batch)]
        table = get_table(self.table)
        declared = {s.name: s for s in agents.get(table.programs[0].algo).config.SETTINGS}
        for name, value in (self.agent_overrides or {}).items():
            if name not in declared:
                raise ValueError(f"unknown {self.table} agent setting {name!r}; allowed: {sorted(declared)}")
            args += ["--set", f"{name}={declared[name].text(value)}"]
        run_settings = settings.by_name(TRAIN_SETTINGS)
        for name, value in (self.train_overrides or {}).items():
            if name not in run_settings or name in ROW_DECIDES:
                raise ValueError(f"train_overrides cannot carry {name!r} to a piece's command line; allowed: "
                                 f"{sorted(set(run_settings) - set(ROW_DECIDES))}")
            args += ["--set-run", f"{name}={run_settings[name].text(value)}"]
        return args


def spell_run_batch(run_batch) -> str:
    """`run_batch` as --run-batch spells it: "auto" stays, so that each process resolves it for its own
    device (a GPU's piece merges with a CPU's); None is "all"."""
    if run_batch == "auto":
        return "auto"
    return "all" if run_batch is None else str(int(run_batch))


def parse_run_settings(pairs) -> dict:
    """--set-run NAME=VALUE texts parsed by the run settings' declarations (`configs.TRAIN_SETTINGS`),
    the inverse of `Request.args`'s --set-run; a name the row decides (ROW_DECIDES) or no setting's
    raises a ValueError naming the allowed ones."""
    from fedjax_rl.core import settings
    from fedjax_rl.training.configs import TRAIN_SETTINGS

    allowed = tuple(s for s in TRAIN_SETTINGS if s.name not in ROW_DECIDES)
    return settings.parse_pairs(allowed, pairs, "or row-decided run settings", flag="--set-run")