"""Federated DQN agent-steps per second: the compiled fedjax_rl loop against Stable-Baselines3.

One *agent-step* is one environment step of one agent plus one gradient update (train_freq=1,
gradient_steps=1), with the federated average every E = 100 steps. Both sides run FedRDQN's setting
on CartPole-v1 with the pole length perturbed per agent (p = 0.5), K = 5 agents, 5 seeds, and the
same hyperparameters: RL-Zoo3's CartPole DQN (net [256, 256], lr 2.3e-3, gamma 0.99, target copy
every 10 steps) with batch 16, buffer 1000 and learning_starts 100.

  ours  fedjax_rl: `jax.jit(jax.vmap(trainer.run_block, in_axes=(0, None, None)))` over seeds; one
        call = `eval_every_rounds` rounds of E steps of all K agents of every seed, then one greedy
        evaluation episode of the global policy (that evaluation is extra work SB3 does not do; it
        is inside our timing). Compile time (lower + compile) is reported separately; block 0 (which
        crosses learning_starts) is a warm-up; the steady-state rate times the calls after it.
  sb3   benchmarks/sb3/sb3_reference.py (K SB3 DQN agents, parameters averaged every E steps, seeds one
        after another, 1 torch thread), run as a subprocess with the .venv-bench interpreter; its
        JSON is parsed. Its timing also excludes the warm-up rounds up to learning_starts.

FedRDQN trains a second (expectile) network of the same size every step; SB3 has no FedRDQN, so
its reference is the plain federated DQN (= DQNAvg's work). The ratio is reported against it for
both of our algorithms: FedRDQN/SB3 compares more work with less.

Every case of ours and the SB3 run are cases of `harness.measure`, interleaved (ours, ..., sb3, ours,
..., sb3) because the machine is shared; every table entry is the median over repeats, and the load
average is recorded. `agent-steps/CPU-s` divides by the process's CPU time (all threads), a less
load-sensitive figure.

Usage:
  python -m benchmarks.throughput.dqn_throughput [--repeats 3] [--seeds-scaling 25] [--no-sb3] [--out PATH]
Writes benchmarks/results/throughput/dqn_throughput.json (or --out; the GPU run uses dqn_throughput_gpu.json)
in benchmarks/harness.py's format: a row per case and repeat, ours (`kind` "ours", `algo`) and SB3's
(`kind` "sb3", `algo` "sb3", the rates of the rounds it timed), each with its ratios to SB3's medians.
"""

from __future__ import annotations

import os
import sys

from benchmarks import common, harness
from fedjax_rl.training import configs

BENCHMARK = "throughput.dqn_throughput"
ROOT = harness.ROOT
RESULTS = harness.default_out(BENCHMARK)
BENCH_PYTHON = os.path.join(ROOT, ".venv-bench", "bin", "python")

# The shared setting (both implementations).
K = 5
SYNC_EVERY = 100
MAX_RATE = 0.5
LEARNING_STARTS = 100
AGENT = dict(
    train_freq=1, gradient_steps=1, learning_starts=LEARNING_STARTS, batch_size=16, buffer_size=1000,
    hidden_sizes=(256, 256),
)  # the rest (lr, gamma, target interval, exploration) are agents.dqn.ZOO_DQN["CartPole-v1"] = SB3's


def make_case(algo: str, num_seeds: int, rounds_per_call: int, calls: int, cpu_dots: str | None = None) -> harness.Case:
    """One vmapped-seeds `run_block` (`common.Block`, with `cpu_dots`' matrix products on a CPU, default
    the algorithm's): its setup compiles it, each call runs one more block."""
    steps_per_agent = rounds_per_call * SYNC_EVERY * (calls + 1)
    cfg = configs.train_config(
        algo, "CartPole-v1", agent_overrides=AGENT, num_agents=K, sync_every=SYNC_EVERY,
        max_rate=MAX_RATE, steps_per_agent=steps_per_agent, eval_every_rounds=rounds_per_call,
        eval_episodes=1, cpu_dots=cpu_dots,
    )
    config = dict(steps_per_agent=steps_per_agent, eval_every_rounds=rounds_per_call, eval_episodes=1,
                  agent={k: getattr(cfg.agent, k) for k in (
                      "learning_rate", "gamma", "batch_size", "buffer_size", "learning_starts", "train_freq",
                      "gradient_steps", "target_update_interval", "exploration_fraction", "exploration_final_eps",
                      "hidden_sizes", "omega", "tau", "robust")})
    return harness.Case(f"{algo} ({cfg.dots}) x{num_seeds}", lambda: common.Block(cfg, num_seeds),
                        dict(kind="ours", algo=algo, cpu_dots=cfg.dots, num_seeds=num_seeds, num_agents=K,
                             rounds_per_call=rounds_per_call, config=config))


def sb3_case(num_seeds: int, steps: int, threads: int, python: str = BENCH_PYTHON) -> harness.Case:
    args = ["--agents", str(K), "--seeds", str(num_seeds), "--steps", str(steps), "--sync-every", str(SYNC_EVERY),
            "--length-rate", str(MAX_RATE), "--batch-size", "16", "--buffer-size", "1000", "--learning-starts",
            str(LEARNING_STARTS), "--threads", str(threads)]
    return common.sb3_case("sb3", "benchmarks.sb3.sb3_reference", args, python,
                           dict(kind="sb3", algo="sb3", num_seeds=num_seeds))


def machine() -> dict:
    return dict(common.machine(), dtype="float32")


def add_ratios(rows: list[dict], sb3: dict) -> None:
    """Each row's rates over SB3's medians (`common.sb3_rates`)."""
    for row in rows:
        row["ratio_vs_sb3"] = row["agent_steps_per_sec"] / sb3["agent_steps_per_sec"]
        row["ratio_vs_sb3_per_cpu_sec"] = row["agent_steps_per_cpu_sec"] / sb3["agent_steps_per_cpu_sec"]


def target(rows: list[dict]) -> dict:
    """The issue's target: the first case of ours at >= 100x SB3 (medians over its repeats)."""
    first = next(r for r in rows if r.get("kind", "ours") == "ours" and r["algo"] != "sb3")
    ratio = first.get("ratio_vs_sb3")
    if ratio is not None and "case" in first:  # a row per repeat: their median
        ratio = harness.median(rows, "ratio_vs_sb3", case=first["case"])
    return dict(required_ratio=100, case=f"{first['algo']} x{first['num_seeds']} seeds", ratio=ratio,
                met=None if ratio is None else ratio >= 100)


def attach_sb3(path: str, reference: str) -> None:
    """Ratios of a results file (e.g. the GPU run's) against the SB3 rate measured in another run."""
    res, ref = harness.read(path), harness.read(reference)
    sb3 = common.sb3_rates(ref)
    source = (f"{os.path.relpath(reference, ROOT)}: SB3 on {ref['machine']['cpu']} "
              f"({ref['machine']['cores']} cores), measured in that run, not this one")
    res["rows"] = [r for r in res["rows"] if r["algo"] != "sb3"]
    add_ratios(res["rows"], sb3)
    for row in res["rows"]:
        print(f"{row['algo']} x{row['num_seeds']}: {row['agent_steps_per_sec']:.0f} agent-steps/s = "
              f"{row['ratio_vs_sb3']:.1f}x SB3 ({sb3['agent_steps_per_sec']:.1f})")
    res["settings"]["target"] = dict(target(res["rows"]), best=max(r["ratio_vs_sb3"] for r in res["rows"]))
    res["rows"].append(dict(sb3, kind="sb3", algo="sb3", source=source))
    harness.dump(path, res)


def main() -> None:
    p = harness.parser(BENCHMARK, __doc__, repeats=3)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--seeds-scaling", type=int, nargs="*", default=[25],
                   help="extra FedRDQN rows with more vmapped seeds")
    p.add_argument("--algos", default="fedrdqn,dqnavg")
    common.add_cpu_dots_argument(p)
    p.add_argument("--rounds-per-call", type=int, default=5, help="federated rounds (of E steps) per run_block")
    p.add_argument("--scaling-rounds-per-call", type=int, default=None)
    p.add_argument("--no-sb3", action="store_true", help="ours only (e.g. on a GPU machine)")
    p.add_argument("--sb3-steps", type=int, default=200, help="timed steps per SB3 agent per repeat")
    p.add_argument("--sb3-threads", type=int, default=1)
    p.add_argument("--sb3-python", default=BENCH_PYTHON, help="interpreter with torch + SB3 + gymnasium")
    p.add_argument("--sb3-reference", default=None, help="take the SB3 rate from this result (harness format)")
    p.add_argument("--attach-sb3", metavar="JSON", default=None,
                   help="only add SB3 ratios (from --sb3-reference, default the CPU results) to JSON and exit")
    a = p.parse_args()
    if a.attach_sb3:
        return attach_sb3(a.attach_sb3, a.sb3_reference or RESULTS)

    info = machine()
    print(common.machine_line(info), flush=True)

    cases = [make_case(algo, a.seeds, a.rounds_per_call, a.repeats, dots)
             for algo in a.algos.split(",") for dots in a.cpu_dots]
    cases += [make_case("fedrdqn", s, a.scaling_rounds_per_call or a.rounds_per_call, a.repeats)
              for s in a.seeds_scaling]
    if not a.no_sb3:
        cases.append(sb3_case(a.seeds, a.sb3_steps, a.sb3_threads, a.sb3_python))
    rows = common.measure_rates(cases, a.repeats)

    sb3 = None
    if not a.no_sb3:
        sb3 = dict(common.sb3_rates(dict(rows=rows)), source="measured in this run")
    elif a.sb3_reference:
        sb3 = dict(common.sb3_rates(harness.read(a.sb3_reference)),
                   source=f"from {os.path.relpath(a.sb3_reference, ROOT)} (other machine/run)")
    if sb3:
        add_ratios(rows, sb3)

    print(f"\nagent-steps/s (median of {a.repeats}); 1 gradient update per agent-step; K={K}, E={SYNC_EVERY}, "
          f"net 256x256, batch 16, buffer 1000")
    print(f"{'impl':<26}{'seeds':>6}{'agent-steps/s':>15}{'per CPU-s':>11}{'x SB3':>8}{'x SB3/CPU-s':>12}"
          f"{'compile s':>11}")
    for case in (c for c in cases if c.settings["kind"] == "ours"):
        r = next(r for r in rows if r["case"] == case.name)
        med = {key: harness.median(rows, key, case=case.name) for key in ("agent_steps_per_sec", "agent_steps_per_cpu_sec")}
        ratios = [med[key] / sb3[key] if sb3 else float("nan") for key in med]
        print(f"{'fedjax_rl ' + r['algo'] + ' (' + r['cpu_dots'] + ')':<26}{r['num_seeds']:>6}"
              f"{med['agent_steps_per_sec']:>15.0f}{med['agent_steps_per_cpu_sec']:>11.0f}{ratios[0]:>8.1f}"
              f"{ratios[1]:>12.1f}{r['compile_s']:>11.1f}")
    if sb3:
        print(f"{'SB3 DQN (federated loop)':<26}{a.seeds:>6}{sb3['agent_steps_per_sec']:>15.1f}"
              f"{sb3['agent_steps_per_cpu_sec']:>11.1f}{1.0:>8.1f}{1.0:>12.1f}{'-':>11}   ({sb3['source']})")
    goal = target(rows)
    if goal["ratio"] is not None:
        print(f"target (>= 100x SB3, {goal['case']}): {goal['ratio']:.1f}x -> {'met' if goal['met'] else 'NOT met'}")

    settings = dict(
        description=__doc__.strip().splitlines()[0],
        definitions=dict(
            agent_step="one env step of one agent + one gradient update (train_freq=1, gradient_steps=1)",
            ours="jit(vmap(Trainer.run_block, in_axes=(0, None, None))) over seeds; steady state = calls "
                 "after the first; includes one greedy nominal evaluation episode per call",
            sb3="benchmarks/sb3/sb3_reference.py mode=loop, seeds sequential, torch threads as in sb3_threads",
            ratio="a row's agent-steps/s / SB3's median agent-steps/s (the target: medians over medians)",
        ),
        setting=dict(env="CartPole-v1", physics="length", max_rate=MAX_RATE, num_agents=K,
                     sync_every=SYNC_EVERY, **{k: list(v) if isinstance(v, tuple) else v for k, v in AGENT.items()}),
        repeats=a.repeats, sb3_threads=a.sb3_threads, sb3=sb3, target=goal,
    )
    harness.write(a.out, BENCHMARK, settings, rows, machine=info)


if __name__ == "__main__":
    sys.exit(main())
