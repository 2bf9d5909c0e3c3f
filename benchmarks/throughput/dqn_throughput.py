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

Measurements are interleaved (ours, sb3, ours, sb3, ...) because the machine is shared; every
table entry is the median over repeats, and the load average is recorded. `agent-steps/CPU-s`
divides by the process's CPU time (all threads), a less load-sensitive figure.

Usage:
  python -m benchmarks.throughput.dqn_throughput [--repeats 3] [--seeds-scaling 25] [--no-sb3] [--out PATH]
Writes benchmarks/results/throughput/dqn_throughput.json (or --out; the GPU run uses dqn_throughput_gpu.json)
in benchmarks/harness.py's format: a row per case of ours (medians, and every timed call under
`timed_calls`) and one for SB3 (`algo` "sb3").
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time

import jax
import numpy as np

from benchmarks import common, harness
from fedjax_rl.training import configs, program

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


def make_case(algo: str, num_seeds: int, rounds_per_call: int, calls: int, cpu_dots: str | None = None):
    """Compile one vmapped-seeds `run_block` (with `cpu_dots`' matrix products on a CPU, default the
    algorithm's); return a callable that times one more block."""
    steps_per_agent = rounds_per_call * SYNC_EVERY * (calls + 1)
    cfg = configs.train_config(
        algo, "CartPole-v1", agent_overrides=AGENT, num_agents=K, sync_every=SYNC_EVERY,
        max_rate=MAX_RATE, steps_per_agent=steps_per_agent, eval_every_rounds=rounds_per_call,
        eval_episodes=1, cpu_dots=cpu_dots,
    )
    trainer = program.make_trainer(cfg)
    hp = trainer.hparams
    jit = functools.partial(jax.jit, compiler_options=cfg.compiler_options)  # the run's matrix-product library
    state = jit(jax.vmap(trainer.init))(program.seed_keys(0, num_seeds))
    jax.block_until_ready(state)
    run_block = jit(jax.vmap(trainer.run_block, in_axes=(0, None, None)))
    t0 = time.perf_counter()
    compiled = run_block.lower(state, hp, 0).compile()
    compile_s = time.perf_counter() - t0
    agent_steps_per_call = num_seeds * K * rounds_per_call * SYNC_EVERY
    box = dict(state=state, block=0)

    def call():
        t0, c0 = time.perf_counter(), time.process_time()
        box["state"], metrics = compiled(box["state"], hp, box["block"])
        jax.block_until_ready((box["state"], metrics))
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        box["block"] += 1
        return dict(seconds=dt, cpu_seconds=dc, agent_steps=agent_steps_per_call,
                    agent_steps_per_sec=agent_steps_per_call / dt,
                    agent_steps_per_cpu_sec=agent_steps_per_call / dc,
                    load_avg_1min=os.getloadavg()[0],
                    train_return=float(np.mean(metrics["train_return"])))

    warmup = call()  # block 0: first execution, crosses learning_starts
    return dict(algo=algo, cpu_dots=cfg.dots, num_seeds=num_seeds, num_agents=K, compile_s=compile_s,
                rounds_per_call=rounds_per_call, agent_steps_per_call=agent_steps_per_call,
                first_call_s=warmup["seconds"], call=call, calls=[], max_calls=calls,
                config=dict(steps_per_agent=steps_per_agent, eval_every_rounds=rounds_per_call,
                            eval_episodes=1, agent={k: getattr(cfg.agent, k) for k in (
                                "learning_rate", "gamma", "batch_size", "buffer_size", "learning_starts",
                                "train_freq", "gradient_steps", "target_update_interval",
                                "exploration_fraction", "exploration_final_eps", "hidden_sizes",
                                "omega", "tau", "robust")}))


def run_sb3(num_seeds: int, steps: int, threads: int, python: str = BENCH_PYTHON) -> dict:
    cmd = [python, "-m", "benchmarks.sb3.sb3_reference", "--agents", str(K), "--seeds",
           str(num_seeds), "--steps", str(steps), "--sync-every", str(SYNC_EVERY), "--length-rate",
           str(MAX_RATE), "--batch-size", "16", "--buffer-size", "1000", "--learning-starts",
           str(LEARNING_STARTS), "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return json.loads(out[out.index("{"):])


def machine() -> dict:
    return dict(common.machine(), dtype="float32")


def sb3_summary(result: dict) -> dict | None:
    """The SB3 row of a result, without its runs."""
    row = next((r for r in result["rows"] if r["algo"] == "sb3"), None)
    return None if row is None else {k: v for k, v in row.items() if k not in ("runs", "algo")}


def attach_sb3(path: str, reference: str) -> None:
    """Ratios of a results file (e.g. the GPU run's) against the SB3 rate measured in another run."""
    res, ref = harness.read(path), harness.read(reference)
    sb3 = sb3_summary(ref)
    sb3["source"] = (f"{os.path.relpath(reference, ROOT)}: SB3 on {ref['machine']['cpu']} "
                     f"({ref['machine']['cores']} cores), measured in that run, not this one")
    res["rows"] = [r for r in res["rows"] if r["algo"] != "sb3"]
    for row in res["rows"]:
        row["ratio_vs_sb3"] = row["agent_steps_per_sec"] / sb3["agent_steps_per_sec"]
        print(f"{row['algo']} x{row['num_seeds']}: {row['agent_steps_per_sec']:.0f} agent-steps/s = "
              f"{row['ratio_vs_sb3']:.1f}x SB3 ({sb3['agent_steps_per_sec']:.1f})")
    first = res["rows"][0]
    res["settings"]["target"] = dict(required_ratio=100, case=f"{first['algo']} x{first['num_seeds']} seeds",
                                     ratio=first["ratio_vs_sb3"], met=first["ratio_vs_sb3"] >= 100,
                                     best=max(r["ratio_vs_sb3"] for r in res["rows"]))
    res["rows"].append(dict(sb3, algo="sb3"))
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

    cases = []
    for algo in a.algos.split(","):
        for dots in a.cpu_dots:
            cases.append(make_case(algo, a.seeds, a.rounds_per_call, a.repeats, dots))
    for s in a.seeds_scaling:
        cases.append(make_case("fedrdqn", s, a.scaling_rounds_per_call or a.rounds_per_call, a.repeats))
    for c in cases:
        print(f"compiled {c['algo']} ({c['cpu_dots']}) x{c['num_seeds']} seeds: compile {c['compile_s']:.1f}s, "
              f"first call {c['first_call_s']:.1f}s", flush=True)

    sb3_runs = []
    for r in range(a.repeats):
        for c in cases:
            c["calls"].append(c["call"]())
            x = c["calls"][-1]
            print(f"  rep {r}: ours {c['algo']} ({c['cpu_dots']}) x{c['num_seeds']}: {x['agent_steps_per_sec']:.0f} "
                  f"agent-steps/s (load {x['load_avg_1min']:.1f})", flush=True)
            if not a.no_sb3 and c is cases[0]:
                res = run_sb3(a.seeds, a.sb3_steps, a.sb3_threads, a.sb3_python)
                sb3_runs.append(res)
                print(f"  rep {r}: sb3 x{a.seeds}: {res['agent_steps_per_sec']:.1f} agent-steps/s "
                      f"(load {res['load_avg_1min_at_end']:.1f})", flush=True)

    sb3 = None
    if sb3_runs:
        sb3 = dict(common.median_rates(sb3_runs), source="measured in this run", runs=sb3_runs)
    elif a.sb3_reference:
        sb3 = dict(sb3_summary(harness.read(a.sb3_reference)),
                   source=f"from {os.path.relpath(a.sb3_reference, ROOT)} (other machine/run)")

    rows = []
    for c in cases:
        row = {k: v for k, v in c.items() if k not in ("call", "calls", "max_calls")}
        row.update(common.median_rates(c["calls"], sb3))
        row["timed_calls"] = c["calls"]
        rows.append(row)

    print(f"\nagent-steps/s (median of {a.repeats}); 1 gradient update per agent-step; K={K}, E={SYNC_EVERY}, "
          f"net 256x256, batch 16, buffer 1000")
    print(f"{'impl':<26}{'seeds':>6}{'agent-steps/s':>15}{'per CPU-s':>11}{'x SB3':>8}{'x SB3/CPU-s':>12}"
          f"{'compile s':>11}")
    for r in rows:
        print(f"{'fedjax_rl ' + r['algo'] + ' (' + r['cpu_dots'] + ')':<26}{r['num_seeds']:>6}"
              f"{r['agent_steps_per_sec']:>15.0f}"
              f"{r['agent_steps_per_cpu_sec']:>11.0f}{r.get('ratio_vs_sb3', float('nan')):>8.1f}"
              f"{r.get('ratio_vs_sb3_per_cpu_sec', float('nan')):>12.1f}{r['compile_s']:>11.1f}")
    if sb3:
        print(f"{'SB3 DQN (federated loop)':<26}{a.seeds:>6}{sb3['agent_steps_per_sec']:>15.1f}"
              f"{sb3['agent_steps_per_cpu_sec']:>11.1f}{1.0:>8.1f}{1.0:>12.1f}{'-':>11}   ({sb3['source']})")
    target = rows[0].get("ratio_vs_sb3")
    if target is not None:
        print(f"target (>= 100x SB3, {rows[0]['algo']} x{rows[0]['num_seeds']} seeds): {target:.1f}x -> "
              f"{'met' if target >= 100 else 'NOT met'}")
    info["load_average_1_5_15min_at_end"] = list(os.getloadavg())
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in info['load_average_1_5_15min_at_end'])}")

    settings = dict(
        description=__doc__.strip().splitlines()[0],
        definitions=dict(
            agent_step="one env step of one agent + one gradient update (train_freq=1, gradient_steps=1)",
            ours="jit(vmap(Trainer.run_block, in_axes=(0, None, None))) over seeds; steady state = calls "
                 "after the first; includes one greedy nominal evaluation episode per call",
            sb3="benchmarks/sb3/sb3_reference.py mode=loop, seeds sequential, torch threads as in sb3_threads",
            ratio="ours agent-steps/s / SB3 agent-steps/s (medians)",
        ),
        setting=dict(env="CartPole-v1", physics="length", max_rate=MAX_RATE, num_agents=K,
                     sync_every=SYNC_EVERY, **{k: list(v) if isinstance(v, tuple) else v for k, v in AGENT.items()}),
        repeats=a.repeats, sb3_threads=a.sb3_threads,
        target=dict(required_ratio=100, case=f"{rows[0]['algo']} x{rows[0]['num_seeds']} seeds",
                    ratio=target, met=None if target is None else target >= 100),
    )
    if sb3:
        rows.append(dict(sb3, algo="sb3", num_seeds=a.seeds))
    harness.write(a.out, BENCHMARK, settings, rows, machine=info)


if __name__ == "__main__":
    sys.exit(main())
