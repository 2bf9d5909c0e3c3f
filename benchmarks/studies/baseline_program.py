"""Can Table 1's baseline run as its own program? The reproduction runs DQNAvg as the omega = 0 point of
FedRDQN's omega grid (one vmapped program), so the baseline pays for FedRDQN's degree network D(s; psi),
which its target multiplies by zero: 18 matrix products per gradient step where DQNAvg's own program has
11. Running it as DQNAvg's program instead is allowed only if the numbers are the same: a row's seeds
must all be one program's samples, and its committed pieces ran the grid.

This trains both at Table 1's CartPole-v1 settings (K = 5, E = 100, p = 0.5, batch 16, buffer 1,000,
RL-Zoo3's other settings) for a short budget, 2 seeds: FedRDQN's grid over omega [0, 0.1] and DQNAvg
alone (`loop.run`, as the command line runs them), and compares every metric both record.

    .venv/bin/python -m benchmarks.studies.baseline_program [--steps 5000]

Writes benchmarks/results/studies/baseline_program.json (benchmarks/harness.py's format): a row per metric
both record, with its largest absolute difference; the settings hold the verdict and the seconds.
"""

from __future__ import annotations

import numpy as np

from benchmarks import common, harness
from benchmarks.throughput.table1_rates import ENV, budget
from fedjax_rl.reproduce import paper
from fedjax_rl.training import configs, loop

BENCHMARK = "studies.baseline_program"


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__)
    parser.add_argument("--steps", type=int, default=5000, help="steps per agent (default 5,000)")
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    steps, eval_every = budget("fedrdqn", args.steps)
    fields = dict(physics=("length",), num_agents=paper.NUM_AGENTS, sync_every=paper.SYNC_EVERY,
                  max_rate=paper.MAX_RATE, steps_per_agent=steps, eval_every_rounds=eval_every,
                  eval_episodes=paper.EVAL_EPISODES)
    robust = configs.train_config("fedrdqn", ENV, agent_overrides=dict(omega=0.1), **fields)
    baseline = configs.train_config("dqnavg", ENV, **fields)
    info = common.machine()
    # Each program run once, whole (compilation and evaluation included): a study of what the runs
    # compute, whose seconds are a note, so `time_call`, not interleaved repeats.
    grid_run = harness.time_call(lambda: dict(out=loop.run(robust, num_seeds=args.seeds, progress=False,
                                                           grid={"omega": [0.0, 0.1]})))
    alone_run = harness.time_call(lambda: dict(out=loop.run(baseline, num_seeds=args.seeds, progress=False)))
    grid, grid_s = grid_run.pop("out"), grid_run["wall_s"]
    alone, alone_s = alone_run.pop("out"), alone_run["wall_s"]
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
    harness.write(args.out, BENCHMARK, dict(steps_per_agent=steps, seeds=args.seeds, bit_identical=equal,
                                            first_block_with_another_td_loss=first,
                                            seconds=dict(grid=grid_s, dqnavg_alone=alone_s)),
                  [dict(metric=name, max_abs_difference=value) for name, value in differences.items()], machine=info)


if __name__ == "__main__":
    main()
