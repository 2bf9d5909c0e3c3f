"""Where a run directory stands, as a script needs to know it: finished, failed, stopped or unfinished
(`status`, behind `fedjax-rl status`). A federation of processes (`fedjax_rl.flower`) runs inside
Flower's runtime, whose `flwr run` exits 0 whatever happened to the run; its ServerApp records a
failure it names in the run directory (`write_failed`, failed.json: {"reason", "time"}), removed when
the same run starts again (`clear_failed`), so that the directory itself says whether the run failed."""

from __future__ import annotations

import datetime
import json
import os

from fedjax_rl.training import checkpoint
from fedjax_rl.training.checkpoint import read_json
from fedjax_rl.training.run_directory import FAILED, METRICS, RunDirectory

FINISHED, FAILURE, STOPPED, UNFINISHED = "finished", "failed", "stopped", "unfinished"


def write_failed(out_dir: str, reason: str) -> None:
    """failed.json in `out_dir`: the run stopped on `reason`."""
    with checkpoint.atomic_write(os.path.join(out_dir, FAILED)) as f:
        json.dump({"reason": reason, "time": datetime.datetime.now().isoformat(timespec="seconds")}, f, indent=2)


def clear_failed(out_dir: str) -> None:
    """The run starts again: an earlier failure's record goes."""
    if os.path.exists(os.path.join(out_dir, FAILED)):
        os.remove(os.path.join(out_dir, FAILED))


def status(path: str) -> tuple[str, str]:
    """(FINISHED | FAILURE | STOPPED | UNFINISHED, one line saying so) for the run directory at `path`,
    read without changing it. FAILURE: a federation stopped on a failure it named; STOPPED: a run
    stopped on non-finite values (metrics.json marked stopped); UNFINISHED: evaluation blocks saved
    but no result yet (still running, or interrupted: the same command resumes it). A
    FileNotFoundError where `path` holds no run."""
    recorded = RunDirectory.recorded(path) if os.path.isdir(path) else None
    if recorded is None:
        raise FileNotFoundError(f"{path} holds no run (no config.json, finished.json or checkpoint): is it the "
                                "out-dir of a `fedjax-rl train` run or a federation?")
    if os.path.exists(os.path.join(path, FAILED)):
        failed = read_json(os.path.join(path, FAILED))
        return FAILURE, f"{path}: failed ({failed.get('time', 'at an unrecorded time')}): {failed['reason']}"
    directory = RunDirectory(path, recorded)
    if directory.is_finished():
        return FINISHED, f"{path}: finished"
    if os.path.exists(os.path.join(path, METRICS)):
        stopped = read_json(os.path.join(path, METRICS)).get("stopped")
        if stopped:
            return STOPPED, (f"{path}: stopped at block {stopped['blocks_done']} of {stopped['num_blocks']}: "
                             f"{stopped['reason']}")
    blocks = directory.progress(num_blocks=0)["blocks_done"]  # the count matters only for a finished run
    return UNFINISHED, (f"{path}: unfinished, {blocks} evaluation block(s) saved (still running, or interrupted: "
                        "the same command resumes it)")

