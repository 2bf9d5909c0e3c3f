"""Federated DDPG agent-steps per second and FLOP/s, against this machine's batched-matmul rate.

One *agent-step* is one environment step of one agent plus one gradient update (train_freq 1,
gradient_steps 1: critic(s), expectile network, actor, soft target updates), with the federated
average every E = 100 steps. Setting: FedRDDPG, K = 5 agents, 5 vmapped seeds, 400-300 networks,
batch 64 (the paper's), RL-Zoo3's other DDPG settings, on `--env` (Hopper-v4 once the MJX
environments are registered; Pendulum-v1 with perturbed mass by default on this branch).

  rate   `jax.jit(jax.vmap(trainer.run_block, in_axes=(0, None, None)))` over seeds, one call =
         `--rounds-per-call` rounds of E steps of all K agents of every seed plus one greedy
         evaluation episode (inside the timing). Block 0 (crosses learning_starts) is a warm-up.
  FLOP   counted by hand per gradient step (`update_flop`: 2 m n k per dense-layer product; backward
         = input- and weight-gradient products, 2x the forward), the dominant work of an
         agent-step; acting and evaluation (batch 1) are left out. XLA's own count
         (`cost_analysis`) is recorded too but counts a loop body once, not once per iteration.
  matmul the machine's rate for the same work shape, measured in the same run: one jitted program
         of batched matmuls [seeds*K, 64, n_in] x [seeds*K, n_in, n_out] for every dense layer of
         the critic and the actor (400-300), forward and both backward products, repeated in a
         fori_loop; its FLOP are counted by hand (2 m n k per product).

The SB3 reference loop (issue 11) is not part of this script yet: the JAX side is reported alone.

Usage: python benchmarks/ddpg_throughput.py [--env Pendulum-v1] [--param m] [--repeats 3] [--out PATH]
Writes benchmarks/results/ddpg_throughput.json (or --out).
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
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from fedjax_rl import configs, envs, train  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "ddpg_throughput.json")
K, SYNC_EVERY, BATCH, HIDDEN = 5, 100, 64, (400, 300)


def dense_flop(batch, sizes):
    """Forward FLOP of an MLP with layer sizes [in, h1, ..., out] at `batch`."""
    return sum(2 * batch * i * o for i, o in zip(sizes[:-1], sizes[1:]))


def update_flop(obs_size, act_size, num_critics, robust):
    """FLOP of one DDPG gradient step at batch 64: target actor and critics on s', D(s) for the target,
    critic forward + backward, D forward + backward, actor forward + critic forward + input-gradient
    backward through the critic + actor backward (the pieces of `DDPGAgent.update`)."""
    critic = dense_flop(BATCH, [obs_size + act_size, *HIDDEN, 1])
    actor = dense_flop(BATCH, [obs_size, *HIDDEN, act_size])
    degree = dense_flop(BATCH, [obs_size, *HIDDEN, 1])
    target = actor + num_critics * critic + (degree if robust else 0)
    critics_step = 3 * num_critics * critic
    degree_step = 3 * degree if robust else 0
    actor_step = actor + critic + critic + 2 * actor
    return target + critics_step + degree_step + actor_step


def make_case(algo, env_name, param, num_seeds, rounds_per_call, calls):
    steps = rounds_per_call * SYNC_EVERY * (calls + 1)
    config = configs.train_config(
        algo, env_name, physics=(param,), num_agents=K, sync_every=SYNC_EVERY, steps_per_agent=steps,
        eval_every_rounds=rounds_per_call, eval_episodes=1, sweep_points=2,
        agent_overrides=dict(hidden_sizes=HIDDEN, batch_size=BATCH, buffer_size=100_000, learning_starts=BATCH),
    )
    trainer = train.make_trainer(config)
    hp = trainer.hparams
    state = jax.jit(jax.vmap(trainer.init))(train.seed_keys(0, num_seeds))
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(trainer.run_block, in_axes=(0, None, None))).lower(state, hp, 0).compile()
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    agent_steps = num_seeds * K * rounds_per_call * SYNC_EVERY
    box = dict(state=state, block=0)

    def call():
        t0 = time.perf_counter()
        box["state"], metrics = compiled(box["state"], hp, box["block"])
        jax.block_until_ready((box["state"], metrics))
        box["block"] += 1
        return time.perf_counter() - t0

    first = call()
    times = [call() for _ in range(calls)]
    seconds = statistics.median(times)
    xla_flops = float(cost.get("flops", float("nan")))
    obs_size = int(np.prod(trainer.agent.obs_shape))
    act_size = int(np.prod(trainer.agent.action_shape))
    flops = agent_steps * update_flop(obs_size, act_size, config.agent.num_critics, config.agent.robust)
    return dict(algo=algo, env=env_name, param=param, num_seeds=num_seeds, num_agents=K, compile_s=compile_s,
                first_call_s=first, call_seconds=times, agent_steps_per_call=agent_steps,
                agent_steps_per_sec=agent_steps / seconds, flop_per_call=flops, xla_cost_analysis_flop=xla_flops,
                flop_per_agent_step=flops / agent_steps, flop_per_sec=flops / seconds,
                obs_size=obs_size, action_size=act_size, hidden_sizes=list(HIDDEN), batch_size=BATCH,
                num_critics=config.agent.num_critics, robust=config.agent.robust)


def matmul_rate(copies, obs_size, act_size, repeats=20):
    """FLOP/s of batched matmuls with the critic's and actor's layer shapes at batch 64 (forward,
    input-gradient and weight-gradient products), `copies` independent networks (seeds x agents)."""
    layers = []
    for n_in in (obs_size + act_size, obs_size):  # critic, actor
        sizes = [n_in, *HIDDEN, 1 if n_in == obs_size + act_size else act_size]
        layers += list(zip(sizes[:-1], sizes[1:]))
    key = jax.random.key(0)
    xs = [jax.random.normal(key, (copies, BATCH, i)) for i, _ in layers]
    ws = [jax.random.normal(key, (copies, i, o)) for i, o in layers]
    gs = [jax.random.normal(key, (copies, BATCH, o)) for _, o in layers]
    flop_once = sum(3 * 2 * copies * BATCH * i * o for i, o in layers)

    @jax.jit
    def work(xs, ws, gs):
        def body(_, acc):
            total = acc
            for x, w, g in zip(xs, ws, gs):
                y = jnp.einsum("cbi,cio->cbo", x + acc, w)  # forward
                dx = jnp.einsum("cbo,cio->cbi", g + acc, w)  # gradient w.r.t. the input
                dw = jnp.einsum("cbi,cbo->cio", x, g + acc)  # gradient w.r.t. the weights
                total = total + 1e-9 * (y.sum() + dx.sum() + dw.sum())
            return total

        return jax.lax.fori_loop(0, repeats, body, jnp.float32(0.0))

    jax.block_until_ready(work(xs, ws, gs))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(work(xs, ws, gs))
        times.append(time.perf_counter() - t0)
    return flop_once * repeats / statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Hopper-v4" if "Hopper-v4" in envs.list_envs() else "Pendulum-v1")
    p.add_argument("--param", default=None, help="perturbed parameter (default: the task's first)")
    p.add_argument("--algos", default="fedrddpg,ddpgavg2")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--rounds-per-call", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=RESULTS)
    a = p.parse_args()
    param = a.param or envs.get_spec(a.env).perturbed[0]
    info = common.machine()
    print(f"machine: {info['cpu']}, {info['cores']} cores, jax {info['jax']} ({info['backend']}); load "
          f"{' '.join(f'{x:.1f}' for x in info['load_average_1_5_15min_at_start'])}", flush=True)
    rows = []
    for algo in a.algos.split(","):
        row = make_case(algo, a.env, param, a.seeds, a.rounds_per_call, a.repeats)
        rows.append(row)
        print(f"{algo} {a.env} K={K} x{a.seeds} seeds: {row['agent_steps_per_sec']:.0f} agent-steps/s, "
              f"{row['flop_per_agent_step'] / 1e6:.1f} MFLOP/agent-step, {row['flop_per_sec'] / 1e9:.2f} GFLOP/s "
              f"(compile {row['compile_s']:.0f}s)", flush=True)
    peak = matmul_rate(a.seeds * K, rows[0]["obs_size"], rows[0]["action_size"])
    for row in rows:
        row["matmul_flop_per_sec"] = peak
        row["fraction_of_matmul_rate"] = row["flop_per_sec"] / peak
    print(f"batched-matmul rate at these shapes: {peak / 1e9:.2f} GFLOP/s")
    print(f"{'algo':10} {'agent-steps/s':>14} {'MFLOP/step':>11} {'GFLOP/s':>8} {'of matmul':>9}")
    for row in rows:
        print(f"{row['algo']:10} {row['agent_steps_per_sec']:14.0f} {row['flop_per_agent_step'] / 1e6:11.1f} "
              f"{row['flop_per_sec'] / 1e9:8.2f} {row['fraction_of_matmul_rate']:9.1%}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(dict(machine=info, matmul_flop_per_sec=peak, ours=rows,
                       sb3=None, note="SB3 reference loop not implemented in this script yet"), f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
