"""The host loop: run a compiled federated training block by block over vmapped seeds, with a
progress bar, a checkpoint after every block, and outputs written to a run directory.

`run` is a sequence of named parts: `plan_run` (validate, settle the run directory), the finished
run read back if there is one, `_check_before_compiling` (memory, traffic, process layout),
`compile_programs`, `_start` (a fresh state or the checkpoint's), `_run_blocks` (the block loop:
train, `check_finite`, checkpoint, report), `_evaluate` (the final evaluation) and `_finish` (the
result and its files). The parts it calls live in their rooms: a grid's points and the run batch are
settings (`configs.grid_configs`, `configs.check_run_batch`), how runs are mapped and what crosses
the network belong to the program (`program.over_runs`, `program.communication`), and what the
machine can hold to `machine` (`check_memory`, `check_warp_worlds`). What the run directory holds, how a finished run is read back, how another
configuration's run is set aside and what counts as damaged is `fedjax_rl.training.run_directory`.

`run` is the one door to a training run: the command line calls it, the Python API is it, and a
resumed run re-enters it, so all three execute the same compiled `init`, `run_block` and
`finalize` programs and give bit-identical metrics for one seed on one machine
(tests/test_reproducibility.py). `jax.jit(jax.vmap(make_train(config)))(keys)` runs the same
computation as one fused program: XLA then fuses and rounds a few operations differently (1-2 float32
ulps after one update, measured), which a chaotic task amplifies over a run. Use it to compose
(vmap over hyperparameters, embed in a larger program), not to reproduce a CLI run to the last bit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_rl.agents.base import first_training_step
from fedjax_rl.training import distributed, machine, records, run_directory, tensorboard_log
from fedjax_rl.training.configs import check_run_batch, grid_configs
from fedjax_rl.training.machine import NotEnoughMemory, check_memory  # noqa: F401 (part of `run`'s interface)
# Part of `run`'s interface: the errors `run` raises on a directory, the files it writes and how far
# a run on disk got.
from fedjax_rl.training.run_directory import (  # noqa: F401
    CHECKPOINT, FINISHED, METRICS, SET_ASIDE, LayoutMismatch, OutDirError, RunExists)
from fedjax_rl.training.program import communication, make_trainer, over_runs, seed_keys, strongly_typed


class NonFiniteError(FloatingPointError):
    """A loss or a parameter of some agent became NaN or infinite; the run stopped. `description`:
    what and where, without what was done about it."""

    def __init__(self, message: str = "", description: str = ""):
        super().__init__(message)
        self.description = description or message


class NonFiniteWarning(UserWarning):
    """A run with on_nonfinite='record' met a non-finite loss or parameter and trained on."""


NONFINITE_POLICIES = ("stop", "record")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped the run; the message says how far it got and how to resume."""



def run(
    config,
    num_seeds: int = 1,
    seed: int = 0,
    out_dir: str | None = None,
    progress: bool = True,
    grid: dict[str, Sequence[float]] | None = None,
    on_block: Callable[[int, int], None] | None = None,
    run_batch: int | None = None,
    new_run: bool = False,
    first_seed: int = 0,
    on_nonfinite: str = "stop",
) -> dict:
    """Train `num_seeds` vmapped seeds; returns numpy metrics {"curve": ..., "final": ...}.
    `first_seed`: train seed indices first_seed, ..., first_seed + num_seeds - 1 of `seed`'s sequence
    (`program.seed_keys`), exactly those seeds of a wider run: a piece of a reproduction program.

    With `out_dir`, writes config.json, a checkpoint after every block (resumed from if present and
    written by the same config), metrics.json, metrics.csv and the final global parameters, then
    finished.json. A finished run of the same config is read back from those files, not recomputed
    (its `timing` then has `resumed_at_block` = every block). A directory holding a run of another
    config raises `RunExists` (before anything compiles) unless `new_run`, which moves that run to
    `out_dir/set_aside/<n>/`; a set-aside run of this config is moved back and resumed. A run that
    stops on non-finite values writes the evaluations it made to metrics.json, marked "stopped".
    `on_nonfinite`: "stop" (the default) stops the run at the first block with a non-finite loss or
    parameter; "record" warns, names it, and trains on to the final evaluation, which then measures
    whatever global policy is left. That is for measuring a federation that can break (the attacks
    table: one party scaling its upload makes the mean diverge); the blocks' `nonfinite_step/*` records
    keep which runs went non-finite, and metrics.json says `"on_nonfinite": "record"`.

    `grid` maps vmappable agent hyperparameters to values: every point of their Cartesian product
    trains in the same compiled program (a leading grid axis over the seed axis), from the same seeds
    (same initialisation, physics and exploration keys: only the hyperparameters differ). Metrics
    then carry a leading grid axis, `result["grid"]` lists the points' configs, and `out_dir` gets one
    ordinary run directory per point (`out_dir/omega=0.05/`) beside the shared checkpoint. A grid is a
    differently shaped program, so its numbers match separate runs only to float rounding.

    `run_batch`: vmap at most this many runs (grid points x seeds) at a time; the batches then run
    one after another inside the same compiled block (`lax.map`). None: all runs in one vmap. Smaller
    batches keep each batch's parameters and optimizer states in cache: on a 2-core CPU a 40-run
    FedRDQN grid trains 1.6-2x faster in batches of 10-20 (benchmarks/throughput/run_batch.py). The batch size
    shapes the program, so it is recorded in config.json and a run resumes only with the same one;
    its numbers differ from the all-at-once program by float rounding, like another CPU's.

    `progress`: a progress bar and status lines (compiling, resuming, the final evaluation).
    `on_block(blocks_done, num_blocks)`, if given, is called once before training (with the blocks a
    resumed checkpoint already holds) and after every block: a caller's own progress display
    (`fedjax_rl.reproduce.harness` drives one bar over many runs).

    Before compiling, the run is refused (`NotEnoughMemory`) if its training state cannot fit in the
    memory available (`check_memory`), and warned about if no agent would ever take a gradient step.
    Ctrl-C raises `Interrupted`, saying how many blocks are saved.

    Multi-process (after `distributed.initialize`, every process making the same call): the agent
    axis spans every process's devices (`config.num_devices` = all of them); metrics and checkpoints
    are gathered onto every process and written by process 0 alone; every process reads `out_dir`
    to resume (a shared filesystem), and only on the process layout that wrote it (`LayoutMismatch`).
    """
    plan = plan_run(config, num_seeds, seed, out_dir, progress, grid, run_batch, new_run, first_seed,
                    on_nonfinite)
    finished = _read_finished(plan, on_block)
    if finished is not None:
        return finished
    _check_before_compiling(plan)
    programs = compile_programs(plan)
    done = _Progress()
    try:
        state, programs = _start(plan, programs, done)
        state = _run_blocks(plan, programs, state, done, on_block)
        final = _evaluate(plan, programs, state)
    except KeyboardInterrupt as error:
        if isinstance(error, Interrupted):
            raise
        raise Interrupted(plan.directory.interrupted(done.blocks, plan.config.num_evals)) from None
    return _finish(plan, state, done, final)


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What `run` settled before compiling: the validated trainer, the grid's points, what
    config.json records, the run directory (prepared), and how to report."""

    config: Any
    trainer: Any
    num_seeds: int
    seed: int
    first_seed: int
    out_dir: str | None
    directory: run_directory.RunDirectory | run_directory.NoRunDirectory
    grid: dict | None
    points: list | None
    config_dict: dict
    run_batch: int | None
    progress: bool
    started: float
    communication: dict
    on_nonfinite: str = "stop"

    @property
    def num_runs(self) -> int:
        return self.num_seeds * (len(self.points) if self.points else 1)

    @property
    def run_shape(self) -> tuple[int, ...]:
        return (len(self.points), self.num_seeds) if self.points else (self.num_seeds,)

    @property
    def cpu_dots(self) -> str | None:
        """The matrix-product library of this run's programs on a CPU (None on other backends)."""
        return machine.dots_in_effect(self.config.dots)

    def say(self, text: str) -> None:
        if self.progress:
            print(text, flush=True)


class _WithHparams(NamedTuple):
    """A jitted part of the loop, `fn(state, hparams, *rest)`, called with the run's hyperparameters
    bound: they stay an argument of the program (a grid's points share one compile), and no caller
    handles them."""

    fn: Any
    hparams: Any  # settings.Hyperparams: the config's, or [grid points] stacked

    def __call__(self, state, *rest):
        return self.fn(state, self.hparams, *rest)

    def compiled_for(self, state, *rest) -> "_WithHparams":
        """The same part compiled ahead of time for these arguments' shapes."""
        return self._replace(fn=self.fn.lower(state, self.hparams, *rest).compile())


class Programs(NamedTuple):
    """The run's compiled entry points, over every run (seeds, grid points)."""

    init: Any  # seed keys -> state
    run_block: _WithHparams  # (state, block) -> (state, block metrics); donates its state
    finalize: _WithHparams  # state -> final metrics


@dataclasses.dataclass
class _Progress:
    """How far the run got: blocks done (checkpointed or not), their curve records, and the wall
    time earlier processes spent on it (NaN: a checkpoint that did not record it)."""

    blocks: int = 0
    start_block: int = 0
    curve: list = dataclasses.field(default_factory=list)
    wall_before: float = 0.0


def plan_run(config, num_seeds: int = 1, seed: int = 0, out_dir: str | None = None, progress: bool = True,
             grid: dict | None = None, run_batch: int | None = None, new_run: bool = False,
             first_seed: int = 0, on_nonfinite: str = "stop") -> RunPlan:
    """Validate everything (once, before anything compiles) and make `out_dir` hold this run's
    configuration or nothing (`RunExists`, `OutDirError`; `new_run` sets another run aside)."""
    if on_nonfinite not in NONFINITE_POLICIES:
        raise ValueError(f"on_nonfinite must be one of {list(NONFINITE_POLICIES)}, got {on_nonfinite!r}")
    if num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {num_seeds}")
    if first_seed < 0:
        raise ValueError(f"first_seed must be >= 0, got {first_seed}")
    check_run_batch(run_batch)
    started = time.perf_counter()
    trainer = make_trainer(config)  # validates before anything compiles
    points = grid_configs(config, grid) if grid else None
    config_dict, run_batch = records.recorded_config(config, num_seeds, seed, grid, run_batch, first_seed)
    directory = run_directory.for_run(out_dir, config_dict, points, grid, num_seeds, seed, first_seed)
    directory.prepare(new_run)
    return RunPlan(config=config, trainer=trainer, num_seeds=num_seeds, seed=seed, first_seed=first_seed,
                   out_dir=out_dir, directory=directory, grid=grid, points=points, config_dict=config_dict,
                   run_batch=run_batch, progress=progress and distributed.is_writer(),
                   started=started, communication=communication(trainer), on_nonfinite=on_nonfinite)


def _read_finished(plan: RunPlan, on_block) -> dict | None:
    """The result of a finished run of this configuration in `out_dir`, read back (None: none)."""
    finished = plan.directory.read_finished()
    if finished is None:
        return None
    num_blocks = plan.config.num_evals
    plan.say(f"{plan.out_dir} holds this finished run: its results are read back, nothing is computed again")
    if on_block is not None:
        on_block(num_blocks, num_blocks)
    finished["timing"].update(wall_s_this_process=time.perf_counter() - plan.started, resumed_at_block=num_blocks)
    return {**finished, "communication": plan.communication}


def _check_before_compiling(plan: RunPlan) -> None:
    """Refuse a run whose state cannot fit, warn about one that never trains, report the traffic."""
    check_memory(plan.trainer, plan.num_runs, checkpoints=plan.directory.saves)
    machine.check_warp_worlds(plan.config, plan.run_batch or plan.num_runs)  # runs in one program
    _warn_if_never_trains(plan.config)
    comm = plan.communication
    plan.say(f"{comm['shared_params']:,} shared parameters per agent ({comm['model_bytes'] / 2**10:.1f} KiB); per "
             f"round {comm['participants_per_round']} of {plan.config.num_agents} agents upload, all download: "
             f"{(comm['bytes_up_per_round'] + comm['bytes_down_per_round']) / 2**20:.3f} MiB, "
             f"{comm['bytes_total'] / 2**20:.1f} MiB over {comm['rounds']} rounds")
    plan.directory.check_layout()



def compile_programs(plan: RunPlan) -> Programs:
    """The trainer's parts mapped over the runs and jitted, with the hyperparameters they take bound
    to them: made here, once, from the config (or the grid's points, stacked), where the programs
    are made."""
    trainer, points = plan.trainer, plan.points
    jit = functools.partial(jax.jit, compiler_options=plan.config.compiler_options)
    if not points:
        hparams, init = plan.config.agent.hparams(), jit(jax.vmap(trainer.init))
    else:
        hparams = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[p.agent.hparams() for p in points])
        if "max_rate" in plan.grid:
            # Each point draws its agents' physics at its own p, an argument of the program like the
            # hyperparameters; every later part sees p only through the env params in the state.
            over_points = jit(jax.vmap(jax.vmap(trainer.init, in_axes=(0, None)), in_axes=(None, 0)))
            max_rates = jnp.asarray([p.max_rate for p in points], jnp.float32)
            init = lambda keys: over_points(keys, max_rates)  # noqa: E731
        else:  # every point starts from the same state
            init = jit(jax.vmap(jax.vmap(trainer.init), in_axes=None, axis_size=len(points)))
    run_block = over_runs(trainer.run_block, plan.run_shape, plan.run_batch)
    finalize = over_runs(trainer.finalize, plan.run_shape, plan.run_batch)
    # The block donates its input state: replay buffers (0.6 GiB for 25 Ant agents at 1e5) are not
    # held twice while a block runs.
    return Programs(init=init, run_block=_WithHparams(jit(run_block, donate_argnums=0), hparams),
                    finalize=_WithHparams(jit(finalize), hparams))


def _start(plan: RunPlan, programs: Programs, done: _Progress) -> tuple[Any, Programs]:
    """The state to train from (this configuration's checkpoint in `out_dir`, else a fresh one), and
    the programs with the block compiled for it."""
    plan.say("compiling the training program (can take minutes; the progress bar and its ETA start once it is done)")
    compile_started = time.perf_counter()
    # Strongly typed, as its checkpoint restores it: a resumed run's block is the fresh run's program.
    state = strongly_typed(programs.init(seed_keys(plan.seed, plan.num_seeds, plan.first_seed)))
    state, done.start_block, done.curve, done.wall_before = plan.directory.open(state)
    done.blocks = done.start_block
    if done.start_block:
        plan.say(f"resuming from block {done.start_block} of {plan.config.num_evals} ({plan.directory.checkpoint_path})")
    if done.start_block < plan.config.num_evals:
        programs = programs._replace(run_block=programs.run_block.compiled_for(state, done.start_block))
    plan.say(f"compiled in {time.perf_counter() - compile_started:.0f} s")
    return state, programs


def _run_blocks(plan: RunPlan, programs: Programs, state, done: _Progress, on_block):
    """Every remaining block: train, stop on non-finite values, checkpoint, report progress."""
    config, num_blocks = plan.config, plan.config.num_evals
    if on_block is not None:
        on_block(done.start_block, num_blocks)
    blocks = range(done.start_block, num_blocks)
    if plan.progress:
        from tqdm.auto import tqdm

        blocks = tqdm(blocks, initial=done.start_block, total=num_blocks, unit="block",
                      desc=f"training {config.algo} on {config.env_name}")
    # nothing without out_dir
    board = tensorboard_log.open_board(plan, done.start_block, run_directory.RunDirectory.grid_point_name)
    for block in blocks:
        state, metrics = programs.run_block(state, block)
        metrics = distributed.to_host(metrics)
        try:
            check_finite(metrics, plan.trainer, plan.seed, block, grid=plan.points)
        except NonFiniteError as error:
            if plan.on_nonfinite == "stop":
                raise _stopped(error, plan, done.curve, block, num_blocks) from None
            warnings.warn(f"{error.description}; recorded, and training goes on (on_nonfinite='record')",
                          NonFiniteWarning, stacklevel=2)
        done.curve.append(records.to_lists(metrics))
        board.write(done.curve[-1], wall_s=done.wall_before + time.perf_counter() - plan.started)  # then checkpoint
        if plan.progress:
            blocks.set_postfix(nominal_return=f"{np.mean(metrics['nominal_return']):.1f}")
        plan.directory.save_block(state, block + 1, done.curve,
                                  wall_s=done.wall_before + time.perf_counter() - plan.started)
        done.blocks = block + 1
        if on_block is not None:
            on_block(block + 1, num_blocks)
    board.close()
    if plan.progress:
        blocks.close()
    return state


def _evaluate(plan: RunPlan, programs: Programs, state) -> dict:
    """The final evaluation (every agent's environment, the robustness sweep), on the host."""
    config = plan.config
    evaluation_started = time.perf_counter()
    plan.say(f"final evaluation: the global policy in each of the {config.num_agents} agents' environments and at "
             f"{config.sweep_points} robustness-sweep points, {config.eval_episodes} episode(s) each, for "
             f"{plan.num_runs} run(s) (compiling and running; this can take minutes)")
    final = distributed.to_host(programs.finalize(state))
    plan.say(f"final evaluation done in {time.perf_counter() - evaluation_started:.0f} s")
    return final


def _finish(plan: RunPlan, state, done: _Progress, final: dict) -> dict:
    """The result, and with `out_dir` its files (metrics, CSVs, global parameters), then finished.json."""
    this_process = time.perf_counter() - plan.started
    total = done.wall_before + this_process
    # Wall time (compilation included) over every process that worked on this run; None when a
    # resumed checkpoint did not record it.
    timing = {"wall_s": None if math.isnan(total) else total, "wall_s_this_process": this_process,
              "resumed_at_block": done.start_block}
    result = _result(plan, done.curve, final, cpu_dots=plan.cpu_dots, machine=machine.describe(), timing=timing)
    if plan.points is not None:
        result["grid"] = plan.points
    plan.directory.finish(result, state)
    return result


def _result(plan: RunPlan, curve: list[dict], final: dict, **extra) -> dict:
    """What a run returns and its metrics.json holds, finished or stopped: the curve, the final
    evaluation, the traffic, how runs were batched and the seed indices, then `extra`."""
    marked = {"on_nonfinite": plan.on_nonfinite} if plan.on_nonfinite != "stop" else {}
    return {"curve": _stack(curve), "final": final, "communication": plan.communication, "run_batch": plan.run_batch,
            "seed_indices": list(range(plan.first_seed, plan.first_seed + plan.num_seeds)), **marked, **extra}


def _stack(curve: list[dict]) -> dict:
    """Per-block lists of [seeds] (or [grid, seeds]) -> arrays [seeds, blocks], the layout `train(key)`
    returns: the block axis goes after the run axes. No blocks: {}."""
    if not curve:
        return {}
    batch_ndim = np.ndim(curve[0]["env_steps"])
    return {k: np.stack([np.asarray(c[k]) for c in curve], axis=batch_ndim) for k in curve[0]}


def _stopped(error: NonFiniteError, plan: RunPlan, curve, block, num_blocks) -> NonFiniteError:
    """A non-finite stop: metrics.json (and metrics.csv) with the evaluations made so far, marked
    "stopped" with the reason, so that `compare` and `plot` show the run as stopped; the error,
    saying where they are."""
    stopped = {"reason": str(error), "blocks_done": block, "num_blocks": num_blocks}
    result = _result(plan, curve, {}, stopped=stopped)
    return NonFiniteError(f"{error}{plan.directory.write_stopped(result, block)}")


def _warn_if_never_trains(config) -> None:
    """A run whose agents never reach a training phase only evaluates its initial policy: legitimate
    for a smoke test or a throughput measurement, a surprise otherwise, so warned about, not refused."""
    agent = config.agent
    if not hasattr(agent, "learning_starts"):  # an agent that trains from its first step
        return
    first, freq = first_training_step(agent), agent.train_freq
    if first > config.steps_per_agent:
        warnings.warn(
            f"no agent will take a gradient step: the first training phase would be at environment step "
            f"{first:,} (learning_starts {agent.learning_starts:,}, train_freq {freq}), after the run's "
            f"{config.steps_per_agent:,} steps per agent, so this run only evaluates its initial, random policy. "
            f"Lower learning_starts or train_freq (--set NAME=N) or raise steps_per_agent (--steps) to train.",
            UserWarning, stacklevel=3)


def check_finite(metrics: dict, trainer, seed: int, block: int, grid: list | None = None) -> None:
    """Raise `NonFiniteError` naming the quantity, the seed, the agent and the environment step if
    a block's metrics (seed-batched, grid-batched first when `grid` lists the points) report a
    non-finite loss or parameter."""
    problems = []
    for key, steps in metrics.items():
        if not key.startswith("nonfinite_step/"):
            continue
        name = key.split("/", 1)[1]
        agents_ = np.asarray(metrics[f"nonfinite_agent/{name}"]).reshape(-1)
        for s, step in enumerate(np.asarray(steps).reshape(-1)):
            if step > 0:
                problems.append((int(step), s, int(agents_[s]), name))
    if not problems:
        return
    step, s, agent, name = min(problems)
    where = ""
    if grid:  # flat index over [grid point, seed]
        num_seeds = np.shape(metrics["env_steps"])[-1]
        s, point = s % num_seeds, s // num_seeds
        where = f" at grid point {point} ({grid[point].agent.hparams()}, max_rate={grid[point].max_rate:g})"
    def describe(quantity):
        if quantity == "parameters":
            return "shared parameters"
        return getattr(trainer.agent, "loss_descriptions", {}).get(quantity, quantity)

    what = describe(name)
    if name == "parameters":
        what = "shared parameters (checked at the end of each round)"
    rest = sorted(problems)[1:]  # (seed, quantity) records after the one reported
    counts = {q: sum(p[3] == q for p in rest) for q in sorted({p[3] for p in rest})}
    others = "" if not rest else (f" ({len(rest)} more non-finite record(s) in this block: "
                                  + ", ".join(f"{describe(q)} in {n} run(s)" for q, n in counts.items()) + ")")
    description = (f"non-finite {what} in seed index {s} (of the seeds vmapped from seed={seed}){where}, "
                   f"agent {agent}, at environment step {step} (block {block})")
    raise NonFiniteError(f"{description}; stopped before checkpointing this block{others}", description=description)
