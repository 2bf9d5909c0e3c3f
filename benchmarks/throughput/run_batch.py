"""How many runs to vmap at a time: `loop.run(..., run_batch=N)` on a reproduce-sized grid.

A Table 1 row of `fedjax-rl reproduce` trains 5 omega points x 8 seeds = 40 runs (200 agents) in one
program. All 40 in one vmap make every parameter, gradient and Adam moment one array over 200 agents
(55 MB per 256 x 256 layer), which streams from memory at every op. `run_batch=N` vmaps N runs at a
time and runs the batches one after another (`lax.map`) inside the same compiled block.

This script times the compiled training block (`program.over_runs(trainer.run_block, ...)`, the
function `loop.run` jits) for each task's RL-Zoo3 DQN settings with training from the first
step (learning_starts 0), interleaving the batch sizes over repeats, and prints agent-steps/s and
the ratio to all-at-once. Compilation is excluded (the case's setup, and one untimed call); timed by
benchmarks/harness.py.

    .venv/bin/python -m benchmarks.throughput.run_batch                      # the four Table 1 tasks
    .venv/bin/python -m benchmarks.throughput.run_batch --tasks Acrobot-v1 --batches all,10,20 --repeats 3

Writes benchmarks/results/throughput/run_batch.json, a row per task, batch size and repeat, rewritten after
every task (a long run that stops keeps what it measured).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from benchmarks import common, harness
from fedjax_rl.reproduce import plan
from fedjax_rl.training import configs, program

BENCHMARK = "throughput.run_batch"

TASKS = {"CartPole-v1": "length", "Acrobot-v1": "gravity", "MountainCar-v0": "gravity", "LunarLander-v3": "gravity"}


def case(env_name: str, param: str, rounds: int, num_seeds: int, omegas: list[float], run_batch) -> harness.Case:
    config = configs.train_config("fedrdqn", env_name, physics=(param,), steps_per_agent=100 * rounds,
                                  eval_every_rounds=rounds, agent_overrides=dict(learning_starts=0))
    agent_steps = len(omegas) * num_seeds * config.num_agents * config.steps_per_agent

    def setup():
        trainer = program.make_trainer(config)
        points = configs.grid_configs(config, {"omega": omegas})
        hparams = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[p.agent.hparams() for p in points])
        init = jax.jit(jax.vmap(jax.vmap(trainer.init), in_axes=None, axis_size=len(points)))
        state = init(program.seed_keys(0, num_seeds))
        run_block = jax.jit(program.over_runs(trainer.run_block, (len(points), num_seeds), run_batch))

        def call():
            jax.block_until_ready(run_block(state, hparams, 1))
            return dict(agent_steps=agent_steps)

        return call

    name = "all" if run_batch is None else str(run_batch)
    return harness.Case(f"{env_name} {name}", setup, dict(task=env_name, param=param, run_batch=name))


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=2)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--batches", default="all,5,10,20", help="runs per vmap; 'all' = every run at once")
    parser.add_argument("--seeds", type=int, default=plan.DEFAULT_SEEDS + plan.DEFAULT_TUNING_SEEDS)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of E = 100 steps per timed call")
    args = parser.parse_args()
    batches = [None if b == "all" else int(b) for b in args.batches.split(",")]
    omegas = [0.0, *plan.DEFAULT_OMEGAS]
    num_runs = len(omegas) * args.seeds
    layout = f"{len(omegas)} omega points x {args.seeds} seeds = {num_runs} runs, K = 5"
    host = common.machine()
    print(common.machine_line(host))
    print(f"{layout}; {args.rounds} rounds (x 100 steps per agent) per timed call")
    print(f"{'task':16s} {'run_batch':>9s} {'agent-steps/s':>14s} {'vs all':>7s}  seconds per call")
    rows = []
    for env_name in args.tasks.split(","):
        cases = [case(env_name, TASKS[env_name], args.rounds, args.seeds, omegas, b) for b in batches]
        task_rows = harness.measure(cases, args.repeats)  # interleaved: the machine's load drifts
        for row in task_rows:
            row["agent_steps_per_sec"] = row["agent_steps"] / row["wall_s"]
        best = {c.settings["run_batch"]: max(r["agent_steps_per_sec"] for r in task_rows if r["case"] == c.name)
                for c in cases}
        for row in task_rows:
            row["speedup_vs_all"] = row["agent_steps_per_sec"] / best["all"] if "all" in best else None
        for c in cases:
            name = c.settings["run_batch"]
            ratio = f"{best[name] / best['all']:.2f}x" if "all" in best else "-"
            seconds = ", ".join(f"{r['wall_s']:.1f}" for r in task_rows if r["case"] == c.name)
            print(f"{env_name:16s} {name:>9s} {best[name]:14,.0f} {ratio:>7s}  {seconds}", flush=True)
        rows += task_rows
        # after every task: a long run that stops keeps what it measured
        harness.write(args.out, BENCHMARK, dict(layout=layout, omegas=omegas, seeds=args.seeds,
                                                rounds_per_call=args.rounds, repeats=args.repeats), rows, machine=host)


if __name__ == "__main__":
    main()
