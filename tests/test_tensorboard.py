"""TensorBoard event files (fedjax_rl/training/tensorboard_log.py), read back with TensorBoard's own reader:
one value per evaluation block for every tag, equal to metrics.json's curve, through a run that
stopped between a block's events and its checkpoint and resumed (so that block was written twice);
per grid point and per seed. The plain (non-grid) run's files are checked in test_cli.py on its
fixture; `--no-tensorboard` there and here."""

import os
import types

import numpy as np
import pytest

from references import tensorboard_raw_steps as raw_steps
from references import tensorboard_scalars as scalars

from fedjax_rl.training import checkpoint, configs, loop, records, run_directory, tensorboard_log

AGENT = dict(hidden_sizes=(8,), learning_starts=10, train_freq=1, gradient_steps=1, batch_size=4, buffer_size=20)
GRID = {"omega": [0.0, 0.2]}
BLOCK_STEPS = 20  # sync_every 10 x eval_every_rounds 2
NUM_BLOCKS = 3


def tiny_config(**changes):
    return configs.train_config("fedrdqn", "CartPole-v1", num_agents=2, sync_every=10, steps_per_agent=60,
                                eval_every_rounds=2, eval_episodes=1, sweep_points=2, agent_overrides=AGENT,
                                **changes)


@pytest.fixture(scope="module")
def resumed_grid_run(tmp_path_factory):
    """A 2-point omega grid x 2 seeds, 3 blocks: stopped after block 2's events were written but before
    its checkpoint (a crash between the two), then resumed by the same call from block 1."""
    out = str(tmp_path_factory.mktemp("tb") / "grid")
    config = tiny_config()
    real_save = checkpoint.save

    def crash_before_second_checkpoint(path, tree, **extra):
        if extra.get("blocks_done") == 2:
            raise KeyboardInterrupt
        real_save(path, tree, **extra)

    checkpoint.save = crash_before_second_checkpoint
    try:
        with pytest.raises(loop.Interrupted, match="stopped at block 1 of 3"):
            loop.run(config, num_seeds=2, out_dir=out, grid=GRID, progress=False)
    finally:
        checkpoint.save = real_save
    before = {label: scalars(os.path.join(out, label)) for label in ("omega=0", "omega=0.2")}
    result = loop.run(config, num_seeds=2, out_dir=out, grid=GRID, progress=False)
    assert result["timing"]["resumed_at_block"] == 1
    return out, result, before


TAGS = {"eval/nominal_return", "eval/local_average", "eval/local_minimum", "rollout/train_return", "train/td_loss",
        "train/degree_loss", "train/omega", "federation/bytes", "time/wall_s"}
PER_SEED = {"nominal_return": "eval/nominal_return", "local_average": "eval/local_average",
            "local_minimum": "eval/local_minimum", "train_return": "rollout/train_return",
            "td_loss": "train/td_loss", "degree_loss": "train/degree_loss"}


def test_the_stopped_run_had_written_the_block_its_checkpoint_lacks(resumed_grid_run):
    _, _, before = resumed_grid_run
    for shown in before.values():
        assert [step for step, _ in shown["eval/nominal_return"]] == [BLOCK_STEPS, 2 * BLOCK_STEPS]


@pytest.mark.parametrize("point", [0, 1])
def test_every_tag_has_one_value_per_block_equal_to_the_curve(resumed_grid_run, point):
    out, result, _ = resumed_grid_run
    label, omega = ("omega=0", "omega=0.2")[point], GRID["omega"][point]
    run_dir = os.path.join(out, label)
    shown = scalars(run_dir)
    assert set(shown) == TAGS
    steps = [BLOCK_STEPS * (b + 1) for b in range(NUM_BLOCKS)]
    for tag, points in shown.items():
        assert [step for step, _ in points] == steps, tag
    # Block 2 was written twice (before the crash and after the resume); TensorBoard shows it once.
    assert raw_steps(run_dir, "eval/nominal_return").count(2 * BLOCK_STEPS) == 2
    curve = result["curve"]
    for name, tag in PER_SEED.items():
        expected = np.mean(np.asarray(curve[name][point], np.float64), axis=0)  # [seeds, blocks] -> [blocks]
        np.testing.assert_array_equal([v for _, v in shown[tag]], np.float32(expected), err_msg=tag)
        for index in range(2):  # seeds 0 and 1: by_seed/seed_<n>
            alone = scalars(os.path.join(run_dir, tensorboard_log.BY_SEED, f"seed_{index}"))
            np.testing.assert_array_equal([v for _, v in alone[tag]], np.float32(curve[name][point][index]),
                                          err_msg=f"{tag} seed {index}")
    assert [v for _, v in shown["train/omega"]] == [np.float32(omega)] * NUM_BLOCKS
    per_round = result["communication"]["bytes_up_per_round"] + result["communication"]["bytes_down_per_round"]
    assert [v for _, v in shown["federation/bytes"]] == [per_round * 2 * (b + 1) for b in range(NUM_BLOCKS)]
    wall = [v for _, v in shown["time/wall_s"]]
    assert all(0 < a < b for a, b in zip(wall, wall[1:]))


def test_no_tensorboard_writes_nothing_and_is_not_part_of_the_run(tmp_path):
    with_board, without = tiny_config(), tiny_config(tensorboard=False)
    assert with_board.tensorboard is True and without.tensorboard is False
    # What config.json and a reproduction row record: the same run.
    assert records.recorded_config(with_board, 2, 0, GRID) == records.recorded_config(without, 2, 0, GRID)
    plan = types.SimpleNamespace(config=without, out_dir=str(tmp_path), points=None, grid=None, seed=0, first_seed=0,
                                 num_seeds=1)
    board = tensorboard_log.open_board(plan, 0, run_directory.RunDirectory.grid_point_name)
    board.write({"env_steps": [20], "nominal_return": [1.0]}, wall_s=1.0)
    board.close()
    assert os.listdir(tmp_path) == []


def test_reproduce_no_tensorboard_reaches_the_runs_and_not_the_rows_record(monkeypatch):
    """`reproduce --no-tensorboard` sets the runs' setting; a row's recorded request leaves it out, so a
    row finished with event files is the same request without them."""
    from fedjax_rl.cli import commands
    from fedjax_rl.reproduce import plan, status, tables

    seen = {}
    monkeypatch.setattr(status, "rows", lambda table, out, **request: seen.update(request) or [])
    monkeypatch.setattr(status, "lines", lambda *args: [])
    commands.main(["reproduce", "table1", "--status", "--no-tensorboard", "--out", "unused"])
    assert seen["train_overrides"] == {"tensorboard": False}
    record = dict(budget=1.0, num_seeds=5, tuning_seeds=3, omegas=[0.1], seed=0, agent_overrides=None)
    assert (plan.request_record(**record, train_overrides={"tensorboard": False})
            == plan.request_record(**record, train_overrides=None))
    table = tables.get_table("table1")
    programs = plan.row_programs(table, plan.select_rows(table, None)[0], 0.01, [0.1],
                                      train_overrides={"tensorboard": False})
    assert all(planned.config.tensorboard is False for planned in programs)
