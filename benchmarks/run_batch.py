"""How many runs to vmap at a time: `loop.run(..., run_batch=N)` on a reproduce-sized grid.

A Table 1 row of `fedjax-rl reproduce` trains 5 omega points x 8 seeds = 40 runs (200 agents) in one
program. All 40 in one vmap make every parameter, gradient and Adam moment one array over 200 agents
(55 MB per 256 x 256 layer), which streams from memory at every op. `run_batch=N` vmaps N runs at a
time and runs the batches one after another (`lax.map`) inside the same compiled block.

This script times the compiled training block (`program.over_runs(trainer.run_block, ...)`, the
function `loop.run` jits) for each task's RL-Zoo3 DQN settings with training from the first
step (learning_starts 0), interleaving the batch sizes over repeats, and prints agent-steps/s and
the ratio to all-at-once. Compilation is excluded (one untimed call first).

    .venv/bin/python benchmarks/run_batch.py                      # the four Table 1 tasks
    .venv/bin/python benchmarks/run_batch.py --tasks Acrobot-v1 --batches all,10,20 --repeats 3

Writes (updates, task by task) benchmarks/results/run_batch.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, machine_line  # noqa: E402

from fedjax_rl.reproduce import plan  # noqa: E402
from fedjax_rl.training import configs, program

TASKS = {"CartPole-v1": "length", "Acrobot-v1": "gravity", "MountainCar-v0": "gravity", "LunarLander-v3": "gravity"}


def block_fn(env_name: str, param: str, rounds: int, num_seeds: int, omegas: list[float], run_batch):
    config = configs.train_config("fedrdqn", env_name, physics=(param,), steps_per_agent=100 * rounds,
                                  eval_every_rounds=rounds, agent_overrides=dict(learning_starts=0))
    trainer = program.make_trainer(config)
    points = configs.grid_configs(config, {"omega": omegas})
    hparams = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[p.agent.hparams() for p in points])
    init = jax.jit(jax.vmap(jax.vmap(trainer.init), in_axes=None, axis_size=len(points)))
    state = init(program.seed_keys(0, num_seeds))
    run_block = jax.jit(program.over_runs(trainer.run_block, (len(points), num_seeds), run_batch))
    return lambda: jax.block_until_ready(run_block(state, hparams, 1)), config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--batches", default="all,5,10,20", help="runs per vmap; 'all' = every run at once")
    parser.add_argument("--seeds", type=int, default=plan.DEFAULT_SEEDS + plan.DEFAULT_TUNING_SEEDS)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of E = 100 steps per timed call")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "run_batch.json"))
    args = parser.parse_args()
    batches = [None if b == "all" else int(b) for b in args.batches.split(",")]
    omegas = [0.0, *plan.DEFAULT_OMEGAS]
    num_runs = len(omegas) * args.seeds
    layout = f"{len(omegas)} omega points x {args.seeds} seeds = {num_runs} runs, K = 5"
    # Tasks measured by earlier invocations stay in the file (each with its own machine record).
    record = {"tasks": {}}
    if os.path.exists(args.out):
        with open(args.out) as f:
            record = json.load(f)
    host = machine()
    print(machine_line(host))
    print(f"{layout}; {args.rounds} rounds (x 100 steps per agent) per timed call")
    print(f"{'task':16s} {'run_batch':>9s} {'agent-steps/s':>14s} {'vs all':>7s}  seconds per call")
    for env_name in args.tasks.split(","):
        fns = {}
        for b in batches:
            fn, config = block_fn(env_name, TASKS[env_name], args.rounds, args.seeds, omegas, b)
            fn()  # compile
            fns[b] = fn
        seconds = {b: [] for b in batches}
        for _ in range(args.repeats):  # interleaved: the machine's load drifts
            for b, fn in fns.items():
                start = time.perf_counter()
                fn()
                seconds[b].append(time.perf_counter() - start)
        agent_steps = num_runs * config.num_agents * config.steps_per_agent
        rows = {}
        for b in batches:
            best = min(seconds[b])
            rows["all" if b is None else str(b)] = dict(seconds=seconds[b], agent_steps_per_sec=agent_steps / best,
                                                         median_seconds=statistics.median(seconds[b]))
        base = rows["all"]["agent_steps_per_sec"] if "all" in rows else None
        for name, row in rows.items():
            row["speedup_vs_all"] = row["agent_steps_per_sec"] / base if base else None
            ratio = f"{row['speedup_vs_all']:.2f}x" if base else "-"
            print(f"{env_name:16s} {name:>9s} {row['agent_steps_per_sec']:14,.0f} {ratio:>7s}  "
                  f"{', '.join(f'{s:.1f}' for s in row['seconds'])}", flush=True)
        record["tasks"][env_name] = dict(param=TASKS[env_name], layout=layout, rounds_per_call=args.rounds,
                                         repeats=args.repeats, machine=host, run_batch=rows)
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:  # after every task: a long run that stops keeps what it measured
            json.dump(record, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
