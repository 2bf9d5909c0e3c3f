"""`fedjax-rl reproduce table1|table2|heterogeneity`: plan a request's rows, run their programs in
seed pieces (resumable, on one machine or many) and write each row when its pieces tile its seeds.
`tables` declares the tables, `report` turns finished rows into tables and figures, `status` says
where a request stands. How a row is run, seeded, tuned, batched and resumed: docs/design.md,
"The reproduction harness". ::

    fedjax-rl reproduce table1 --out results/table1                       # paper budgets, 5 + 3 seeds
    fedjax-rl reproduce table1 --rows CartPole-v1/length --budget 0.1 --out results/t1_small
    fedjax-rl reproduce table2 --rows Hopper-v4/torso --budget 0.005 --set learning_starts=1000 --out DIR
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import subprocess
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedjax_rl import agents
from fedjax_rl.reproduce import paper, report, seed_pieces
from fedjax_rl.training import configs, records
from fedjax_rl.training.machine import describe as describe_machine
from fedjax_rl.training.machine import summary as machine_summary
# The tables' declarations, shared with the reporting half; TABLES and Program are kept as this
# module's names too (`reproduce.TABLES`, `reproduce.get_table`).
from fedjax_rl.reproduce.tables import (  # noqa: F401
    OMEGA_RULE, ROW_RESULT, TABLES, Family, Program, Table, chosen_omega, first_point_dir, get_table, grid_points,
    load_program_run, load_run, row_dir)

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
                 agent_overrides: dict | None = None, train_overrides: dict | None = None,
                 max_rates: Sequence[float] | None = None) -> list[tuple]:
    """[(Program, TrainConfig, grid or None)] for one row; raises a ValueError naming what this
    installation lacks (an environment, a parameter, an algorithm's task defaults) before compiling.
    `max_rates`: the heterogeneity levels p every program grids over, outermost (None: the paper's
    p alone); the config's own max_rate stays the paper's, so that at p = 0.5 a grid point is the
    paper table's config exactly."""
    out = []
    try:
        for program in table.family(row).programs:
            steps, eval_every = budget_steps(program.algo, row.env_name, budget)
            fields = dict(physics=(row.param,), steps_per_agent=steps, eval_every_rounds=eval_every,
                          eval_episodes=paper.EVAL_EPISODES, num_agents=getattr(row, "num_agents", paper.NUM_AGENTS),
                          sync_every=paper.SYNC_EVERY, max_rate=paper.MAX_RATE)
            fields.update(train_overrides or {})
            config = configs.train_config(program.algo, row.env_name, agent_overrides=dict(agent_overrides or {}),
                                          **fields)
            grid = {**({"max_rate": [float(p) for p in max_rates]} if max_rates is not None else {}),
                    **({"omega": [0.0, *omegas]} if program.zero_label else {})} or None
            out.append((program, config, grid))
    except ValueError as error:
        hint = f" ({table.missing_hint})" if table.missing_hint else ""
        raise ValueError(f"{table.name} row {row.key} cannot run in this installation: {error}{hint}") from None
    return out


def _point_dir(max_rate: float | None = None, omega: float | None = None) -> str:
    """A grid point's directory, run_directory.grid_label's spelling: "omega=0.1", "max_rate=0.3,omega=0.1",
    "max_rate=0.3" ("" for neither)."""
    return ",".join(f"{name}={value:g}" for name, value in (("max_rate", max_rate), ("omega", omega))
                    if value is not None)


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


def _request(budget, num_seeds, tuning_seeds, omegas, seed, agent_overrides, train_overrides,
             max_rates=None) -> dict:
    """What a row records of the request it ran (another request on a finished row is refused). Run
    settings that change no number (`--no-tensorboard`) are left out, as config.json leaves them;
    `max_rates` only for a table with a heterogeneity grid (so the paper tables' rows read as before)."""
    levels = {} if max_rates is None else {"max_rates": list(max_rates)}
    return json.loads(json.dumps(dict(budget=budget, num_seeds=num_seeds, tuning_seeds=tuning_seeds,
                                      omegas=list(omegas), seed=seed, agent_overrides=agent_overrides or {},
                                      train_overrides=configs.identity_fields(train_overrides or {}), **levels)))


def summarize_row(directory: str, family: Family, tuning_seeds: int, pieces: dict | None = None,
                  num_seeds: int | None = None, max_rate: float | None = None) -> dict:
    """Per-algorithm tuning/reported numbers of a finished row, read from its metrics.json files
    (so the tables equal the files), and the headline omega chosen on the tuning seeds. `family`:
    the row's programs (`Table.family`). `pieces`: {program: its seed pieces' directories relative
    to ROW/PROGRAM/, in seed order} (None: each program's own directory, as before pieces);
    `num_seeds`: the row's seeds, [0, num_seeds) (None: all its pieces hold). `max_rate`: the
    heterogeneity level p of a program gridded over it (None: no such grid): that level's points."""
    algorithms = {}
    tuning_min = {}
    for program in family.programs:
        program_pieces = (pieces or {}).get(program.name)
        if program.zero_label:
            first = os.path.join(directory, program.name, (program_pieces or [""])[0])
            with open(os.path.join(first, "config.json")) as f:
                grid = json.load(f)["grid"]["omega"]
            runs = [(program.zero_label if w == 0 else agents.ALGORITHMS[program.algo].describe({"omega": w}),
                     f"{program.name}/{_point_dir(max_rate, w)}", w) for w in grid]
        else:
            runs = [(program.label, "/".join([program.name, _point_dir(max_rate)]).rstrip("/"), None)]
        for label, rel, omega in runs:
            final = load_program_run(directory, rel, program_pieces)["final"]
            avg, mn = (np.asarray(final[name], float)[:num_seeds] for name in ("local_average", "local_minimum"))
            algorithms[label] = dict(
                dir=rel, omega=omega,
                tuning=dict(average=avg[:tuning_seeds].tolist(), minimum=mn[:tuning_seeds].tolist()),
                reported=dict(average=avg[tuning_seeds:].tolist(), minimum=mn[tuning_seeds:].tolist()))
            if omega:
                tuning_min[omega] = float(np.mean(mn[:tuning_seeds]))
    chosen = chosen_omega(tuning_min)
    headline = agents.ALGORITHMS[family.programs[0].algo].describe({"omega": chosen})
    return dict(algorithms=algorithms, tuning_minimum_mean=tuning_min, chosen_omega=chosen,
                headline=headline, omega_rule=OMEGA_RULE)


def table_defaults(table: Table) -> dict:
    """The request settings a table uses when the caller gives none: the paper tables' (DEFAULT_SEEDS,
    DEFAULT_TUNING_SEEDS, DEFAULT_OMEGAS) and its levels p, then the table's own (`Table.defaults`)."""
    return {**dict(num_seeds=DEFAULT_SEEDS, tuning_seeds=DEFAULT_TUNING_SEEDS, omegas=DEFAULT_OMEGAS,
                   max_rates=table.max_rates), **table.defaults}


def _check_max_rates(table: Table, max_rates) -> tuple[float, ...] | None:
    if max_rates is None:
        return None
    if table.max_rates is None:
        raise ValueError(f"{table.name} has no heterogeneity grid (max_rates): its rows run the paper's "
                         f"p = {paper.MAX_RATE}; tables with one: {[t.name for t in TABLES.values() if t.max_rates]}")
    levels = tuple(float(p) for p in max_rates)
    if not levels or any(not 0 <= p < 1 for p in levels) or len(set(levels)) != len(levels):
        raise ValueError(f"max_rates must be distinct heterogeneity levels p in [0, 1), got {list(max_rates)}")
    return tuple(sorted(levels))


def _plan(table_name, rows, num_seeds, tuning_seeds, omegas, budget, seed, agent_overrides, train_overrides,
          run_batch, max_rates=None):
    """Validate a request and resolve its rows' programs, before anything compiles (a missing
    environment stops here); None for num_seeds, tuning_seeds, omegas or max_rates is the table's
    default (`table_defaults`). Returns (table, rows, request record, {row key: programs}, run_batch)."""
    from fedjax_rl.training import loop

    run_batch = default_run_batch() if run_batch == "auto" else run_batch
    loop.check_run_batch(run_batch)
    table = get_table(table_name)
    given = dict(num_seeds=num_seeds, tuning_seeds=tuning_seeds, omegas=omegas, max_rates=max_rates)
    num_seeds, tuning_seeds, omegas, max_rates = ({**table_defaults(table), **{k: v for k, v in given.items()
                                                                                 if v is not None}}[k] for k in given)
    budget = parse_budget(budget)
    omegas = _check_omegas(omegas)
    max_rates = _check_max_rates(table, max_rates)
    if num_seeds < 1:
        raise ValueError(f"num_seeds (reported seeds) must be >= 1, got {num_seeds}")
    if tuning_seeds < 1:
        raise ValueError(f"tuning_seeds must be >= 1 (the headline omega is chosen on them), got {tuning_seeds}")
    selected = select_rows(table, rows)
    request = _request(budget, num_seeds, tuning_seeds, omegas, seed, agent_overrides, train_overrides, max_rates)
    plans = {row.key: row_programs(table, row, budget, omegas, agent_overrides, train_overrides, max_rates)
             for row in selected}
    return table, selected, request, plans, run_batch


def bind_request(table_name: str, out_dir: str, **request) -> tuple[dict, tuple]:
    """`reproduce`'s arguments for a request, its defaults filled in (unknown settings raise here),
    and the request's `_plan`."""
    import inspect

    args = inspect.signature(reproduce).bind(table_name, out_dir, **request)
    args.apply_defaults()
    given = args.arguments
    return given, _plan(**{name: given[name] for name in inspect.signature(_plan).parameters})


# A row's identity: its request without the number of reported seeds, which may grow (new pieces of
# new seeds; the tuning seeds, and with them the headline omega, stay).
_GROWS = ("num_seeds",)


def _row_state(row_result: str, request: dict) -> tuple[str, dict | None]:
    """("none" | "finished" | "fewer seeds", its row.json) for a request; raises a ValueError if
    the row was computed with other settings (the message names them)."""
    if not os.path.exists(row_result):
        return "none", None
    diff, record = finished_row(row_result, request)
    if diff:
        previous = record["request"]
        raise ValueError(f"{row_result} was computed with different settings {diff} "
                         f"({ {k: previous.get(k) for k in diff} } vs requested { {k: request[k] for k in diff} }); "
                         "use another --out or remove that row directory")
    enough = len(record["seeds"]["reported"]) >= request["num_seeds"]
    return ("finished" if enough else "fewer seeds"), record


def row_finished(row_result: str, request: dict) -> bool:
    """Whether the row is finished with at least the requested seeds; raises if it was computed with
    other settings."""
    return _row_state(row_result, request)[0] == "finished"


def finished_row(row_result: str, request: dict) -> tuple[list[str], dict]:
    """The request settings a finished row.json was computed with differently (the reported seeds
    aside: a row grows by new seeds), and its record."""
    with open(row_result) as f:
        record = json.load(f)
    return sorted(k for k in request if k not in _GROWS and record["request"].get(k) != request[k]), record


@dataclasses.dataclass(frozen=True)
class PieceRun:
    """One piece of one program of a row, checked and placed, ready to train (or to be read back)."""

    program: Program
    config: Any
    grid: dict | None
    piece: seed_pieces.Piece
    path: str


def expected_record(config, grid, piece, seed: int, run_batch) -> dict:
    """What a piece's directory records (`records.recorded_config`)."""

    return records.recorded_config(config, piece.num_seeds, seed, grid, run_batch, piece.first)[0]


def program_pieces(directory: str, program: Program, config, grid, total: int, seed: int, run_batch,
                   piece_seeds: int | None = None, only: tuple[int, int] | None = None) -> list[PieceRun]:
    """The pieces of one program of a row still to run for seed indices [0, total), or exactly the
    piece `only` = (first, stop), each checked by `seed_pieces.check` (which refuses overlaps and
    settings that could not merge) before anything compiles."""
    program_dir = os.path.join(directory, program.name)
    on_disk = seed_pieces.found(program_dir, program.name)
    whole = expected_record(config, grid, seed_pieces.Piece(program.name, 0, total), seed, run_batch)
    pieces = ([seed_pieces.Piece(program.name, *only)] if only is not None
              else seed_pieces.missing(on_disk, whole, total, program.name, piece_seeds))
    out = []
    for piece in pieces:
        seed_pieces.check(piece, expected_record(config, grid, piece, seed, run_batch), on_disk)
        out.append(PieceRun(program, config, grid, piece, seed_pieces.location(program_dir, piece, total, on_disk)))
    return out


def _run_piece(run: PieceRun, seed: int, run_batch, progress: bool, on_block=None) -> dict:
    from fedjax_rl.training import loop

    return loop.run(run.config, num_seeds=run.piece.num_seeds, seed=seed, out_dir=run.path, progress=progress,
                          grid=run.grid, on_block=on_block, run_batch=run_batch, first_seed=run.piece.first,
                          new_run=True)  # another request's unfinished piece: set aside, as --status says


def run_program(table_name: str, out_dir: str, row: str, program: str, progress: bool = True,
                piece: tuple[int, int] | None = None, piece_seeds: int | None = None, **request) -> list[dict]:
    """Run one program of one row (e.g. "ddpgavg2" of Table 2's "Hopper-v4/torso"), exactly as
    `reproduce(table_name, out_dir, rows=[row], **request)` would run it, into the same directory: the
    seeds it still lacks, as pieces of `piece_seeds` seeds (None: one piece per missing range), or
    only the seed piece `piece` = (first, stop). Returns `loop.run`'s result per piece. A row's
    programs and pieces are independent, so they can run in separate processes or machines;
    `reproduce` with the same request then reads every finished piece back and writes the row,
    computing nothing again. `request`: `reproduce`'s settings."""
    given, (table, [selected], request, plans, run_batch) = bind_request(table_name, out_dir, rows=[row], **request)
    directory = row_dir(out_dir, table, selected)
    _row_state(os.path.join(directory, ROW_RESULT), request)  # refuses a row finished with other settings
    by_name = {plan[0].name: plan for plan in plans[selected.key]}
    if program not in by_name:
        raise ValueError(f"program must be one of {list(by_name)} for {table.name}, got {program!r}")
    total, seed = request["tuning_seeds"] + request["num_seeds"], given["seed"]
    runs = program_pieces(directory, *by_name[program], total, seed, run_batch, piece_seeds, piece)
    return [_run_piece(run, seed, run_batch, progress) for run in runs]


def reproduce(
    table_name: str,
    out_dir: str,
    rows: Sequence[str] | None = None,
    num_seeds: int | None = None,
    tuning_seeds: int | None = None,
    omegas: Sequence[float] | None = None,
    budget: float | str = 1.0,
    seed: int = 0,
    progress: bool = True,
    agent_overrides: dict | None = None,
    train_overrides: dict | None = None,
    run_batch: int | None | str = "auto",
    piece_seeds: int | None = None,
    max_rates: Sequence[float] | None = None,
) -> dict:
    """Run the requested rows of `table_name` (those without a row.json of at least the requested
    seeds), then rebuild the table and figures from every finished row in `out_dir`. Each program
    runs the seeds it still lacks, as pieces of `piece_seeds` seeds (None: one piece per missing
    range; `fedjax_rl.reproduce.seed_pieces`); a row finished with fewer reported seeds grows by new ones.
    `agent_overrides` / `train_overrides` replace the paper's settings (tests use tiny networks);
    they are recorded and printed with the results. `run_batch`: runs vmapped at a time
    (`loop.run`); "auto" is `default_run_batch()`. `num_seeds`, `tuning_seeds`, `omegas` and
    (a table with a heterogeneity grid) `max_rates`, the levels p: None is the table's default
    (`table_defaults`: 5, 3 and 0.01-0.2 for the paper's tables; `heterogeneity`: 10, 2, 0.05 and 0.1).
    Returns {"rows": {key: row record}, "paths": [written files]}."""
    table, selected, request, plans, run_batch = _plan(table_name, rows, num_seeds, tuning_seeds, omegas, budget,
                                                       seed, agent_overrides, train_overrides, run_batch, max_rates)
    tuning_seeds = request["tuning_seeds"]
    num_total = tuning_seeds + request["num_seeds"]
    work = {}  # every row's pieces, checked before anything compiles
    for row in selected:
        directory = row_dir(out_dir, table, row)
        if not row_finished(os.path.join(directory, ROW_RESULT), request):
            work[row.key] = [run for program, config, grid in plans[row.key]
                             for run in program_pieces(directory, program, config, grid, num_total, seed, run_batch,
                                                       piece_seeds)]
    todo = [row for row in selected if row.key in work]
    bar = _rows_bar(table, selected, work, plans) if progress else None
    for index, row in enumerate(todo):
        directory = row_dir(out_dir, table, row)
        os.makedirs(directory, exist_ok=True)
        start, results = time.time(), {}
        for run in work[row.key]:
            description = (f"{table.name} {row.key} ({run.program.label}{_seeds_text(run, num_total)}), "
                           f"row {len(selected) - len(todo) + index + 1}/{len(selected)}")
            on_block = _program_progress(bar, description, run.piece.num_seeds, tuning_seeds, run.config, run.grid)
            results[run.path] = _run_piece(run, seed, run_batch, False, on_block)
        record = _row_record(directory, table, row, plans[row.key], request, budget, seed, tuning_seeds, num_total,
                             run_batch, results, start)
        _write_row(directory, record)
    if bar is not None:
        bar.close()
    return report.write_outputs(table, out_dir)


def _seeds_text(run: PieceRun, total: int) -> str:
    return "" if (run.piece.first, run.piece.stop) == (0, total) else f", {seed_pieces.seed_span(run.piece.first, run.piece.stop)}"


def _rows_bar(table: Table, selected: list, work: dict, plans: dict):
    """One progress bar over every requested row's blocks: the finished rows' counted as done, each
    unfinished row's by the pieces it has still to run."""
    from tqdm.auto import tqdm

    done_rows = sum(c.num_evals for r in selected if r.key not in work for _, c, _ in plans[r.key])
    total = done_rows + sum(run.config.num_evals for runs in work.values() for run in runs)
    return tqdm(total=total, initial=done_rows, unit="block",
                desc=f"{table.name}: {len(selected) - len(work)}/{len(selected)} rows done")


def _program_progress(bar, description: str, num_total: int, tuning_seeds: int, config, grid):
    """`loop.run`'s `on_block` for one program of a row: the rows' bar (None: no bar) says which
    program runs and how far, and counts its blocks, those a resumed checkpoint holds as a head start
    (`begin_program`)."""
    seen = {"blocks": None}

    def on_block(done, total):
        resumed = seen["blocks"] is None  # the first call reports what the checkpoint holds
        step = done - (seen["blocks"] or 0)
        seen["blocks"] = done
        if bar is not None:
            bar.set_description(description)
            points = grid_points(grid)
            # The final evaluation (local environments and the 19-point sweep) comes after the
            # last block: most of an Ant program's wall time on a CPU, so say it is running.
            stage = ", final evaluation" if done == total else ""
            axis = "grid points (p x omega)" if "max_rate" in (grid or {}) else "omega(s)"
            bar.set_postfix_str(f"{num_total} seeds ({tuning_seeds} tuning) x {points} {axis}, step "
                                f"{done * config.steps_per_agent // total:,}/{config.steps_per_agent:,} per agent"
                                f"{stage}", refresh=False)
            if resumed:
                begin_program(bar, step)
            else:
                bar.update(step)

    return on_block


def _row_record(directory, table: Table, row, programs: list, request: dict, budget, seed: int, tuning_seeds: int,
                num_total: int, run_batch, results: dict, start: float) -> dict:
    """A finished row's row.json: the request, the seeds, the budget and configs of its programs, each
    program's seed pieces (where each ran, its wall time), versions, machine and wall time, and its
    numbers (`summarize_row`). `results`: `loop.run`'s result per piece directory trained or
    read in this process."""

    pieces, batches, walls, resumed = {}, {}, [], 0
    for program, config, grid in programs:
        program_dir = os.path.join(directory, program.name)
        whole = expected_record(config, grid, seed_pieces.Piece(program.name, 0, num_total), seed, run_batch)
        covering = seed_pieces.covered(seed_pieces.found(program_dir, program.name), whole)
        pieces[program.name] = [_piece_record(program_dir, found, grid) for found in covering]
        batches[program.name] = _one_or_all([found.record.get("run_batch") for found in covering])
        walls += [p["wall_s"] for p in pieces[program.name]]
        resumed += sum(results[f.path]["timing"]["resumed_at_block"] if f.path in results else config.num_evals
                       for f in covering)
    num_seeds = min(p[-1]["seeds"][1] for p in pieces.values())  # every program holds [0, num_seeds)
    request = {**request, "num_seeds": num_seeds - tuning_seeds}
    return dict(
        table=table.name, row=row.key, env_name=row.env_name, param=row.param, request=request,
        seeds=dict(seed=seed, tuning=list(range(tuning_seeds)), reported=list(range(tuning_seeds, num_seeds)),
                   note="indices into train.seed_keys(seed, tuning + reported)"),
        budget=dict(fraction=budget, steps_per_agent={p.name: c.steps_per_agent for p, c, _ in programs},
                    paper_steps_per_agent={p.name: agents.get(p.algo).steps(row.env_name) for p, _, _ in programs}),
        configs={p.name: dict(config=records.config_to_dict(c), grid=g) for p, c, g in programs},
        # Runs vmapped at a time per program (None: all in one vmap): rounding, not the algorithm.
        run_batch=batches, pieces=pieces,
        versions=versions(), machine=describe_machine(), resumed_blocks=resumed,
        # Over every process that worked on the row (None if a resumed checkpoint did not record its time).
        wall_s=None if None in walls else sum(walls),
        wall_s_this_process=time.time() - start,
        **_summarize(directory, table, row, request, {k: [p["dir"] for p in v] for k, v in pieces.items()}, num_seeds),
    )


def _summarize(directory: str, table: Table, row, request: dict, pieces: dict, num_seeds: int) -> dict:
    """A row's numbers (`summarize_row`); for a table with a heterogeneity grid, one summary per level
    p, each with its own headline omega chosen on the tuning seeds at that level ("points")."""
    family, tuning_seeds = table.family(row), request["tuning_seeds"]
    if "max_rates" not in request:
        return summarize_row(directory, family, tuning_seeds, pieces, num_seeds)
    return dict(points=[dict(max_rate=p, **summarize_row(directory, family, tuning_seeds, pieces, num_seeds, p))
                        for p in request["max_rates"]], omega_rule=OMEGA_RULE)


def _one_or_all(values: list):
    return values[0] if len(set(map(str, values))) == 1 else values


def _piece_record(program_dir: str, found, grid) -> dict:
    """Where a finished piece is (relative to ROW/PROGRAM/), its seeds, the machine it ran on and its
    wall time, from its own metrics (a piece written before runs recorded their machine: None)."""
    first_point = os.path.join(found.path, first_point_dir(grid)) if grid else found.path
    metrics = load_run(first_point)
    rel = os.path.relpath(found.path, program_dir)
    return dict(dir="" if rel == "." else rel, seeds=[found.piece.first, found.piece.stop],
                machine=machine_summary(metrics["machine"]) if "machine" in metrics else None,
                wall_s=metrics.get("timing", {}).get("wall_s"))


def _write_row(directory: str, record: dict) -> None:
    """row.json, atomically; then the pieces' checkpoints go: a finished row never resumes its
    pieces, and their checkpoints (replay buffers included, ~90 MB for a 40-run CartPole row) only
    cost disk."""
    from fedjax_rl.training import run_directory

    with open(os.path.join(directory, ROW_RESULT + ".tmp"), "w") as f:
        json.dump(record, f, indent=2, default=str)
    os.replace(os.path.join(directory, ROW_RESULT + ".tmp"), os.path.join(directory, ROW_RESULT))
    for program, pieces in record["pieces"].items():
        for piece in pieces:
            ckpt = os.path.join(directory, program, piece["dir"], run_directory.CHECKPOINT)
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
