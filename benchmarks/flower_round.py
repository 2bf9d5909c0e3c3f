"""What a federation of processes pays per round (fedjax_rl.flower) against the compiled program's
synchronisation, per agent-step.

FedRDQN on CartPole-v1 (its Table 1 settings: 256-256 networks, batch 16, sync every E = 100 steps),
K agents, R rounds after a warm-up round (compilation excluded), wall-clock seconds per round:

  compiled    the program's own round, `program.agent_round` mapped over the agent axis and jitted
              (E local steps of every agent, then the mean inside the program): what
              `fedjax-rl train` runs, less its block scan;
  members     the same federation with every agent a `federation.Member` and the server's rule on
              the stacked uploads, in one process: the agents' compute alone, one after another;
  simulation  Flower's simulation engine (`flwr.simulation.run_simulation`, Ray workers), the
              ServerApp and ClientApps of `fedjax_rl.flower.apps` with their messages: the second
              block of R rounds (the first compiles), its one evaluation included, timed by the
              server.

A deployment (a SuperLink and SuperNodes as processes, `tests/test_flower.py`) adds a ClientApp
process per message in Flower's default isolation; its cost is the process start printed by
`--startup` (a fresh interpreter importing the ClientApp and loading its compiled round from the
disk cache), paid per message.

    python benchmarks/flower_round.py [--agents 2] [--rounds 8] [--startup]

Writes benchmarks/results/flower_round.json with the machine.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from fedjax_rl.core import federated  # noqa: E402
from fedjax_rl.flower import federation  # noqa: E402
from fedjax_rl.training import configs, program  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "flower_round.json")
SEED = 0


def task_config(num_agents: int, rounds: int):
    # learning_starts 0: every step of the timed rounds trains, as in the bulk of a run. Two blocks of
    # `rounds` rounds: the simulation is timed over the second (the first compiles).
    return configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=dict(learning_starts=0),
                                num_agents=num_agents, steps_per_agent=100 * 2 * rounds, sync_every=100,
                                eval_every_rounds=rounds, eval_episodes=1, sweep_points=2, tensorboard=False)


def compiled_round_s(config, rounds: int) -> float:
    trainer = program.make_trainer(config)
    state = jax.jit(trainer.init)(program.seed_keys(SEED, 1)[0])
    mapped = jax.jit(federated.for_each_agent(functools.partial(program.agent_round, trainer.setup),
                                              config.num_agents, in_axes=(0, None, None, None)))
    agents, _ = mapped(state.agents, jnp.int32(0), trainer.hparams, None)
    jax.block_until_ready(agents)
    started = time.perf_counter()
    for r in range(1, rounds + 1):
        agents, _ = mapped(agents, jnp.int32(r), trainer.hparams, None)
    jax.block_until_ready(agents)
    return (time.perf_counter() - started) / rounds


def members_round_s(config, rounds: int) -> float:
    members = [federation.Member(config, SEED, k) for k in range(config.num_agents)]
    aggregate = federation.Aggregation(federated.Server(config.num_agents))

    def one_round(carries, r):
        carries = [m.local_round(c, r)[0] for m, c in zip(members, carries)]
        model = aggregate([c.learner.shared for c in carries])
        return [m.with_shared(c, model) for m, c in zip(members, carries)]

    carries = jax.block_until_ready(one_round([m.init() for m in members], 0))
    started = time.perf_counter()
    for r in range(1, rounds + 1):
        carries = one_round(carries, r)
    jax.block_until_ready(carries)
    return (time.perf_counter() - started) / rounds


def simulation_round_s(config, rounds: int) -> float:
    from flwr.simulation import run_simulation

    from fedjax_rl.flower import apps

    stamps = []

    def say(text):
        if text.startswith("round "):
            stamps.append(time.perf_counter())

    run_simulation(apps.server_app(config, SEED, None, say=say), apps.client_app(),
                   num_supernodes=config.num_agents, backend_config={"client_resources": {"num_cpus": 1}})
    # A stamp after each block: the second block's rounds and its one evaluation.
    return (stamps[1] - stamps[0]) / config.eval_every_rounds


def startup_s() -> float:
    """A fresh interpreter importing the ClientApp (JAX, flwr, the library) and building its app."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from fedjax_rl.flower.apps import client_app; client_app()"], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--startup", action="store_true", help="also time a ClientApp process's start")
    args = parser.parse_args()
    config = task_config(args.agents, args.rounds)
    agent_steps = config.num_agents * config.sync_every  # per round
    rows = {}
    for name, measure in (("compiled", compiled_round_s), ("members", members_round_s),
                          ("simulation", simulation_round_s)):
        seconds = measure(config, args.rounds)
        rows[name] = {"round_s": seconds, "agent_steps_per_s": agent_steps / seconds}
        print(json.dumps({name: rows[name]}), flush=True)
    for name in rows:
        rows[name]["vs_compiled"] = rows[name]["round_s"] / rows["compiled"]["round_s"]
    if args.startup:
        rows["clientapp_process_start_s"] = startup_s()
    result = dict(machine=common.machine(), task="CartPole-v1", algo="fedrdqn", num_agents=args.agents,
                  sync_every=config.sync_every, rounds=args.rounds, rows=rows)
    print(common.machine_line(result["machine"]))
    print(f"{'':12} {'s/round':>8} {'agent-steps/s':>14} {'x compiled':>10}")
    for name in ("compiled", "members", "simulation"):
        row = rows[name]
        print(f"{name:12} {row['round_s']:8.3f} {row['agent_steps_per_s']:14,.0f} {row['vs_compiled']:10.2f}")
    if args.startup:
        print(f"a ClientApp process's start: {rows['clientapp_process_start_s']:.1f} s per message")
    with open(RESULTS, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
