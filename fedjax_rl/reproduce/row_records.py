"""A table's finished rows on disk: row.json in today's layout whichever version wrote it
(`upgrade_row`), the rows of a table found in an output directory, and each algorithm's metrics
merged over the seed pieces that hold it; and which of a row's seeds its verdict reads
(`seed_sets`). Where a row lives and what a table declares is `fedjax_rl.reproduce.tables`."""

from __future__ import annotations

import json
import os

import numpy as np

from fedjax_rl import envs
from fedjax_rl.reproduce.tables import ROW_RESULT, Table, row_dir
from fedjax_rl.training.run_directory import RunDirectory

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
            mujoco = envs.get(config["env_name"]).engines != ("jax",)
            program["config"] = {**config, "engine": "mjx" if mujoco else None}
            if mujoco and "engine" not in record["unrecorded"]:
                record["unrecorded"].append("engine")
    return record


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
    return merge_runs([RunDirectory.read_metrics(os.path.join(row_path, program, piece, point))
                       for piece in (pieces or [""])])


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


EXPLORATORY, CONFIRMATORY, REPORTED = "exploratory", "confirmatory", "reported"


def seed_sets(table: Table, record: dict) -> dict[str, np.ndarray]:
    """{name: positions among the row's reported seeds}: every reported seed under REPORTED, or, where
    the row holds seeds from `table.confirmatory_from` on, those under CONFIRMATORY (the verdict's) and
    the earlier ones under EXPLORATORY."""
    indices = np.asarray(record["seeds"]["reported"])
    if table.confirmatory_from is None or not (indices >= table.confirmatory_from).any():
        return {REPORTED: np.arange(indices.size)}
    return {CONFIRMATORY: np.flatnonzero(indices >= table.confirmatory_from),
            EXPLORATORY: np.flatnonzero(indices < table.confirmatory_from)}
