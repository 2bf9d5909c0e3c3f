"""The run directory's promises, through its one API (`RunDirectory`), on tiny states: nothing compiles."""

import os
from typing import NamedTuple

import numpy as np
import pytest

from fedjax_rl.reproduce import status
from fedjax_rl.training import run_directory
from fedjax_rl.training.run_directory import RunDirectory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {"env": "CartPole-v1", "num_seeds": 1, "seed": 0}
NUM_BLOCKS = 2


class _Learner(NamedTuple):
    shared: dict


class _Agents(NamedTuple):
    learner: _Learner


class _State(NamedTuple):
    agents: _Agents


def _state(value: float) -> _State:
    """What the directory reads of a training state: a pytree, with the learner's shared parameters
    ([seeds, agents, ...])."""
    return _State(_Agents(_Learner({"w": np.full((1, 2, 3), value, np.float32)})))


def _result(value: float) -> dict:
    return {"curve": {"return": np.full((1, NUM_BLOCKS), value)}, "final": {"local_average": np.array([value]),
            "local_minimum": np.array([value]), "sweep_scales": np.array([[1.0]]), "sweep_returns": np.array([[value]])},
            "run_batch": None, "timing": {"train_s": 1.0}}


def _finished_run(path) -> RunDirectory:
    directory = RunDirectory(str(path), CONFIG)
    directory.prepare(new_run=False)
    state, blocks_done, curve, _ = directory.open(_state(0.0))
    assert (blocks_done, curve) == (0, [])
    for block in range(NUM_BLOCKS):
        directory.save_block(_state(block + 1.0), block + 1, curve, wall_s=1.0)
    directory.finish(_result(7.0), _state(2.0))
    return directory


def test_a_run_reads_back_what_it_wrote_and_says_where_it_stands(tmp_path):
    fresh = RunDirectory(str(tmp_path / "run"), CONFIG)
    assert fresh.progress(NUM_BLOCKS)["state"] == "not started" and not fresh.is_finished()
    directory = _finished_run(tmp_path / "run")
    assert RunDirectory.recorded(directory.path) == CONFIG
    assert directory.is_finished() and directory.progress(NUM_BLOCKS)["state"] == "finished"
    assert directory.read_finished()["final"]["local_average"].tolist() == [7.0]
    other = RunDirectory(directory.path, {**CONFIG, "seed": 1})
    assert not other.is_finished() and other.progress(NUM_BLOCKS)["state"] == "other settings"
    with pytest.raises(run_directory.RunExists, match=r"seed: 0 -> 1"):
        other.prepare(new_run=False)


def test_a_finished_run_evaluated_again_is_unfinished_until_it_finishes_again(tmp_path):
    """Its outputs gone, a finished run resumes from its checkpoint to evaluate again: from then on
    the directory no longer says finished (a stop mid-evaluation must not leave a finished run
    without outputs), until the new outputs are written."""
    directory = _finished_run(tmp_path / "run")
    os.remove(os.path.join(directory.path, run_directory.METRICS))
    assert directory.read_finished() is None
    state, blocks_done, _, _ = directory.open(_state(0.0))
    assert blocks_done == NUM_BLOCKS and float(state.agents.learner.shared["w"][0, 0, 0]) == NUM_BLOCKS
    assert not directory.is_finished()
    assert directory.progress(NUM_BLOCKS) == {"state": "partial", "blocks_done": NUM_BLOCKS, "wall_s": 1.0}
    directory.finish(_result(8.0), state)
    assert directory.is_finished() and directory.read_finished()["final"]["local_average"].tolist() == [8.0]


def test_a_damaged_finished_marker_is_not_finished_and_is_set_aside_on_reading_back(tmp_path):
    directory = _finished_run(tmp_path / "run")
    marker = os.path.join(directory.path, run_directory.FINISHED)
    with open(marker, "w") as f:
        f.write('{"env": ')
    assert not directory.is_finished()
    with pytest.warns(UserWarning, match="set aside"):
        assert directory.read_finished() is None
    assert not os.path.exists(marker) and os.path.exists(marker.replace(".json", ".damaged.1.json"))


def test_the_committed_runs_read_as_finished_where_status_and_resume_read_them():
    """The committed Table 1 runs, some recorded before today's fields existed, are finished pieces
    for a reproduction that grows their rows: status reads every seed they hold as held, none to
    train again."""
    rows = status.rows("table1", os.path.join(REPO, "results", "table1_paper"), budget="paper", num_seeds=30)
    assert len(rows) == 8
    for row in rows:
        for program in row["programs"]:
            states = {tuple(piece["seeds"]): piece["state"] for piece in program["pieces"]}
            assert "other settings" not in states.values(), (row["row"], states)
            finished = sorted(seeds for seeds, state in states.items() if state == "finished")
            assert finished[0][0] == 0 and all(a[1] == b[0] for a, b in zip(finished, finished[1:])), finished
            assert program["seeds_held"] == finished[-1][1] >= 8, (row["row"], program["seeds_held"], finished)
