"""Federated DDPG agent-steps per second and FLOP/s, against this machine's batched-matmul rate.

One *agent-step* is one environment step of one agent plus one gradient update (train_freq 1,
gradient_steps 1: critic(s), expectile network, actor, soft target updates), with the federated
average every E = 100 steps. Setting: FedRDDPG, DDPGAvg(1) and DDPGAvg(2), K = 5 agents, 5 vmapped
seeds, 400-300 networks, batch 64 (the paper's), RL-Zoo3's other DDPG settings, on `--env` (Hopper-v4
with perturbed torso mass by default) stepped by `--engine` (MuJoCo's C engine by default).

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

  sb3    `benchmarks.sb3.sb3_ddpg_reference` (SB3 DDPG on gymnasium's MuJoCo Hopper-v4, the same federated loop,
         DDPGAvg(1)) run with the .venv-bench interpreter as a subprocess after each repeat of ours
         (cases of `harness.measure`, interleaved: the machine is shared); ratios are medians over medians. SAC rows
         (`--algos fedrsac,sacavg`) are compared with SB3's SAC in the same loop (`--algo sac`:
         SACAvg's work, log alpha averaged too), run beside SB3's DDPG in every repeat.
  memory `--memory-env` (Ant-v4): a FedRDDPG run of K x seeds agents with replay `--memory-buffer` in
         a child process; its peak RSS, RSS by stage and the replay's theoretical size.

Usage: python -m benchmarks.throughput.ddpg_throughput [--env Hopper-v4] [--param torso] [--repeats 3]
       [--no-sb3] [--algos fedrddpg,ddpgavg1,ddpgavg2,fedrsac,sacavg]
       [--memory-env Ant-v4 | ''] [--memory-into RESULT] [--out PATH]
Writes benchmarks/results/throughput/ddpg_throughput.json (or --out) in benchmarks/harness.py's format:
a row per case and repeat of ours (`kind` "ours") and of each SB3 algorithm (`kind` "sb3"), a row per
CPU library and repeat of the matmul rate (`kind` "matmul") and one for the memory run (`kind` "memory").
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common, harness
from fedjax_rl import agents, envs
from fedjax_rl.training import configs, machine

BENCHMARK = "throughput.ddpg_throughput"
BENCH_PYTHON = os.path.join(harness.ROOT, ".venv-bench", "bin", "python")
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


def sac_update_flop(obs_size, act_size, num_critics, robust):
    """FLOP of one SAC gradient step at batch 64 (the pieces of `SACAgent.update`): the policy on s
    for the temperature's step; the policy on s', the target critics and D(s) for the target;
    critics and D forward + backward; the policy on s again, the critics, the input-gradient
    backward through them and the policy's backward for the actor step. The policy outputs a mean
    and a log-std per action dimension."""
    critic = dense_flop(BATCH, [obs_size + act_size, *HIDDEN, 1])
    actor = dense_flop(BATCH, [obs_size, *HIDDEN, 2 * act_size])
    degree = dense_flop(BATCH, [obs_size, *HIDDEN, 1])
    target = actor + num_critics * critic + (degree if robust else 0)
    actor_step = actor + 2 * num_critics * critic + 2 * actor
    return actor + target + 3 * num_critics * critic + (3 * degree if robust else 0) + actor_step


def sb3_family(algo) -> str:
    """The SB3 algorithm a row of ours is compared with: "sac" for the SAC family, else "ddpg"."""
    return "sac" if agents.get(algo).family == "SAC" else "ddpg"


def ddpg_config(algo, env_name, param, rounds_per_call, calls, buffer_size=100_000, engine=None, cpu_dots=None):
    """The training config of a case: K agents, 400-300 networks, batch 64, RL-Zoo3's other settings,
    a block of `rounds_per_call` rounds and one evaluation episode, enough steps for `calls` + 2 blocks."""
    return configs.train_config(
        algo, env_name, physics=(param,), engine=engine, cpu_dots=cpu_dots, num_agents=K, sync_every=SYNC_EVERY,
        steps_per_agent=rounds_per_call * SYNC_EVERY * (calls + 2), eval_every_rounds=rounds_per_call,
        eval_episodes=1, sweep_points=2,
        agent_overrides=dict(hidden_sizes=HIDDEN, batch_size=BATCH, buffer_size=buffer_size, learning_starts=BATCH),
    )


def make_case(algo, env_name, param, num_seeds, rounds_per_call, calls, buffer_size=100_000, engine=None,
              cpu_dots=None, run_batch=None) -> harness.Case:
    """One case of ours: its setup builds and compiles a `common.Block` (the seeds mapped as `loop.run`
    maps them: all in one vmap, or `run_batch` at a time; the state donated), each call runs one block."""
    config = ddpg_config(algo, env_name, param, rounds_per_call, calls, buffer_size, engine, cpu_dots)

    def setup():
        block = common.Block(config, num_seeds, run_batch, donate=True)
        cost = block.compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        obs_size = int(np.prod(block.trainer.agent.obs_shape))
        act_size = int(np.prod(block.trainer.agent.action_shape))
        flop = (sac_update_flop if sb3_family(algo) == "sac" else update_flop)(
            obs_size, act_size, config.agent.num_critics, config.agent.robust)
        block.info.update(flop_per_agent_step=flop, xla_cost_analysis_flop=float(cost.get("flops", float("nan"))),
                          obs_size=obs_size, action_size=act_size, num_critics=config.agent.num_critics,
                          robust=config.agent.robust)
        return block

    settings = dict(kind="ours", algo=algo, env=env_name, param=param, engine=config.engine, cpu_dots=config.dots,
                    run_batch=run_batch, num_seeds=num_seeds, num_agents=K, hidden_sizes=list(HIDDEN),
                    batch_size=BATCH, buffer_size=buffer_size)
    return harness.Case(label(settings), setup, settings)


def replay_bytes(state) -> int:
    """Bytes of every replay-buffer leaf in the (seeds, agents)-batched train state."""
    total = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        if "buffer" in jax.tree_util.keystr(path).lower() or "replay" in jax.tree_util.keystr(path).lower():
            total += leaf.size * leaf.dtype.itemsize
    return total


def memory_case(env_name, param, num_seeds, buffer_size) -> dict:
    """Peak resident memory of a FedRDDPG run (init + compile + one block) at K x seeds agents, replay
    `buffer_size` per agent, beside the replay's size: theoretical (transitions x bytes of one
    transition) and as allocated (the buffer leaves of the state). Run in a fresh process."""
    import resource

    baseline_rss = common.current_rss()
    block = common.Block(ddpg_config("fedrddpg", env_name, param, 1, 1, buffer_size), num_seeds, donate=True)
    block()
    block()
    obs = int(np.prod(block.trainer.agent.obs_shape))
    act = int(np.prod(block.trainer.agent.action_shape))
    # one stored transition: obs, next obs, action, reward (float32) and terminated (bool); truncation
    # is not stored (a truncated step bootstraps like any other)
    per_transition = 4 * (2 * obs + act + 1) + 1
    agents = num_seeds * K
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(block.state))
    return dict(env=env_name, param=param, num_seeds=num_seeds, num_agents=K, buffer_size=buffer_size,
                agents=agents, bytes_per_transition=per_transition,
                replay_theoretical_bytes=agents * buffer_size * per_transition,
                replay_allocated_bytes=replay_bytes(block.state), train_state_bytes=state_bytes,
                peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                rss_bytes=dict(before_building=baseline_rss, **block.rss, after_two_blocks=common.current_rss()),
                compile_s=block.info["compile_s"])


def sb3_case(env_name, body, num_seeds, steps, threads, python=BENCH_PYTHON, algo="ddpg") -> harness.Case:
    args = ["--algo", algo, "--net-arch", ",".join(map(str, HIDDEN)), "--env", env_name, "--body", body,
            "--agents", str(K), "--seeds", str(num_seeds), "--steps", str(steps), "--sync-every", str(SYNC_EVERY),
            "--learning-starts", str(BATCH), "--threads", str(threads)]
    return common.sb3_case(f"sb3_{algo}", "benchmarks.sb3.sb3_ddpg_reference", args, python,
                           dict(kind="sb3", algo=f"sb3_{algo}", threads=threads))


def label(row) -> str:
    """'ddpgavg1 (eigen)': the algorithm and the CPU matrix-product library its program used, and
    'batch 1' when its seeds were vmapped that many at a time."""
    batch = f", batch {row['run_batch']}" if row.get("run_batch") else ""
    return f"{row['algo']} ({row['cpu_dots']}{batch})"


def matmul_case(copies, obs_size, act_size, repeats=20, cpu_dots=None) -> harness.Case:
    """Batched matmuls with the critic's and actor's layer shapes at batch 64 (forward, input-gradient
    and weight-gradient products), `copies` independent networks (seeds x agents), computed by the CPU
    matrix-product library `cpu_dots` (None: XLA's default), `repeats` times in a fori_loop per call;
    a call's row carries its FLOP (`flop`), so its rate is flop / wall_s."""
    layers = []
    for n_in in (obs_size + act_size, obs_size):  # critic, actor
        sizes = [n_in, *HIDDEN, 1 if n_in == obs_size + act_size else act_size]
        layers += list(zip(sizes[:-1], sizes[1:]))
    flop = sum(3 * 2 * copies * BATCH * i * o for i, o in layers) * repeats

    def setup():
        key = jax.random.key(0)
        xs = [jax.random.normal(key, (copies, BATCH, i)) for i, _ in layers]
        ws = [jax.random.normal(key, (copies, i, o)) for i, o in layers]
        gs = [jax.random.normal(key, (copies, BATCH, o)) for _, o in layers]

        @functools.partial(jax.jit, compiler_options=machine.compiler_options(cpu_dots))
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

        return common.finished(lambda: work(xs, ws, gs), dict(flop=flop))

    return harness.Case(f"matmul ({cpu_dots})", setup, dict(kind="matmul", algo="matmul", cpu_dots=cpu_dots))


def main() -> None:
    p = harness.parser(BENCHMARK, __doc__, repeats=3)
    p.add_argument("--env", default="Hopper-v4")
    p.add_argument("--param", default=None, help="perturbed parameter (default: the task's first)")
    p.add_argument("--engine", default=None, help="physics engine of a MuJoCo task: c (default), mjx, warp")
    common.add_cpu_dots_argument(p)
    p.add_argument("--run-batch", default="",
                   help="seeds vmapped at a time, comma-separated for several cases side by side (loop.run's "
                        "run_batch; 'all': every seed in one vmap, the default)")
    p.add_argument("--algos", default="fedrddpg,ddpgavg1,ddpgavg2")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--rounds-per-call", type=int, default=2)
    p.add_argument("--no-sb3", action="store_true")
    p.add_argument("--sb3-steps", type=int, default=100, help="timed steps per SB3 agent per repeat")
    p.add_argument("--sb3-threads", type=int, default=1)
    p.add_argument("--sb3-python", default=BENCH_PYTHON)
    p.add_argument("--memory-env", default="Ant-v4", help="task of the peak-memory run ('' to skip)")
    p.add_argument("--memory-buffer", type=int, default=100_000)
    p.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)  # the child process
    p.add_argument("--memory-into", metavar="JSON", default=None,
                   help="only (re)measure the memory run and store it as the memory row of an existing result")
    a = p.parse_args()
    if a.memory_only:  # the child process: its one row to --out, for the parent to read
        param = a.param or envs.get(a.env).perturbed[0]
        harness.write(a.out, BENCHMARK, dict(memory_only=True), [memory_case(a.env, param, a.seeds, a.memory_buffer)])
        return
    param = a.param or envs.get(a.env).perturbed[0]
    info = common.machine()
    print(common.machine_line(info), flush=True)

    memory = None
    if a.memory_env or a.memory_into:
        # its own process, so that ru_maxrss is this run's peak and nothing else's
        mparam = envs.get(a.memory_env).perturbed[0]
        with tempfile.TemporaryDirectory() as tmp:
            child = os.path.join(tmp, "memory.json")
            cmd = [sys.executable, "-m", f"benchmarks.{BENCHMARK}", "--memory-only", "--env", a.memory_env,
                   "--param", mparam, "--seeds", str(a.seeds), "--memory-buffer", str(a.memory_buffer), "--out", child]
            subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=harness.ROOT)
            memory = harness.read(child)["rows"][0]
        gib = 2.0 ** 30
        print(f"memory, FedRDDPG {a.memory_env} K={K} x{a.seeds} seeds, replay {a.memory_buffer} per agent: peak RSS "
              f"{memory['peak_rss_bytes'] / gib:.2f} GiB; replay theoretical {memory['replay_theoretical_bytes'] / gib:.2f}"
              f" GiB, allocated {memory['replay_allocated_bytes'] / gib:.2f} GiB; whole train state "
              f"{memory['train_state_bytes'] / gib:.2f} GiB; RSS by stage "
              f"{ {k: round(v / gib, 2) for k, v in memory['rss_bytes'].items()} } GiB", flush=True)
        if a.memory_into:
            result = harness.read(a.memory_into)
            result["rows"] = [r for r in result["rows"] if r.get("kind") != "memory"]
            result["rows"].append(dict(memory, kind="memory", env=a.memory_env, machine=info))
            harness.dump(a.memory_into, result)
            return

    cases = [make_case(algo, a.env, param, a.seeds, a.rounds_per_call, a.repeats, engine=a.engine, cpu_dots=dots,
                       run_batch=configs.parse_run_batch(run_batch))
             for algo in a.algos.split(",")
             for dots, run_batch in itertools.product(a.cpu_dots, a.run_batch.split(",") if a.run_batch else ["all"])]
    ours = [c.name for c in cases]
    body = envs.get(a.env).perturbed[0] if param is None else param
    families = sorted({sb3_family(c.settings["algo"]) for c in cases})  # the SB3 algorithms to run
    if not a.no_sb3:
        cases += [sb3_case(a.env, body, a.seeds, a.sb3_steps, a.sb3_threads, a.sb3_python, f) for f in families]
    rows = common.measure_rates(cases, a.repeats)
    first = next(r for r in rows if r["kind"] == "ours")
    obs_size, act_size = first["obs_size"], first["action_size"]
    # The ceiling is the faster library's rate at these shapes (on a CPU they differ by 10-50% per
    # product: benchmarks/README.md, "Matrix products on a CPU"), the libraries interleaved.
    matmul = harness.measure([matmul_case(a.seeds * K, obs_size, act_size, cpu_dots=dots) for dots in machine.CPU_DOTS],
                             repeats=3)
    for row in matmul:
        row["flop_per_sec"] = row["flop"] / row["wall_s"]
    matmul_by_library = {dots: harness.median(matmul, "flop_per_sec", cpu_dots=dots) for dots in machine.CPU_DOTS}
    peak = max(matmul_by_library.values())
    sb3_by_family = {}
    for family in families:
        summary = common.sb3_rates(dict(rows=rows), algo=f"sb3_{family}")
        if summary:
            flop = (sac_update_flop if family == "sac" else update_flop)(obs_size, act_size, 1 + (family == "sac"), False)
            sb3_by_family[family] = dict(summary, flop_per_agent_step=flop, flop_per_sec=summary["agent_steps_per_sec"] * flop)
    for row in rows:
        family = row["algo"].removeprefix("sb3_") if row["kind"] == "sb3" else sb3_family(row["algo"])
        if row["kind"] == "sb3":
            row["flop_per_agent_step"] = sb3_by_family[family]["flop_per_agent_step"]
        row["flop_per_sec"] = row["agent_steps_per_sec"] * row["flop_per_agent_step"]
        row["matmul_flop_per_sec"] = peak
        row["fraction_of_matmul_rate"] = row["flop_per_sec"] / peak
        if family in sb3_by_family:
            row["ratio_vs_sb3"] = row["agent_steps_per_sec"] / sb3_by_family[family]["agent_steps_per_sec"]
            row["ratio_vs_sb3_per_cpu_sec"] = row["agent_steps_per_cpu_sec"] / sb3_by_family[family]["agent_steps_per_cpu_sec"]
    medians = {name: harness.medians(rows, ("agent_steps_per_sec", "agent_steps_per_cpu_sec", "flop_per_sec",
                                            "fraction_of_matmul_rate", "ratio_vs_sb3", "ratio_vs_sb3_per_cpu_sec"),
                                     case=name) for name in ours}

    print(f"\n{a.env} ({param}, engine {first['engine']}), K={K} x {a.seeds} seeds, E={SYNC_EVERY}, {HIDDEN[0]}-{HIDDEN[1]} nets, batch {BATCH}; "
          f"one env step + one gradient update per agent-step; medians of {a.repeats} interleaved repeats")
    print(f"batched-matmul rate at these shapes (this run, the faster library): {peak / 1e9:.2f} GFLOP/s ("
          + ", ".join(f"{dots} {rate / 1e9:.2f}" for dots, rate in matmul_by_library.items()) + ")")
    print(f"{'impl':<28}{'agent-steps/s':>14}{'per CPU-s':>10}{'MFLOP/step':>11}{'GFLOP/s':>8}{'of matmul':>10}"
          f"{'x SB3':>7}{'x SB3/CPU-s':>12}")
    for name, m in medians.items():
        flop = next(r["flop_per_agent_step"] for r in rows if r["case"] == name)
        print(f"{'fedjax_rl ' + name:<28}{m['agent_steps_per_sec']:>14.1f}{m['agent_steps_per_cpu_sec']:>10.1f}"
              f"{flop / 1e6:>11.1f}{m['flop_per_sec'] / 1e9:>8.2f}{m['fraction_of_matmul_rate']:>10.1%}"
              f"{m.get('ratio_vs_sb3', float('nan')):>7.2f}{m.get('ratio_vs_sb3_per_cpu_sec', float('nan')):>12.2f}")
    for family, summary in sb3_by_family.items():
        print(f"{'SB3 %s (%d torch thread)' % (family.upper(), a.sb3_threads):<28}{summary['agent_steps_per_sec']:>14.1f}"
              f"{summary['agent_steps_per_cpu_sec']:>10.1f}{summary['flop_per_agent_step'] / 1e6:>11.1f}"
              f"{summary['flop_per_sec'] / 1e9:>8.2f}{summary['flop_per_sec'] / peak:>10.1%}{1.0:>7.2f}{1.0:>12.2f}")
    target = next((name for name in ours if name.startswith("ddpgavg1 ")), ours[0])
    ratio, per_cpu = medians[target].get("ratio_vs_sb3"), medians[target].get("ratio_vs_sb3_per_cpu_sec")
    settings = dict(
        description=__doc__.strip().splitlines()[0], repeats=a.repeats,
        setting=dict(env=a.env, param=param, engine=first["engine"], num_agents=K, num_seeds=a.seeds,
                     sync_every=SYNC_EVERY,
                     hidden_sizes=list(HIDDEN), batch_size=BATCH, buffer_size=100_000, learning_starts=BATCH,
                     rounds_per_call=a.rounds_per_call),
        matmul_flop_per_sec=peak, matmul_flop_per_sec_by_library=matmul_by_library, sb3=sb3_by_family,
        targets=dict(
            sb3_ratio=dict(required=3, case=f"{target} (the same work as SB3 DDPG)", ratio=ratio,
                           met=None if ratio is None else ratio >= 3),
            sb3_ratio_per_cpu_second=dict(required=2, case=target, ratio=per_cpu,
                                          met=None if per_cpu is None else per_cpu >= 2),
            matmul_fraction=dict(required=0.5, fractions={n: m["fraction_of_matmul_rate"] for n, m in medians.items()},
                                 met=all(m["fraction_of_matmul_rate"] >= 0.5 for m in medians.values()))))
    rows += matmul
    if memory is not None:
        rows.append(dict(memory, kind="memory", env=a.memory_env))
    harness.write(a.out, BENCHMARK, settings, rows, machine=info)


if __name__ == "__main__":
    main()
