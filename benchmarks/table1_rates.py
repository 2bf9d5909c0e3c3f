"""What a user pays per agent-step for Table 1's programs from the command line: `fedjax-rl train` with
DQNAvg and with FedRDQN on CartPole-v1 (pole length perturbed, K = 5, 5 seeds, the settings Table 1's
CartPole rows ran with, as `reproduce` records them), each command its own process. Agent-steps per
CPU-second of the whole process (startup, tracing, the disk cache's compiled programs, training, every
evaluation), and FedRDQN's rate over DQNAvg's, measured interleaved.

One untimed run of each command first fills a fresh compilation cache, so the timed runs compile
nothing, as a user's second run of a shape does (`machine.use_compilation_cache`).

    .venv/bin/python benchmarks/table1_rates.py [--steps 50000] [--repeats 2]

Writes benchmarks/results/table1_rates.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, machine_line  # noqa: E402

from fedjax_rl import agents  # noqa: E402
from fedjax_rl.reproduce import paper, plan  # noqa: E402
from fedjax_rl.training.machine import CACHE_ENV  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "results", "table1_rates.json")
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


def run(algo: str, steps: int, out: str, cache: str) -> dict:
    steps, eval_every = budget(algo, steps)
    command = ["train", "--algo", algo, *ALGOS[algo], *SETTINGS, "--steps", str(steps),
               "--eval-every", str(eval_every), "--out", out]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedjax_rl.cli", *command], env={**os.environ, CACHE_ENV: cache},
                   capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    shutil.rmtree(out)
    agent_steps = paper.NUM_AGENTS * SEEDS * steps
    return dict(wall_s=wall, cpu_s=cpu, agent_steps=agent_steps, agent_steps_per_cpu_s=agent_steps / cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50_000, help="steps per agent (default 50,000: Table 1's)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    info = machine()
    work = tempfile.mkdtemp(prefix="table1_rates_")
    try:
        cache = os.path.join(work, "cache")
        warm_up = {algo: run(algo, args.steps, os.path.join(work, f"{algo}_warm"), cache) for algo in ALGOS}
        timed = {algo: [] for algo in ALGOS}
        for repeat in range(args.repeats):  # interleaved: the machine is shared
            for algo in ALGOS:
                timed[algo].append(run(algo, args.steps, os.path.join(work, f"{algo}_{repeat}"), cache))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["load_average_1_5_15min_at_end"] = list(os.getloadavg())
    rates = {algo: statistics.median(r["agent_steps_per_cpu_s"] for r in runs) for algo, runs in timed.items()}
    ratios = [f["agent_steps_per_cpu_s"] / d["agent_steps_per_cpu_s"]
              for f, d in zip(timed["fedrdqn"], timed["dqnavg"])]
    print(machine_line(info))
    for algo, runs in timed.items():
        print(f"{algo:8s} first run (compiles) {warm_up[algo]['cpu_s']:7.1f} CPU-s; timed runs "
              + ", ".join(f"{r['cpu_s']:.1f} CPU-s ({r['agent_steps_per_cpu_s']:,.0f} agent-steps/CPU-s)"
                          for r in runs))
    print(f"FedRDQN / DQNAvg agent-steps per CPU-second: median {statistics.median(ratios):.3f} "
          f"(per repeat {', '.join(f'{r:.3f}' for r in ratios)})")
    with open(args.out, "w") as f:
        json.dump(dict(machine=info, settings=SETTINGS, algos=ALGOS, steps_per_agent=args.steps, warm_up=warm_up,
                       timed=timed, median_agent_steps_per_cpu_s=rates, fedrdqn_over_dqnavg=ratios,
                       fedrdqn_over_dqnavg_median=statistics.median(ratios)), f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
