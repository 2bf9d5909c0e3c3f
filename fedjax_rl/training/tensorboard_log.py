"""TensorBoard event files of a run, written in its run directory as the run goes, one point per
evaluation block: `tensorboard --logdir runs/` then shows a federation learning, beside any other
run, in the tool SB3, RL-Zoo3 and CleanRL users already have open.

Where (one TensorBoard run per directory that holds event files)::

    RUN_DIR/                    the mean over the run's seeds, and what the seeds share
    RUN_DIR/by_seed/seed_<n>/   each seed alone (n = the seed: `--seed` + its index), the same tags,
                                so that the seeds overlay the mean on one chart

A grid (`loop.run(grid=...)`, a reproduction row's omegas) writes one RUN_DIR per point,
OUT/omega=0.05/, as its metrics.

Tags, grouped by their first component as TensorBoard's scalar dashboard groups them; the x axis
is the environment step of each agent (the figures' axis; K agents take K times as many steps)::

    eval/nominal_return     the global policy in the nominal environment (every block's evaluation)
    eval/local_average      the global policy in each agent's own environment, averaged over the K
    eval/local_minimum      ... and the worst of the K: the paper's two numbers, block by block
    rollout/train_return    the agents' own training episodes that ended in the block (exploration
                            included; SB3's rollout/ep_rew_mean)
    train/<loss>            the algorithm's losses, averaged over the block's gradient steps
                            (td_loss, degree_loss; critic_loss, actor_loss, alpha_loss)
    train/omega             the robustness level (0 for the *Avg baselines)
    federation/bytes        bytes uploaded and downloaded so far by one federation (one seed)
    time/wall_s             seconds since the run started, compilation included (a resumed run
                            adds the time of the processes before it; absent where a checkpoint
                            predates that record)

`compare`'s table is the final evaluation (its own episodes), not the last point of these curves.

Resuming. A block's events are written and flushed before its checkpoint, so the event files hold
every checkpointed block. A resumed run opens a new event file whose writer first records a restart
at the first step after its checkpoint (`purge_step`): TensorBoard's readers (the Python event
accumulator and the data server alike) drop every older point from that step on, which only a run
stopped between a block's events and its checkpoint has, and the resumed run writes those blocks
again: one point per block. A run that restarts from block 0 (a damaged checkpoint) hides all of
its old points the same way.

`--no-tensorboard` (`TrainConfig.tensorboard = False`) writes none; it changes no number and is not
part of a run's identity. Writing uses tensorboardX (no TensorFlow); reading needs the `tensorboard`
package (`pip install tensorboard`, in the test extras).
"""

from __future__ import annotations

import glob
import math
import os
import weakref

import numpy as np

EVENTS = "events.out.tfevents.*"
BY_SEED = "by_seed"
# curve record name -> tag; each is written for the mean over seeds and for every seed alone.
PER_SEED = {
    "nominal_return": "eval/nominal_return",
    "local_average": "eval/local_average",
    "local_minimum": "eval/local_minimum",
    "train_return": "rollout/train_return",
}


def has_events(directory: str) -> bool:
    """Whether `directory` holds TensorBoard event files."""
    return bool(glob.glob(os.path.join(glob.escape(directory), EVENTS)))


class NoBoard:
    """What a run without event files writes to: nothing."""

    def write(self, record: dict, wall_s: float) -> None:
        pass

    def close(self) -> None:
        pass


class Board:
    """The event files of one run (every grid point, every seed), open for its remaining blocks."""

    def __init__(self, run_dirs: list[str], grid: bool, seeds: list[int], start_step: int, loss_names,
                 omegas: list[float], bytes_per_round: int, sync_every: int):
        """`run_dirs`: one per grid point (records then have a leading point axis, `grid`), else one.
        `start_step`: the first environment step after the checkpoint the run continues from."""
        from tensorboardX import SummaryWriter

        self.grid, self.loss_names, self.omegas = grid, tuple(loss_names), omegas
        self.bytes_per_round, self.sync_every = bytes_per_round, sync_every
        self.tags = {**PER_SEED, **{name: f"train/{name}" for name in self.loss_names}}

        def writer(directory):
            # A resumed run's file starts with a restart at its first new step (see the module
            # docstring); the process id and that step keep a quick resume from reusing the name of
            # the file before it (the name holds the second it was opened).
            resumed = has_events(directory)
            return SummaryWriter(directory, purge_step=start_step if resumed else None, flush_secs=3600,
                                 filename_suffix=f".{os.getpid()}.{start_step}")

        self.writers = [(writer(d), [writer(os.path.join(d, BY_SEED, f"seed_{s}")) for s in seeds])
                        for d in run_dirs]
        every = [w for mean, per_seed in self.writers for w in (mean, *per_seed)]
        # Closed when the run ends or stops (an exception, Ctrl-C) and its board is dropped.
        self._close = weakref.finalize(self, _close_all, every)

    def write(self, record: dict, wall_s: float) -> None:
        """One evaluation block's curve record (lists: [seeds], or [grid points, seeds] for a grid)."""
        step = int(np.asarray(record["env_steps"]).reshape(-1)[0])  # the same for every run
        for point, (mean, per_seed) in enumerate(self.writers):
            # A quantity a run did not record is written as absent.
            values = {name: np.asarray(record[name], float)[point] if self.grid else np.asarray(record[name], float)
                      for name in self.tags if name in record}
            for name, seeds in values.items():
                mean.add_scalar(self.tags[name], float(np.mean(seeds)), step)
                for writer, value in zip(per_seed, seeds):
                    writer.add_scalar(self.tags[name], float(value), step)
            mean.add_scalar("train/omega", float(self.omegas[point]), step)
            mean.add_scalar("federation/bytes", float(self.bytes_per_round * (step // self.sync_every)), step)
            if not math.isnan(wall_s):
                mean.add_scalar("time/wall_s", float(wall_s), step)
        for mean, per_seed in self.writers:
            for writer in (mean, *per_seed):
                writer.flush()  # before the block's checkpoint

    def close(self) -> None:
        self._close()


def _close_all(writers) -> None:
    for writer in writers:
        writer.close()


def open_board(plan, start_block: int, grid_label) -> Board | NoBoard:
    """The board of `loop.run`'s plan, continuing after `start_block` checkpointed blocks; one
    that writes nothing without a run directory, with `tensorboard=False`, or on a process other than
    the writer. `grid_label(point, grid)` names a grid point's directory."""
    if plan.out_dir is None or not plan.config.tensorboard:
        return NoBoard()  # without asking the plan for its trainer
    seeds = [plan.seed + plan.first_seed + i for i in range(plan.num_seeds)]
    return board_for(plan.config, plan.out_dir, seeds, start_block, plan.trainer.agent.loss_names,
                     plan.communication, plan.points, plan.grid, grid_label)


def board_for(config, out_dir: str | None, seeds: list[int], start_block: int, loss_names, comm: dict,
              points: list | None = None, grid: dict | None = None, grid_label=None) -> Board | NoBoard:
    """`open_board` from its parts, for a run that has no plan (a federation of processes,
    `fedjax_rl.flower`): the run's `config` and directory, its seeds, the blocks already written,
    its agent's loss names and its communication (`program.communication`)."""
    from fedjax_rl.training import distributed

    if (out_dir is None or not config.tensorboard or not distributed.is_writer()
            or start_block >= config.num_evals):  # nothing left to write
        return NoBoard()
    run_dirs = [out_dir] if points is None else [os.path.join(out_dir, grid_label(point, grid)) for point in points]
    block_steps = config.sync_every * config.eval_every_rounds
    return Board(run_dirs, points is not None, seeds, start_block * block_steps + 1, loss_names,
                 [float(getattr(p.agent, "omega", 0.0)) for p in (points or [config])],
                 comm["bytes_up_per_round"] + comm["bytes_down_per_round"], config.sync_every)
