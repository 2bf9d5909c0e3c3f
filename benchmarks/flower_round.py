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
              server;
  deployment  with --deployment: a SuperLink and K SuperNodes as processes of their own on
              127.0.0.1 (the deployment test's `Deployment`, tests/test_flower.py) running the
              example app (examples/flower_app) by `flwr run`, as docs/flower.md has a user start
              them: the second block of R rounds, its one evaluation included, timed by the run
              directory's checkpoint (the server writes it after every round). Every process it
              started is stopped at the end. A SuperNode in Flower's default isolation starts a ClientApp
              process for every message: the cost `--startup` prints (a fresh interpreter importing
              the ClientApp and loading its compiled round from the disk cache).

    python -m benchmarks.flower_round [--agents 2] [--rounds 8] [--startup] [--deployment] [--note TEXT]

Writes benchmarks/results/flower_round.json with the machine: one entry per number of agents K
(`by_agents`), so that runs at K = 2 and K = 3 stand side by side; `--note` records what else the
machine ran.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp

from benchmarks import common
from fedjax_rl.core import agent_axis, federated
from fedjax_rl.flower import federation
from fedjax_rl.training import configs, program, run_directory

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, os.pardir, "tests")
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
    mapped = jax.jit(agent_axis.for_each_agent(functools.partial(program.agent_round, trainer.setup),
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


def deployment_run_config(config, out_dir: str) -> str:
    """`flwr run --run-config` text for the example app that runs `config` (its declared keys, the rest
    in `options`); checked against the apps' own reading of it."""
    from fedjax_rl.flower import apps

    values = {"algo": "fedrdqn", "env": "CartPole-v1", "seed": SEED, "out-dir": out_dir,
              "num-agents": config.num_agents, "steps-per-agent": config.steps_per_agent,
              "sync-every": config.sync_every, "eval-every-rounds": config.eval_every_rounds,
              "agent.omega": config.agent.omega, "agent.learning-starts": config.agent.learning_starts,
              "round-timeout": 600, "wait-for-clients": 120,
              "options": f"eval-episodes={config.eval_episodes} sweep-points={config.sweep_points} tensorboard=false"}
    read, seed, _, _ = apps.config_from_run_config(values)
    assert (read, seed) == (config, SEED), "the run config does not say the benchmark's settings"
    return " ".join(f"{k}={json.dumps(v)}" for k, v in values.items())


def deployment_round_s(config, rounds: int, timeout_s: float = 3600.0) -> float:
    """A SuperLink and K SuperNodes on 127.0.0.1, `flwr run` of the example app; every process stopped at
    the end (the deployment test's `Deployment`). The server saves its checkpoint after every round:
    the second block is from the checkpoint of round R to that of round 2R (its evaluation included)."""
    import importlib.util

    # tests/ is no package: its deployment helper is loaded from its file
    spec = importlib.util.spec_from_file_location("test_flower", os.path.join(TESTS, "test_flower.py"))
    test_flower = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(test_flower)
    CONNECTION, EXAMPLE_APP, Deployment = test_flower.CONNECTION, test_flower.EXAMPLE_APP, test_flower.Deployment

    with tempfile.TemporaryDirectory(prefix="flower_round_") as home:
        out = os.path.join(home, "run")
        checkpoint = os.path.join(out, run_directory.CHECKPOINT)
        stamps: list[float] = []  # when each round's checkpoint was written
        with Deployment(home, config.num_agents) as deployment:
            with open(os.path.join(home, "flwr_run.log"), "w") as log:
                flwr = subprocess.Popen([deployment.which("flwr"), "run", EXAMPLE_APP, CONNECTION, "--stream",
                                         "--run-config", deployment_run_config(config, out)],
                                        env=deployment.env, cwd=home, stdout=log, stderr=subprocess.STDOUT)
                try:
                    deadline = time.monotonic() + timeout_s
                    while len(stamps) < config.num_rounds and time.monotonic() < deadline and flwr.poll() is None:
                        try:
                            written = os.stat(checkpoint).st_mtime
                        except FileNotFoundError:
                            written = None
                        if written is not None and (not stamps or written > stamps[-1]):
                            stamps.append(written)
                        time.sleep(0.05)
                    flwr.wait(timeout=max(1.0, deadline - time.monotonic()))
                finally:
                    if flwr.poll() is None:
                        flwr.kill()
                        flwr.wait(timeout=10)
        finished = os.path.exists(os.path.join(out, run_directory.FINISHED))
        if len(stamps) < 2 * rounds or not finished:
            with open(os.path.join(home, "flwr_run.log")) as f:
                raise RuntimeError(f"the deployment saw {len(stamps)} of {2 * rounds} rounds:\n" + f.read()[-4000:])
        print(json.dumps({"deployment_round_s_each": [b - a for a, b in zip(stamps, stamps[1:])]}), flush=True)
    return (stamps[2 * rounds - 1] - stamps[rounds - 1]) / rounds


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
    parser.add_argument("--deployment", action="store_true",
                        help="also time a deployment: a SuperLink and K SuperNodes as processes on 127.0.0.1 (minutes)")
    parser.add_argument("--note", default="", help="recorded with the result: what else the machine ran")
    args = parser.parse_args()
    machine = common.machine()
    config = task_config(args.agents, args.rounds)
    agent_steps = config.num_agents * config.sync_every  # per round
    rows = {}
    measures = [("compiled", compiled_round_s), ("members", members_round_s), ("simulation", simulation_round_s)]
    if args.deployment:
        measures.append(("deployment", deployment_round_s))
    for name, measure in measures:
        seconds = measure(config, args.rounds)
        rows[name] = {"round_s": seconds, "agent_steps_per_s": agent_steps / seconds}
        print(json.dumps({name: rows[name]}), flush=True)
    names = list(rows)
    for name in names:
        rows[name]["vs_compiled"] = rows[name]["round_s"] / rows["compiled"]["round_s"]
    if args.startup:
        rows["clientapp_process_start_s"] = startup_s()
    # The machine is shared: its load at the start and at the end.
    machine["load_average_1_5_15min_at_end"] = list(os.getloadavg())
    result = dict(machine=machine, date=datetime.date.today().isoformat(), note=args.note,
                  task="CartPole-v1", algo="fedrdqn", num_agents=args.agents, sync_every=config.sync_every,
                  rounds=args.rounds, rows=rows)
    print(common.machine_line(result["machine"]))
    print(f"{'':12} {'s/round':>8} {'agent-steps/s':>14} {'x compiled':>10}")
    for name in names:
        row = rows[name]
        print(f"{name:12} {row['round_s']:8.3f} {row['agent_steps_per_s']:14,.0f} {row['vs_compiled']:10.2f}")
    if args.startup:
        print(f"a ClientApp process's start: {rows['clientapp_process_start_s']:.1f} s per message")
    # One entry per K: a run at K = 3 keeps the one at K = 2 (a file of the older layout, one result, is
    # kept as its K's entry).
    recorded = {}
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            recorded = json.load(f)
        if "by_agents" not in recorded:
            recorded = {"by_agents": {str(recorded["num_agents"]): recorded}}
    by_agents = {**recorded.get("by_agents", {}), str(args.agents): result}
    with open(RESULTS, "w") as f:
        json.dump({"by_agents": dict(sorted(by_agents.items()))}, f, indent=1)


if __name__ == "__main__":
    main()
