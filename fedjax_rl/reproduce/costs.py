"""How long a reproduction piece will take, from the programs that have run: measured, never assumed.

Every finished program (or piece) in a results directory records its wall time (compilation, training
and the final evaluation), its runs (seeds x grid points) and its steps per agent, and the machine it
ran on (its metrics.json's "machine", or where a run did not record one, what its row's row.json records
of it; a program no record places is left out). `measurements` reads them, every finished piece on disk
included (a row still in pieces, or growing by new ones); `estimate` turns the closest measurement into
a time for a new piece, per kind of machine:

- on a CPU the work is the networks' (benchmarks/README.md: 97% of a DDPG agent-step), so the time
  scales with runs x steps;
- on a GPU a program of these sizes is latency-bound (Table 2's 90-agent and 30-agent programs took
  about as long on an H200), so the time scales with steps, and with runs only beyond the measured
  width.

The closest measurement is the same table, task, program and physics engine on that kind of machine;
failing that, the same program and engine on the same row, then the same task, in another table (a
heterogeneity row from Table 1's, said so: "from table1 CartPole-v1/length"), then on another task of
the table (said so: "from Hopper-v4/torso"). A measurement at another number of agents K scales by K like runs (each
agent is a network and an environment stepped). Of several measurements as close (a row's pieces of one
seed each), the median time, so that one piece slowed by other work beside it does not set the estimate.
None: no measurement.
"""

from __future__ import annotations

import dataclasses
import glob
import os

from fedjax_rl.training.machine import machine_cores, summary_kind
from fedjax_rl.reproduce.seed_pieces import found
from fedjax_rl.reproduce.tables import ROW_RESULT, first_point_dir, get_table, grid_points, rules_on_disk, with_rules
from fedjax_rl.reproduce.row_records import read_row
from fedjax_rl.training.run_directory import RunDirectory

# The results directories committed with the code (a clone's results/), read beside --out.
# (This module is fedjax_rl/reproduce/costs.py: the clone's root is three directories up.)
COMMITTED_RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                 "results")


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One finished program or piece: its table, task and program, the kind of machine ("cpu" or
    "gpu") and its name, runs, steps per agent, wall seconds, and where it is."""

    table: str
    row: str
    env_name: str
    program: str
    engine: str | None
    kind: str
    machine: str
    runs: int
    steps: int
    wall_s: float
    source: str
    agents: int = 5  # K


def _program_measurements(row_path: str, record: dict, table: str) -> list[Measurement]:
    out = []
    for program, entry in record["configs"].items():
        grid = entry.get("grid") or {}
        points = grid_points(grid)
        pieces = record["pieces"].get(program) or [{"dir": "", "seeds": None}]
        for piece in pieces:
            base = os.path.join(row_path, program, piece["dir"])
            metrics_dir = os.path.join(base, first_point_dir(grid)) if grid else base
            try:
                metrics = RunDirectory.read_metrics(metrics_dir)
            except (OSError, ValueError):
                continue
            wall = metrics.get("timing", {}).get("wall_s")
            if wall is None and len(record["configs"]) == 1 and len(pieces) == 1:
                wall = record.get("wall_s")  # one program, one piece: the row's wall time is the program's
            ran_on = _ran_on(metrics, record, piece)
            if not wall or ran_on is None:
                continue
            seeds = (piece["seeds"][1] - piece["seeds"][0]) if piece.get("seeds") else len(
                metrics["final"]["local_average"])
            out.append(_measurement(table, record["row"], program, entry["config"], *ran_on, seeds * points, wall,
                                    base))
    return out


def _ran_on(metrics: dict, record: dict, piece: dict) -> tuple[str, str] | None:
    """(kind, name) of the machine a program or piece of a written row ran on: its metrics' own record,
    else the summary its row.json keeps of it (a row written from pieces trained on other machines,
    a GPU's among them), else, for a row.json that lists no pieces (its one process trained it
    all), the row's machine. None where no record says: a row written from pieces whose program
    recorded no machine did not necessarily run where the row was written."""
    if "machine" in metrics:
        return _kind(metrics["machine"]), machine_name(metrics["machine"])
    if "machine" not in piece:
        return _kind(record["machine"]), machine_name(record["machine"]) + " (the row's machine)"
    if piece["machine"] is None:
        return None
    return summary_kind(piece["machine"]), piece["machine"]


def _kind(machine: dict) -> str:
    return "gpu" if machine.get("backend") == "gpu" else "cpu"


def _measurement(table: str, row: str, program: str, config: dict, kind: str, machine: str, runs: int, wall: float,
                 source: str) -> Measurement:
    """One finished program or piece of `row`, from its recorded config and the machine it ran on."""
    return Measurement(table, row, config["env_name"], program, config.get("engine"), kind, machine, runs,
                       int(config["steps_per_agent"]), float(wall), source, int(config.get("num_agents", 5)))


def _piece_measurements(row_path: str, table: str) -> list[Measurement]:
    """Every finished piece on disk of a row, written or not (a row not yet written, or one growing by
    pieces its row.json does not list yet), each read from its own config.json and metrics.json, so that
    a row's newest pieces give the estimates for its next ones and its sibling rows'. The row is the
    table's row of that directory; a piece whose metrics record no machine is left to its row.json."""
    declared, out_dir = get_table(table), os.path.dirname(os.path.dirname(row_path))
    rows = with_rules(declared, rules_on_disk(declared, out_dir), check=False).rows  # a user's rule's rows too
    row = next((r.key for r in rows if r.dir_name == os.path.basename(row_path)), None)
    if row is None:
        return []
    out = []
    for program_dir in sorted(p for p in glob.glob(os.path.join(row_path, "*")) if os.path.isdir(p)):
        program = os.path.basename(program_dir)
        for piece in found(program_dir, program):
            if not piece.finished:
                continue
            config, grid = piece.record, piece.record.get("grid") or {}
            try:
                metrics = RunDirectory.read_metrics(os.path.join(piece.path, first_point_dir(grid)) if grid else piece.path)
            except (OSError, ValueError):
                continue
            wall, machine = metrics.get("timing", {}).get("wall_s"), metrics.get("machine")
            if wall and machine:
                out.append(_measurement(table, row, program, config, _kind(machine), machine_name(machine),
                                        piece.piece.num_seeds * grid_points(grid), wall, piece.path))
    return out


def machine_name(machine: dict) -> str:
    """A GPU by its kind; a CPU by its model and the cores the run could use ("1 of 2 cores": pinned)."""
    if machine.get("gpu"):
        return ", ".join(machine["gpu"])
    return f"{machine.get('cpu', '?')} ({machine_cores(machine)})"


def measurements(results_dirs: list[str]) -> list[Measurement]:
    """Every finished program or piece under these directories (each a `reproduce --out`): every finished
    piece on disk, and what a written row's row.json records of the pieces whose own metrics do not."""
    out = []
    for results in results_dirs:
        for row_path in sorted(p for p in glob.glob(os.path.join(results, "*", "*")) if os.path.isdir(p)):
            path = os.path.join(row_path, ROW_RESULT)
            try:
                pieces = _piece_measurements(row_path, os.path.basename(os.path.dirname(row_path)))
                if os.path.exists(path):
                    record = read_row(path)
                    seen = {os.path.normpath(m.source) for m in pieces}
                    out += [m for m in _program_measurements(row_path, record, record["table"])
                            if os.path.normpath(m.source) not in seen]
                out += pieces
            except (OSError, ValueError, KeyError):
                continue
    return out


def default_sources(out_dir: str) -> list[str]:
    """--out and the committed results directories (when running from a clone)."""
    committed = sorted(glob.glob(os.path.join(COMMITTED_RESULTS, "*")))
    return [out_dir, *[d for d in committed if os.path.abspath(d) != os.path.abspath(out_dir)]]


def estimate(found: list[Measurement], table: str, row: str, program: str, engine: str | None, runs: int,
             steps: int, agents: int = 5) -> dict[str, tuple[float, str] | None]:
    """{"cpu": (seconds, basis), "gpu": (seconds, basis)} for a piece of `runs` runs (seeds x grid
    points) and `steps` steps per agent of `program` in `row` ("Ant-v4/back_left_leg") at `agents`
    agents, each from the closest measurement (module docstring): the same row, else the same task,
    else the same row or task in another table, else another task of the table; among those the one closest
    in size (runs x agents x steps), whose fixed costs (compilation, the final evaluation) weigh
    alike, and of several of that size the median time (the lower of the middle two). None where there
    is none. The basis names the measurement: its table and row when another, machine, runs, agents when
    another K, time, and how many it is the median of."""
    import math

    env_name = row.split("/")[0]
    out = {}
    for kind in ("cpu", "gpu"):
        same = [m for m in found if (m.program, m.engine, m.kind) == (program, engine, kind)]
        here = [m for m in same if m.table == table]
        pool = ([m for m in here if m.row == row] or [m for m in here if m.env_name == env_name]
                or [m for m in same if m.row == row] or [m for m in same if m.env_name == env_name] or here)
        if not pool:
            out[kind] = None
            continue
        def distance(m):
            return abs(math.log(m.runs * m.agents * m.steps / (runs * agents * steps)))

        # Among measurements of the closest size, the median wall time: one piece that ran beside a test
        # suite or another piece takes two to three times its fellows' time, and must not set the estimate.
        nearest = min(distance(m) for m in pool)
        closest = sorted((m for m in pool if distance(m) == nearest), key=lambda m: (m.wall_s, m.source))
        m = closest[(len(closest) - 1) // 2]
        if kind == "cpu":
            seconds = m.wall_s * (runs * agents * steps) / (m.runs * m.agents * m.steps)
        else:
            seconds = m.wall_s * steps / m.steps * max(1.0, runs * agents / (m.runs * m.agents))
        where = "" if (m.table, m.row) == (table, row) else (
            f"from {m.row}, " if m.table == table else f"from {m.table} {m.row}, ")
        k = "" if m.agents == agents else f" of {m.agents} agents"
        median = f", the median of {len(closest)} such" if len(closest) > 1 else ""
        out[kind] = (seconds, f"{where}{m.machine}: {m.runs} run{'s' * (m.runs != 1)}{k} x {m.steps:,} steps "
                              f"in {m.wall_s:,.0f} s{median}")
    return out


def duration(seconds: float) -> str:
    """Seconds as the status line says them: minutes up to an hour and a half, then hours; under a minute,
    "under 1 min" (an estimate rounded to 0 minutes would read as free)."""
    if seconds < 60:
        return "under 1 min"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def about(seconds: float) -> str:
    """An estimated duration as a phrase: "about 23 min", or "under 1 min" alone, which is already a bound."""
    text = duration(seconds)
    return text if seconds < 60 else f"about {text}"
