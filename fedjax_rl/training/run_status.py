"""Where a run directory stands, as a script needs to know it: finished, failed, stopped or unfinished
(`status`, behind `fedjax-rl status`), read through `RunDirectory` alone. A federation of processes
(`fedjax_rl.flower`) runs inside Flower's runtime, whose `flwr run` exits 0 whatever happened to the
run; its ServerApp records a failure it names in the run directory (`RunDirectory.write_failed`),
removed when the same run starts again, so that the directory itself says whether the run failed."""

from __future__ import annotations

import os

from fedjax_rl.training.run_directory import RunDirectory

FINISHED, FAILURE, STOPPED, UNFINISHED = "finished", "failed", "stopped", "unfinished"


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
    failed = RunDirectory.read_failed(path)
    if failed is not None:
        return FAILURE, f"{path}: failed ({failed.get('time', 'at an unrecorded time')}): {failed['reason']}"
    directory = RunDirectory(path, recorded)
    if directory.is_finished():
        return FINISHED, f"{path}: finished"
    try:
        stopped = RunDirectory.read_metrics(path).get("stopped")
    except FileNotFoundError:
        stopped = None
    if stopped:
        return STOPPED, (f"{path}: stopped at block {stopped['blocks_done']} of {stopped['num_blocks']}: "
                         f"{stopped['reason']}")
    blocks = directory.progress(num_blocks=0)["blocks_done"]  # the count matters only for a finished run
    return UNFINISHED, (f"{path}: unfinished, {blocks} evaluation block(s) saved (still running, or interrupted: "
                        "the same command resumes it)")

