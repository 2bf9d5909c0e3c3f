"""The host loop: run a compiled federated training block by block over vmapped seeds, with a
progress bar, a checkpoint after every block, and outputs written to a run directory.

`run` is the one door to a training run: the command line calls it, the Python API is it, and a
resumed run re-enters it, so all three execute the same compiled `init`, `run_block` and
`finalize` programs and give bit-identical metrics for one seed on one machine
(tests/test_reproducibility.py). `jax.jit(jax.vmap(make_train(config)))(keys)` runs the same
computation as one fused program: XLA then fuses and rounds a few operations differently (1-2 float32
ulps after one update, measured), which a chaotic task amplifies over a run. Use it to compose
(vmap over hyperparameters, embed in a larger program), not to reproduce a CLI run to the last bit.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_rl import checkpoint, distributed, federated
from fedjax_rl.train import TrainConfig, make_trainer, seed_keys

CHECKPOINT = "checkpoint.npz"
# Written last, holding the run's config: its outputs are complete, and a rerun reads them instead
# of evaluating again (an Ant program's final sweep is over an hour on a 2-core CPU).
FINISHED = "finished.json"


class LayoutMismatch(ValueError):
    """A checkpoint written on one process layout was asked to resume on another."""


class NonFiniteError(FloatingPointError):
    """A loss or a parameter of some agent became NaN or infinite; the run stopped."""


def config_to_dict(config) -> dict:
    return dataclasses.asdict(config)


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
        where = f" at grid point {point} ({grid[point].agent.hparams()})"
    what = getattr(trainer.agent, "loss_descriptions", {}).get(name, name)
    if name == "parameters":
        what = "shared parameters (checked at the end of each round)"
    others = "" if len(problems) == 1 else f" ({len(problems) - 1} more: {sorted(set(p[3] for p in problems))})"
    raise NonFiniteError(
        f"non-finite {what} in seed index {s} (of the seeds vmapped from seed={seed}){where}, "
        f"agent {agent}, at environment step {step} (block {block}); stopped before checkpointing this block, "
        f"the blocks before it are saved{others}"
    )


def _to_lists(tree: Any) -> Any:
    return jax.tree.map(lambda x: np.asarray(x).tolist(), tree)


def grid_configs(config: TrainConfig, grid: dict[str, Sequence[float]]) -> list[TrainConfig]:
    """One validated config per point of the Cartesian grid over vmappable agent hyperparameters
    (e.g. {"omega": [0.01, 0.1], "learning_rate": [1e-3]}); raises before anything compiles."""
    leaves = set(config.agent.hparams().names())
    for name, values in grid.items():
        if name not in leaves:
            raise ValueError(f"grid setting {name!r} is not a vmappable hyperparameter of {config.algo}; "
                             f"allowed: {', '.join(sorted(leaves))}")
        if len(values) < 1:
            raise ValueError(f"grid setting {name!r} needs at least one value")
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    configs = [dataclasses.replace(config, agent=dataclasses.replace(config.agent, **p)) for p in points]
    for c in configs:
        c.validate()
    return configs


def grid_label(point: TrainConfig, grid: dict) -> str:
    """`omega=0.05,learning_rate=0.001`: the sub-directory name of one grid point."""
    return ",".join(f"{name}={getattr(point.agent, name):g}" for name in grid)


def recorded_config(config, num_seeds: int, seed: int, grid: dict[str, Sequence[float]] | None = None,
                    run_batch: int | None = None) -> tuple[dict, int | None]:
    """What a run directory's config.json records (a checkpoint resumes only into the same), and the
    run_batch that shapes the program: None when every run fits in one vmap."""
    config_dict = {**config_to_dict(config), "num_seeds": num_seeds, "seed": seed}
    num_runs = num_seeds
    if grid:
        config_dict["grid"] = {name: list(map(float, values)) for name, values in grid.items()}
        num_runs *= math.prod(len(values) for values in grid.values())
    if run_batch is not None and run_batch < num_runs:
        # Recorded only when it shapes the program: run directories written before this setting
        # existed (every run in one vmap) still resume.
        config_dict["run_batch"] = run_batch
    else:
        run_batch = None
    return config_dict, run_batch


# Settings added after run directories were first written, with the value that reproduces what a
# run recorded without them computed: such a run still resumes and still reads as finished.
_ADDED_SETTINGS = {federated.AGGREGATION.name: "mean", federated.TRIM.name: federated.TRIM.default}


def _read_recorded(path: str) -> dict:
    """A run directory's JSON record (config.json, finished.json), completed with `_ADDED_SETTINGS`."""
    with open(path) as f:
        recorded = json.load(f)
    if isinstance(recorded, dict) and "algo" in recorded:
        recorded = {**_ADDED_SETTINGS, **recorded}
    return recorded


def _holds(path: str, config_dict: dict) -> bool:
    """Whether the JSON file at `path` (config.json, finished.json) records exactly `config_dict`."""
    if not os.path.exists(path):
        return False
    return _read_recorded(path) == json.loads(json.dumps(config_dict))


def progress_on_disk(out_dir: str, config_dict: dict, num_blocks: int) -> dict:
    """How far `out_dir` holds the run recorded as `config_dict`, of `num_blocks` evaluation blocks,
    read without computing:
    {"state": "finished" | "partial" | "other settings" | "not started", "blocks_done", "wall_s"}
    ("other settings": the directory holds another configuration's run, which `run` sets aside)."""
    if _holds(os.path.join(out_dir, FINISHED), config_dict):
        return {"state": "finished", "blocks_done": num_blocks, "wall_s": None}
    if not os.path.exists(os.path.join(out_dir, "config.json")):
        return {"state": "not started", "blocks_done": 0, "wall_s": None}
    if not _holds(os.path.join(out_dir, "config.json"), config_dict):
        return {"state": "other settings", "blocks_done": 0, "wall_s": None}
    if not os.path.exists(os.path.join(out_dir, CHECKPOINT)):
        return {"state": "not started", "blocks_done": 0, "wall_s": None}
    with np.load(os.path.join(out_dir, CHECKPOINT)) as data:  # reads only these members
        wall = float(data["extra:wall_s"]) if "extra:wall_s" in data.files else None
        return {"state": "partial", "blocks_done": int(data["extra:blocks_done"]), "wall_s": wall}


def run(
    config,
    num_seeds: int = 1,
    seed: int = 0,
    out_dir: str | None = None,
    progress: bool = True,
    grid: dict[str, Sequence[float]] | None = None,
    on_block: Callable[[int, int], None] | None = None,
    run_batch: int | None = None,
) -> dict:
    """Train `num_seeds` vmapped seeds; returns numpy metrics {"curve": ..., "final": ...}.

    With `out_dir`, writes config.json, a checkpoint after every block (resumed from if present and
    written by the same config), metrics.json, metrics.csv and the final global parameters, then
    finished.json. A finished run of the same config is read back from those files, not recomputed
    (its `timing` then has `resumed_at_block` = every block).

    `grid` maps vmappable agent hyperparameters to values: every point of their Cartesian product
    trains in the same compiled program (a leading grid axis over the seed axis), from the same seeds
    (same initialisation, physics and exploration keys: only the hyperparameters differ). Metrics
    then carry a leading grid axis, `result["grid"]` lists the points' configs, and `out_dir` gets one
    ordinary run directory per point (`out_dir/omega=0.05/`) beside the shared checkpoint. A grid is a
    differently shaped program, so its numbers match separate runs only to float rounding.

    `run_batch`: vmap at most this many runs (grid points x seeds) at a time; the batches then run
    one after another inside the same compiled block (`lax.map`). None: all runs in one vmap. Smaller
    batches keep each batch's parameters and optimizer states in cache: on a 2-core CPU a 40-run
    FedRDQN grid trains 1.6-2x faster in batches of 10-20 (benchmarks/run_batch.py). The batch size
    shapes the program, so it is recorded in config.json and a run resumes only with the same one;
    its numbers differ from the all-at-once program by float rounding, like another CPU's.

    `on_block(blocks_done, num_blocks)`, if given, is called once before training (with the blocks a
    resumed checkpoint already holds) and after every block: a caller's own progress display
    (`fedjax_rl.reproduce` drives one bar over many runs).

    Multi-process (after `distributed.initialize`, every process making the same call): the agent
    axis spans every process's devices (`config.num_devices` = all of them); metrics and checkpoints
    are gathered onto every process and written by process 0 alone; every process reads `out_dir`
    to resume (a shared filesystem), and only on the process layout that wrote it (`LayoutMismatch`).
    """
    if num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {num_seeds}")
    check_run_batch(run_batch)
    started = time.perf_counter()
    trainer = make_trainer(config)  # validates before anything compiles
    comm = communication(trainer)
    progress = progress and distributed.is_writer()
    if progress:
        print(f"{comm['shared_params']:,} shared parameters per agent ({comm['model_bytes'] / 2**10:.1f} KiB); per round "
              f"{comm['participants_per_round']} of {config.num_agents} agents upload, all download: "
              f"{(comm['bytes_up_per_round'] + comm['bytes_down_per_round']) / 2**20:.3f} MiB, "
              f"{comm['bytes_total'] / 2**20:.1f} MiB over {comm['rounds']} rounds")
    init = jax.vmap(trainer.init)
    hparams = trainer.hparams
    points = None
    if grid:
        points = grid_configs(config, grid)
        hparams = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[p.agent.hparams() for p in points])
        init = jax.vmap(init, in_axes=None, axis_size=len(points))
    run_shape = (len(points), num_seeds) if points else (num_seeds,)
    config_dict, run_batch = recorded_config(config, num_seeds, seed, grid, run_batch)
    if out_dir is not None:
        finished = _load_finished(out_dir, config_dict, points, grid)
        if finished is not None:
            if on_block is not None:
                on_block(config.num_evals, config.num_evals)
            finished["timing"].update(wall_s_this_process=time.perf_counter() - started,
                                      resumed_at_block=config.num_evals)
            return {**finished, "communication": comm}
    run_block = over_runs(trainer.run_block, run_shape, run_batch)
    finalize = over_runs(trainer.finalize, run_shape, run_batch)
    # The block donates its input state: replay buffers (0.6 GiB for 25 Ant agents at 1e5) are not
    # held twice while a block runs.
    init, run_block, finalize = jax.jit(init), jax.jit(run_block, donate_argnums=0), jax.jit(finalize)

    if out_dir is not None:
        _check_resume_layout(out_dir, config_dict)  # before anything compiles
    state = init(seed_keys(seed, num_seeds))
    curve: list[dict] = []
    start_block = 0
    wall_before = 0.0  # seconds earlier processes spent on this run (NaN: a checkpoint that did not record it)
    ckpt_path = None
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        ckpt_path = os.path.join(out_dir, CHECKPOINT)
        config_path = os.path.join(out_dir, "config.json")
        if os.path.exists(ckpt_path) and os.path.exists(config_path):
            previous = _read_recorded(config_path)
            if previous == json.loads(json.dumps(config_dict)):
                try:
                    restored, extra = checkpoint.load(ckpt_path, state)
                    state = distributed.put_like(restored, state)
                    start_block = int(extra["blocks_done"])
                    curve = json.loads(str(extra["curve"]))
                    wall_before = float(extra["wall_s"]) if "wall_s" in extra else math.nan
                except checkpoint.CheckpointMismatch as error:
                    # Same configuration, different state layout: written by another version of
                    # this library. Keep the file, start afresh.
                    kept = ckpt_path.replace(".npz", ".incompatible.npz")
                    os.replace(ckpt_path, kept)
                    warnings.warn(f"{error}; it was written by another version of fedjax_rl. Kept as {kept}, "
                                  "starting this run from block 0.", stacklevel=2)
            elif distributed.is_writer():
                # Another configuration's run (other settings, seeds or run_batch): set it aside, with
                # the config that explains it, rather than overwrite it at the end of the first block.
                changed = sorted(k for k in {**previous, **config_dict}
                                 if previous.get(k) != json.loads(json.dumps(config_dict.get(k))))
                kept = ckpt_path.replace(".npz", ".other_config.npz")
                os.replace(ckpt_path, kept)
                os.replace(config_path, config_path.replace(".json", ".other_config.json"))
                warnings.warn(f"{out_dir} holds a checkpoint of another configuration (differs in {changed}); "
                              f"kept as {kept} with its config, starting this run from block 0.", stacklevel=2)
        if jax.process_count() > 1:
            # Every process must resume from the same block: they all read out_dir (a shared
            # filesystem), only process 0 writes it.
            from jax.experimental import multihost_utils

            multihost_utils.assert_equal(start_block, "processes found different checkpoints in out_dir "
                                                      "(multi-process runs need out_dir on a shared filesystem)")
        if distributed.is_writer():
            if os.path.exists(os.path.join(out_dir, FINISHED)):
                os.remove(os.path.join(out_dir, FINISHED))  # another configuration's outputs, about to be replaced
            with open(config_path, "w") as f:
                json.dump(config_dict, f, indent=2)

    blocks = range(start_block, config.num_evals)
    if on_block is not None:
        on_block(start_block, config.num_evals)
    if progress:
        from tqdm.auto import tqdm

        blocks = tqdm(blocks, initial=start_block, total=config.num_evals, desc=f"{config.algo} {config.env_name}",
                      unit="block")
    for block in blocks:
        state, metrics = run_block(state, hparams, block)
        metrics = distributed.to_host(metrics)
        check_finite(metrics, trainer, seed, block, grid=points)
        curve.append(_to_lists(metrics))
        if progress:
            blocks.set_postfix(nominal_return=f"{np.mean(metrics['nominal_return']):.1f}")
        if ckpt_path is not None:
            host_state = distributed.to_host(state)  # a collective: every process takes part
            if distributed.is_writer():
                checkpoint.save(ckpt_path, host_state, blocks_done=block + 1, curve=json.dumps(curve),
                                layout=json.dumps(distributed.layout()),
                                wall_s=wall_before + time.perf_counter() - started)
        if on_block is not None:
            on_block(block + 1, config.num_evals)

    final = distributed.to_host(finalize(state, hparams))
    # Per-block lists of [seeds] -> arrays [seeds, blocks], the layout `train(key)` returns.
    batch_ndim = np.ndim(curve[0]["env_steps"])  # [seeds] or [grid, seeds]: the block axis goes after them
    stacked = {k: np.stack([np.asarray(c[k]) for c in curve], axis=batch_ndim) for k in curve[0]}
    this_process = time.perf_counter() - started
    total = wall_before + this_process
    result = {"curve": stacked, "final": final, "communication": comm, "run_batch": run_batch,
              # Wall time (compilation included) over every process that worked on this run; None when
              # a resumed checkpoint predates this record.
              "timing": {"wall_s": None if math.isnan(total) else total, "wall_s_this_process": this_process,
                         "resumed_at_block": start_block}}
    shared = distributed.to_host(state.agents.learner.shared) if out_dir is not None else None
    if points is None:
        if out_dir is not None and distributed.is_writer():
            _write_outputs(out_dir, result, shared)
            _mark_finished(out_dir, config_dict)
        return result
    result["grid"] = points
    if out_dir is not None and distributed.is_writer():
        for i, point in enumerate(points):
            point_dir = os.path.join(out_dir, grid_label(point, grid))
            os.makedirs(point_dir, exist_ok=True)
            with open(os.path.join(point_dir, "config.json"), "w") as f:
                json.dump({**config_to_dict(point), "num_seeds": num_seeds, "seed": seed}, f, indent=2)
            one = jax.tree.map(lambda x, i=i: x[i], {"curve": result["curve"], "final": result["final"]})
            one.update(communication=comm, timing=result["timing"], run_batch=run_batch)
            _write_outputs(point_dir, one, jax.tree.map(lambda x, i=i: x[i], shared))
        _mark_finished(out_dir, config_dict)
    return result


def _mark_finished(out_dir: str, config_dict: dict) -> None:
    tmp = os.path.join(out_dir, FINISHED + ".tmp")
    with open(tmp, "w") as f:
        json.dump(config_dict, f, indent=2)
    os.replace(tmp, os.path.join(out_dir, FINISHED))


def _load_finished(out_dir: str, config_dict: dict, points: list | None, grid: dict | None) -> dict | None:
    """The result a finished run of exactly this configuration wrote to `out_dir` (its metrics
    files, one per grid point, stacked into `run`'s layout), or None if there is none."""
    if not _holds(os.path.join(out_dir, FINISHED), config_dict):
        return None
    dirs = [out_dir] if points is None else [os.path.join(out_dir, grid_label(p, grid)) for p in points]
    if not all(os.path.exists(os.path.join(d, "metrics.json")) for d in dirs):
        return None  # outputs removed since: evaluate again from the checkpoint
    runs = []
    for directory in dirs:
        with open(os.path.join(directory, "metrics.json")) as f:
            runs.append(json.load(f))
    stack = (lambda *xs: np.asarray(xs[0])) if points is None else (lambda *xs: np.stack([np.asarray(x) for x in xs]))
    result = {part: {name: stack(*(run[part][name] for run in runs)) for name in runs[0][part]}
              for part in ("curve", "final")}
    result.update(run_batch=runs[0]["run_batch"], timing=dict(runs[0]["timing"]))
    if points is not None:
        result["grid"] = points
    return result


def check_run_batch(run_batch: int | None) -> None:
    if run_batch is not None and (isinstance(run_batch, bool) or not isinstance(run_batch, int) or run_batch < 1):
        raise ValueError(f"run_batch must be an integer >= 1 (runs vmapped at a time) or None (all at once), "
                         f"got {run_batch!r}")


def parse_run_batch(text: str) -> int | None:
    """The command line's spelling: 'all' (None) or a positive integer."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--run-batch must be 'all' or an integer >= 1 (runs vmapped at a time), got {text!r}") from None
    check_run_batch(value)
    return value


def over_runs(fn: Callable, run_shape: tuple[int, ...], run_batch: int | None) -> Callable:
    """`fn(state, hparams, *static)` of one run, mapped over runs laid out as `run_shape`: [seeds], with
    `hparams` shared, or [grid points, seeds], with `hparams` carrying the grid axis.
    `*static` (a block index) is never batched, so the schedules derived from it stay real branches.

    The runs are flattened to one axis (a vmap of vmaps would add a batch dimension to every array of
    the physics, see `evaluate.returns_over_params`). run_batch None vmaps them all at once; otherwise
    `lax.map` vmaps `run_batch` of them at a time (a smaller last batch if they do not divide). The
    state keeps its layout."""
    num_runs, num_seeds, grid_hparams = math.prod(run_shape), run_shape[-1], len(run_shape) == 2

    def mapped(state, hparams, *static):
        flat = jax.tree.map(lambda x: x.reshape((num_runs, *x.shape[len(run_shape):])), state)
        if grid_hparams:  # [points] -> [points * seeds], the flattened order of the state
            per_run = jax.tree.map(lambda x: jnp.repeat(x, num_seeds, axis=0), hparams)
            one_run, runs = (lambda xs: fn(xs[0], xs[1], *static)), (flat, per_run)
        else:
            one_run, runs = (lambda s: fn(s, hparams, *static)), flat
        out = jax.vmap(one_run)(runs) if run_batch is None else jax.lax.map(one_run, runs, batch_size=run_batch)
        return jax.tree.map(lambda x: x.reshape((*run_shape, *x.shape[1:])), out)

    return mapped


def _check_resume_layout(out_dir: str, config_dict: dict) -> None:
    """Raise `LayoutMismatch` if `out_dir` holds a checkpoint of this configuration written on
    another process layout."""
    ckpt_path, config_path = os.path.join(out_dir, CHECKPOINT), os.path.join(out_dir, "config.json")
    if not (os.path.exists(ckpt_path) and _holds(config_path, config_dict)):
        return  # nothing to resume, or another configuration: the run starts afresh anyway
    with np.load(ckpt_path) as data:
        extra = {"layout": data["extra:layout"]} if "extra:layout" in data.files else {}
    _check_layout(ckpt_path, extra)


def _check_layout(path: str, extra: dict) -> None:
    """A run resumes on the process layout that wrote its checkpoint (files written before layouts
    were recorded came from one process)."""
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


def communication(trainer) -> dict:
    """What crosses the network in this run (`federated.communication`), from the shapes of one
    agent's shared leaves (nothing is computed)."""
    config = trainer.config
    shapes = jax.eval_shape(trainer.init, jax.random.key(0)).agents.learner.shared
    one_agent = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), shapes)
    return federated.communication(one_agent, config.num_agents, config.participation, config.num_rounds)


def _write_outputs(out_dir: str, result: dict, shared) -> None:
    with open(os.path.join(out_dir, "metrics.json"), "w") as f:
        json.dump(_to_lists(result), f)
    curve = result["curve"]
    keys = [k for k in sorted(curve) if curve[k].ndim == 2]  # [seeds, blocks]; per-round records stay in the JSON
    with open(os.path.join(out_dir, "metrics.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", *keys])
        num_seeds, num_blocks = curve[keys[0]].shape
        for s in range(num_seeds):
            for b in range(num_blocks):
                writer.writerow([s, *(curve[k][s, b] for k in keys)])
    with open(os.path.join(out_dir, "final.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        final = result["final"]
        writer.writerow(["seed", "local_average", "local_minimum", *[f"sweep_{c:.1f}" for c in final["sweep_scales"][0]]])
        for s in range(len(final["local_average"])):
            writer.writerow([s, final["local_average"][s], final["local_minimum"][s], *final["sweep_returns"][s]])
    # The global model: agent 0's shared leaves (identical on every agent after the last sync).
    global_params = jax.tree.map(lambda leaf: leaf[:, 0], shared)
    checkpoint.save(os.path.join(out_dir, "global_params.npz"), global_params)
