"""`reproduce --jobs N` and `--executor ray` (fedjax_rl/reproduce/executor.py) on the reproduce tests'
tiny table (one CartPole row, 1 tuning + 2 reported seeds, three pieces of one seed): the same pieces
run in this process, by local worker processes and by a local Ray instance hold bit-identical numbers;
a failed piece is reported with the tail of its log while the others finish; a killed piece loses
nothing that finished, and rerunning the command finishes the rest.

The pieces' processes share this session's persistent compilation cache (tests/conftest.py; its
directory is passed to them through JAX_COMPILATION_CACHE_DIR), so a piece's process can load a program
that another process compiled instead of compiling it again (seconds instead of minutes on a loaded
2-core machine). Every piece process still compiles or loads its own programs."""

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import jax
import numpy as np
import pytest

from fedjax_rl.cli import commands, reproduce_command
from fedjax_rl.reproduce import executor, harness, plan
from fedjax_rl.reproduce.plan import Request
from fedjax_rl.reproduce.executor import Task
from fedjax_rl.reproduce.seed_pieces import Piece
from test_reproduce import ROWS, TINY
from loopback import private_network

ROW = ROWS[0]
REQUEST = {**{k: v for k, v in TINY.items() if k != "progress"}, "rows": [ROW]}
PIECE_SEEDS = 1  # seeds 0, 1 and 2 as three pieces, one program each (1 seed x 3 omegas)
PIECES = ["seeds_0-1", "seeds_1-2", "seeds_2-3"]
PROGRAM_DIR = os.path.join("table1", "CartPole-v1__length", "fedrdqn")
# What a piece's metrics.json records of the process that ran it, not of its numbers.
NOT_NUMBERS = ("timing", "machine")

# Loaded by every piece process started while FEDJAX_RL_TEST_FAULTS is set (the test puts this file's
# directory first on PYTHONPATH): seed piece 1 stops at once with the error a non-finite loss raises;
# seed piece 2 writes its process id to PIDFILE after its first checkpointed block and waits to be killed.
FAULTS = textwrap.dedent("""\
    import os, time
    if os.environ.get("FEDJAX_RL_TEST_FAULTS"):
        from fedjax_rl.training import loop
        _run = loop.run

        def run(config, *args, first_seed=0, on_block=None, **kwargs):
            if first_seed == 1:
                raise loop.NonFiniteError("non-finite loss in seed index 1 (injected by the test)")
            if first_seed == 2:
                report = on_block

                def then_wait(done, total):
                    if report is not None:
                        report(done, total)
                    if done == 1:
                        with open(os.environ["FEDJAX_RL_TEST_FAULTS"], "w") as f:
                            f.write(str(os.getpid()))
                        time.sleep(600)
                on_block = then_wait
            return _run(config, *args, first_seed=first_seed, on_block=on_block, **kwargs)

        loop.run = run
    """)


@pytest.fixture(scope="module")
def shared_cache():
    """The pieces' processes use this session's compilation cache (see the module docstring)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("JAX_COMPILATION_CACHE_DIR", os.path.abspath(jax.config.jax_compilation_cache_dir))
    mp.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")
    yield
    mp.undo()


@pytest.fixture(scope="module")
def in_process(tmp_path_factory, shared_cache):
    """The row as the command without --jobs runs it: its three pieces one after another here."""
    out = str(tmp_path_factory.mktemp("in_process"))
    row = harness.reproduce("table1", out, progress=False, piece_seeds=PIECE_SEEDS, **REQUEST)["rows"][ROW]
    return dict(out=out, row=row)


def piece_numbers(out: str, piece: str) -> dict:
    """Every number a finished piece wrote: per omega point its metrics.json (without the timing and
    machine of the process that ran it) and its final global parameters."""
    found = {}
    for point in ("omega=0", "omega=0.05", "omega=0.2"):
        path = os.path.join(out, PROGRAM_DIR, piece, point)
        with open(os.path.join(path, "metrics.json")) as f:
            found[point] = {k: v for k, v in json.load(f).items() if k not in NOT_NUMBERS}
        with np.load(os.path.join(path, "global_params.npz")) as params:
            found[point + "/params"] = {k: params[k] for k in params.files}
    return found


def assert_same_pieces(out: str, reference: str, pieces=PIECES) -> None:
    for piece in pieces:
        mine, theirs = piece_numbers(out, piece), piece_numbers(reference, piece)
        assert mine.keys() == theirs.keys()
        for key in mine:
            if key.endswith("/params"):
                assert mine[key].keys() == theirs[key].keys()
                for name in mine[key]:
                    np.testing.assert_array_equal(mine[key][name], theirs[key][name], err_msg=f"{piece} {key} {name}")
            else:
                assert mine[key] == theirs[key], f"{piece} {key}"


@pytest.fixture(scope="module")
def killed_then_resumed(tmp_path_factory, in_process):
    """Run 1 (--jobs 3): piece 0 finishes, piece 1 fails at once (an injected non-finite loss), piece
    2 is killed (SIGKILL) after its first checkpointed block. Run 2, the same command without the
    faults (--jobs 2), runs pieces 1 and 2 and writes the row."""
    out = str(tmp_path_factory.mktemp("jobs"))
    faults = tmp_path_factory.mktemp("faults")
    (faults / "sitecustomize.py").write_text(FAULTS)
    pidfile = str(faults / "pid")
    killed = {}

    def kill_piece_2():
        deadline = time.time() + 900
        while time.time() < deadline and not os.path.exists(pidfile):
            time.sleep(0.5)
        time.sleep(0.5)  # the file is written; its process id with it
        killed["pid"] = int(open(pidfile).read())
        killed["cores"] = os.sched_getaffinity(killed["pid"])  # the cores its worker slot pinned it to
        os.kill(killed["pid"], signal.SIGKILL)

    mp = pytest.MonkeyPatch()
    mp.setenv("FEDJAX_RL_TEST_FAULTS", pidfile)
    mp.setenv("PYTHONPATH", os.pathsep.join([str(faults), *filter(None, [os.environ.get("PYTHONPATH")])]))
    killer = threading.Thread(target=kill_piece_2, daemon=True)
    killer.start()
    said = io.StringIO()
    try:
        planned_first = executor.plan_tasks("table1", out, PIECE_SEEDS, **REQUEST)[1]
        with pytest.raises(executor.PiecesFailed) as failed, contextlib.redirect_stderr(said):
            executor.run("table1", out, jobs=3, progress=False, piece_seeds=PIECE_SEEDS, **REQUEST)
    finally:
        mp.undo()
    killer.join(timeout=1)
    finished_0 = os.path.getmtime(os.path.join(out, PROGRAM_DIR, PIECES[0], "finished.json"))
    planned_second = executor.plan_tasks("table1", out, PIECE_SEEDS, **REQUEST)[1]
    result = executor.run("table1", out, jobs=2, progress=False, piece_seeds=PIECE_SEEDS, **REQUEST)
    return dict(out=out, failed=failed.value, said=said.getvalue(), killed=killed, planned_first=planned_first,
                planned_second=planned_second, finished_0=finished_0, row=result["rows"][ROW])


def tasks(*firsts) -> list[Task]:
    return [Task(ROW, Piece("fedrdqn", first, first + 1)) for first in firsts]


@pytest.mark.deployment
def test_a_failed_piece_is_reported_with_its_log_and_the_others_finish(killed_then_resumed):
    failed = killed_then_resumed["failed"]
    assert killed_then_resumed["planned_first"] == tasks(0, 1, 2)
    assert sorted((o.task.piece.first, o.returncode) for o in failed.failed) == [(1, 1), (2, -signal.SIGKILL)]
    message = str(failed)
    assert message.startswith("2 of 3 piece(s) failed: ")
    assert f"{ROW} fedrdqn seed 1 (exit code 1, log " in message
    assert f"{ROW} fedrdqn seed 2 (exit code -9, log " in message
    # Each failure was said as it happened, with the tail of its log: the injected error's line.
    said = killed_then_resumed["said"]
    assert f"FAILED {ROW} fedrdqn seed 1 (exit code 1); the last lines of " in said
    assert "NonFiniteError: non-finite loss in seed index 1 (injected by the test)" in said
    # The piece that did not fail finished; no row was written while pieces were missing.
    assert f"finished {ROW} fedrdqn seed 0 in " in said
    # Three workers, each pinned to its group of this machine's cores: piece 2 ran in the third.
    groups = executor.core_groups(sorted(os.sched_getaffinity(0)), 3)
    assert killed_then_resumed["killed"]["cores"] == set(groups[2])
    assert failed.result["rows"] == {}


@pytest.mark.deployment
def test_a_killed_piece_loses_nothing_finished_and_the_rerun_finishes_the_rest(killed_then_resumed):
    out = killed_then_resumed["out"]
    # The rerun ran only the two pieces that had not finished; the finished one was read back.
    assert killed_then_resumed["planned_second"] == tasks(1, 2)
    finished_0 = os.path.join(out, PROGRAM_DIR, PIECES[0], "finished.json")
    assert os.path.getmtime(finished_0) == killed_then_resumed["finished_0"]
    logs = sorted(os.listdir(os.path.join(out, "logs")))
    assert logs == [f"CartPole-v1__length__fedrdqn__{p}.log" for p in PIECES]
    attempts = {name: open(os.path.join(out, "logs", name)).read().count("\n== ") + 1 for name in logs}
    assert list(attempts.values()) == [1, 2, 2]
    # The killed piece resumed from the block it had checkpointed.
    with open(os.path.join(out, PROGRAM_DIR, PIECES[2], "omega=0", "metrics.json")) as f:
        assert json.load(f)["timing"]["resumed_at_block"] == 1
    assert [p["seeds"] for p in killed_then_resumed["row"]["pieces"]["fedrdqn"]] == [[0, 1], [1, 2], [2, 3]]


@pytest.mark.deployment
def test_local_workers_give_the_in_process_numbers(killed_then_resumed, in_process):
    """Pieces run by worker processes (one of them killed and resumed) against the same pieces run in
    this process: every number bit-identical, and so the row."""
    assert_same_pieces(killed_then_resumed["out"], in_process["out"])
    row, reference = killed_then_resumed["row"], in_process["row"]
    for key in ("algorithms", "chosen_omega", "headline", "request", "configs", "seeds", "budget"):
        assert row[key] == reference[key], key


@pytest.mark.deployment
def test_ray_tasks_give_the_in_process_numbers(in_process, tmp_path):
    """Pieces 1 and 2 as two Ray tasks on a local 2-CPU instance (piece 0, copied from the in-process
    run, is read back: each piece process compiles its program, the price of this test), against
    the same pieces run in this process."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'fedjax-rl[ray]')")
    shutil.copytree(os.path.join(in_process["out"], PROGRAM_DIR, PIECES[0]), tmp_path / PROGRAM_DIR / PIECES[0])
    assert executor.plan_tasks("table1", str(tmp_path), PIECE_SEEDS, **REQUEST)[1] == tasks(1, 2)
    with private_network():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            result = executor.run("table1", str(tmp_path), executor="ray", progress=False,
                                  piece_seeds=PIECE_SEEDS, **REQUEST)
        finally:
            ray.shutdown()
    assert_same_pieces(str(tmp_path), in_process["out"])
    assert result["rows"][ROW]["algorithms"] == in_process["row"]["algorithms"]
    assert sorted(os.listdir(tmp_path / "logs")) == [f"CartPole-v1__length__fedrdqn__{p}.log" for p in PIECES[1:]]


# -- cheap checks: nothing trains --------------------------------------------------------------------


def test_the_request_is_spelled_as_flags_that_read_back_to_it():
    args = Request.of("table1", **REQUEST).args()
    assert args == ["--seeds", "2", "--tuning-seeds", "1", "--omegas", "0.05,0.2", "--budget", "0.006", "--seed", "0",
                    "--run-batch", "3", "--set", "hidden_sizes=8", "--set", "learning_starts=50",
                    "--set", "train_freq=4", "--set", "gradient_steps=1",
                    "--set-run", "sweep_points=3", "--set-run", "eval_episodes=2"]
    parsed = commands.build_parser().parse_args(["reproduce", "table1", *args])
    assert reproduce_command.agent_overrides("table1", parsed.set) == REQUEST["agent_overrides"]
    assert reproduce_command.run_settings(parsed.set_run) == REQUEST["train_overrides"]
    # A float is spelled by its shortest exact decimal, so it reads back to the same float.
    spelled = Request("table1", budget=0.1 + 0.2).args()
    assert spelled[spelled.index("--budget") + 1] == "0.30000000000000004"
    # A table's own defaults travel as no flag; a heterogeneity table's levels as --max-rates.
    levels = Request("heterogeneity", max_rates=[0, 0.5]).args()
    assert "--seeds" not in levels and levels[:2] == ["--max-rates", "0.0,0.5"]
    assert commands.build_parser().parse_args(["reproduce", "heterogeneity", *levels]).max_rates == "0.0,0.5"
    challenging = Request("table1", challengers=("fedrdqn_min",)).args()
    assert commands.build_parser().parse_args(["reproduce", "table1", *challenging]).challenger == ["fedrdqn_min"]
    switch = Request("table1", train_overrides={"tensorboard": False}).args()[-2:]
    assert switch == ["--set-run", "tensorboard=false"]
    assert reproduce_command.run_settings(switch[1:]) == {"tensorboard": False}
    with pytest.raises(ValueError, match="train_overrides cannot carry 'env_name'"):
        Request("table1", train_overrides={"env_name": "Acrobot-v1"}).args()
    with pytest.raises(ValueError, match=r"unknown or row-decided run settings \['physics'\] for --set-run"):
        plan.parse_run_settings(["physics=length"])


def test_a_challengers_own_settings_travel_as_flags_and_are_checked(example_algorithm):
    """--challenger-set: parsed by the challenger's declarations, spelled back by Request.args, refused
    before compiling without a challenger, for a setting no challenger declares, or out of range."""
    request = Request("table1", challengers=("fedrdqn_min",), challenger_overrides={"pessimism": 0.5})
    args = request.args()
    assert args[:4] == ["--challenger", "fedrdqn_min", "--challenger-set", "pessimism=0.5"]
    parsed = commands.build_parser().parse_args(["reproduce", "table1", *args])
    assert reproduce_command.challenger_overrides(parsed.challenger, parsed.challenger_set) == {"pessimism": 0.5}
    planned = Request("table1", rows=["CartPole-v1/length"], challengers=("fedrdqn_min",),
                      challenger_overrides={"pessimism": 0.5}).plan()
    assert planned.record["challenger_overrides"] == {"pessimism": 0.5}
    [*own, theirs] = planned.programs["CartPole-v1/length"]
    assert theirs.config.agent.pessimism == 0.5 and all(not hasattr(p.config.agent, "pessimism") for p in own)
    for overrides, challengers, error in (
            ({"pessimism": 1.5}, ("fedrdqn_min",), r"pessimism must be in \[0, 1\], got 1.5"),
            ({"kappa": 1.0}, ("fedrdqn_min",), r"unknown challenger settings \['kappa'\] for --challenger-set"),
            ({"pessimism": 0.5}, (), r"add --challenger ALGO")):
        with pytest.raises(ValueError, match=error):
            Request("table1", challengers=challengers, challenger_overrides=overrides).plan()
    with pytest.raises(ValueError, match=r"--challenger-set sets a challenger's settings: add --challenger ALGO"):
        reproduce_command.challenger_overrides([], ["pessimism=0.5"])


def test_cores_are_split_into_contiguous_groups():
    assert executor.core_groups([0, 1, 2, 3, 4, 5, 6, 7], 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert executor.core_groups([4, 5, 6, 7], 2) == [[4, 5], [6, 7]]
    assert executor.core_groups([0, 1], 3) == [[0], [1], [0]]  # more jobs than cores: round robin


def test_executor_settings_are_refused_before_anything_runs(tmp_path, monkeypatch):
    def nothing(*args, **kwargs):
        raise AssertionError("nothing may run")

    monkeypatch.setattr(executor, "start_command", nothing)
    base = ["reproduce", "table1", "--rows", ROW, "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match=r"--jobs must be an integer >= 1 \(pieces run at once\), got 0"):
        commands.main([*base, "--jobs", "0"])
    with pytest.raises(SystemExit, match="--address, --cpus-per-piece and --gpus-per-piece are Ray's"):
        commands.main([*base, "--jobs", "2", "--gpus-per-piece", "0.5"])
    with pytest.raises(SystemExit, match="--jobs is the local executor's"):
        commands.main([*base, "--executor", "ray", "--jobs", "2"])
    with pytest.raises(SystemExit, match="give no --program, --status or --report-only with them"):
        commands.main([*base, "--jobs", "2", "--status"])
    with pytest.raises(SystemExit, match=r"--max-pieces must be an integer >= 1 \(pieces to run before stopping\), got 0"):
        commands.main([*base, "--max-pieces", "0"])
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed: its import fails
    with pytest.raises(SystemExit, match=r"--executor ray needs Ray, which is not installed: "
                                         r"pip install \"fedjax-rl\[ray\]\""):
        commands.main([*base, "--executor", "ray"])
    assert not os.listdir(tmp_path)


@pytest.mark.deployment  # shares the process tests' finished pieces (`in_process`)
def test_a_finished_request_runs_no_process(in_process, monkeypatch):
    def nothing(*args, **kwargs):
        raise AssertionError("nothing may run")

    monkeypatch.setattr(subprocess, "Popen", nothing)
    result = executor.run("table1", in_process["out"], jobs=2, progress=False, piece_seeds=PIECE_SEEDS,
                                    **REQUEST)
    assert result["rows"][ROW]["algorithms"] == in_process["row"]["algorithms"]


def test_max_pieces_runs_the_first_pieces_and_writes_no_row_with_pieces_left(tmp_path, monkeypatch, capsys):
    """A lent machine runs what it can finish: the first N missing pieces in --status's order; a row
    with pieces left is not written (and never trained in this process)."""
    ran, written = [], []

    def run_local(tasks, args_of, out_dir, jobs, display):
        ran.extend((task.piece.first, task.piece.stop, jobs) for task in tasks)
        return [executor.Outcome(task, 0, 1.0, "log") for task in tasks]

    monkeypatch.setattr(executor, "run_local", run_local)
    monkeypatch.setattr(executor, "write_rows", lambda table, out, rows, *a: written.append(rows) or {})
    executor.run("table1", str(tmp_path), jobs=None, progress=False, piece_seeds=PIECE_SEEDS,
                           max_pieces=2, **REQUEST)
    assert ran == [(0, 1, 1), (1, 2, 1)] and written == [[]]
    said = capsys.readouterr().err
    assert "2 piece(s) to run for 1 row(s)" in said and "(--max-pieces 2; 1 more left for a later run)" in said
    assert f"1 piece(s) left (--max-pieces 2), their rows not written: {ROW} fedrdqn seed 2" in said
    # Enough pieces allowed: every piece runs and the row is written, as without the setting.
    ran.clear(), written.clear()
    executor.run("table1", str(tmp_path), jobs=2, progress=False, piece_seeds=PIECE_SEEDS,
                           max_pieces=5, **REQUEST)
    assert ran == [(0, 1, 2), (1, 2, 2), (2, 3, 2)] and written == [[ROW]]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_display_redraws_running_pieces_in_place_on_a_terminal(tmp_path):
    log = tmp_path / "piece.log"
    log.write_text("== header\ncompiling\rtraining:  33%| 1/3\rtraining:  67%| 2/3")  # a progress bar's updates
    screen = Terminal()
    display = executor.Display(total=3, progress=True, stream=screen)
    display.refresh({Task(ROW, Piece("fedrdqn", 0, 1)): (str(log), 0)})
    block = screen.getvalue()
    assert block.startswith("0/3 pieces done, 1 running, 0 failed (")
    assert block.endswith(f"\n  {ROW} fedrdqn seed 0: training:  67%| 2/3\n")
    display.say("started another piece")  # erases the block (2 lines up), writes the line; the next refresh redraws
    assert screen.getvalue() == block + "\x1b[2F\x1b[J" + "started another piece\n"
    # Not a terminal: no escape sequences, the status only every STATUS_EVERY_S seconds.
    plain = io.StringIO()
    quiet = executor.Display(total=3, progress=True, stream=plain)
    quiet.refresh({Task(ROW, Piece("fedrdqn", 0, 1)): (str(log), 0)})
    quiet.say("started another piece")
    assert plain.getvalue() == "started another piece\n"
