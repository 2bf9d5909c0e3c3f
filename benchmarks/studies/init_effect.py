"""Does SB3's network initialisation change a result? The measurement behind the `init` setting's default.

SB3's off-policy networks keep PyTorch's `nn.Linear` default (weights and biases uniform in
±1/sqrt(fan_in)); ours used Flax's (LeCun-normal weights, zero biases). Each arm below is one
`fedjax-rl train` program of 12 seeds (K = 5, p = 0.5, E = 100, the task's full budget), run on this
machine; arms that differ only in `init` share every seed's physics, exploration and replay keys, so
the comparison is paired by seed:

- CartPole-v1 length, DQNAvg at the full budget: `torch` against `flax`;
- Pendulum-v1 m, DDPGAvg(1) at RL-Zoo3's budget (20,000 steps, learning_starts 10,000):
  `torch` against `flax`;
- and the same tasks with `flax` at the old timing (the code before SB3's warm-up noise and first
  gradient step were matched, learning_starts 10,000 for Pendulum as given) against `flax` now, to show
  what the timing change alone does.

Run the arms (each prints where it writes), then summarise:

    fedjax-rl train --algo dqnavg --env CartPole-v1 --param length --set init=torch --seeds 12 --out runs/init_study/cartpole_torch
    fedjax-rl train --algo dqnavg --env CartPole-v1 --param length --set init=flax --seeds 12 --out runs/init_study/cartpole_flax
    fedjax-rl train --algo ddpgavg1 --env Pendulum-v1 --param m --set init=torch --seeds 12 --out runs/init_study/pendulum_torch
    fedjax-rl train --algo ddpgavg1 --env Pendulum-v1 --param m --set init=flax --seeds 12 --out runs/init_study/pendulum_flax
    python -m benchmarks.studies.init_effect --runs runs/init_study
    python -m benchmarks.studies.init_effect --from-results    # the comparisons again from the recorded arms, by today's rule

The old-timing arms (`cartpole_oldtiming`, `pendulum_oldtiming`) ran the same commands from the
commit before the change (77f349b), without `--set init=...`; they are compared where present.

Writes benchmarks/results/studies/init_effect.json (benchmarks/harness.py's format) and the tables beside it
as init_effect.md: a row per arm (`kind` "arm": per seed the local Minimum, Average and the
robustness sweep's mean) and per comparison (`kind` "comparison": the median paired difference with its interval
(`fedjax_rl.analysis.stats.difference`), the verdict (`judge.comparison`) and the seeds that would decide it
80% of the time (`power.seeds_for_power`)).
"""

from __future__ import annotations

import json
import os

import numpy as np

from benchmarks import harness
from benchmarks.common import machine, machine_line
from fedjax_rl.analysis import judge, power, stats

BENCHMARK = "studies.init_effect"

METRICS = {"local_minimum": "Minimum", "local_average": "Average", "sweep_mean": "sweep mean (0.1m-1.9m)"}
COMPARISONS = (  # (task, name, arm, baseline arm)
    ("CartPole-v1 length, DQNAvg", "init torch - flax", "cartpole_torch", "cartpole_flax"),
    ("CartPole-v1 length, DQNAvg", "timing now - old (flax)", "cartpole_flax", "cartpole_oldtiming"),
    ("Pendulum-v1 m, DDPGAvg(1)", "init torch - flax", "pendulum_torch", "pendulum_flax"),
    ("Pendulum-v1 m, DDPGAvg(1)", "timing now - old (flax)", "pendulum_flax", "pendulum_oldtiming"),
)


def read_arm(run_dir: str) -> dict | None:
    """An arm's per-seed numbers from its finished run directory, or None if it has not finished."""
    if not os.path.exists(os.path.join(run_dir, "finished.json")):
        return None
    with open(os.path.join(run_dir, "metrics.json")) as f:
        metrics = json.load(f)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    final = metrics["final"]
    return dict(
        local_minimum=[float(v) for v in final["local_minimum"]],
        local_average=[float(v) for v in final["local_average"]],
        sweep_mean=[float(np.mean(v)) for v in final["sweep_returns"]],
        init=config["agent"].get("init", "flax (before the setting)"),
        learning_starts=config["agent"]["learning_starts"],
        steps_per_agent=config["steps_per_agent"],
        wall_s=metrics["timing"]["wall_s"],
    )


def compare(arm: dict, baseline: dict) -> dict:
    """Per metric: the paired difference arm - baseline with its interval and verdict, and the seeds
    80% power would need for a difference of the observed size."""
    out = {}
    for metric in METRICS:
        x, y = np.asarray(arm[metric]), np.asarray(baseline[metric])
        interval = stats.difference(x, y, paired=True)
        out[metric] = dict(difference=interval.estimate, low=interval.low, high=interval.high,
                           verdict=judge.comparison({metric: x}, {metric: y}, (metric,), decide_on=metric)["verdict"],
                           seeds_better=int((x > y).sum()), seeds_worse=int((x < y).sum()),
                           seeds_for_power=power.seeds_for_power(x, y))
    return out


def markdown(arms: dict, results: list[dict], info: dict) -> str:
    lines = ["# Network initialisation (torch against flax) and SB3's timing: measured effect", "",
             machine_line(info), "", "| arm | init | learning_starts | seeds | Minimum mean | Average mean | sweep mean | wall (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, arm in arms.items():
        lines.append(f"| {name} | {arm['init']} | {arm['learning_starts']:,} | {len(arm['local_minimum'])} | "
                     f"{np.mean(arm['local_minimum']):.1f} | {np.mean(arm['local_average']):.1f} | "
                     f"{np.mean(arm['sweep_mean']):.1f} | {arm['wall_s']:.0f} |")
    lines += ["", f"Paired by seed: the median difference with its {stats.CONFIDENCE:.0%} order-statistic interval; "
              f"the verdict ({stats.RULE}, as the tables judge); seeds better / worse; seeds for 80% power.", "",
              "| task | comparison | metric | difference [interval] | verdict | better / worse | seeds for 80% power |",
              "| --- | --- | --- | --- | --- | ---: | ---: |"]
    for r in results:
        for metric, name in METRICS.items():
            m = r["metrics"][metric]
            power = "-" if m["seeds_for_power"] is None else f"{m['seeds_for_power']:,}"
            lines.append(f"| {r['task']} | {r['name']} | {name} | {m['difference']:+.1f} [{m['low']:+.1f}, {m['high']:+.1f}] | "
                         f"{m['verdict']} | {m['seeds_better']} / {m['seeds_worse']} | {power} |")
    return "\n".join(lines) + "\n"


def main():
    parser = harness.parser(BENCHMARK, __doc__)
    parser.add_argument("--runs", default="runs/init_study", help="directory holding the arms' run directories")
    parser.add_argument("--from-results", action="store_true",
                        help="compare the arms recorded in --out again (training nothing), by today's rule")
    args = parser.parse_args()
    if args.from_results:
        recorded = harness.read(args.out)
        info = dict(recorded["machine"])
        info.setdefault("load_average_1_5_15min_at_end", None)  # the recorded run's, not this machine's
        arms = {row["arm"]: {k: v for k, v in row.items() if k not in ("kind", "arm")}
                for row in recorded["rows"] if row["kind"] == "arm"}
    else:
        info = machine()
        names = {name for _, _, a, b in COMPARISONS for name in (a, b)}
        arms = {name: arm for name in sorted(names) if (arm := read_arm(os.path.join(args.runs, name)))}
    results = [dict(task=task, name=name, arm=a, baseline=b, metrics=compare(arms[a], arms[b]))
               for task, name, a, b in COMPARISONS if a in arms and b in arms]
    text = markdown(arms, results, info)
    print(text)
    rows = [dict(kind="arm", arm=name, **arm) for name, arm in arms.items()]
    rows += [dict(kind="comparison", **r) for r in results]
    harness.write(args.out, BENCHMARK, dict(runs=args.runs, comparisons=[list(c) for c in COMPARISONS]), rows,
                  machine=info)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
