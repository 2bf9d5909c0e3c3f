"""`fedjax-rl reproduce table1|table2|heterogeneity`: run a request's rows (`plan.Request`, resolved
to a `plan.Plan`) as their programs' seed pieces (resumable, on one machine or many; `pieces_left`
says which are left) and write each row when its pieces tile its seeds. `tables` declares the
tables, `report` turns finished rows into tables and figures, `status` says where a request stands. How a row is run, seeded, tuned, batched and resumed: docs/design.md,
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
from fedjax_rl.reproduce import report, seed_pieces
from fedjax_rl.reproduce.plan import Plan, Planned, Request
from fedjax_rl.training import records
from fedjax_rl.training.run_directory import RunDirectory
from fedjax_rl.training.machine import describe as describe_machine
from fedjax_rl.training.machine import summary as machine_summary
from fedjax_rl.reproduce.tables import (
    OMEGA_RULE, ROW_RESULT, Family, Program, Table, chosen_omega, first_point_dir, grid_points, row_dir)
from fedjax_rl.reproduce.row_records import ROW_SCHEMA, read_row, load_program_run, pieces_holding

PACKAGES = ("jax", "jaxlib", "flax", "optax", "chex", "gymnax", "flashbax", "numpy", "mujoco", "mujoco-mjx")


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


def summarize_row(directory: str, family: Family, tuning_seeds: int, pieces: dict | None = None,
                  num_seeds: int | None = None, max_rate: float | None = None,
                  challengers: Sequence[Program] = ()) -> dict:
    """Per-algorithm tuning/reported numbers of a finished row, read from its metrics.json files
    (so the tables equal the files), and the headline omega chosen on the tuning seeds. `family`:
    the row's programs (`Table.family`). `pieces`: {program: its seed pieces' records, in seed order
    (row.json's: "dir" relative to ROW/PROGRAM/, and "grid" where a piece trained a part of the
    program's; each algorithm reads the pieces that hold it, `row_records.pieces_holding`)} (None: each
    program's own directory);
    `num_seeds`: the row's seeds, [0, num_seeds) (None: all its pieces hold). `max_rate`: the
    heterogeneity level p of a program gridded over it (None: no such grid): that level's points.
    `challengers`: programs beside the row's own, each with its numbers among the algorithms and,
    under "challengers", its headline omega chosen by the same rule on its own tuning seeds."""
    algorithms, tuning_min = {}, {}
    for program in family.programs:
        tuning_min.update(_read_program(directory, program, pieces, tuning_seeds, num_seeds, max_rate, algorithms))
    chosen = chosen_omega(tuning_min)
    headline = agents.get(family.programs[0].algo).describe({"omega": chosen})
    seeds = {label: len(algorithms[label]["reported"]["minimum"]) for label in (headline, *family.baselines)}
    if len(set(seeds.values())) > 1:
        raise ValueError(f"{directory}: the headline and the baselines hold different seeds ({seeds}); a piece "
                         "that trained a part of the grid left out the omega this row chose")
    out = dict(algorithms=algorithms, tuning_minimum_mean=tuning_min, chosen_omega=chosen,
               headline=headline, omega_rule=OMEGA_RULE)
    if challengers:
        out["challengers"] = {}
        for program in challengers:
            own = {}
            tuning = _read_program(directory, program, pieces, tuning_seeds, num_seeds, max_rate, own)
            algorithms.update(own)
            mine = chosen_omega(tuning) if tuning else None
            out["challengers"][program.name] = dict(
                label=program.label, labels=list(own), tuning_minimum_mean=tuning, chosen_omega=mine,
                headline=agents.get(program.algo).describe({"omega": mine}) if tuning else program.label)
    return out


def _read_program(directory: str, program: Program, pieces: dict | None, tuning_seeds: int, num_seeds: int | None,
                  max_rate: float | None, into: dict) -> dict:
    """One program's tuning and reported numbers per algorithm label, added to `into`; returns the
    tuning seeds' mean Minimum per omega > 0 of its grid (empty without one)."""
    program_pieces = (pieces or {}).get(program.name)
    grid = None
    if program.zero_label or program.challenger:
        first = os.path.join(directory, program.name, program_pieces[0]["dir"] if program_pieces else "")
        grid = (RunDirectory.read_config(first)["grid"] or {}).get("omega")
    if grid is not None:
        describe = agents.get(program.algo).describe
        runs = [(program.zero_label if w == 0 else describe({"omega": w}),
                 f"{program.name}/{RunDirectory.point_name({'max_rate': max_rate, 'omega': w})}", w) for w in grid]
    else:
        runs = [(program.label, "/".join([program.name, RunDirectory.point_name({"max_rate": max_rate})]).rstrip("/"),
                 None)]
    tuning_min = {}
    for label, rel, omega in runs:
        held = None if program_pieces is None else [
            piece["dir"] for piece in pieces_holding(program_pieces, None if omega is None else {"omega": omega})]
        final = load_program_run(directory, rel, held)["final"]
        avg, mn = (np.asarray(final[name], float)[:num_seeds] for name in ("local_average", "local_minimum"))
        into[label] = dict(
            dir=rel, omega=omega,
            tuning=dict(average=avg[:tuning_seeds].tolist(), minimum=mn[:tuning_seeds].tolist()),
            reported=dict(average=avg[tuning_seeds:].tolist(), minimum=mn[tuning_seeds:].tolist()))
        if omega:
            tuning_min[omega] = float(np.mean(mn[:tuning_seeds]))
    return tuning_min


# A row's identity: its request without the number of reported seeds, which may grow (new pieces of
# new seeds; the tuning seeds, and with them the headline omega, stay), without its challengers,
# which a request may add (the row's own programs are read back, the challenger's trained), and without
# what its new seeds train (`Request.new_seeds_at`: the row's algorithms stay, some hold fewer seeds).
CHALLENGERS = "challengers"
CHALLENGER_OVERRIDES = "challenger_overrides"
_GROWS = ("num_seeds", CHALLENGERS, CHALLENGER_OVERRIDES, "new_seeds_at")


def row_state(row_result: str, request: dict) -> tuple[str, dict | None, list[str]]:
    """Where a row stands for a request, from its row.json: (state, the record, the request settings
    it was computed with differently). The state is "none" (no row.json), "other settings" (the
    request differs beyond its reported seeds, which may grow), "finished" (at least the requested
    reported seeds and challengers), "fewer seeds" or "lacks a challenger"."""
    if not os.path.exists(row_result):
        return "none", None, []
    record = read_row(row_result)
    diff = sorted(k for k in request if k not in _GROWS and record["request"].get(k) != request[k])
    # A challenger the row has, asked for with other settings of its own, is other settings too.
    shared = set(request.get(CHALLENGERS, ())) & set(record["request"].get(CHALLENGERS, ()))
    if shared and record["request"].get(CHALLENGER_OVERRIDES, {}) != request.get(CHALLENGER_OVERRIDES, {}):
        diff.append(CHALLENGER_OVERRIDES)
    if diff:
        return "other settings", record, diff
    enough = len(record["seeds"]["reported"]) >= request["num_seeds"]
    if enough and not set(request.get(CHALLENGERS, ())) <= set(record["request"].get(CHALLENGERS, ())):
        return "lacks a challenger", record, []
    return ("finished" if enough else "fewer seeds"), record, []


def row_finished(row_result: str, request: dict) -> bool:
    """Whether the row is finished with at least the requested seeds; a ValueError naming the
    settings if it was computed with other ones."""
    state, record, diff = row_state(row_result, request)
    if state == "other settings":
        previous = record["request"]
        raise ValueError(f"{row_result} was computed with different settings {diff} "
                         f"({ {k: previous.get(k) for k in diff} } vs requested { {k: request.get(k) for k in diff} }); "
                         "use another --out or remove that row directory")
    return state == "finished"


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


def program_on_disk(directory: str, program: Program, config, grid, total: int, seed: int,
                    run_batch) -> seed_pieces.ProgramOnDisk:
    """One program of a row in `directory`, read once against the request's settings for seed indices
    [0, total)."""
    whole = expected_record(config, grid, seed_pieces.Piece(program.name, 0, total), seed, run_batch)
    return seed_pieces.ProgramOnDisk.read(os.path.join(directory, program.name), program.name, total, whole)


def program_pieces(directory: str, planned: Planned, total: int, seed: int, run_batch,
                   piece_seeds: int | None = None, only: tuple[int, int] | None = None) -> list[PieceRun]:
    """The pieces of one program of a row still to run for seed indices [0, total), or exactly the
    piece `only` = (first, stop), each checked (`ProgramOnDisk.check`: it refuses overlaps and settings
    that could not merge) before anything compiles; each trains `planned.piece_grid`."""
    program, config = planned.program, planned.config
    on_disk = program_on_disk(directory, program, config, planned.grid, total, seed, run_batch)
    pieces = [seed_pieces.Piece(program.name, *only)] if only is not None else on_disk.missing(piece_seeds)
    out = []
    for piece in pieces:
        on_disk.check(piece)
        out.append(PieceRun(program, config, planned.piece_grid, piece, on_disk.location(piece)))
    return out


def _run_piece(run: PieceRun, seed: int, run_batch, progress: bool, on_nonfinite: str, on_block=None) -> dict:
    from fedjax_rl.training import loop

    return loop.run(run.config, num_seeds=run.piece.num_seeds, seed=seed, out_dir=run.path, progress=progress,
                          grid=run.grid, on_block=on_block, run_batch=run_batch, first_seed=run.piece.first,
                          new_run=True,  # another request's unfinished piece: set aside, as --status says
                          on_nonfinite=on_nonfinite)


def run_program(table_name: str, out_dir: str, row: str, program: str, progress: bool = True,
                piece: tuple[int, int] | None = None, piece_seeds: int | None = None, **request) -> list[dict]:
    """Run one program of one row (e.g. "ddpgavg2" of Table 2's "Hopper-v4/torso"), exactly as
    `reproduce(table_name, out_dir, rows=[row], **request)` would run it, into the same directory: the
    seeds it still lacks, as pieces of `piece_seeds` seeds (None: one piece per missing range), or
    only the seed piece `piece` = (first, stop). Returns `loop.run`'s result per piece. A row's
    programs and pieces are independent, so they can run in separate processes or machines;
    `reproduce` with the same request then reads every finished piece back and writes the row,
    computing nothing again. `request`: `reproduce`'s settings."""
    plan = Request.of(table_name, rows=[row], **request).plan()
    [selected] = plan.rows
    directory = row_dir(out_dir, plan.table, selected)
    row_finished(os.path.join(directory, ROW_RESULT), plan.record)  # refuses a row finished with other settings
    by_name = {planned.program.name: planned for planned in plan.at(out_dir).programs[selected.key]}
    if program not in by_name:
        raise ValueError(f"program must be one of {list(by_name)} for {plan.table.name}, got {program!r}")
    runs = program_pieces(directory, by_name[program], plan.total_seeds, plan.seed, plan.run_batch, piece_seeds,
                          piece)
    return [_run_piece(run, plan.seed, plan.run_batch, progress, plan.table.on_nonfinite) for run in runs]


def pieces_left(out_dir: str, plan: Plan, piece_seeds: int | None = None) -> dict[str, list[PieceRun]]:
    """{row key: every piece of its programs still to run} for the plan's rows that are not finished
    (a finished row has no entry), each piece checked (`program_pieces`) before anything compiles: what
    `reproduce` trains and what an executor starts."""
    return _pieces_of(out_dir, unfinished(out_dir, plan), piece_seeds)


def unfinished(out_dir: str, plan: Plan) -> Plan:
    """The plan's rows that are not finished in `out_dir`, resolved against it (`Plan.at`); a ValueError
    for a row finished with other settings."""
    rows = [row for row in plan.rows
            if not row_finished(os.path.join(row_dir(out_dir, plan.table, row), ROW_RESULT), plan.record)]
    return plan._replace(rows=rows).at(out_dir)


def _pieces_of(out_dir: str, plan: Plan, piece_seeds: int | None) -> dict[str, list[PieceRun]]:
    return {row.key: [run for planned in plan.programs[row.key]
                      for run in program_pieces(row_dir(out_dir, plan.table, row), planned, plan.total_seeds,
                                                plan.seed, plan.run_batch, piece_seeds)]
            for row in plan.rows}


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
    challengers: Sequence[str] = (),
    new_seeds_at: str = "grid",
    challenger_overrides: dict | None = None,
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
    `new_seeds_at`: what a finished row's new seeds train (`plan.Request`). `challenger_overrides`: settings
    of the `challengers` ({name: value}, each for every challenger that declares it), recorded in the row.
    Returns {"rows": {key: row record}, "paths": [written files]}."""
    plan = Request(table_name, rows, num_seeds, tuning_seeds, omegas, budget, seed, agent_overrides, train_overrides,
                   run_batch, max_rates, tuple(challengers), new_seeds_at, challenger_overrides).plan()
    table, selected, request, run_batch = plan.table, plan.rows, plan.record, plan.run_batch
    tuning_seeds, num_total = request["tuning_seeds"], plan.total_seeds
    resolved = unfinished(out_dir, plan)
    work = _pieces_of(out_dir, resolved, piece_seeds)
    todo, plans = resolved.rows, resolved.programs
    bar = _rows_bar(table, selected, work, plan.programs) if progress else None
    for index, row in enumerate(todo):
        directory = row_dir(out_dir, table, row)
        os.makedirs(directory, exist_ok=True)
        start, results = time.time(), {}
        for run in work[row.key]:
            description = (f"{table.name} {row.key} ({run.program.label}{_seeds_text(run, num_total)}), "
                           f"row {len(selected) - len(todo) + index + 1}/{len(selected)}")
            on_block = _program_progress(bar, description, seeds_trained(run.piece, tuning_seeds), run.config, run.grid)
            results[run.path] = _run_piece(run, seed, run_batch, False, table.on_nonfinite, on_block)
        record = _row_record(directory, table, row, plans[row.key], request, seed, tuning_seeds, num_total,
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

    done_rows = sum(planned.config.num_evals for r in selected if r.key not in work for planned in plans[r.key])
    total = done_rows + sum(run.config.num_evals for runs in work.values() for run in runs)
    return tqdm(total=total, initial=done_rows, unit="block",
                desc=f"{table.name}: {len(selected) - len(work)}/{len(selected)} rows done")


def seeds_trained(piece: seed_pieces.Piece, tuning_seeds: int) -> str:
    """What a piece's seeds are, for its progress line: "11 seeds (1 tuning)" for a whole row, and a
    piece's own share of the tuning seeds (indices below `tuning_seeds`): "1 seed (reported)"."""
    tuning = max(0, min(piece.stop, tuning_seeds) - piece.first)
    count = f"{piece.num_seeds} seed{'s' if piece.num_seeds != 1 else ''}"
    if tuning == 0:
        return f"{count} (reported)"
    return f"{count} (tuning)" if tuning == piece.num_seeds else f"{count} ({tuning} tuning)"


def _program_progress(bar, description: str, seeds: str, config, grid):
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
            bar.set_postfix_str(f"{seeds} x {points} {axis}, step "
                                f"{done * config.steps_per_agent // total:,}/{config.steps_per_agent:,} per agent"
                                f"{stage}", refresh=False)
            if resumed:
                begin_program(bar, step)
            else:
                bar.update(step)

    return on_block


def _row_record(directory, table: Table, row, programs: list, request: dict, seed: int, tuning_seeds: int,
                num_total: int, run_batch, results: dict, start: float) -> dict:
    """A finished row's row.json: the request, the seeds, the budget and configs of its programs, each
    program's seed pieces (where each ran, its wall time), versions, machine and wall time, and its
    numbers (`summarize_row`). `results`: `loop.run`'s result per piece directory trained or
    read in this process."""

    pieces, batches, walls, resumed = {}, {}, [], 0
    earlier = _earlier_record(directory)
    for program, config, grid, _ in programs:
        on_disk = program_on_disk(directory, program, config, grid, num_total, seed, run_batch)
        covering = on_disk.covered()
        pieces[program.name] = [_piece_record(on_disk.path, found, grid, _earlier_pieces(earlier, program.name))
                                for found in covering]
        batches[program.name] = _one_or_all([found.record.get("run_batch") for found in covering])
        walls += [p["wall_s"] for p in pieces[program.name]]
        resumed += sum(results[f.path]["timing"]["resumed_at_block"] if f.path in results else config.num_evals
                       for f in covering)
    num_seeds = min(p[-1]["seeds"][1] for p in pieces.values())  # every program holds [0, num_seeds)
    request = {**request, "num_seeds": num_seeds - tuning_seeds}
    return dict(
        schema=ROW_SCHEMA, table=table.name, row=row.key, env_name=row.env_name, param=row.param, request=request,
        seeds=dict(seed=seed, tuning=list(range(tuning_seeds)), reported=list(range(tuning_seeds, num_seeds)),
                   note="indices into training.program.seed_keys(seed, tuning + reported)"),
        # The request's budget is the fraction the command's "paper" or "0.05" means.
        budget=dict(fraction=request["budget"], steps_per_agent={p.name: c.steps_per_agent for p, c, _, _ in programs},
                    paper_steps_per_agent={p.name: agents.get(p.algo).steps(row.env_name) for p, *_ in programs}),
        configs={p.name: dict(config=records.config_to_dict(c), grid=g) for p, c, g, _ in programs},
        # Runs vmapped at a time per program (None: all in one vmap): rounding, not the algorithm.
        run_batch=batches, pieces=pieces,
        versions=versions(), machine=describe_machine(), resumed_blocks=resumed,
        # Over every process that worked on the row (None if a resumed checkpoint did not record its time).
        wall_s=None if None in walls else sum(walls),
        wall_s_this_process=time.time() - start,
        **_summarize(directory, table, row, request, pieces, num_seeds, [p for p, *_ in programs if p.challenger]),
    )


def _summarize(directory: str, table: Table, row, request: dict, pieces: dict, num_seeds: int,
               challengers: Sequence[Program] = ()) -> dict:
    """A row's numbers (`summarize_row`); for a table with a heterogeneity grid, one summary per level
    p, each with its own headline omega chosen on the tuning seeds at that level ("points")."""
    family, tuning_seeds = table.family(row), request["tuning_seeds"]
    if "max_rates" not in request:
        return summarize_row(directory, family, tuning_seeds, pieces, num_seeds, challengers=challengers)
    return dict(points=[dict(max_rate=p, **summarize_row(directory, family, tuning_seeds, pieces, num_seeds, p,
                                                         challengers))
                        for p in request["max_rates"]], omega_rule=OMEGA_RULE)


def _one_or_all(values: list):
    return values[0] if len(set(map(str, values))) == 1 else values


def _earlier_record(directory: str) -> dict | None:
    """The row.json this write replaces, if any: it may be the only record of where older pieces ran."""
    path = os.path.join(directory, ROW_RESULT)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _earlier_pieces(earlier: dict | None, program: str) -> list[dict]:
    """A program's pieces as the replaced row.json recorded them, each with a machine and jax where
    that record knew them. A row.json written without pieces, or whose only piece of this program was
    the whole program, was written by the process that trained it (an older program's metrics record
    no machine), so its own machine and jax are that program's."""
    if earlier is None:
        return []
    found = earlier.get("pieces", {}).get(program)
    if not found:
        found = [{"dir": "", "seeds": None, "machine": None}]
    if len(found) == 1 and found[0]["dir"] == "" and found[0]["machine"] is None:
        found = [{**found[0], "machine": machine_summary(earlier["machine"]),
                  "jax": earlier.get("versions", {}).get("jax")}]
    return found


def _piece_record(program_dir: str, found, grid, earlier: Sequence[dict] = ()) -> dict:
    """Where a finished piece is (relative to ROW/PROGRAM/), its seeds, the machine and jax it ran on
    and its wall time, from its own metrics, or where those record no machine from the replaced
    row.json's record of the same piece (`earlier`; None where neither knows); and its grid where it
    trained a part of the program's `grid` (`row_records.pieces_holding` reads it)."""
    own = found.record.get("grid")
    first_point = os.path.join(found.path, first_point_dir(own)) if own else found.path
    metrics = RunDirectory.read_metrics(first_point)
    rel = os.path.relpath(found.path, program_dir)
    rel = "" if rel == "." else rel
    seeds = [found.piece.first, found.piece.stop]
    part = {} if own == (grid and {k: list(map(float, v)) for k, v in grid.items()}) else {"grid": own}
    if "machine" in metrics:
        machine, jax_version = machine_summary(metrics["machine"]), metrics["machine"].get("jax")
    else:
        same = [p for p in earlier if p["dir"] == rel and p.get("seeds") in (None, seeds) and p["machine"]]
        machine, jax_version = (same[0]["machine"], same[0].get("jax")) if same else (None, None)
    return dict(dir=rel, seeds=seeds, machine=machine, **({"jax": jax_version} if jax_version else {}),
                wall_s=metrics.get("timing", {}).get("wall_s"), **part)


def _write_row(directory: str, record: dict) -> None:
    """row.json, atomically; then the pieces' checkpoints go: a finished row never resumes its
    pieces, and their checkpoints (replay buffers included, ~90 MB for a 40-run CartPole row) only
    cost disk."""
    with open(os.path.join(directory, ROW_RESULT + ".tmp"), "w") as f:
        json.dump(record, f, indent=2, default=str)
    os.replace(os.path.join(directory, ROW_RESULT + ".tmp"), os.path.join(directory, ROW_RESULT))
    for program, pieces in record["pieces"].items():
        for piece in pieces:
            RunDirectory.drop_checkpoint(os.path.join(directory, program, piece["dir"]))


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
