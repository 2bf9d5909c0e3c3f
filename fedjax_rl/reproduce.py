"""`fedjax-rl reproduce table1|table2`: the paper's Tables 1 and 2 and its figures, row by row.

    fedjax-rl reproduce table1 --out results/table1                       # paper budgets, 5 + 3 seeds
    fedjax-rl reproduce table1 --rows CartPole-v1/length --budget 0.1 --out results/t1_small
    fedjax-rl reproduce table2 --rows Hopper-v4/torso --budget 0.005 --set learning_starts=1000 --out DIR

`--set NAME=VALUE` replaces a paper setting of the table's algorithms (a reduced budget shorter than
RL-Zoo3's MuJoCo learning_starts of 10,000 steps needs it); it is part of each row's recorded request
and is printed under the table.

What one row runs (a row = one environment, one perturbed physical parameter):
- Table 1, ONE compiled program: FedRDQN over the omega grid [0] + omegas (`experiment.run(grid=...)`)
  and over all seeds. Its omega = 0 point is reported as DQNAvg. Why not a separate DQNAvg run:
  with omega = 0 the robust target y = r + gamma (1 - omega) max Q' + gamma omega D is the ordinary
  target, and the expectile network, which is still trained, never enters the Q update. The DQN
  test `tests/test_dqn.py::test_omega_zero_reproduces_dqnavg_exactly` shows that the two programs
  give the same parameters, metrics and actions to float32 rounding. As one program the baseline
  shares everything with the robust runs: the seeds (so initialisation, physics and exploration keys
  are the same and the comparison is paired), the compile, and the checkpoint. The price is that
  the omega = 0 point also trains an unused expectile network. Over a long chaotic run its numbers
  differ from a standalone `dqnavg` run the way a run on another CPU would (last-bit rounding that
  grows), not in the algorithm.
- Table 2, two programs: FedRDDPG with one critic over [0] + omegas (omega = 0 is DDPGAvg(1), by
  the same argument: the omega term of the target vanishes), and DDPGAvg(2), which has two critics
  and so a differently shaped program.

Seeds: one seed axis of `tuning_seeds + num_seeds` runs, `train.seed_keys(seed, T + S)`. Indices
[0, T) are the TUNING seeds and [T, T + S) the REPORTED seeds. OMEGA RULE: the headline FedR* number
uses the omega with the highest mean Minimum (local-environment minimum return) over the tuning
seeds, ties going to the smaller omega. It is never chosen on the reported seeds. Every omega's
reported-seed numbers appear in the table too.

Budget: RL-Zoo3's steps per agent for the task (`Algorithm.steps`) times `budget` (1 = the paper's),
rounded to whole evaluation blocks of E * eval_every_rounds steps, with about 20 evaluations per run.
Other settings are the paper's (`fedjax_rl.paper`: K = 5, E = 100, p = 0.5, 5 evaluation episodes)
and the registry's per-task defaults (RL-Zoo3 hyperparameters, the paper's DQN batch 16 / buffer 1000).

Batching (`--run-batch`, default "auto"): on a CPU a row's runs (omega points x seeds) are vmapped
CPU_RUN_BATCH at a time, the batches running one after another inside the same compiled block; a
40-run Table 1 row then trains 1.6-2x faster than with all 40 in one vmap (benchmarks/run_batch.py).
On an accelerator every run is in one vmap. The batch size changes float rounding, not the algorithm;
each row.json records it per program (None: one vmap; the CartPole rows of results/table1_paper).

Resuming: DIR/<table>/<env>__<param>/ holds each row: one experiment.run directory per program
(config, per-block checkpoint, then metrics per grid point and finished.json, so a finished program
of an unfinished row is read back, not re-evaluated) and, when the row is done, row.json.
A row with row.json is never recomputed (its checkpoints are then deleted). If its recorded settings differ from the request, the
command stops with an error and does not mix the two. An interrupted row resumes from its last
finished block. Rows may run on different machines into copies of DIR, and their row directories
are merged by copying. The tables and figures are rebuilt from every finished row in DIR at the end
of each invocation. `status` (`--status`) reads where each requested row stands from these files,
computing and writing nothing.

Outputs in DIR: <table>.md and <table>.csv (Average and Minimum, mean +- std over the reported seeds
(numpy std, ddof 0), beside the paper's numbers (`fedjax_rl.paper`)); <table>_comparisons.csv and the
markdown's comparison section (per row and baseline: the headline FedR* minus the baseline, paired
by seed, on Minimum and Average with 95% bootstrap intervals, the probability of improvement, the
verdict "ahead" / "behind" / "inconclusive" read from the Minimum interval, and whether our sign is
the paper's own); the IQM of normalised scores across rows with stratified bootstrap intervals
(`fedjax_rl.stats`; normalisation: NORMALISATION); <table>_curves.png and <table>_sweeps.png
(2 x 4 grids). Each row.json records the exact configs, package versions, machine, budget and wall
time. `write_outputs` (`--report-only`) rebuilds all of these from the finished rows without training.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import subprocess
import time
from collections.abc import Sequence

import numpy as np

from fedjax_rl import agents, configs, envs, paper, stats
from fedjax_rl.machine import describe as describe_machine
from fedjax_rl.machine import summary as machine_summary

DEFAULT_OMEGAS = (0.01, 0.05, 0.1, 0.2)
DEFAULT_SEEDS = paper.NUM_SEEDS
DEFAULT_TUNING_SEEDS = 3
CPU_RUN_BATCH = 20  # runs per vmap on a CPU (default_run_batch)
ROW_RESULT = "row.json"
OMEGA_RULE = ("headline omega = argmax over the grid (omega > 0) of the mean Minimum on the tuning seeds "
              "(ties: the smaller omega); never chosen on the reported seeds")
PACKAGES = ("jax", "jaxlib", "flax", "optax", "chex", "gymnax", "flashbax", "numpy", "mujoco", "mujoco-mjx")


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
    name: str
    title: str
    rows: tuple[paper.PaperRow, ...]
    programs: tuple[Program, ...]
    robust_label: str
    baselines: tuple[str, ...]
    paper_baseline: str  # the baseline the paper's table reports: the normalisation's reference
    missing_hint: str = ""


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
        robust_label="FedRSAC", baselines=("SACAvg",), paper_baseline="SACAvg"),
}


def default_run_batch() -> int | None:
    """Runs vmapped at a time when the caller does not say: on a CPU, CPU_RUN_BATCH (a 40-run Table 1
    row trains faster in batches whose parameters and optimizer states stay in cache,
    benchmarks/run_batch.py); on an accelerator, every run in one vmap."""
    import jax

    return CPU_RUN_BATCH if jax.default_backend() == "cpu" else None


def get_table(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise ValueError(f"table must be one of {sorted(TABLES)}, got {name!r}") from None


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


def select_rows(table: Table, keys: Sequence[str] | None) -> list[paper.PaperRow]:
    """The table's rows named by `keys` ("CartPole-v1/length"), in the paper's order; all if None."""
    if not keys:
        return list(table.rows)
    by_key = {row.key: row for row in table.rows}
    unknown = [k for k in keys if k not in by_key]
    if unknown:
        raise ValueError(f"unknown {table.name} rows {unknown}; allowed: {', '.join(by_key)}")
    return [row for row in table.rows if row.key in set(keys)]


def _check_omegas(omegas: Sequence[float]) -> tuple[float, ...]:
    omegas = tuple(float(w) for w in omegas)
    if not omegas:
        raise ValueError("omegas needs at least one value")
    if any(not 0 < w <= 1 for w in omegas) or len(set(omegas)) != len(omegas):
        raise ValueError(f"omegas must be distinct values in (0, 1] (omega = 0 is the baseline, always run), got {list(omegas)}")
    return tuple(sorted(omegas))


def row_programs(table: Table, row: paper.PaperRow, budget: float, omegas: Sequence[float],
                 agent_overrides: dict | None = None, train_overrides: dict | None = None) -> list[tuple]:
    """[(Program, TrainConfig, grid or None)] for one row; raises a ValueError naming what this
    installation lacks (an environment, a parameter, an algorithm's task defaults) before compiling."""
    out = []
    try:
        for program in table.programs:
            steps, eval_every = budget_steps(program.algo, row.env_name, budget)
            fields = dict(physics=(row.param,), steps_per_agent=steps, eval_every_rounds=eval_every,
                          eval_episodes=paper.EVAL_EPISODES, num_agents=paper.NUM_AGENTS,
                          sync_every=paper.SYNC_EVERY, max_rate=paper.MAX_RATE)
            fields.update(train_overrides or {})
            config = configs.train_config(program.algo, row.env_name, agent_overrides=dict(agent_overrides or {}),
                                          **fields)
            grid = {"omega": [0.0, *omegas]} if program.zero_label else None
            out.append((program, config, grid))
    except ValueError as error:
        hint = f" ({table.missing_hint})" if table.missing_hint else ""
        raise ValueError(f"{table.name} row {row.key} cannot run in this installation: {error}{hint}") from None
    return out


def _omega_dir(omega: float) -> str:
    return f"omega={omega:g}"  # experiment.grid_label's spelling


def versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out["fedjax_rl_git"] = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                                              text=True, check=False).stdout.strip() or None
    except OSError:
        out["fedjax_rl_git"] = None
    return out


def _request(budget, num_seeds, tuning_seeds, omegas, seed, agent_overrides, train_overrides) -> dict:
    return json.loads(json.dumps(dict(budget=budget, num_seeds=num_seeds, tuning_seeds=tuning_seeds,
                                      omegas=list(omegas), seed=seed, agent_overrides=agent_overrides or {},
                                      train_overrides=train_overrides or {})))


def row_dir(out_dir: str, table: Table, row: paper.PaperRow) -> str:
    return os.path.join(out_dir, table.name, f"{row.env_name}__{row.param}")


def _load_run(path: str) -> dict:
    with open(os.path.join(path, "metrics.json")) as f:
        return json.load(f)


def summarize_row(directory: str, table: Table, tuning_seeds: int) -> dict:
    """Per-algorithm tuning/reported numbers of a finished row, read from its metrics.json files
    (so the tables equal the files), and the headline omega chosen on the tuning seeds."""
    algorithms = {}
    tuning_min = {}
    for program in table.programs:
        prog_dir = os.path.join(directory, program.name)
        if program.zero_label:
            with open(os.path.join(prog_dir, "config.json")) as f:
                grid = json.load(f)["grid"]["omega"]
            runs = [(program.zero_label if w == 0 else agents.ALGORITHMS[program.algo].describe({"omega": w}),
                     os.path.join(program.name, _omega_dir(w)), w) for w in grid]
        else:
            runs = [(program.label, program.name, None)]
        for label, rel, omega in runs:
            final = _load_run(os.path.join(directory, rel))["final"]
            avg, mn = np.asarray(final["local_average"], float), np.asarray(final["local_minimum"], float)
            algorithms[label] = dict(
                dir=rel, omega=omega,
                tuning=dict(average=avg[:tuning_seeds].tolist(), minimum=mn[:tuning_seeds].tolist()),
                reported=dict(average=avg[tuning_seeds:].tolist(), minimum=mn[tuning_seeds:].tolist()))
            if omega:
                tuning_min[omega] = float(np.mean(mn[:tuning_seeds]))
    best = max(tuning_min.values())
    chosen = min(w for w, v in tuning_min.items() if v == best)
    headline = agents.ALGORITHMS[table.programs[0].algo].describe({"omega": chosen})
    return dict(algorithms=algorithms, tuning_minimum_mean=tuning_min, chosen_omega=chosen,
                headline=headline, omega_rule=OMEGA_RULE)


def _plan(table_name, rows, num_seeds, tuning_seeds, omegas, budget, seed, agent_overrides, train_overrides,
          run_batch):
    """Validate a request and resolve its rows' programs, before anything compiles (a missing
    environment stops here). Returns (table, rows, request record, {row key: programs}, run_batch)."""
    from fedjax_rl import experiment

    run_batch = default_run_batch() if run_batch == "auto" else run_batch
    experiment.check_run_batch(run_batch)
    table = get_table(table_name)
    budget = parse_budget(budget)
    omegas = _check_omegas(omegas)
    if num_seeds < 1:
        raise ValueError(f"num_seeds (reported seeds) must be >= 1, got {num_seeds}")
    if tuning_seeds < 1:
        raise ValueError(f"tuning_seeds must be >= 1 (the headline omega is chosen on them), got {tuning_seeds}")
    selected = select_rows(table, rows)
    request = _request(budget, num_seeds, tuning_seeds, omegas, seed, agent_overrides, train_overrides)
    plans = {row.key: row_programs(table, row, budget, omegas, agent_overrides, train_overrides) for row in selected}
    return table, selected, request, plans, run_batch


def _finished_row(row_result: str, request: dict) -> tuple[list[str], dict]:
    """The request settings a finished row.json was computed with differently, and its record."""
    with open(row_result) as f:
        record = json.load(f)
    return sorted(k for k in request if record["request"].get(k) != request[k]), record


def status(table_name: str, out_dir: str, **request) -> list[dict]:
    """Where each requested row stands in `out_dir` for a request (`reproduce`'s keyword arguments,
    with its defaults; `progress` aside), read from its files: nothing compiles, runs or is written.
    One dict per row: "row", "state" ("finished", "finished with other settings", "in progress",
    "not started"), and either the finished row's "wall_s" and "machine", or per program its
    `experiment.progress_on_disk`."""
    import inspect

    from fedjax_rl import experiment

    args = inspect.signature(reproduce).bind(table_name, out_dir, **request)  # unknown settings raise here
    args.apply_defaults()
    given = args.arguments
    table, selected, request, plans, run_batch = _plan(**{name: given[name] for name in inspect.signature(_plan).parameters})
    num_seeds, tuning_seeds, seed = given["num_seeds"], given["tuning_seeds"], given["seed"]
    report = []
    for row in selected:
        directory = row_dir(out_dir, table, row)
        path = os.path.join(directory, ROW_RESULT)
        if os.path.exists(path):
            diff, record = _finished_row(path, request)
            report.append(dict(row=row.key, state="finished with other settings" if diff else "finished",
                               other_settings=diff, wall_s=record.get("wall_s"),
                               machine=machine_summary(record["machine"])))
            continue
        programs = []
        for program, config, grid in plans[row.key]:
            recorded, _ = experiment.recorded_config(config, tuning_seeds + num_seeds, seed, grid, run_batch)
            on_disk = experiment.progress_on_disk(os.path.join(directory, program.name), recorded, config.num_evals)
            programs.append(dict(program=program.label, num_blocks=config.num_evals, **on_disk))
        started = any(p["state"] in ("partial", "finished") for p in programs)
        report.append(dict(row=row.key, state="in progress" if started else "not started", programs=programs))
    return report


def status_lines(table_name: str, out_dir: str, report: list[dict]) -> list[str]:
    """`status` as text, with the training time left at each unfinished program's pace so far
    (compilation included; its final evaluation is not counted, and a program that has trained every
    block says its final evaluation is pending)."""
    counts = {state: sum(r["state"] == state for r in report)
              for state in ("finished", "finished with other settings", "in progress", "not started")}
    lines = [f"{table_name} in {out_dir}: " + ", ".join(f"{n} {state}" for state, n in counts.items() if n)
             + f" (of {len(report)} requested rows)"]
    for r in report:
        if r["state"].startswith("finished"):
            wall = "" if r["wall_s"] is None else f"{r['wall_s']:,.0f} s on "
            other = f" {r['other_settings']}" if r["other_settings"] else ""
            lines.append(f"  {r['row']}: {r['state']}{other} ({wall}{r['machine']})")
            continue
        parts = []
        for p in r["programs"]:
            if p["state"] == "finished":
                parts.append(f"{p['program']} trained and evaluated")
            elif p["state"] == "partial":
                text = f"{p['program']} {p['blocks_done']}/{p['num_blocks']} blocks"
                if p["blocks_done"] == p["num_blocks"]:
                    wall = "" if p["wall_s"] is None else f" ({p['wall_s']:,.0f} s of training)"
                    text += f"{wall}, final evaluation pending"
                elif p["wall_s"] is not None and p["blocks_done"]:
                    left = p["wall_s"] / p["blocks_done"] * (p["num_blocks"] - p["blocks_done"])
                    text += f" ({p['wall_s']:,.0f} s so far, about {left / 3600:.1f} h of training left)"
                parts.append(text)
            elif p["state"] == "other settings":
                parts.append(f"{p['program']} holds a run with other settings (set aside when this request runs)")
            else:
                parts.append(f"{p['program']} not started")
        lines.append(f"  {r['row']}: {r['state']}: " + "; ".join(parts))
    return lines


def reproduce(
    table_name: str,
    out_dir: str,
    rows: Sequence[str] | None = None,
    num_seeds: int = DEFAULT_SEEDS,
    tuning_seeds: int = DEFAULT_TUNING_SEEDS,
    omegas: Sequence[float] = DEFAULT_OMEGAS,
    budget: float | str = 1.0,
    seed: int = 0,
    progress: bool = True,
    agent_overrides: dict | None = None,
    train_overrides: dict | None = None,
    run_batch: int | None | str = "auto",
) -> dict:
    """Run the requested rows of `table_name` (those without a row.json), then rebuild the table
    and figures from every finished row in `out_dir`. `agent_overrides` / `train_overrides` replace
    the paper's settings (tests use tiny networks); they are recorded and printed with the results.
    `run_batch`: runs vmapped at a time (`experiment.run`); "auto" is `default_run_batch()`.
    Returns {"rows": {key: row record}, "paths": [written files]}."""
    from fedjax_rl import experiment

    table, selected, request, plans, run_batch = _plan(table_name, rows, num_seeds, tuning_seeds, omegas, budget,
                                                       seed, agent_overrides, train_overrides, run_batch)
    todo = []
    for row in selected:
        path = os.path.join(row_dir(out_dir, table, row), ROW_RESULT)
        if os.path.exists(path):
            diff, record = _finished_row(path, request)
            previous = record["request"]
            if diff:
                raise ValueError(f"{path} was computed with different settings {diff} "
                                 f"({ {k: previous.get(k) for k in diff} } vs requested { {k: request[k] for k in diff} }); "
                                 "use another --out or remove that row directory")
        else:
            todo.append(row)

    blocks_per_row = {key: sum(c.num_evals for _, c, _ in plan) for key, plan in plans.items()}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        total = sum(blocks_per_row.values())
        done_rows = sum(blocks_per_row[r.key] for r in selected if r not in todo)
        bar = tqdm(total=total, initial=done_rows, unit="block",
                   desc=f"{table.name}: {len(selected) - len(todo)}/{len(selected)} rows done")

    num_total = tuning_seeds + num_seeds
    for index, row in enumerate(todo):
        directory = row_dir(out_dir, table, row)
        os.makedirs(directory, exist_ok=True)
        start = time.time()
        timings, batches = [], {}
        for program, config, grid in plans[row.key]:
            seen = {"blocks": None}

            def on_block(done, total, seen=seen, config=config, grid=grid):
                resumed = seen["blocks"] is None  # the first call reports what the checkpoint holds
                step = done - (seen["blocks"] or 0)
                seen["blocks"] = done
                if bar is not None:
                    bar.set_description(f"{table.name} {row.key} ({program.label}), row {len(selected) - len(todo) + index + 1}/{len(selected)}")
                    points = len(next(iter(grid.values()))) if grid else 1
                    # The final evaluation (local environments and the 19-point sweep) comes after the
                    # last block: most of an Ant program's wall time on a CPU, so say it is running.
                    stage = ", final evaluation" if done == total else ""
                    bar.set_postfix_str(f"{num_total} seeds ({tuning_seeds} tuning) x {points} omega(s), step "
                                        f"{done * config.steps_per_agent // total:,}/{config.steps_per_agent:,} per agent"
                                        f"{stage}", refresh=False)
                    if resumed:
                        begin_program(bar, step)
                    else:
                        bar.update(step)

            result = experiment.run(config, num_seeds=num_total, seed=seed, out_dir=os.path.join(directory, program.name),
                                    progress=False, grid=grid, on_block=on_block, run_batch=run_batch,
                                    new_run=True)  # another request's unfinished program: set aside, as --status says
            timings.append(result["timing"])
            batches[program.name] = result["run_batch"]
        record = dict(
            table=table.name, row=row.key, env_name=row.env_name, param=row.param, request=request,
            seeds=dict(seed=seed, tuning=list(range(tuning_seeds)), reported=list(range(tuning_seeds, num_total)),
                       note="indices into train.seed_keys(seed, tuning + reported)"),
            budget=dict(fraction=budget, steps_per_agent={p.name: c.steps_per_agent for p, c, _ in plans[row.key]},
                        paper_steps_per_agent={p.name: agents.get(p.algo).steps(row.env_name) for p, _, _ in plans[row.key]}),
            configs={p.name: dict(config=experiment.config_to_dict(c), grid=g) for p, c, g in plans[row.key]},
            # Runs vmapped at a time per program (None: all in one vmap): rounding, not the algorithm.
            run_batch=batches,
            versions=versions(), machine=describe_machine(), resumed_blocks=sum(t["resumed_at_block"] for t in timings),
            # Over every process that worked on the row (None if a resumed checkpoint did not record its time).
            wall_s=None if any(t["wall_s"] is None for t in timings) else sum(t["wall_s"] for t in timings),
            wall_s_this_process=time.time() - start,
            **summarize_row(directory, table, tuning_seeds),
        )
        with open(os.path.join(directory, ROW_RESULT + ".tmp"), "w") as f:
            json.dump(record, f, indent=2, default=str)
        os.replace(os.path.join(directory, ROW_RESULT + ".tmp"), os.path.join(directory, ROW_RESULT))
        for program, _, _ in plans[row.key]:  # a finished row never resumes; its checkpoints (replay
            # buffers included, ~90 MB for a 40-run CartPole row) only cost disk
            ckpt = os.path.join(directory, program.name, experiment.CHECKPOINT)
            if os.path.exists(ckpt):
                os.remove(ckpt)
    if bar is not None:
        bar.close()
    return write_outputs(table, out_dir)


def begin_program(bar, checkpointed_blocks: int) -> None:
    """Tell a tqdm bar that a program starts, `checkpointed_blocks` into its run. Two things would
    otherwise count as speed and wreck the time-left estimate: the blocks a checkpoint already holds
    (a resumed row jumps ahead in seconds, which made the estimate several times too short), and the
    time since the bar's last update, which is the previous program's final evaluation (over an hour
    for Ant on a CPU, which made the next block look 40x slower). Elapsed time stays wall time."""
    bar.n += checkpointed_blocks
    bar.last_print_n += checkpointed_blocks  # the smoothed rate only sees increments past last_print_n
    bar.initial += checkpointed_blocks  # the unsmoothed rate is (n - initial) / elapsed
    bar.last_print_t = bar._time()  # ... and the time since last_print_t
    bar.refresh()


def finished_rows(table: Table, out_dir: str) -> dict:
    """{row key: row record} for every row of `table` with a row.json in `out_dir`, in paper order."""
    out = {}
    for row in table.rows:
        path = os.path.join(row_dir(out_dir, table, row), ROW_RESULT)
        if os.path.exists(path):
            with open(path) as f:
                out[row.key] = json.load(f)
    return out


def _stats(values) -> tuple[float, float]:
    values = np.asarray(values, float)
    return float(values.mean()), float(values.std())


def _fmt(mean_std) -> str:
    return f"{mean_std[0]:.1f} ± {mean_std[1]:.1f}"


def _paper_cell(value, spread) -> str:
    if value is None:
        return paper.NOT_REPORTED
    return f"{value:.1f}" if spread is None else f"{value:.1f} ± {spread:.1f}"  # as the paper prints them


def _sign(value: float) -> str:
    return "+" if value > 0 else "-" if value < 0 else "0"


METRICS = ("minimum", "average")
NORMALISATION = (
    "normalised score = (return - random-policy return) / (the paper's {ref} return - random-policy return), "
    "per row and per metric (the paper's {ref} Minimum for Minimum, its Average for Average): 0 is a "
    "uniformly random policy and 1 the paper's {ref} in that row. Why: the rows' returns differ in scale "
    "and sign (Acrobot -500..0, CartPole 0..500, HalfCheetah thousands), so they can only be pooled on a "
    "common scale; the random policy is a floor every task has (fedjax_rl.envs.random_return, measured at "
    "the nominal physics of the row's variant), and the paper's {ref} is the one reference every row has "
    "from outside this reproduction, so it cannot move with our own results")


def comparisons(table: Table, records: dict) -> list[dict]:
    """Per finished row and baseline: the headline FedR* minus the baseline on the reported seeds,
    paired by seed (one program's grid, or programs with the same seed keys), on Minimum and on
    Average, each with a 95% bootstrap interval and P(FedR* > baseline); the verdict read from the
    Minimum interval; and the paper's own Minimum difference where its table reports both."""
    rows_by_key = {row.key: row for row in table.rows}
    out = []
    for key, rec in records.items():
        prow, algs, headline = rows_by_key[key], rec["algorithms"], rec["headline"]
        for base in table.baselines:
            line = dict(row=key, baseline=base, robust=headline, seeds=len(algs[headline]["reported"]["minimum"]))
            for metric in METRICS:
                robust, baseline = algs[headline]["reported"][metric], algs[base]["reported"][metric]
                line[metric] = stats.difference(robust, baseline, paired=True)
                line[f"{metric}_improvement"] = stats.probability_of_improvement(robust, baseline)
            line["verdict"] = stats.verdict(line["minimum"], line["seeds"])
            p_robust, p_base = prow.paper_numbers(table.robust_label)[1], prow.paper_numbers(base)[1]
            # Rounded as the paper prints its numbers (one decimal), so that -4.7 is not -4.700000000000017.
            line["paper_minimum_difference"] = None if p_robust is None or p_base is None else round(p_robust - p_base, 1)
            line["sign_agrees"] = (None if line["paper_minimum_difference"] is None
                                   else _sign(line["minimum"].estimate) == _sign(line["paper_minimum_difference"]))
            out.append(line)
    return out


def _anchors(table: Table, row: paper.PaperRow, metric: str) -> tuple[float, float | None]:
    """(random-policy return, the paper's reference-baseline `metric`) of a row: NORMALISATION's 0 and 1."""
    reference = dict(zip(("average", "minimum"), row.paper_numbers(table.paper_baseline)))[metric]
    return envs.random_return(row.env_name, (row.param,)), reference


def normalised_scores(table: Table, records: dict, algorithm: str, metric: str) -> dict:
    """{row key: the reported seeds' `metric` of `algorithm` ("headline" for the headline FedR*),
    normalised by the random policy and the paper's reference baseline (NORMALISATION)}; rows
    without the paper's reference number are left out."""
    rows_by_key = {row.key: row for row in table.rows}
    out = {}
    for key, rec in records.items():
        random_return, reference = _anchors(table, rows_by_key[key], metric)
        if reference is not None:
            label = rec["headline"] if algorithm == "headline" else algorithm
            out[key] = stats.normalise(rec["algorithms"][label]["reported"][metric], random_return, reference)
    return out


def paper_robust_iqm(table: Table, keys: Sequence[str], metric: str) -> float:
    """IQM over the rows `keys` of the paper's own FedR* number, normalised as `normalised_scores`."""
    rows_by_key = {row.key: row for row in table.rows}
    index = ("average", "minimum").index(metric)  # paper_numbers' order
    return stats.iqm([float(stats.normalise(rows_by_key[k].paper_numbers(table.robust_label)[index],
                                            *_anchors(table, rows_by_key[k], metric))) for k in keys])


def aggregates(table: Table, records: dict) -> list[dict]:
    """Per metric and baseline: the IQM over every (row, reported seed) of the normalised scores of
    the baseline and of the headline FedR*, their difference and the mean P(FedR* > baseline), with
    stratified bootstrap intervals (rows are the strata; `stats.stratified_iqm`)."""
    out = []
    for metric in METRICS:
        robust = normalised_scores(table, records, "headline", metric)
        for base in table.baselines:
            baseline = normalised_scores(table, records, base, metric)
            keys = [k for k in robust if k in baseline]
            if keys:
                out.append(dict(metric=metric, baseline=base, rows=keys,
                                aggregate=stats.stratified_iqm([baseline[k] for k in keys], [robust[k] for k in keys])))
    return out


def table_lines(table: Table, records: dict) -> tuple[list[str], list[dict], list[dict]]:
    """Markdown lines, CSV records (one per row and algorithm) and comparison CSV records (one per
    row and baseline) for the finished rows."""
    rows_by_key = {row.key: row for row in table.rows}
    unreported = [b for b in table.baselines if b != table.paper_baseline]
    md = [f"# {table.title}", "",
          f"Source of the paper's numbers: {paper.SOURCE} ({paper.URL}), transcribed in fedjax_rl/paper.py "
          "with their \"±\" as printed (the paper does not say over what)."
          + (f" The paper's table does not report {', '.join(unreported)} (its figures do)." if unreported else ""), ""]
    budgets = sorted({r["request"]["budget"] for r in records.values()})
    if budgets != [1.0]:
        # The steps each row ran, not only the fraction: a fraction is rounded to whole evaluation
        # blocks of at least one round (--budget 1e-6 runs 100 steps, not 0.05).
        ran = {key: f"{_steps(r['budget']['steps_per_agent'])} steps per agent (paper "
                    f"{_steps(r['budget']['paper_steps_per_agent'])})" for key, r in records.items()}
        ran = (f"{next(iter(ran.values()))} in every row" if len(set(ran.values())) == 1
               else "; ".join(f"{key}: {text}" for key, text in ran.items()))
        md += [f"**REDUCED BUDGET**: {ran} (requested fraction(s) {', '.join(f'{b:g}' for b in budgets)} of the "
               "paper's RL-Zoo3 steps, rounded to whole evaluation blocks). These numbers are not the paper's "
               "setting.", ""]
    overrides = {k: r["request"][k] for r in records.values() for k in ("agent_overrides", "train_overrides") if r["request"][k]}
    if overrides:
        md += [f"**Settings overridden** (not the paper's): {json.dumps(overrides)}", ""]
    md += [f"Average / Minimum: the final global policy's mean / lowest return over the K = {paper.NUM_AGENTS} "
           "local environments, mean ± std (numpy, ddof 0) over the reported seeds. "
           f"{table.baselines[0]} is the omega = 0 point of the {table.programs[0].label} grid (same program, "
           "same seeds; see fedjax_rl/reproduce.py). Omega rule: " + OMEGA_RULE + ".", "",
           "| row | algorithm | seeds | Average | Minimum | paper Average | paper Minimum |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    csv_rows = []
    for key, rec in records.items():
        prow = rows_by_key[key]
        algs = rec["algorithms"]
        headline = rec["headline"]
        order = [*table.baselines, headline] + [lab for lab in algs if lab not in table.baselines and lab != headline]
        for lab in order:
            a = algs[lab]
            role = "baseline" if lab in table.baselines else ("headline" if lab == headline else "omega grid")
            paper_label = table.robust_label if role == "headline" else lab
            p_avg, p_min = prow.paper_numbers(paper_label) if role != "omega grid" else (None, None)
            s_avg, s_min = prow.paper_spread(paper_label) if role != "omega grid" else (None, None)
            avg, mn = _stats(a["reported"]["average"]), _stats(a["reported"]["minimum"])
            shown = f"**{lab}** (headline)" if role == "headline" else lab
            paper_cells = ("", "") if role == "omega grid" else (_paper_cell(p_avg, s_avg), _paper_cell(p_min, s_min))
            md.append(f"| {key} | {shown} | {len(a['reported']['average'])} | {_fmt(avg)} | {_fmt(mn)} | "
                      f"{paper_cells[0]} | {paper_cells[1]} |")
            csv_rows.append(dict(table=table.name, row=key, env_name=rec["env_name"], param=rec["param"], algorithm=lab,
                                 role=role, omega="" if a["omega"] is None else a["omega"],
                                 seeds=len(a["reported"]["average"]), average_mean=avg[0], average_std=avg[1],
                                 minimum_mean=mn[0], minimum_std=mn[1], paper_average=p_avg, paper_minimum=p_min,
                                 paper_average_spread=s_avg, paper_minimum_spread=s_min,
                                 budget_fraction=rec["request"]["budget"],
                                 steps_per_agent=next(iter(rec["budget"]["steps_per_agent"].values()))))

    lines = comparisons(table, records)
    robust = table.robust_label
    md += ["", f"## {robust} (headline ω) − baseline, paired by seed", "",
           "Per row and baseline, over the reported seeds: the mean of the per-seed differences with its 95% "
           f"percentile bootstrap interval ({stats.REPS:,} resamples of the seeds, generator seed {stats.SEED}; "
           f"fedjax_rl/stats.py), on Minimum and on Average. P({robust} > baseline): the probability that a "
           f"{robust} seed's value exceeds a baseline seed's, over all pairs of seeds, ties counting one half "
           "(rliable's probability of improvement). **Verdict** (on Minimum, the paper's claim): *ahead* if "
           "the interval lies above 0, *behind* if below, otherwise *inconclusive*; also *inconclusive* with "
           f"fewer than {stats.MIN_SEEDS} seeds, where a 95% bootstrap interval is just the range of the values. "
           "At 5 seeds the interval is narrow for its level (about 85% coverage for normal data), so a verdict "
           "is weaker than a 95% claim. Paper: the paper's own Minimum difference in that row; sign agrees: "
           "our mean difference has the paper's sign.", "",
           f"| row | baseline | seeds | Minimum: difference [95% CI] | Average: difference [95% CI] | "
           f"P({robust} > baseline), Minimum / Average | verdict | paper's Minimum difference | sign agrees |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    comparison_rows = []
    for line in lines:
        paper_diff = line["paper_minimum_difference"]
        agrees = "—" if line["sign_agrees"] is None else ("yes" if line["sign_agrees"] else "no")
        md.append(f"| {line['row']} | {line['baseline']} | {line['seeds']} | {line['minimum'].format()} | "
                  f"{line['average'].format()} | {line['minimum_improvement']:.2f} / {line['average_improvement']:.2f} | "
                  f"{_verdict_cell(line['verdict'], line['seeds'])} | {paper.NOT_REPORTED if paper_diff is None else f'{paper_diff:+.1f}'} | {agrees} |")
        record = dict(table=table.name, row=line["row"], robust=line["robust"], baseline=line["baseline"],
                      seeds=line["seeds"])
        for metric in METRICS:
            interval = line[metric]
            record.update({f"{metric}_difference": interval.estimate, f"{metric}_low": interval.low,
                           f"{metric}_high": interval.high, f"{metric}_improvement": line[f"{metric}_improvement"]})
        record.update(verdict=line["verdict"], paper_minimum_difference=paper_diff, sign_agrees=line["sign_agrees"],
                      confidence=stats.CONFIDENCE, reps=stats.REPS, bootstrap_seed=stats.SEED)
        comparison_rows.append(record)

    md.append("")
    for base in table.baselines:
        verdicts = [line["verdict"] for line in lines if line["baseline"] == base]
        md.append(f"- Against {base}: {robust} is " + ", ".join(
            f"{word} in {verdicts.count(word)}" for word in (stats.AHEAD, stats.BEHIND, stats.INCONCLUSIVE))
            + f" of {len(verdicts)} rows.")
    by_row = {key: [line for line in lines if line["row"] == key] for key in records}
    supported = sum(all(line["verdict"] == stats.AHEAD for line in row) for row in by_row.values())
    contradicted = sum(any(line["verdict"] == stats.BEHIND for line in row) for row in by_row.values())
    signs = sum(all(line["minimum"].estimate > 0 for line in row) for row in by_row.values())
    judged = [line for line in lines if line["sign_agrees"] is not None]
    md += [f"- The paper's claim ({paper.CLAIM}): the intervals support it in **{supported}**, contradict it "
           f"(behind some baseline) in **{contradicted}**, and cannot tell in **{len(records) - supported - contradicted}** "
           f"of {len(records)} finished rows (of {len(table.rows)} in the table).",
           f"- Signs alone, a secondary fact: {robust}'s mean Minimum is above every baseline's in {signs} of "
           f"{len(records)} rows; our sign agrees with the paper's own in {sum(line['sign_agrees'] for line in judged)} "
           f"of the {len(judged)} comparisons its table reports."]

    reference = table.paper_baseline
    md += ["", "## Across rows: IQM of normalised scores", "",
           NORMALISATION.format(ref=reference) + ". IQM: the mean of the middle half of all (row, reported seed) "
           "scores (rliable's interquartile mean). Intervals: 95% stratified bootstrap, the rows are the strata "
           "(seeds are resampled within each row, the same draw for both algorithms, so the difference stays "
           f"paired), {stats.REPS:,} resamples. The verdict reads the difference's interval as above; "
           f"P({robust} > baseline) is averaged over the rows.", "",
           f"| metric | baseline | rows x seeds | baseline IQM [95% CI] | {robust} IQM [95% CI] | "
           f"{robust} − baseline [95% CI] | verdict | P({robust} > baseline) [95% CI] |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    paper_iqm = []
    for agg in aggregates(table, records):
        a = agg["aggregate"]
        if agg["baseline"] == reference:
            paper_iqm.append(f"{paper_robust_iqm(table, agg['rows'], agg['metric']):.2f} on {agg['metric'].capitalize()}")
        seeds = sorted({len(records[k]["algorithms"][records[k]["headline"]]["reported"]["minimum"]) for k in agg["rows"]})
        md.append(f"| {agg['metric'].capitalize()} | {agg['baseline']} | {a.num_rows} x {'/'.join(map(str, seeds))} | "
                  f"{_unsigned(a.baseline)} | {_unsigned(a.robust)} | "
                  f"{a.difference.format(2)} | {_verdict_cell(a.verdict, a.min_seeds)} | {_unsigned(a.probability_of_improvement)} |")

    if paper_iqm:
        md += ["", f"For scale: in these units the paper's own {robust} means over the same rows have an IQM of "
               f"{' and '.join(paper_iqm)} (its {reference} is 1 by construction)."]
    md += ["", "## Per row", ""]
    for key, rec in records.items():
        chosen = ", ".join(f"ω={w}: {float(v):.1f}" for w, v in rec["tuning_minimum_mean"].items())
        m = rec["machine"]
        md.append(f"- {key}: steps per agent {rec['budget']['steps_per_agent']} (paper {rec['budget']['paper_steps_per_agent']}), "
                  f"tuning-seed mean Minimum {{{chosen}}} -> ω = {rec['chosen_omega']:g}; {_wall(rec)} "
                  f"on {machine_summary(m)}, jax {rec['versions'].get('jax')}, "
                  f"{_batching(rec)}{_physics_engine(rec)}; "
                  f"exact configs, versions, machine: {table.name}/{rec['env_name']}__{rec['param']}/{ROW_RESULT}")
    return md, csv_rows, comparison_rows


def _verdict_cell(word: str, seeds: int) -> str:
    return f"**{word}**" + (f" ({seeds} seeds < {stats.MIN_SEEDS})" if seeds < stats.MIN_SEEDS else "")


def _unsigned(interval: stats.Interval) -> str:
    return f"{interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}]"


def _steps(per_program: dict) -> str:
    """'100' or '100/200': the distinct steps per agent of a row's programs."""
    return "/".join(f"{n:,}" for n in sorted(set(per_program.values())))


def _physics_engine(rec: dict) -> str:
    """', physics: MuJoCo's C engine' for a MuJoCo row; rows written before engines existed ran MJX."""
    config = next(iter(rec["configs"].values()))["config"]
    if envs.get_spec(config["env_name"]).engines == ("jax",):
        return ""
    engine = config.get("engine", "mjx")
    return f", physics: {ENGINE_NAMES.get(engine, engine)}" + ("" if "engine" in config else " (written before engines)")


ENGINE_NAMES = {"c": "MuJoCo's C engine", "mjx": "MuJoCo-MJX", "warp": "MuJoCo Warp"}


def _batching(rec: dict) -> str:
    """How the row's runs were vmapped (rows written before run_batch existed: all at once)."""
    sizes = {n for n in rec.get("run_batch", {}).values() if n is not None}
    return f"{'/'.join(map(str, sorted(sizes)))} runs per vmap" if sizes else "all runs in one vmap"


def _wall(rec: dict) -> str:
    if "wall_s_this_process" not in rec:  # rows written before wall time survived a resume
        this, total = rec["wall_s"], (None if rec.get("resumed_blocks") else rec["wall_s"])
    else:
        this, total = rec["wall_s_this_process"], rec["wall_s"]
    if total is not None:
        return f"wall {total:.0f} s"
    return (f"wall {this:.0f} s after resuming at block {rec['resumed_blocks']} "
            "(the time before the resume was not recorded)")


def write_outputs(table: Table, out_dir: str, figures: bool = True) -> dict:
    """Rebuild DIR/<table>.md, .csv, _comparisons.csv and (with `figures`) the figures from every
    finished row; trains nothing (`fedjax-rl reproduce TABLE --out DIR --report-only`)."""
    import csv

    records = finished_rows(table, out_dir)
    paths = []
    if records:
        md, csv_rows, comparison_rows = table_lines(table, records)
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{table.name}.md")
        with open(path, "w") as f:
            f.write("\n".join(md) + "\n")
        paths.append(path)
        for name, rows in ((table.name, csv_rows), (f"{table.name}_comparisons", comparison_rows)):
            path = os.path.join(out_dir, f"{name}.csv")
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
            paths.append(path)
        if figures:
            paths += write_figures(table, out_dir, records)
    return {"rows": records, "paths": paths}


def write_figures(table: Table, out_dir: str, records: dict) -> list[str]:
    """Nominal learning curves and robustness sweeps as 2 x 4 grids (reported seeds only; the
    baselines and the headline FedR*), the training range 1 ± p shaded on the sweeps."""
    from fedjax_rl import plots

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
        for lab in (*table.baselines, rec["headline"]):
            m = _load_run(os.path.join(row_path, rec["algorithms"][lab]["dir"]))
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
