"""The run directory: what a training run writes to `out_dir`, how a finished run is recognised and
read back, how another configuration's run is set aside, and what counts as damaged. Its one API is
`RunDirectory` (`NoRunDirectory` for a run without one, `for_run` picks); the module's functions
are the steps behind its methods.

A run directory holds config.json (the settings it was started with, `records.recorded_config`), a
checkpoint after every evaluation block, and once the run is done metrics.json, metrics.csv,
final.csv and global_params.npz (one directory per grid point), then finished.json, written last.

A run directory is never silently overwritten. Another configuration on a directory that holds a
run stops with `RunExists`, listing every differing setting, before anything compiles; with
`new_run=True` the old run moves to `DIR/set_aside/<n>/` (numbered, never overwritten) and the new
one starts, and a later call with the old configuration moves it back and resumes it. Every file is
written atomically (`checkpoint.atomic_write`); a damaged one (truncated, empty, garbage) is named,
set aside beside itself as `NAME.damaged.<n>.EXT`, and the run goes on from what is still good: a
finished run's checkpoint evaluates again, otherwise training restarts at block 0.

`fedjax_rl.training.loop.run` calls a `RunDirectory`'s steps in order; `RunDirectory.progress`,
`is_finished` and `recorded` read where a directory stands without computing or writing anything.
Every other module reads a run through it (`read_config`, `read_metrics`, `read_parameters`,
`read_failed`, `point_name`): no other module names a run's files.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import glob
import itertools
import json
import math
import os
import warnings

import jax
import numpy as np

from fedjax_rl.training import checkpoint, configs, distributed, records, set_aside
from fedjax_rl.training.checkpoint import DamagedFile, read_json
from fedjax_rl.training.configs import TrainConfig
from fedjax_rl.training.set_aside import NESTED_RUN_PREFIX, SET_ASIDE  # noqa: F401 (part of this API)

CHECKPOINT = "checkpoint.npz"
CONFIG = "config.json"
METRICS = "metrics.json"
# Written last, holding the run's config: its outputs are complete, and a rerun reads them instead
# of evaluating again (an Ant program's final sweep is over an hour on a 2-core CPU).
FINISHED = "finished.json"
# A federation that stopped on a failure it names (`run_status`).
FAILED = "failed.json"
# A finished run's global model: agent 0's shared leaves, [seeds, ...].
PARAMETERS = "global_params.npz"
CURVE_CSV, FINAL_CSV = "metrics.csv", "final.csv"
# What a run writes into its directory (grid points add one directory each, named in config.json).
_RUN_FILES = (CONFIG, FINISHED, CHECKPOINT, METRICS, CURVE_CSV, FINAL_CSV, PARAMETERS, FAILED)


class LayoutMismatch(ValueError):
    """A checkpoint written on one process layout was asked to resume on another."""


class RunExists(ValueError):
    """out_dir holds a run of another configuration; nothing was changed."""


class OutDirError(ValueError):
    """out_dir cannot hold a run (an existing file, or not writable)."""


@dataclasses.dataclass(frozen=True)
class RunDirectory:
    """One run's directory and its whole protocol. Read without writing: `recorded`, `is_finished`,
    `progress`. In the order `loop.run` calls them: `prepare` (this configuration or nothing in it),
    `read_finished` (a finished run read back), `check_layout`, `open` (the checkpoint to resume
    from), `save_block` after every block, then `finish` (the files, then finished.json) or
    `write_stopped`. On several processes every one calls each step (the
    gathers are collectives) and process 0 alone writes. `NoRunDirectory` is the same protocol for a
    run without a directory: it saves and reads nothing."""

    path: str
    config_dict: dict
    points: list | None = None
    grid: dict | None = None
    num_seeds: int = 1
    seed: int = 0
    first_seed: int = 0

    saves = True

    @staticmethod
    def recorded(path: str) -> dict | None:
        """The configuration the directory at `path` records (None: it holds no run), read without
        changing it."""
        return _recorded(path)

    @staticmethod
    def read_config(path: str) -> dict:
        """config.json of the run (or grid point) directory at `path`: FileNotFoundError naming the
        directory where it has none, `DamagedFile` where it cannot be read."""
        return _read_file(path, CONFIG, "is it a `fedjax-rl train --out` directory or a federation's out-dir?")

    @staticmethod
    def read_metrics(path: str) -> dict:
        """metrics.json of the run (or grid point) directory at `path`: its curve, final evaluation,
        timing and machine (FileNotFoundError, `DamagedFile` as `read_config`)."""
        return _read_file(path, METRICS, "is it a `fedjax-rl train --out` directory? A run still training has only "
                                         "its checkpoint until it ends")

    @staticmethod
    def has_parameters(path: str) -> bool:
        """Whether the directory at `path` holds a finished run's global model."""
        return os.path.exists(os.path.join(path, PARAMETERS))

    @staticmethod
    def read_parameters(path: str, like) -> object:
        """The global model at `path`, [seeds, ...] leaves shaped as `like`'s."""
        return checkpoint.load(os.path.join(path, PARAMETERS), like)[0]

    @staticmethod
    def read_failed(path: str) -> dict | None:
        """The failure a federation recorded at `path` ({"reason", "time"}), None if it recorded none."""
        failed = os.path.join(path, FAILED)
        return read_json(failed) if os.path.exists(failed) else None

    @staticmethod
    def drop_checkpoint(path: str) -> None:
        """Delete the checkpoint of a run that will never resume (a written row's pieces)."""
        if os.path.exists(os.path.join(path, CHECKPOINT)):
            os.remove(os.path.join(path, CHECKPOINT))

    @staticmethod
    def point_name(values: dict) -> str:
        """The sub-directory of one grid point from its values {name: value}, in order, None left out:
        `omega=0.05,learning_rate=0.001`, `max_rate=0.3,omega=0.05` ("" for none)."""
        return ",".join(f"{name}={value:g}" for name, value in values.items() if value is not None)

    @staticmethod
    def grid_point_name(point: TrainConfig, grid: dict) -> str:
        """`point_name` of one grid point of `grid`: its agent hyperparameters' values and the run's own
        (`configs.TRAIN_LEAVES`)."""
        return RunDirectory.point_name({name: getattr(point if name in configs.TRAIN_LEAVES else point.agent, name)
                                        for name in grid})

    def is_finished(self) -> bool:
        """Whether the directory holds a finished run of exactly this configuration (a damaged marker:
        no)."""
        return _is_finished(self.path, self.config_dict)

    def progress(self, num_blocks: int) -> dict:
        """How far the directory holds this run, of `num_blocks` evaluation blocks, read without
        computing or writing: {"state": "finished" | "partial" | "other settings" | "not started",
        "blocks_done", "wall_s"} ("other settings": it holds another configuration's run; a damaged
        file counts as absent, as `run` sets it aside)."""
        return _progress(self.path, self.config_dict, num_blocks)

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.path, CHECKPOINT)

    def prepare(self, new_run: bool) -> None:
        """Make the directory hold this run's configuration or nothing (`RunExists`, `OutDirError`;
        `new_run` sets another run aside); the other processes wait for process 0 to settle it."""
        if distributed.is_writer():
            _check_out_dir(self.path)
            _prepare(self.path, self.config_dict, new_run)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("fedjax_rl: out_dir prepared")

    def read_finished(self) -> dict | None:
        return _load_finished(self.path, self.config_dict, self.points, self.grid)

    def check_layout(self) -> None:
        _check_resume_layout(self.path, self.config_dict)

    def open(self, state) -> tuple:
        """(state, blocks done, curve, wall time so far) to start from (`_open_run`)."""
        return _open_run(self.path, state, self.config_dict)

    def save_block(self, state, blocks_done: int, curve: list, wall_s: float) -> None:
        host_state = distributed.to_host(state)  # a collective: every process takes part
        if distributed.is_writer():
            _save_checkpoint(self.checkpoint_path, host_state, blocks_done, curve, self.config_dict, wall_s=wall_s)

    def finish(self, result: dict, state) -> None:
        """The run's files, with its global parameters, then finished.json."""
        self.finish_with(result, distributed.to_host(state.agents.learner.shared))

    def finish_with(self, result: dict, shared) -> None:
        """`finish` from the agents' shared leaves alone ([seeds, K, ...]; [grid, seeds, K, ...] for a
        grid), for a run whose state lives elsewhere (a federation of processes, `fedjax_rl.flower`)."""
        if distributed.is_writer():
            _write_run(self.path, result, self.points, self.grid, self.num_seeds, self.seed, shared, self.first_seed)
            _mark_finished(self.path, self.config_dict)

    def write_stopped(self, result: dict, blocks_done: int) -> str:
        """metrics.json with the evaluations made before a non-finite stop; the error message's ending,
        saying where they are."""
        if distributed.is_writer():
            _write_run(self.path, result, self.points, self.grid, self.num_seeds, self.seed, None, self.first_seed)
        where = f"{self.path}/<grid point>/{METRICS}" if self.points is not None else os.path.join(self.path, METRICS)
        kept = (f"{CHECKPOINT} holds the {blocks_done} block(s) before it" if blocks_done
                else "no block was checkpointed")
        return f". The {blocks_done} evaluation(s) made before it are in {where}, marked stopped; {kept}"

    def record_provenance(self, provenance: dict) -> dict:
        """Write `provenance` into config.json (where the run ran and where its physics came from,
        `records.COMPILED`'s layout), known only once a federation's clients have joined; returns what
        config.json recorded before, for the caller to hold a resumed run to it."""
        path = os.path.join(self.path, CONFIG)
        recorded = read_json(path)
        before = records.provenance(recorded)
        if distributed.is_writer():
            with checkpoint.atomic_write(path) as f:
                json.dump({**recorded, "provenance": provenance}, f, indent=2)
        return before

    def write_failed(self, reason: str) -> None:
        """failed.json: the run stopped on `reason`, a failure it named (`read_failed`; a federation
        runs inside Flower's runtime, whose `flwr run` exits 0 whatever happened)."""
        if distributed.is_writer():
            with checkpoint.atomic_write(os.path.join(self.path, FAILED)) as f:
                json.dump({"reason": reason, "time": datetime.datetime.now().isoformat(timespec="seconds")}, f,
                          indent=2)

    def clear_failed(self) -> None:
        """The run starts again: an earlier failure's record goes."""
        if distributed.is_writer() and os.path.exists(os.path.join(self.path, FAILED)):
            os.remove(os.path.join(self.path, FAILED))

    def interrupted(self, blocks_done: int, num_blocks: int) -> str:
        """Ctrl-C's message: how far the run got, what is saved, how to resume."""
        during = " (during the final evaluation)" if blocks_done == num_blocks else ""
        saved = _blocks_saved(self.path)  # Ctrl-C may come between the checkpoint's rename and the count
        return (f"stopped at block {saved} of {num_blocks}{during}: {saved} block(s) saved in {self.path}; "
                "rerun the same command to resume")


class NoRunDirectory:
    """`RunDirectory`'s protocol for a run without a directory: nothing is read back, resumed or saved."""

    path = None
    checkpoint_path = None
    saves = False

    def prepare(self, new_run: bool) -> None:
        pass

    def read_finished(self) -> None:
        return None

    def check_layout(self) -> None:
        pass

    def open(self, state) -> tuple:
        return state, 0, [], 0.0

    def save_block(self, state, blocks_done: int, curve: list, wall_s: float) -> None:
        pass

    def finish(self, result: dict, state) -> None:
        pass

    def finish_with(self, result: dict, shared) -> None:
        pass

    def write_stopped(self, result: dict, blocks_done: int) -> str:
        return "; nothing was saved (no out_dir / --out)"

    def record_provenance(self, provenance: dict) -> dict:
        return dict(provenance)

    def write_failed(self, reason: str) -> None:
        pass

    def clear_failed(self) -> None:
        pass

    def interrupted(self, blocks_done: int, num_blocks: int) -> str:
        during = " (during the final evaluation)" if blocks_done == num_blocks else ""
        return f"stopped at block {blocks_done} of {num_blocks}{during}: nothing was saved (no out_dir / --out)"


def for_run(out_dir: str | None, config_dict: dict, points: list | None, grid: dict | None,
                  num_seeds: int, seed: int, first_seed: int = 0) -> RunDirectory | NoRunDirectory:
    """The run's directory (None: a run without one)."""
    if out_dir is None:
        return NoRunDirectory()
    return RunDirectory(out_dir, config_dict, points, grid, num_seeds, seed, first_seed)


# -- the steps behind RunDirectory's methods -------------------------------------------------------


def _read_file(directory: str, name: str, hint: str) -> dict:
    """The JSON file `name` of the run directory `directory`, or FileNotFoundError naming both."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{directory} has no {name} ({hint})")
    return read_json(path)


def _holds(path: str, config_dict: dict) -> bool:
    """Whether the JSON file at `path` (config.json, finished.json) records exactly `config_dict`
    (`DamagedFile` if it cannot be read)."""
    if not os.path.exists(path):
        return False
    return records.as_recorded(read_json(path)) == records.as_recorded(config_dict)


def _recorded(directory: str) -> dict | None:
    """The configuration a run directory records (None: it holds no run), read without changing it."""
    return _recorded_run(directory, repair=False)


def _is_finished(directory: str, config_dict: dict) -> bool:
    """Whether `directory` holds a finished run of exactly `config_dict` (a damaged marker: no)."""
    try:
        return _holds(os.path.join(directory, FINISHED), config_dict)
    except DamagedFile:
        return False


def _progress(out_dir: str, config_dict: dict, num_blocks: int) -> dict:
    """How far `out_dir` holds the run recorded as `config_dict`, of `num_blocks` evaluation blocks,
    read without computing or writing:
    {"state": "finished" | "partial" | "other settings" | "not started", "blocks_done", "wall_s"}
    ("other settings": the directory holds another configuration's run; a damaged file counts as
    absent, as `run` sets it aside)."""
    def holds(name):
        try:
            return _holds(os.path.join(out_dir, name), config_dict)
        except DamagedFile:
            return False

    if holds(FINISHED):
        return {"state": "finished", "blocks_done": num_blocks, "wall_s": None}
    if not os.path.exists(os.path.join(out_dir, CONFIG)):
        return {"state": "not started", "blocks_done": 0, "wall_s": None}
    if not holds(CONFIG):
        return {"state": "other settings", "blocks_done": 0, "wall_s": None}
    if not os.path.exists(os.path.join(out_dir, CHECKPOINT)):
        return {"state": "not started", "blocks_done": 0, "wall_s": None}
    try:
        extra = checkpoint.read_extras(os.path.join(out_dir, CHECKPOINT), ("blocks_done", "wall_s"))
        blocks_done = int(extra["blocks_done"])
    except (DamagedFile, KeyError):
        return {"state": "not started", "blocks_done": 0, "wall_s": None}
    wall = float(extra["wall_s"]) if "wall_s" in extra else None
    return {"state": "partial", "blocks_done": blocks_done, "wall_s": wall}


# -- making out_dir hold this run: other runs set aside, set-aside runs brought back -----------------


def _check_out_dir(out_dir: str) -> None:
    """Raise `OutDirError` unless `out_dir` is a writable directory or can be created as one (its
    nearest existing ancestor is a writable directory). Writes nothing."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise OutDirError(f"out_dir {out_dir} is an existing file, not a directory; choose a directory "
                          "(it is created if missing)")
    existing = os.path.abspath(out_dir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutDirError(f"out_dir {out_dir} cannot be created: {existing} is a file; choose another directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutDirError(f"out_dir {out_dir} is not writable ({existing}: permission denied); choose another "
                          "directory")


def _prepare(out_dir: str, config_dict: dict, new_run: bool) -> None:
    """Make `out_dir` hold this configuration's run, or nothing, without losing another's: a
    set-aside run of this configuration comes back (the current one, if any, goes aside); another
    configuration's run raises `RunExists` listing the differences, or with `new_run` is set aside."""
    on_disk = _recorded_run(out_dir, repair=True)
    if on_disk == records.as_recorded(config_dict):
        if not os.path.exists(os.path.join(out_dir, CONFIG)):  # read from another record: write it again
            with checkpoint.atomic_write(os.path.join(out_dir, CONFIG)) as f:
                json.dump(config_dict, f, indent=2)
        return
    holds_run = on_disk is not None or any(os.path.exists(os.path.join(out_dir, n)) for n in _RUN_FILES)
    wanted = records.as_recorded(config_dict)
    match = next((slot for slot in set_aside.slots(out_dir) if _recorded_run(slot, repair=False) == wanted), None)
    if holds_run and match is None and not new_run:
        if on_disk is None:
            what = "files of a run whose settings cannot be read (no readable config.json)"
        else:
            what = "a run of other settings:\n  " + "\n  ".join(records.config_differences(on_disk, config_dict))
        base = out_dir.rstrip(os.sep)
        free = next(f"{base}-{n}" for n in itertools.count(2) if not os.path.exists(f"{base}-{n}"))
        raise RunExists(f"{out_dir} holds {what}\nNothing was changed. To keep both, choose another directory "
                        f"(e.g. --out {free}), or pass --new-run (new_run=True) to move that run to "
                        f"{os.path.join(out_dir, SET_ASIDE, '<n>')} and start this one here.")
    if holds_run:
        slot = set_aside.set_aside_run(out_dir)
        what = "" if on_disk is None else f" ({'; '.join(records.config_differences(on_disk, config_dict))})"
        warnings.warn(f"{out_dir} held a run of other settings{what}: moved to {slot}", UserWarning, stacklevel=3)
    if match is not None:
        set_aside.move_run(match, out_dir)
        os.rmdir(match)
        warnings.warn(f"{match} held a run of these settings: moved back into {out_dir} to resume it",
                      UserWarning, stacklevel=3)


def _recorded_run(directory: str, repair: bool) -> dict | None:
    """The config a run directory records (config.json, else finished.json, else the checkpoint's own
    copy), or None if it holds none. With `repair`, a damaged record is set aside (and warned about);
    without, it is skipped."""
    for name in (CONFIG, FINISHED, CHECKPOINT):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        try:
            if name == CHECKPOINT:
                extra = checkpoint.read_extras(path, ("config",))
                if "config" in extra:
                    return records.as_recorded(json.loads(str(extra["config"])))
            else:
                return records.as_recorded(read_json(path))
        except DamagedFile as error:
            if repair:
                set_aside.damaged(error, "the run's settings are read from its other files" if name != CHECKPOINT
                         else "training starts again from block 0")
    return None


# -- resuming from the checkpoint ------------------------------------------------------------------


def _check_resume_layout(out_dir: str, config_dict: dict) -> None:
    """Raise `LayoutMismatch` if `out_dir` holds a checkpoint of this configuration written on
    another process layout."""
    ckpt_path = os.path.join(out_dir, CHECKPOINT)
    if not os.path.exists(ckpt_path):
        return  # nothing to resume
    try:
        extra = checkpoint.read_extras(ckpt_path, ("layout",))
    except DamagedFile:
        return  # set aside when the run tries to resume from it
    _check_layout(ckpt_path, extra)


def _check_layout(path: str, extra: dict) -> None:
    """A run resumes on the process layout that wrote its checkpoint (a checkpoint that records no
    layout came from one process)."""
    written = json.loads(str(extra["layout"])) if "layout" in extra else {"num_processes": 1}
    now = distributed.layout()
    # One process: the checkpoint holds global values, so any device count restores it.
    multi = written["num_processes"] > 1 or now["num_processes"] > 1
    if written["num_processes"] != now["num_processes"] or (multi and written.get("local_devices") != now["local_devices"]):
        raise LayoutMismatch(
            f"checkpoint {path} was written by {written['num_processes']} process(es)"
            f"{' x ' + str(written['local_devices']) + ' devices' if 'local_devices' in written else ''}; this run has "
            f"{now['num_processes']} x {now['local_devices']} devices. Resume it on the same process layout, "
            "or start it in a new out_dir"
        )


def _save_checkpoint(path: str, host_state, blocks_done: int, curve: list, config_dict: dict, wall_s: float) -> None:
    """The checkpoint after a block: the training state, and what resuming reads back with it (`_open_run`,
    `RunDirectory.progress`): the blocks done, their curve records, the process layout that wrote it, the
    wall time so far, and the configuration (`_recorded_run`'s last resort)."""
    checkpoint.save(path, host_state, blocks_done=blocks_done, curve=json.dumps(curve),
                    layout=json.dumps(distributed.layout()), wall_s=wall_s, config=json.dumps(config_dict))


def _blocks_saved(out_dir: str) -> int:
    """The blocks `out_dir`'s checkpoint holds (0: none, or unreadable)."""
    try:
        return int(checkpoint.read_extras(os.path.join(out_dir, CHECKPOINT), ("blocks_done",))["blocks_done"])
    except (OSError, KeyError, DamagedFile):
        return 0


def _open_run(out_dir: str, state, config_dict: dict) -> tuple:
    """(state, blocks done, curve, wall time so far) to start from: this configuration's checkpoint
    in `out_dir`, or the fresh `state` at block 0. Process 0 then records the configuration."""
    start = (state, 0, [], 0.0)
    resumed = _resume(os.path.join(out_dir, CHECKPOINT), state)
    if resumed is not None:
        start = resumed
    if jax.process_count() > 1:
        # Every process must resume from the same block: they all read out_dir (a shared
        # filesystem), only process 0 writes it.
        from jax.experimental import multihost_utils

        multihost_utils.assert_equal(start[1], "processes found different checkpoints in out_dir "
                                               "(multi-process runs need out_dir on a shared filesystem)")
    if distributed.is_writer():
        os.makedirs(out_dir, exist_ok=True)
        for stale in glob.glob(os.path.join(glob.escape(out_dir), ".*.tmp")):
            os.remove(stale)  # a process killed (SIGKILL) mid-write left its temporary file behind
        if os.path.exists(os.path.join(out_dir, FINISHED)):
            os.remove(os.path.join(out_dir, FINISHED))  # its outputs are about to be written again
        with checkpoint.atomic_write(os.path.join(out_dir, CONFIG)) as f:
            json.dump(config_dict, f, indent=2)
    return start


def _resume(ckpt_path: str, state) -> tuple | None:
    """(state, blocks done, curve, wall time so far) from this configuration's checkpoint, or None:
    no checkpoint, or one that is damaged or from another library version (set aside, warned)."""
    if not os.path.exists(ckpt_path):
        return None
    try:
        restored, extra = checkpoint.load(ckpt_path, state)
        wall = float(extra["wall_s"]) if "wall_s" in extra else math.nan
        return (distributed.put_like(restored, state), int(extra["blocks_done"]), json.loads(str(extra["curve"])),
                wall)
    except DamagedFile as error:
        if distributed.is_writer():
            set_aside.damaged(error, "training starts again from block 0")
    except checkpoint.CheckpointMismatch as error:
        # Same configuration, different state layout: written by another version of this library.
        if distributed.is_writer():
            kept = set_aside.set_aside_file(ckpt_path, "incompatible")
            warnings.warn(f"{error}; it was written by another version of fedjax_rl. Kept as {kept}, "
                          "starting this run from block 0.", UserWarning, stacklevel=3)
    return None


# -- the outputs, written and read back ----------------------------------------------------------


def _write_run(out_dir, result, points, grid, num_seeds, seed, shared, first_seed: int = 0) -> None:
    """metrics.json, the CSV files and (with `shared`) the global parameters, in `out_dir` or, for a
    grid, in one directory per point."""
    if points is None:
        _write_outputs(out_dir, result, shared, seed)
        return
    for i, point in enumerate(points):
        point_dir = os.path.join(out_dir, RunDirectory.grid_point_name(point, grid))
        os.makedirs(point_dir, exist_ok=True)
        with checkpoint.atomic_write(os.path.join(point_dir, CONFIG)) as f:
            json.dump({**records.config_to_dict(point), "num_seeds": num_seeds, "seed": seed,
                       "first_seed": first_seed}, f,
                      indent=2)
        one = {part: jax.tree.map(lambda x, i=i: x[i], result[part]) for part in ("curve", "final")}
        one.update({k: v for k, v in result.items() if k not in ("curve", "final", "grid")})
        _write_outputs(point_dir, one, None if shared is None else jax.tree.map(lambda x, i=i: x[i], shared), seed)


def _write_outputs(out_dir: str, result: dict, shared, seed: int = 0) -> None:
    """metrics.json and metrics.csv; final.csv when the run finished (a stopped run has no final
    evaluation); global_params.npz when `shared` is given. Each file atomically. `seed`: the run's, which
    the CSVs' seed column adds to each seed's index (`records.curve_rows`)."""
    with checkpoint.atomic_write(os.path.join(out_dir, METRICS)) as f:
        json.dump(records.to_lists(result), f)
    for name, rows in ((CURVE_CSV, records.curve_rows(result, seed)), (FINAL_CSV, records.final_rows(result, seed))):
        if rows:  # a stopped run has no final evaluation
            with checkpoint.atomic_write(os.path.join(out_dir, name), newline="") as f:
                csv.writer(f).writerows(rows)
    if shared is not None:
        # The global model: agent 0's shared leaves (identical on every agent after the last sync).
        global_params = jax.tree.map(lambda leaf: leaf[:, 0], shared)
        checkpoint.save(os.path.join(out_dir, PARAMETERS), global_params)


def _mark_finished(out_dir: str, config_dict: dict) -> None:
    """Write the run's `finished.json` (its configuration), last of its files, atomically."""
    with checkpoint.atomic_write(os.path.join(out_dir, FINISHED)) as f:
        json.dump(config_dict, f, indent=2)


def _load_finished(out_dir: str, config_dict: dict, points: list | None, grid: dict | None) -> dict | None:
    """The result a finished run of exactly this configuration wrote to `out_dir` (its metrics
    files, one per grid point, stacked into `run`'s layout), or None if there is none. A damaged
    metrics file is set aside (process 0) and the run evaluated again from its checkpoint."""
    try:
        if not _holds(os.path.join(out_dir, FINISHED), config_dict):
            return None
    except DamagedFile as error:
        if distributed.is_writer():
            set_aside.damaged(error, "the run's outputs are written again")
        return None
    dirs = [out_dir] if points is None else [os.path.join(out_dir, RunDirectory.grid_point_name(p, grid)) for p in points]
    if not all(os.path.exists(os.path.join(d, METRICS)) for d in dirs):
        return None  # outputs removed since: evaluate again from the checkpoint
    runs = []
    for directory in dirs:
        try:
            runs.append(read_json(os.path.join(directory, METRICS)))
        except DamagedFile as error:
            if distributed.is_writer():
                again = ("evaluating the run again from its checkpoint"
                         if os.path.exists(os.path.join(out_dir, CHECKPOINT)) else "training the run again")
                set_aside.damaged(error, again)
            return None
    stack = (lambda *xs: np.asarray(xs[0])) if points is None else (lambda *xs: np.stack([np.asarray(x) for x in xs]))
    result = {part: {name: stack(*(run[part][name] for run in runs)) for name in runs[0][part]}
              for part in ("curve", "final")}
    result.update(run_batch=runs[0]["run_batch"], timing=dict(runs[0]["timing"]))
    result.update({k: runs[0][k] for k in ("machine", "seed_indices") if k in runs[0]})  # runs written since
    if points is not None:
        result["grid"] = points
    return result
