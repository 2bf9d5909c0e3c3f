"""A reproduction program in pieces: ranges of its seeds, each a finished, self-contained run.

A row's program (Table 1's FedRDQN over its omega grid, Table 2's FedRDDPG or DDPGAvg(2)) trains the
seed indices [0, T + S) of `program.seed_keys(seed, ...)`: T tuning seeds, then S reported seeds. A
*piece* trains a range [first, stop) of them, `loop.run(first_seed=first, num_seeds=stop -
first)`. A seed index gets the same key whatever else runs beside it, so a piece trains exactly those
seeds of the whole program; only the vmapped width differs, which changes float rounding the way
another CPU does (tests/test_pieces.py measures it). Pieces let a program too long for one working
session (a Table 2 program on a 2-core CPU: 3-5 hours) run an hour at a time, on any machine, and let a
row grow by new reported seeds without touching the ones it has.

Where a piece lives: ROW/PROGRAM/ holds the piece that was run as the whole program (a program run whole,
when nothing else was there);
ROW/PROGRAM/seeds_A-B/ holds each other piece, seeds A to B - 1. Each is an ordinary `loop.run`
directory (config.json, per-block checkpoint while it trains, then its metrics and finished.json), so
nothing about a finished piece needs a checkpoint: a finished piece directory can be copied from the
machine that ran it into any clone of the results and is merged there.

Rules, checked before anything compiles (`ProgramOnDisk.check`):

- a piece is refused if a finished piece of the same program holds other settings (they could never be
  merged), naming both and what differs;
- a piece is refused if its seeds overlap a finished piece's (no piece computes again what a finished
  piece wrote), or an unfinished piece's of another range (resume that one instead), naming both;
- a piece of exactly a finished piece's range and settings is that piece: read back, not trained.

A piece's identity is its program's recorded configuration without its seed range, its batching
(`run_batch` changes rounding, not the algorithm, so a GPU's piece and a CPU's merge) and its grid: a
piece may train a part of its program's grid (`grid_fits`: a confirmatory piece trains the baseline
and the row's headline omega alone), and each grid point then reads the pieces that hold it
(`ProgramOnDisk.covered`).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os

from fedjax_rl.training import records, run_directory
from fedjax_rl.reproduce.tables import ROW_RESULT
from fedjax_rl.reproduce.row_records import read_row

PIECE_PREFIX = run_directory.NESTED_RUN_PREFIX  # seeds_A-B
# What a piece's recorded configuration holds beyond its program's identity (`identity`).
_NOT_IDENTITY = ("num_seeds", "first_seed", "run_batch", "grid")


@dataclasses.dataclass(frozen=True)
class Piece:
    """Seed indices [first, stop) of one program (its name: a sub-directory of the row)."""

    program: str
    first: int
    stop: int

    @property
    def num_seeds(self) -> int:
        return self.stop - self.first

    @property
    def dir_name(self) -> str:
        return f"{PIECE_PREFIX}{self.first}-{self.stop}"

    def describe(self) -> str:
        return f"{self.program} {seed_span(self.first, self.stop)}"

    def overlaps(self, other: "Piece") -> bool:
        return self.first < other.stop and other.first < self.stop


def seed_span(first: int, stop: int) -> str:
    """The seed indices first..stop-1 as a reader says them: "seeds 0-1", or "seed 3" for one."""
    return f"seed {first}" if stop - first == 1 else f"seeds {first}-{stop - 1}"


def parse_range(text: str) -> tuple[int, int]:
    """"6:8" -> (6, 8): seed indices 6 and 7."""
    try:
        first, stop = (int(part) for part in str(text).split(":"))
    except ValueError:
        raise ValueError(f"piece must be FIRST:STOP, seed indices [FIRST, STOP), e.g. 6:8, got {text!r}") from None
    if not 0 <= first < stop:
        raise ValueError(f"piece must be FIRST:STOP with 0 <= FIRST < STOP, got {text!r}")
    return first, stop


@dataclasses.dataclass(frozen=True)
class Found:
    """A piece on disk: where, the configuration it records (and its `identity`), and whether it finished."""

    piece: Piece
    path: str
    record: dict
    finished: bool
    identity: dict


def identity(record: dict) -> dict:
    """A recorded configuration without what may differ between pieces of one program."""
    return {k: v for k, v in records.as_recorded(record).items() if k not in _NOT_IDENTITY}


def grid_fits(part: dict | None, whole: dict | None) -> bool:
    """Whether a piece's grid `part` is a part of its program's grid `whole`: the same axes, in the same
    order, each holding some of the program's values (no grid fits only no grid)."""
    part, whole = part or {}, whole or {}
    return list(part) == list(whole) and all(set(map(float, part[axis])) <= set(map(float, whole[axis]))
                                             for axis in whole)


def holds(grid: dict | None, point: dict | None) -> bool:
    """Whether a piece of grid `grid` trains the grid point `point` ({axis: value}; None: every piece)."""
    return point is None or all(float(value) in map(float, (grid or {}).get(axis, ())) for axis, value in point.items())


def found(program_dir: str, program: str) -> list[Found]:
    """Every piece under ROW/PROGRAM/ (the directory itself and its seeds_A-B/), by first seed."""
    out = []
    for path in [program_dir, *sorted(glob.glob(os.path.join(program_dir, PIECE_PREFIX + "*")))]:
        record = run_directory.RunDirectory.recorded(path) if os.path.isdir(path) else None
        if record is None or "num_seeds" not in record:
            continue
        first = int(record.get("first_seed", 0))
        piece = Piece(program, first, first + int(record["num_seeds"]))
        finished = run_directory.RunDirectory(path, record).is_finished() or (path == program_dir and _whole_in_old_row(program_dir))
        out.append(Found(piece, path, record, finished, identity(record)))
    return sorted(out, key=lambda f: (f.piece.first, f.piece.stop))


def _whole_in_old_row(program_dir: str) -> bool:
    """Whether the row holds this program's directory itself as a finished piece: it lists it among its
    pieces (dir ""), or lists no pieces at all (`row_records.upgrade_row`: it ran each program whole) and
    reads this program's numbers from it. Such directories may lack their finished.json (the committed
    Table 1 rows keep only the grid points' metrics), yet the row finished, so its program did, and the
    row can grow by new seeds."""
    path = os.path.join(os.path.dirname(program_dir), ROW_RESULT)
    if not os.path.exists(path):
        return False
    record = read_row(path)
    name = os.path.basename(program_dir)
    if record["pieces"]:
        return any(piece["dir"] == "" for piece in record["pieces"].get(name, ()))
    return any(algorithm["dir"].partition("/")[0] == name for algorithm in record["algorithms"].values())


@dataclasses.dataclass(frozen=True)
class ProgramOnDisk:
    """One program's directory, read once: its pieces on disk (`found`) and the configuration the
    request records for the whole program, seed indices [0, total) (`expected`). A piece on disk is
    this request's when its identity is the expected one's (`mine`: a piece's record differs from the
    whole program's only outside its identity); the rules of the module are its methods."""

    path: str
    program: str
    total: int
    expected: dict
    mine: dict
    pieces: tuple[Found, ...]

    @classmethod
    def read(cls, path: str, program: str, total: int, expected: dict) -> "ProgramOnDisk":
        return cls(path, program, total, expected, identity(expected), tuple(found(path, program)))

    def is_mine(self, piece: Found) -> bool:
        """Whether a piece on disk holds this request's settings (and a part of its grid)."""
        return piece.identity == self.mine and grid_fits(piece.record.get("grid"), self.expected.get("grid"))

    def differences(self, piece: Found) -> list[str]:
        """What keeps a piece on disk from being this request's: its settings that differ, and its grid
        where it is not a part of the program's."""
        lines = records.config_differences(piece.identity, self.mine)
        theirs, ours = piece.record.get("grid"), self.expected.get("grid")
        if not grid_fits(theirs, ours):
            lines.append(f"grid: {json.dumps(theirs)} is not a part of {json.dumps(ours)}")
        return lines

    def check(self, piece: Piece) -> Found | None:
        """Refuse `piece` of this request's settings (ValueError, before anything compiles) under the
        module's rules; return the piece on disk of exactly this range and settings (finished: read
        back; unfinished: resumed), or None."""
        for other in self.pieces:
            same = self.is_mine(other)
            if other.finished and not same:
                differences = self.differences(other)
                raise ValueError(f"{piece.describe()} would train with other settings than the finished "
                                 f"{other.piece.describe()} in {other.path} ({'; '.join(differences)}): the two "
                                 "could not be merged; use another --out, or the settings that piece was run with")
            if not same or not other.piece.overlaps(piece):
                continue
            if other.piece == piece:
                return other
            kind = "finished" if other.finished else "unfinished"
            advice = ("no piece computes again what a finished piece wrote: ask for the seeds it lacks"
                      if other.finished else f"resume that piece (--piece {other.piece.first}:{other.piece.stop}) "
                                             "or remove its directory")
            raise ValueError(f"{piece.describe()} overlaps the {kind} {other.piece.describe()} in {other.path}; "
                             f"{advice}")
        return None

    def location(self, piece: Piece) -> str:
        """Where a piece trains: where it already is; the program directory itself for the whole program
        [0, total) when no other piece is there (the layout of a program run whole), else
        PROGRAM/seeds_A-B/."""
        same = [f for f in self.pieces if f.piece == piece]
        if same:
            return same[0].path
        whole = (piece.first, piece.stop) == (0, self.total)
        if whole and not any(f.path == self.path for f in self.pieces) and not glob.glob(
                os.path.join(self.path, PIECE_PREFIX + "*")):
            return self.path
        return os.path.join(self.path, piece.dir_name)

    def covered(self, point: dict | None = None) -> list[Found]:
        """The finished pieces of these settings that tile seed indices [0, n) from 0 without a gap, in
        order (empty: seed 0 is not finished); with `point` ({axis: value} of the grid), only pieces that
        train that point. n, the seeds a row can report (of that point), is the last one's stop."""
        finished = {f.piece.first: f for f in self.pieces
                    if f.finished and self.is_mine(f) and holds(f.record.get("grid"), point)}
        out, at = [], 0
        while at in finished:
            out.append(finished[at])
            at = finished[at].piece.stop
        return out

    def missing(self, piece_seeds: int | None = None) -> list[Piece]:
        """The pieces still to run for seed indices [0, total): unfinished pieces of these settings
        inside it first (they resume), then every range no piece of these settings holds, split into
        pieces of `piece_seeds` seeds (None: one piece per range)."""
        held = [f for f in self.pieces if self.is_mine(f) and f.piece.first < self.total]
        todo = [f.piece for f in held if not f.finished]
        taken = sorted((f.piece.first, f.piece.stop) for f in held)
        gaps, at = [], 0
        for first, stop in taken:
            if first > at:
                gaps.append((at, first))
            at = max(at, stop)
        if at < self.total:
            gaps.append((at, self.total))
        size = piece_seeds or max(self.total, 1)
        for first, stop in gaps:
            todo += [Piece(self.program, a, min(a + size, stop)) for a in range(first, stop, size)]
        return sorted(todo, key=lambda p: p.first)
