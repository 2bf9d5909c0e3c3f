"""FedRDQN agent-steps per second on the JAX LunarLander-v3, K = 5 agents x 5 vmapped seeds.

An agent-step is one environment step of one agent plus its share of the learning rule. Settings
are RL-Zoo3's LunarLander DQN (net [256, 256], train_freq 4, gradient_steps = train_freq, so one
gradient update per agent-step on average) with the paper's federated batch 16 / buffer 1000,
E = 100, p = 0.5 on gravity. Compile time is reported separately; the rate is the median over
steady-state calls of the compiled block (`Trainer.run_block`: rounds of local steps, federated
averages and one greedy evaluation of the global policy in the nominal environment).

The environment-only comparison with gymnasium's Box2D LunarLander is `lunarlander_env.py`; this
script merges its latest result file, if present, into `results/lunarlander.json`.

    python benchmarks/lunarlander_dqn.py [--seeds 5] [--rounds-per-call 10] [--calls 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, machine_line  # noqa: E402

from fedjax_rl.training import configs, program  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def measure(algo: str, num_seeds: int, rounds_per_call: int, calls: int, hidden: tuple[int, ...]) -> dict:
    steps = 100 * rounds_per_call * calls
    config = configs.train_config(
        algo, "LunarLander-v3", physics=("gravity",), steps_per_agent=steps, eval_every_rounds=rounds_per_call,
        eval_episodes=1, agent_overrides=dict(hidden_sizes=hidden),
    )
    trainer = program.make_trainer(config)
    state = jax.jit(jax.vmap(trainer.init))(program.seed_keys(0, num_seeds))
    block = jax.jit(jax.vmap(trainer.run_block, in_axes=(0, None, None)))
    start = time.perf_counter()
    compiled = block.lower(state, trainer.hparams, 0).compile()
    compile_s = time.perf_counter() - start
    agent_steps = num_seeds * config.num_agents * 100 * rounds_per_call
    times = []
    for b in range(calls):
        start = time.perf_counter()
        state, metrics = compiled(state, trainer.hparams, b)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    steady = times[1:] or times
    return dict(algo=algo, num_seeds=num_seeds, num_agents=config.num_agents, hidden_sizes=list(hidden),
                compile_s=compile_s, first_call_s=times[0], call_s=times,
                agent_steps_per_call=agent_steps, agent_steps_per_sec=agent_steps / statistics.median(steady),
                train_freq=config.agent.train_freq, gradient_steps=config.agent.gradient_steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds-per-call", type=int, default=10)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--out", default=os.path.join(RESULTS, "lunarlander.json"))
    args = parser.parse_args()

    info = machine()
    rows = [measure(algo, args.seeds, args.rounds_per_call, args.calls, (256, 256)) for algo in ("fedrdqn", "dqnavg")]
    info["load_average_1_5_15min_at_end"] = list(os.getloadavg())
    print(machine_line(info))
    print(f"{'algo':8} {'seeds x K':>9} {'compile s':>9} {'agent-steps/s':>14}")
    for r in rows:
        print(f"{r['algo']:8} {r['num_seeds']:>4} x {r['num_agents']:<2} {r['compile_s']:9.1f} {r['agent_steps_per_sec']:14.0f}")

    result = {"description": "LunarLander-v3 (JAX port): FedRDQN/DQNAvg agent-steps per second, K=5 x seeds vmapped",
              "machine": info, "federated_dqn": rows}
    env_path = os.path.join(RESULTS, "lunarlander_env.json")
    if os.path.exists(env_path):
        with open(env_path) as f:
            result["environment_vs_gymnasium"] = json.load(f)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
