"""Where a reproduction request stands on disk, read from its files alone: nothing compiles, runs or is
written (`fedjax-rl reproduce --status`). `rows` says it per row, program and seed piece; `lines`
writes it as text, with each piece's training time left or its estimated cost."""

from __future__ import annotations

import os

from fedjax_rl.reproduce import harness, seed_pieces, tables
from fedjax_rl.reproduce.plan import Request
from fedjax_rl.reproduce.tables import ROW_RESULT
from fedjax_rl.training.machine import summary as machine_summary


def rows(table_name: str, out_dir: str, piece_seeds: int | None = None, **request) -> list[dict]:
    """Where each requested row stands in `out_dir` for a request (`reproduce`'s keyword arguments,
    with its defaults; `progress` aside), read from its files: nothing compiles, runs or is written.
    One dict per row: "row", "state" ("finished", "finished with other settings", "in progress",
    "not started"), and either the finished row's "wall_s", "machine" and "seeds", or "programs":
    per program its "state", blocks done, and its "pieces" (seeds, state, blocks done, and for a
    piece still to run its estimated time on a CPU and on a GPU, `costs.estimate`)."""
    from fedjax_rl.reproduce import costs

    plan = Request.of(table_name, **request).plan()
    table, selected, request, run_batch = plan.table, plan.rows, plan.record, plan.run_batch
    total, seed = plan.total_seeds, plan.seed
    measured = costs.measurements(costs.default_sources(out_dir))
    row_states = []
    for row in selected:
        directory = tables.row_dir(out_dir, table, row)
        state, record, diff = harness.row_state(os.path.join(directory, ROW_RESULT), request)
        if state in ("finished", "other settings"):
            row_states.append(dict(row=row.key, state="finished with other settings" if diff else "finished",
                                   other_settings=diff, wall_s=record.get("wall_s"),
                                   machine=machine_summary(record["machine"]),
                                   seeds=len(record["seeds"]["tuning"]) + len(record["seeds"]["reported"])))
            continue
        resolved = plan._replace(rows=[row]).at(out_dir).programs[row.key]
        programs = [_program_status(directory, table, row, planned, total, seed, run_batch, piece_seeds, measured)
                    for planned in resolved]
        started = any(p["state"] != "not started" for p in programs)
        row_states.append(dict(row=row.key, state="in progress" if started else "not started", programs=programs))
    return row_states


def _program_status(directory, table, row, planned, total, seed, run_batch, piece_seeds, measured) -> dict:
    """One program's pieces on disk and still to run (`rows`)."""
    from fedjax_rl.reproduce import costs
    from fedjax_rl.training import run_directory

    program, config = planned.program, planned.config
    on_disk = harness.program_on_disk(directory, program, config, planned.grid, total, seed, run_batch)
    points = tables.grid_points(planned.piece_grid)
    pieces = []
    for f in on_disk.pieces:
        if not on_disk.is_mine(f):
            pieces.append(dict(seeds=[f.piece.first, f.piece.stop], state="other settings", path=f.path,
                               finished=f.finished,
                               differences=on_disk.differences(f)))
        elif f.finished:
            pieces.append(dict(seeds=[f.piece.first, f.piece.stop], state="finished", path=f.path))
    for piece in on_disk.missing(piece_seeds):
        there = next((f for f in on_disk.pieces if f.piece == piece and on_disk.is_mine(f)), None)
        progress = run_directory.RunDirectory(there.path, there.record).progress(config.num_evals) if there else None
        state = "partial" if progress and progress["state"] == "partial" else "to run"
        cost = costs.estimate(measured, table.name, row.key, program.name, config.engine,
                                        piece.num_seeds * points, config.steps_per_agent, config.num_agents)
        pieces.append(dict(seeds=[piece.first, piece.stop], state=state, estimate=cost,
                           blocks_done=progress["blocks_done"] if progress else 0,
                           wall_s=progress["wall_s"] if progress else None))
    pieces.sort(key=lambda p: p["seeds"][0])
    covered = on_disk.covered()
    held = covered[-1].piece.stop if covered else 0
    partial = [p for p in pieces if p["state"] == "partial"]
    state = ("finished" if held >= total else "partial" if partial or held
             else "other settings" if any(p["state"] == "other settings" for p in pieces) else "not started")
    # A finished piece of other settings makes every piece of this request refuse (`ProgramOnDisk.check`).
    refused = any(p["state"] == "other settings" and p["finished"] for p in pieces)
    return dict(program=program.label, name=program.name, state=state, refused=refused, num_blocks=config.num_evals,
                seeds_held=held, blocks_done=sum(p["blocks_done"] for p in partial),
                wall_s=partial[0]["wall_s"] if len(partial) == 1 else None, pieces=pieces)


def lines(table_name: str, out_dir: str, row_states: list[dict]) -> list[str]:
    """`rows` as text: per row, and per unfinished program its pieces; an unfinished piece with its
    training time left at its pace so far (compilation included; its final evaluation not counted, and
    a piece that has trained every block says its final evaluation is pending), a piece still to run
    with its estimated time on a CPU and on a GPU, from measured programs (`costs`)."""
    counts = {state: sum(r["state"] == state for r in row_states)
              for state in ("finished", "finished with other settings", "in progress", "not started")}
    lines = [f"{table_name} in {out_dir}: " + ", ".join(f"{n} {state}" for state, n in counts.items() if n)
             + f" (of {len(row_states)} requested rows)"]
    for r in row_states:
        if r["state"].startswith("finished"):
            wall = "" if r["wall_s"] is None else f"{r['wall_s']:,.0f} s on "
            other = f" {r['other_settings']}" if r["other_settings"] else ""
            lines.append(f"  {r['row']}: {r['state']}{other} ({r['seeds']} seeds; {wall}{r['machine']})")
            continue
        lines.append(f"  {r['row']}: {r['state']}: " + "; ".join(_program_line(p) for p in r["programs"]))
        for p in r["programs"]:
            if not p.get("refused"):
                lines += [f"    {p['name']} {text}" for text in _pieces_lines(p)]
    total = _total_line(row_states)
    return lines + ([total] if total else [])


def _total_line(row_states: list[dict]) -> str | None:
    """What the pieces still to run (not partial ones) cost in all, one after another, per kind of
    machine: the sum of their estimates, and how many have none. On a GPU pieces side by side take far
    less than their sum (a program there is bound by its sequential steps), so that sum is a bound.
    None where nothing is left to run."""
    from fedjax_rl.reproduce import costs

    todo = [piece for r in row_states for p in r.get("programs", ()) if not p.get("refused")
            for piece in p["pieces"] if piece["state"] == "to run"]
    if not todo:
        return None
    parts = []
    for kind, name, after in (("cpu", "a CPU", ""), ("gpu", "a GPU", ", far less side by side")):
        known = [piece["estimate"][kind][0] for piece in todo if piece["estimate"][kind]]
        unknown = len(todo) - len(known)
        text = f"{costs.about(sum(known))} on {name} one after another{after}" if known else f"no measurement on {name}"
        parts.append(text + (f" ({unknown} without a measurement)" if known and unknown else ""))
    return f"  in all: {len(todo)} piece(s) to run: " + "; ".join(parts)


def _pieces_lines(program: dict) -> list[str]:
    """A program's unfinished pieces, one line each, but a run of pieces still to run of one size and one
    estimate as one line ("seeds 0-10, 11 pieces of 1 seed: to run, each ..."): a table run in one-seed
    pieces would otherwise list the same line eleven times a row."""
    pending = [piece for piece in program["pieces"] if piece["state"] in ("partial", "to run")]
    texts = [_piece_line(piece, program) for piece in pending]
    out, start = [], 0
    while start < len(pending):
        first, size = pending[start], pending[start]["seeds"][1] - pending[start]["seeds"][0]
        stop = start + 1
        if first["state"] == "to run":
            while (stop < len(pending) and pending[stop]["state"] == "to run" and texts[stop] == texts[start]
                   and pending[stop]["seeds"] == [pending[stop - 1]["seeds"][1], pending[stop - 1]["seeds"][1] + size]):
                stop += 1
        span = seed_pieces.seed_span(first["seeds"][0], pending[stop - 1]["seeds"][1])
        if stop - start == 1:
            out.append(f"{span}: {texts[start]}")
        else:
            each = texts[start].removeprefix("to run: ")
            out.append(f"{span}, {stop - start} pieces of {size} seed{'s' * (size != 1)}: to run, each {each}")
        start = stop
    return out


def _program_line(p: dict) -> str:
    if p["state"] == "finished":
        return f"{p['program']} trained and evaluated"
    if p["state"] == "other settings" or p.get("refused"):
        return _other_settings_line(p)
    held = f"{seed_pieces.seed_span(0, p['seeds_held'])} finished, " if p["seeds_held"] else ""
    todo = sum(1 for piece in p["pieces"] if piece["state"] in ("partial", "to run"))
    if p["state"] == "partial" and len(p["pieces"]) == 1 and p["pieces"][0]["state"] == "partial":
        return f"{p['program']} {_piece_line(p['pieces'][0], p)}"
    return f"{p['program']} {held}{todo} piece(s) to run" if todo else f"{p['program']} not started"


def _other_settings_line(p: dict) -> str:
    """A program that holds pieces of other settings than the request's: an unfinished one is set
    aside when the request runs it, a finished one makes the request refuse (`ProgramOnDisk.check`:
    the two could not be merged), and the line says which, naming the settings that differ."""
    others = [piece for piece in p["pieces"] if piece["state"] == "other settings"]
    differences = sorted({d for piece in others for d in piece["differences"]})
    shown = "; ".join(differences[:3]) + (f"; and {len(differences) - 3} more" if len(differences) > 3 else "")
    if p.get("refused"):
        return (f"{p['program']} holds a finished run with other settings ({shown}): this request is refused "
                "before compiling; run it with those settings (and the code that made them) or another --out")
    return f"{p['program']} holds an unfinished run with other settings ({shown}; set aside when this request runs)"


def _piece_line(piece: dict, program: dict) -> str:
    from fedjax_rl.reproduce import costs

    if piece["state"] == "partial":
        text = f"{piece['blocks_done']}/{program['num_blocks']} blocks"
        if piece["blocks_done"] == program["num_blocks"]:
            wall = "" if piece["wall_s"] is None else f" ({piece['wall_s']:,.0f} s of training)"
            return text + f"{wall}, final evaluation pending"
        if piece["wall_s"] is not None and piece["blocks_done"]:
            left = piece["wall_s"] / piece["blocks_done"] * (program["num_blocks"] - piece["blocks_done"])
            return text + f" ({piece['wall_s']:,.0f} s so far, about {left / 3600:.1f} h of training left)"
        return text
    parts = []
    for kind, name in (("cpu", "a CPU"), ("gpu", "a GPU")):
        guess = piece["estimate"][kind]
        parts.append(f"{costs.about(guess[0])} on {name} ({guess[1]})" if guess
                     else f"no measurement on {name}")
    return "to run: " + "; ".join(parts)
