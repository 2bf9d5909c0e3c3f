"""What a user pays per agent-step for Table 1's programs from the command line: `fedjax-rl train` with
DQNAvg and with FedRDQN on CartPole-v1 (pole length perturbed, K = 5, 5 seeds, the settings Table 1's
CartPole rows ran with, as `reproduce` records them), each command its own process. Agent-steps per
CPU-second of the whole process (startup, tracing, the disk cache's compiled programs, training, every
evaluation), and FedRDQN's rate over DQNAvg's, measured interleaved.

One first run of each command (the case's setup, recorded as `setup_*` in its rows) fills a fresh
compilation cache, so the timed runs compile nothing, as a user's second run of a shape does
(`machine.use_compilation_cache`). Timed by benchmarks/harness.py; the CPU-seconds are the child
process's (`children_cpu_s`).

    .venv/bin/python -m benchmarks.throughput.table1_rates [--steps 50000] [--repeats 2]

Writes benchmarks/results/throughput/table1_rates.json: a row per command and repeat.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchmarks import common, harness
from fedjax_rl import agents
from fedjax_rl.reproduce import paper, plan
from fedjax_rl.training.machine import CACHE_ENV

BENCHMARK = "throughput.table1_rates"
SEEDS, ENV = 5, "CartPole-v1"
# Table 1's CartPole-v1 rows (results/table1_paper/table1/CartPole-v1__length/*/config.json): the paper's
# K, E, p and evaluation episodes, batch 16 and buffer 1000 and RL-Zoo3's other DQN settings (the
# algorithms' defaults), the default 19 sweep points, and evaluation points as `reproduce` spaces them
# at the budget `--steps` is of RL-Zoo3's (`plan.budget_steps`).
SETTINGS = ["--env", ENV, "--param", "length", "--agents", str(paper.NUM_AGENTS),
            "--sync-every", str(paper.SYNC_EVERY), "--max-rate", str(paper.MAX_RATE),
            "--eval-episodes", str(paper.EVAL_EPISODES), "--seeds", str(SEEDS), "--no-progress", "--no-tensorboard"]
ALGOS = {"dqnavg": [], "fedrdqn": ["--omega", "0.1"]}


def budget(algo: str, steps: int) -> tuple[int, int]:
    """(steps per agent, evaluation interval) of `reproduce` at the budget `steps` is of RL-Zoo3's."""
    return plan.budget_steps(algo, ENV, steps / agents.get(algo).steps(ENV))


def case(algo: str, steps: int, work: str, cache: str) -> harness.Case:
    """`fedjax-rl train` of `algo` as its own process; the setup runs it once (filling the cache)."""
    steps, eval_every = budget(algo, steps)
    agent_steps = paper.NUM_AGENTS * SEEDS * steps
    runs = itertools.count()

    def run():
        out = os.path.join(work, f"{algo}_{next(runs)}")
        command = ["train", "--algo", algo, *ALGOS[algo], *SETTINGS, "--steps", str(steps),
                   "--eval-every", str(eval_every), "--out", out]
        subprocess.run([sys.executable, "-m", "fedjax_rl.cli", *command], env={**os.environ, CACHE_ENV: cache},
                       capture_output=True, text=True, check=True)
        shutil.rmtree(out)
        return dict(agent_steps=agent_steps)

    def setup():
        run()
        return run

    return harness.Case(algo, setup, dict(algo=algo, steps_per_agent=steps, eval_every=eval_every))


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=2)
    parser.add_argument("--steps", type=int, default=50_000, help="steps per agent (default 50,000: Table 1's)")
    args = parser.parse_args()
    info = common.machine()
    work = tempfile.mkdtemp(prefix="table1_rates_")
    try:
        cache = os.path.join(work, "cache")
        rows = harness.measure([case(algo, args.steps, work, cache) for algo in ALGOS], args.repeats, warmup=0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for row in rows:
        row["agent_steps_per_cpu_s"] = row["agent_steps"] / row["children_cpu_s"]
    timed = {algo: [r for r in rows if r["algo"] == algo] for algo in ALGOS}
    ratios = [f["agent_steps_per_cpu_s"] / d["agent_steps_per_cpu_s"] for f, d in zip(timed["fedrdqn"], timed["dqnavg"])]
    print(common.machine_line(info))
    for algo, runs in timed.items():
        print(f"{algo:8s} first run (compiles) {runs[0]['setup_children_cpu_s']:7.1f} CPU-s; timed runs "
              + ", ".join(f"{r['children_cpu_s']:.1f} CPU-s ({r['agent_steps_per_cpu_s']:,.0f} agent-steps/CPU-s)"
                          for r in runs))
    print(f"FedRDQN / DQNAvg agent-steps per CPU-second: median {statistics.median(ratios):.3f} "
          f"(per repeat {', '.join(f'{r:.3f}' for r in ratios)})")
    harness.write(args.out, BENCHMARK, dict(settings=SETTINGS, algos=ALGOS, steps_per_agent=args.steps,
                                            fedrdqn_over_dqnavg=ratios,
                                            fedrdqn_over_dqnavg_median=statistics.median(ratios)),
                  rows, machine=info)


if __name__ == "__main__":
    main()
