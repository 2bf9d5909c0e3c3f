"""`fedjax-rl reproduce table1|table2`: the paper's Tables 1 and 2 and its figures, row by row.

This module runs the tables (plan, `status`, `reproduce`); `fedjax_rl.reproduce_tables` declares
them (`TABLES`: the command line takes its choices from it, through the generated flag table) and
`fedjax_rl.reproduce_report` turns finished rows into tables, comparisons and figures. Running
imports reporting, never the other way round. ::

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

Outputs in DIR (written by `fedjax_rl.reproduce_report`, this module's reporting half: tables,
figures and their statistics): <table>.md and <table>.csv (Average and Minimum, mean +- std over the reported seeds
(numpy std, ddof 0), beside the paper's numbers (`fedjax_rl.paper`)); <table>_comparisons.csv and the
markdown's comparison section (per row and baseline: the headline FedR* minus the baseline, paired
by seed, on Minimum and Average with 95% intervals whose level was measured (`fedjax_rl.stats`), the
probability of improvement, the verdict "ahead" / "behind" / "inconclusive" / "too few seeds" read
from the Minimum interval with the seeds an undecided one needs, and whether our sign is the paper's
own); the IQM of normalised scores across rows with stratified bootstrap intervals
(`fedjax_rl.stats`; normalisation: NORMALISATION); <table>_curves.png and <table>_sweeps.png
(2 x 4 grids). Each row.json records the exact configs, package versions, machine, budget and wall
time. `write_outputs` (`--report-only`) rebuilds all of these from the finished rows without training.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import time
from collections.abc import Sequence

import numpy as np

from fedjax_rl import agents, configs, paper, reproduce_report
from fedjax_rl.machine import describe as describe_machine
from fedjax_rl.machine import summary as machine_summary
# The tables' declarations, shared with the reporting half; TABLES and Program are kept as this
# module's names too (`reproduce.TABLES`, `reproduce.get_table`).
from fedjax_rl.reproduce_tables import (  # noqa: F401
    OMEGA_RULE, ROW_RESULT, TABLES, Program, Table, get_table, load_run, row_dir)

DEFAULT_OMEGAS = (0.01, 0.05, 0.1, 0.2)
DEFAULT_SEEDS = paper.NUM_SEEDS
DEFAULT_TUNING_SEEDS = 3
CPU_RUN_BATCH = 20  # runs per vmap on a CPU (default_run_batch)
PACKAGES = ("jax", "jaxlib", "flax", "optax", "chex", "gymnax", "flashbax", "numpy", "mujoco", "mujoco-mjx")


def default_run_batch() -> int | None:
    """Runs vmapped at a time when the caller does not say: on a CPU, CPU_RUN_BATCH (a 40-run Table 1
    row trains faster in batches whose parameters and optimizer states stay in cache,
    benchmarks/run_batch.py); on an accelerator, every run in one vmap."""
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
    return f"omega={omega:g}"  # run_directory.grid_label's spelling


def versions() -> dict:
    """The installed versions of PACKAGES and fedjax_rl's git commit (None where unknown), as a row records
    them."""
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
    """What a row records of the request it ran (another request on a finished row is refused). Run
    settings that change no number (`--no-tensorboard`) are left out, as config.json leaves them."""
    return json.loads(json.dumps(dict(budget=budget, num_seeds=num_seeds, tuning_seeds=tuning_seeds,
                                      omegas=list(omegas), seed=seed, agent_overrides=agent_overrides or {},
                                      train_overrides=configs.identity_fields(train_overrides or {}))))


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
            final = load_run(os.path.join(directory, rel))["final"]
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


def _bind_request(table_name: str, out_dir: str, **request) -> tuple[dict, tuple]:
    """`reproduce`'s arguments for a request, its defaults filled in (unknown settings raise here),
    and the request's `_plan`."""
    import inspect

    args = inspect.signature(reproduce).bind(table_name, out_dir, **request)
    args.apply_defaults()
    given = args.arguments
    return given, _plan(**{name: given[name] for name in inspect.signature(_plan).parameters})


def _refuse_other_settings(row_result: str, request: dict) -> bool:
    """Whether the row is finished (its row.json exists); raises if it was computed with other settings."""
    if not os.path.exists(row_result):
        return False
    diff, record = _finished_row(row_result, request)
    if diff:
        previous = record["request"]
        raise ValueError(f"{row_result} was computed with different settings {diff} "
                         f"({ {k: previous.get(k) for k in diff} } vs requested { {k: request[k] for k in diff} }); "
                         "use another --out or remove that row directory")
    return True


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
    `run_directory.progress_on_disk`."""
    from fedjax_rl import run_directory

    given, (table, selected, request, plans, run_batch) = _bind_request(table_name, out_dir, **request)
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
            recorded, _ = run_directory.recorded_config(config, tuning_seeds + num_seeds, seed, grid, run_batch)
            on_disk = run_directory.progress_on_disk(os.path.join(directory, program.name), recorded, config.num_evals)
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


def _run_program(directory, program, config, grid, num_seeds, seed, run_batch, progress, on_block=None) -> dict:
    from fedjax_rl import experiment

    return experiment.run(config, num_seeds=num_seeds, seed=seed, out_dir=os.path.join(directory, program.name),
                          progress=progress, grid=grid, on_block=on_block, run_batch=run_batch,
                          new_run=True)  # another request's unfinished program: set aside, as --status says


def run_program(table_name: str, out_dir: str, row: str, program: str, progress: bool = True, **request) -> dict:
    """Run one program of one row (e.g. "ddpgavg2" of Table 2's "Hopper-v4/torso"), exactly as
    `reproduce(table_name, out_dir, rows=[row], **request)` would run it, into the same directory,
    and return `experiment.run`'s result. A row's programs are independent, so they can run in
    separate processes or machines; `reproduce` with the same request then reads every finished
    program back and writes the row, computing nothing again. `request`: `reproduce`'s settings."""
    given, (table, [selected], request, plans, run_batch) = _bind_request(table_name, out_dir, rows=[row], **request)
    directory = row_dir(out_dir, table, selected)
    _refuse_other_settings(os.path.join(directory, ROW_RESULT), request)
    by_name = {plan[0].name: plan for plan in plans[selected.key]}
    if program not in by_name:
        raise ValueError(f"program must be one of {list(by_name)} for {table.name}, got {program!r}")
    return _run_program(directory, *by_name[program], given["tuning_seeds"] + given["num_seeds"], given["seed"],
                        run_batch, progress)


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
    table, selected, request, plans, run_batch = _plan(table_name, rows, num_seeds, tuning_seeds, omegas, budget,
                                                       seed, agent_overrides, train_overrides, run_batch)
    todo = [row for row in selected
            if not _refuse_other_settings(os.path.join(row_dir(out_dir, table, row), ROW_RESULT), request)]
    bar = _rows_bar(table, selected, todo, plans) if progress else None
    num_total = tuning_seeds + num_seeds
    for index, row in enumerate(todo):
        directory = row_dir(out_dir, table, row)
        os.makedirs(directory, exist_ok=True)
        start = time.time()
        timings, batches = [], {}
        for program, config, grid in plans[row.key]:
            description = (f"{table.name} {row.key} ({program.label}), "
                           f"row {len(selected) - len(todo) + index + 1}/{len(selected)}")
            on_block = _program_progress(bar, description, num_total, tuning_seeds, config, grid)
            result = _run_program(directory, program, config, grid, num_total, seed, run_batch, False, on_block)
            timings.append(result["timing"])
            batches[program.name] = result["run_batch"]
        record = _row_record(directory, table, row, plans[row.key], request, budget, seed, tuning_seeds, num_total,
                             batches, timings, start)
        _write_row(directory, record, plans[row.key])
    if bar is not None:
        bar.close()
    return reproduce_report.write_outputs(table, out_dir)


def _rows_bar(table: Table, selected: list, todo: list, plans: dict):
    """One progress bar over every requested row's blocks, the finished rows' counted as done."""
    from tqdm.auto import tqdm

    blocks_per_row = {key: sum(c.num_evals for _, c, _ in plan) for key, plan in plans.items()}
    total = sum(blocks_per_row.values())
    done_rows = sum(blocks_per_row[r.key] for r in selected if r not in todo)
    return tqdm(total=total, initial=done_rows, unit="block",
                desc=f"{table.name}: {len(selected) - len(todo)}/{len(selected)} rows done")


def _program_progress(bar, description: str, num_total: int, tuning_seeds: int, config, grid):
    """`experiment.run`'s `on_block` for one program of a row: the rows' bar (None: no bar) says which
    program runs and how far, and counts its blocks, those a resumed checkpoint holds as a head start
    (`begin_program`)."""
    seen = {"blocks": None}

    def on_block(done, total):
        resumed = seen["blocks"] is None  # the first call reports what the checkpoint holds
        step = done - (seen["blocks"] or 0)
        seen["blocks"] = done
        if bar is not None:
            bar.set_description(description)
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

    return on_block


def _row_record(directory, table: Table, row, programs: list, request: dict, budget, seed: int, tuning_seeds: int,
                num_total: int, batches: dict, timings: list, start: float) -> dict:
    """A finished row's row.json: the request, the seeds, the budget and configs of its programs,
    versions, machine and wall time, and its numbers (`summarize_row`)."""
    from fedjax_rl import run_directory

    return dict(
        table=table.name, row=row.key, env_name=row.env_name, param=row.param, request=request,
        seeds=dict(seed=seed, tuning=list(range(tuning_seeds)), reported=list(range(tuning_seeds, num_total)),
                   note="indices into train.seed_keys(seed, tuning + reported)"),
        budget=dict(fraction=budget, steps_per_agent={p.name: c.steps_per_agent for p, c, _ in programs},
                    paper_steps_per_agent={p.name: agents.get(p.algo).steps(row.env_name) for p, _, _ in programs}),
        configs={p.name: dict(config=run_directory.config_to_dict(c), grid=g) for p, c, g in programs},
        # Runs vmapped at a time per program (None: all in one vmap): rounding, not the algorithm.
        run_batch=batches,
        versions=versions(), machine=describe_machine(), resumed_blocks=sum(t["resumed_at_block"] for t in timings),
        # Over every process that worked on the row (None if a resumed checkpoint did not record its time).
        wall_s=None if any(t["wall_s"] is None for t in timings) else sum(t["wall_s"] for t in timings),
        wall_s_this_process=time.time() - start,
        **summarize_row(directory, table, tuning_seeds),
    )


def _write_row(directory: str, record: dict, programs: list) -> None:
    """row.json, atomically; then the programs' checkpoints go: a finished row never resumes, and
    they (replay buffers included, ~90 MB for a 40-run CartPole row) only cost disk."""
    from fedjax_rl import run_directory

    with open(os.path.join(directory, ROW_RESULT + ".tmp"), "w") as f:
        json.dump(record, f, indent=2, default=str)
    os.replace(os.path.join(directory, ROW_RESULT + ".tmp"), os.path.join(directory, ROW_RESULT))
    for program, _, _ in programs:
        ckpt = os.path.join(directory, program.name, run_directory.CHECKPOINT)
        if os.path.exists(ckpt):
            os.remove(ckpt)


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
