"""Can Table 1's baseline run as its own program? The reproduction runs DQNAvg as the omega = 0 point of
FedRDQN's omega grid (one vmapped program), so the baseline pays for FedRDQN's degree network D(s; psi),
which its target multiplies by zero: 18 matrix products per gradient step where DQNAvg's own program has
11. Running it as DQNAvg's program instead is allowed only if the numbers are the same: a row's seeds
must all be one program's samples, and its committed pieces ran the grid.

This trains both at Table 1's CartPole-v1 settings (K = 5, E = 100, p = 0.5, batch 16, buffer 1,000,
RL-Zoo3's other settings) for a short budget, 2 seeds: FedRDQN's grid over omega [0, 0.1] and DQNAvg
alone (`loop.run`, as the command line runs them), and compares every metric both record.

    .venv/bin/python benchmarks/baseline_program.py [--steps 5000]

Writes benchmarks/results/baseline_program.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine  # noqa: E402

from fedjax_rl.reproduce import paper  # noqa: E402
from fedjax_rl.training import configs, loop  # noqa: E402
from table1_rates import ENV, budget  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "results", "baseline_program.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5000, help="steps per agent (default 5,000)")
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    steps, eval_every = budget("fedrdqn", args.steps)
    fields = dict(physics=("length",), num_agents=paper.NUM_AGENTS, sync_every=paper.SYNC_EVERY,
                  max_rate=paper.MAX_RATE, steps_per_agent=steps, eval_every_rounds=eval_every,
                  eval_episodes=paper.EVAL_EPISODES)
    robust = configs.train_config("fedrdqn", ENV, agent_overrides=dict(omega=0.1), **fields)
    baseline = configs.train_config("dqnavg", ENV, **fields)
    info = machine()
    started = time.perf_counter()
    grid = loop.run(robust, num_seeds=args.seeds, progress=False, grid={"omega": [0.0, 0.1]})
    grid_s = time.perf_counter() - started
    started = time.perf_counter()
    alone = loop.run(baseline, num_seeds=args.seeds, progress=False)
    alone_s = time.perf_counter() - started
    differences = {}
    for part in ("curve", "final"):
        for name in sorted(set(grid[part]) & set(alone[part])):
            if name == "degree_loss":  # D's loss: DQNAvg has no D
                continue
            a, b = np.asarray(grid[part][name], np.float64)[0], np.asarray(alone[part][name], np.float64)
            differences[f"{part}/{name}"] = float(np.max(np.abs(a - b))) if a.size else 0.0
    equal = all(d == 0.0 for d in differences.values())
    td_loss = (np.asarray(grid["curve"]["td_loss"])[0], np.asarray(alone["curve"]["td_loss"]))
    blocks = range(td_loss[1].shape[-1])
    first = next((i for i in blocks if not np.array_equal(td_loss[0][..., i], td_loss[1][..., i])), None)
    print(f"{steps} steps per agent, {args.seeds} seeds: grid {grid_s:.0f} s, DQNAvg alone {alone_s:.0f} s")
    print("every metric bit-identical" if equal else
          f"not the same: the first block (0-based) whose TD loss differs is {first}; largest differences "
          + ", ".join(f"{k} {v:.4g}" for k, v in differences.items() if v))
    with open(OUT, "w") as f:
        json.dump(dict(machine=info, steps_per_agent=steps, seeds=args.seeds, bit_identical=equal,
                       first_block_with_another_td_loss=first, max_abs_difference=differences,
                       seconds=dict(grid=grid_s, dqnavg_alone=alone_s)), f, indent=1)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
