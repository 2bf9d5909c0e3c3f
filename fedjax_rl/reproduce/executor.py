"""`fedjax-rl reproduce --jobs N` and `--executor ray`: a table's pieces as separate processes.

A reproduction table is many independent programs (`fedjax_rl.reproduce.seed_pieces`): each row's
programs, each program's seed pieces. This module turns every piece the command would run (every
piece still missing from every requested row, sized by `--piece-seeds` when given) into a *task*,
and runs each task as the single-piece command line ::

    fedjax-rl reproduce TABLE --rows ROW --program P --piece A:B --out OUT <the same run settings>

in a process of its own, so that the executor that ran a piece never enters its numbers: a piece
run by `--jobs 4`, by a Ray task or by the command without either trains the same seeds of the same
compiled program. Each task's output goes to its own log, OUT/logs/ROW__PROGRAM__seeds_A-B.log.

Two executors:

- **local** (`--jobs N`): N processes at once on this machine. The host's cores (the ones this
  process may run on, `os.sched_getaffinity`) are split into N contiguous groups, and each process
  is pinned to one of them (`os.sched_setaffinity` in the child, as `taskset -c` does; the MuJoCo
  engine's threads and XLA's follow the pinning); with more processes than cores, each gets one core
  and the cores are shared round robin. When more than one process shares the machine, JAX's
  default of preallocating 75% of a GPU's memory is turned off in each (XLA_PYTHON_CLIENT_PREALLOCATE
  =false, unless the caller set it), so that several latency-bound programs share one GPU.
- **ray** (`--executor ray [--address ADDR]`): each task is a Ray remote task declaring
  `--cpus-per-piece` CPUs and `--gpus-per-piece` of a GPU (a fraction: pieces share a GPU; Ray sets
  CUDA_VISIBLE_DEVICES), so Ray places it on any machine of the cluster with those resources free.
  The task runs the same command line there. Every machine must see OUT at the same path (a shared
  filesystem: NFS, a cloud bucket mounted alike), since each piece writes its directory and log
  there and the rows are written from them at the end. Ray is an optional extra: `pip install
  "fedjax-rl[ray]"`.

Either way, a finished piece is read back, never run again; an unfinished one resumes from its last
checkpointed block; a killed process loses only the blocks since its last checkpoint. A task that
fails (a nonzero exit: a non-finite loss, a process killed, a setting a machine cannot run) is
reported with the tail of its log as soon as it ends, the others still run, and the command ends
with an error naming every failed piece. When every task has ended, the rows whose pieces all
finished are written in this process exactly as the command without `--jobs` writes them
(`harness.reproduce`, which then only reads the pieces back), and the tables are rebuilt.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from fedjax_rl.reproduce import harness, report, seed_pieces, tables
from fedjax_rl.reproduce.plan import Request

EXECUTORS = ("local", "ray")
RAY_INSTALL = 'pip install "fedjax-rl[ray]"'
LOG_DIR = "logs"
TAIL_LINES = 25  # of a failed piece's log, printed with its failure
POLL_S = 0.5
STATUS_EVERY_S = 60.0  # a status block in plain-text mode (a log file, --no-progress aside)


@dataclasses.dataclass(frozen=True)
class Task:
    """One seed piece of one row, to run as its own `reproduce --program --piece` command."""

    row: str
    piece: seed_pieces.Piece

    def describe(self) -> str:
        """"CartPole-v1/length fedrdqn seeds 0-1" (the seed indices first..stop-1)."""
        return f"{self.row} {self.piece.describe()}"

    @property
    def log_name(self) -> str:
        return f"{self.row.replace('/', '__')}__{self.piece.program}__{self.piece.dir_name}.log"


@dataclasses.dataclass
class Outcome:
    """How a task ended: its exit code (0: the piece finished), wall time, log and where it ran."""

    task: Task
    returncode: int
    wall_s: float
    log: str
    host: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class PiecesFailed(RuntimeError):
    """Some pieces failed; the rows whose pieces all finished were written (`result`)."""

    def __init__(self, message: str, failed: list[Outcome], result: dict | None):
        super().__init__(message)
        self.failed, self.result = failed, result


# -- what to run ------------------------------------------------------------------------------------


def plan_tasks(table_name: str, out_dir: str, piece_seeds: int | None = None,
               **request) -> tuple[list[str], list[Task]]:
    """(the requested rows' keys, every piece still to run for them), for `reproduce`'s keyword
    arguments `request`: the pieces `harness.reproduce` would train, checked before anything
    compiles (a row finished with other settings, a piece overlapping a finished one: ValueError).
    A finished row has none; a finished piece is not among them."""
    plan = Request.of(table_name, **request).plan()
    left = harness.pieces_left(out_dir, plan, piece_seeds)
    tasks = [Task(row, run.piece) for row, runs in left.items() for run in runs]
    return [row.key for row in plan.rows], tasks


def task_args(table_name: str, out_dir: str, task: Task, settings_args: list[str]) -> list[str]:
    """The `fedjax-rl` arguments that run one task: the single-piece command with the request's flags."""
    piece = task.piece
    return ["reproduce", table_name, "--rows", task.row, "--program", piece.program,
            "--piece", f"{piece.first}:{piece.stop}", "--out", out_dir, *settings_args]


def core_groups(cores: Sequence[int], jobs: int) -> list[list[int]]:
    """`cores` split into `jobs` contiguous groups, sizes differing by at most one (the first groups
    take the remainder); with more jobs than cores, one core each, round robin."""
    cores = sorted(cores)
    if jobs >= len(cores):
        return [[cores[i % len(cores)]] for i in range(jobs)]
    size, extra = divmod(len(cores), jobs)
    groups, at = [], 0
    for i in range(jobs):
        n = size + (i < extra)
        groups.append(cores[at:at + n])
        at += n
    return groups


# -- running one task --------------------------------------------------------------------------------


def _child_env(extra: dict | None) -> dict:
    """The environment of a piece's process: this one's, with this checkout importable first when
    fedjax_rl runs from a source tree (not an installed copy), and `extra` where not already set."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.basename(root) not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    for key, value in (extra or {}).items():
        env.setdefault(key, value)
    return env


# A piece's process: pin itself to the cores in its first argument (none: not pinned) before
# anything starts a thread, then run the command line. Pinning here rather than between fork and exec
# (`preexec_fn`) keeps the parent, whose JAX runs threads, from forking without exec.
_PINNED_CLI = ("import os, sys; cores = sys.argv.pop(1); "
               "cores and os.sched_setaffinity(0, [int(c) for c in cores.split(',')]); "
               "from fedjax_rl.cli import commands; sys.exit(commands.main(sys.argv[1:]))")


def start_command(args: list[str], log_path: str, cores: Sequence[int] | None = None,
                  env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """Start `fedjax-rl ARGS` (this Python, `fedjax_rl.cli.commands.main`) with its output appended to
    `log_path` after a header line, pinned to `cores` (None: not pinned; `os.sched_setaffinity` in
    the child, as `taskset -c` does). Returns the process and the log's offset where this attempt's
    output starts (a rerun appends; the tail reads from there)."""
    command = [sys.executable, "-c", _PINNED_CLI, ",".join(map(str, cores or ())), *args]
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a") as log:
        offset = log.tell()
        if offset:
            log.write("\n")  # the header on a line of its own after a killed attempt's last progress update
        pinned = f" on cores {','.join(map(str, cores))}" if cores else ""
        log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} {socket.gethostname()}{pinned}: "
                  f"fedjax-rl {' '.join(args)}\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=_child_env(env))
    return process, offset


def run_command(args: list[str], log_path: str, env: dict | None = None) -> tuple[int, float, str]:
    """Run `fedjax-rl ARGS` to its end (`start_command`, not pinned): (exit code, wall seconds, host).
    What a Ray task runs, on whichever machine Ray placed it."""
    started = time.time()
    process, _ = start_command(args, log_path, None, env)
    return process.wait(), time.time() - started, socket.gethostname()


def _lines(path: str, offset: int = 0, size: int = 1 << 16) -> list[str]:
    """The non-empty lines of the last `size` bytes of a log from `offset` on, a progress bar's
    carriage-return updates each its own line."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(offset, f.tell() - size))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.replace("\r", "\n").split("\n") if line.strip()]


def log_tail(path: str, offset: int = 0, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines a task wrote to its log from `offset` on."""
    return _lines(path, offset)[-lines:]


def last_line(path: str, offset: int = 0) -> str:
    """A running task's latest progress line (its progress bar's last update), "" if none yet."""
    found = _lines(path, offset, size=4096)
    return found[-1] if found else ""


# -- the display -------------------------------------------------------------------------------------


class Display:
    """One progress display over every task: counts of pieces done, running and failed, and each
    running piece's latest progress line, redrawn in place on a terminal; on anything else (a log
    file) or with `progress` off, plain lines: each piece started, finished or failed, and (with
    `progress`) a status block every STATUS_EVERY_S seconds."""

    def __init__(self, total: int, progress: bool, stream=None):
        self.stream = stream or sys.stderr
        self.total, self.progress = total, progress
        self.live = progress and self.stream.isatty()
        self.drawn, self.last_status, self.started = 0, time.time(), time.time()
        self.done = self.failed = 0

    def say(self, line: str) -> None:
        """A line that stays (above the live block on a terminal)."""
        self._clear()
        print(line, file=self.stream, flush=True)

    def ended(self, outcome: Outcome, tail: list[str]) -> None:
        """A task ended: counted, and said; a failed one with the tail of its log."""
        if outcome.ok:
            self.done += 1
            self.say(f"finished {outcome.task.describe()} in {outcome.wall_s:,.0f} s{_on(outcome.host)} "
                     f"({self.done}/{self.total} pieces done)")
            return
        self.failed += 1
        self.say(f"FAILED {outcome.task.describe()} (exit code {outcome.returncode}){_on(outcome.host)}; "
                 f"the last lines of {outcome.log}:\n" + "\n".join(f"    {line}" for line in tail))

    def status(self, running: dict[Task, tuple[str, int]]) -> list[str]:
        """The status block: the counts, then per running task its latest progress line."""
        elapsed = time.time() - self.started
        lines = [f"{self.done}/{self.total} pieces done, {len(running)} running, {self.failed} failed "
                 f"({elapsed / 60:,.1f} min)"]
        width = shutil.get_terminal_size((160, 20)).columns - 1
        for task, (log, offset) in running.items():
            lines.append(f"  {task.describe()}: {last_line(log, offset)}"[:width])
        return lines

    def refresh(self, running: dict[Task, tuple[str, int]]) -> None:
        """Redraw the live block (terminal), or print the status block when it is due (plain text)."""
        if self.live:
            self._clear()
            lines = self.status(running)
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
            self.drawn = len(lines)
        elif self.progress and time.time() - self.last_status >= STATUS_EVERY_S:
            self.last_status = time.time()
            print("\n".join(self.status(running)), file=self.stream, flush=True)

    def _clear(self) -> None:
        if self.live and self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")  # to the block's first line, then erase below
            self.drawn = 0


def _on(host: str) -> str:
    return f" on {host}" if host else ""


# -- the executors -----------------------------------------------------------------------------------


def run_local(tasks: list[Task], args_of, out_dir: str, jobs: int, display: Display) -> list[Outcome]:
    """Run every task, `jobs` at a time, each in its own process pinned to its group of the host's
    cores (`core_groups`); a failed task does not stop the others. Ctrl-C (SIGINT) is passed to the
    running pieces, which checkpoint and stop, and is raised again once they have ended."""
    groups = core_groups(sorted(os.sched_getaffinity(0)), jobs)
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"} if jobs > 1 else None
    pending, free, running, outcomes = list(tasks), list(range(jobs)), {}, []
    try:
        while pending or running:
            while pending and free:
                task, slot = pending.pop(0), free.pop(0)
                log = os.path.join(out_dir, LOG_DIR, task.log_name)
                process, offset = start_command(args_of(task), log, groups[slot], env)
                running[task] = (process, slot, log, offset, time.time())
                display.say(f"started {task.describe()} on cores {_cores_text(groups[slot])} (log: {log})")
            for task, (process, slot, log, offset, started) in list(running.items()):
                if process.poll() is not None:
                    del running[task]
                    free.append(slot)
                    outcomes.append(Outcome(task, process.returncode, time.time() - started, log))
                    display.ended(outcomes[-1], log_tail(log, offset))
            display.refresh({t: (r[2], r[3]) for t, r in running.items()})
            time.sleep(POLL_S if running else 0)
    except KeyboardInterrupt:
        _interrupt([r[0] for r in running.values()])
        raise
    return outcomes


def _cores_text(cores: list[int]) -> str:
    return f"{cores[0]}-{cores[-1]}" if len(cores) > 1 and cores == list(range(cores[0], cores[-1] + 1)) else \
        ",".join(map(str, cores))


def _interrupt(processes: list[subprocess.Popen], wait_s: float = 120.0) -> None:
    """Ask each running piece to stop (SIGINT: it checkpoints and exits) and wait for it."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    deadline = time.time() + wait_s
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.kill()


def import_ray():
    """The `ray` module; a ValueError with the install command if it is not installed."""
    try:
        import ray
    except ImportError:
        raise ValueError(f"--executor ray needs Ray, which is not installed: {RAY_INSTALL} "
                         "(or run the pieces on this machine with --jobs N)") from None
    return ray


def run_ray(tasks: list[Task], args_of, out_dir: str, display: Display, address: str | None = None,
            cpus_per_piece: float = 1.0, gpus_per_piece: float = 0.0) -> list[Outcome]:
    """Run every task as a Ray remote task declaring `cpus_per_piece` CPUs and `gpus_per_piece` of a
    GPU, on the Ray instance this process is connected to, else on the cluster at `address`, else on
    a new local one (this machine's cores and GPUs). Each runs the single-piece command there
    (`run_command`), writing its piece and log under `out_dir`, which every machine must see at the
    same path. A failed task does not stop the others."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        # Without an address, a new instance on this machine, even where `ray start` left one running.
        ray.init(address=address or "local")
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"} if 0 < gpus_per_piece < 1 else None
    remote = ray.remote(num_cpus=cpus_per_piece, num_gpus=gpus_per_piece, max_retries=0)(run_command)
    refs, running, outcomes = {}, {}, []
    try:
        for task in tasks:
            log = os.path.join(out_dir, LOG_DIR, task.log_name)
            offset = os.path.getsize(log) if os.path.exists(log) else 0
            refs[remote.remote(task_args_for(args_of, task), log, env)] = (task, log, offset, time.time())
            running[task] = (log, offset)
        display.say(f"submitted {len(tasks)} piece(s) to Ray ({cpus_per_piece:g} CPU(s) and "
                    f"{gpus_per_piece:g} GPU(s) each); logs in {os.path.join(out_dir, LOG_DIR)}")
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=POLL_S)
            for ref in ready:
                task, log, offset, submitted = refs.pop(ref)
                del running[task]
                outcomes.append(_ray_outcome(ray, ref, task, log, submitted))
                display.ended(outcomes[-1], log_tail(log, offset))
            display.refresh(running)
    finally:
        if started_here:
            ray.shutdown()
    return outcomes


def task_args_for(args_of, task: Task) -> list[str]:
    """`args_of(task)`: the task's command-line arguments (a plain list, sent to the Ray worker)."""
    return list(args_of(task))


def _ray_outcome(ray, ref, task: Task, log: str, submitted: float) -> Outcome:
    """A finished Ray task's outcome; a task Ray itself lost (its worker or machine died) failed."""
    try:
        returncode, wall_s, host = ray.get(ref)
    except Exception as error:  # noqa: BLE001 -- Ray raises its own kinds for a lost worker or node
        with open(log, "a") as f:
            f.write(f"\nRay lost this task: {error}\n")
        return Outcome(task, -1, time.time() - submitted, log)
    return Outcome(task, returncode, wall_s, log, host)


# -- the command -------------------------------------------------------------------------------------


def check_executor(executor: str, jobs: int | None, address: str | None, cpus_per_piece: float,
                   gpus_per_piece: float, max_pieces: int | None = None) -> int:
    """Validate the executor's settings before anything runs (a ValueError naming the setting and
    its allowed range; Ray not installed: the install command). Returns the local executor's jobs."""
    if executor not in EXECUTORS:
        raise ValueError(f"--executor must be one of {list(EXECUTORS)}, got {executor!r}")
    if max_pieces is not None and (not isinstance(max_pieces, int) or max_pieces < 1):
        raise ValueError(f"--max-pieces must be an integer >= 1 (pieces to run before stopping), got {max_pieces!r}")
    if executor == "local":
        if address is not None or cpus_per_piece != 1.0 or gpus_per_piece != 0.0:
            raise ValueError("--address, --cpus-per-piece and --gpus-per-piece are Ray's: give --executor ray")
        jobs = 1 if jobs is None else jobs
        if not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"--jobs must be an integer >= 1 (pieces run at once), got {jobs!r}")
        return jobs
    if jobs is not None:
        raise ValueError("--jobs is the local executor's: Ray runs as many pieces at once as the cluster's "
                         "resources allow (--cpus-per-piece, --gpus-per-piece)")
    if not cpus_per_piece > 0:
        raise ValueError(f"--cpus-per-piece must be > 0, got {cpus_per_piece}")
    if not gpus_per_piece >= 0:
        raise ValueError(f"--gpus-per-piece must be >= 0 (a fraction shares a GPU), got {gpus_per_piece}")
    import_ray()
    return 0


def run(table_name: str, out_dir: str, jobs: int | None = None, executor: str = "local", address: str | None = None,
        cpus_per_piece: float = 1.0, gpus_per_piece: float = 0.0, progress: bool = True,
        piece_seeds: int | None = None, max_pieces: int | None = None, **request) -> dict:
    """`harness.reproduce(table_name, out_dir, piece_seeds=..., **request)` with its pieces run by
    an executor (the module docstring): each missing piece of each requested row as its own
    single-piece command, `jobs` processes at a time on this machine, or as Ray tasks. Then the rows
    whose pieces all finished are written in this process and the tables rebuilt; returns
    `harness.reproduce`'s result. Raises `PiecesFailed` (after writing what finished) naming every
    piece that failed.

    `max_pieces`: run only the first that many missing pieces (in --status's order), for a machine
    lent for a while (a working session, a GPU lease) that should start no piece it cannot finish;
    rows with pieces left are not written, and the same command later runs the rest."""
    jobs = check_executor(executor, jobs, address, cpus_per_piece, gpus_per_piece, max_pieces)
    request.pop("progress", None)
    rows, tasks = plan_tasks(table_name, out_dir, piece_seeds, **request)
    left = tasks[max_pieces:] if max_pieces is not None else []
    tasks = tasks[:max_pieces] if max_pieces is not None else tasks
    settings_args = Request.of(table_name, **request).args()
    args_of = lambda task: task_args(table_name, out_dir, task, settings_args)  # noqa: E731
    display = Display(len(tasks), progress)
    display.say(f"{table_name}: {len(tasks)} piece(s) to run for {len(rows)} row(s) in {out_dir}"
                + (f", {jobs} at a time" if executor == "local" else ", as Ray tasks")
                + (f" (--max-pieces {max_pieces}; {len(left)} more left for a later run)" if left else ""))
    if not tasks:
        outcomes = []  # every piece finished: nothing to start (not even Ray)
    elif executor == "local":
        outcomes = run_local(tasks, args_of, out_dir, jobs, display)
    else:
        outcomes = run_ray(tasks, args_of, out_dir, display, address, cpus_per_piece, gpus_per_piece)
    failed = [o for o in outcomes if not o.ok]
    unwritten = {o.task.row for o in failed} | {task.row for task in left}
    result = write_rows(table_name, out_dir, [r for r in rows if r not in unwritten], piece_seeds, request)
    if left:
        display.say(f"{len(left)} piece(s) left (--max-pieces {max_pieces}), their rows not written: "
                    + ", ".join(task.describe() for task in left) + "; the same command runs them")
    if failed:
        raise PiecesFailed(f"{len(failed)} of {len(tasks)} piece(s) failed: "
                           + "; ".join(f"{o.task.describe()} (exit code {o.returncode}, log {o.log})" for o in failed)
                           + ". Rerun the same command to run them again (finished pieces are read back)",
                           failed, result)
    return result


def write_rows(table_name: str, out_dir: str, rows: list[str], piece_seeds: int | None, request: dict) -> dict:
    """Write `rows` from their finished pieces in this process, exactly as the command without an
    executor does (which reads every finished piece back), then rebuild the tables from every finished
    row in `out_dir`. A row with a piece still to run is an error here, never trained in this process."""
    if not rows:
        return report.write_outputs(tables.get_table(table_name), out_dir)
    request = {**request, "rows": rows}
    _, left = plan_tasks(table_name, out_dir, piece_seeds, **request)
    if left:
        raise RuntimeError("pieces not finished after their process ended with exit code 0: "
                           + ", ".join(t.describe() for t in left))
    return harness.reproduce(table_name, out_dir, progress=False, piece_seeds=piece_seeds, **request)

