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

    python -m benchmarks.flower_round [--agents 2] [--rounds 8] [--repeats 1] [--startup] [--deployment]
                                      [--note TEXT] [--out PATH]

`compiled` and `members` are cases of `harness.measure` (each call R rounds, the first round, which
compiles, in the setup), interleaved over `--repeats`. The simulation and the deployment run inside
Flower's processes, so the harness cannot time their rounds: a run of each is one `harness.time_call`
(its whole wall and CPU seconds, start included), and its rounds are timed by the server's stamps, as
described above; the ClientApp's start is one `time_call` of a process.

Writes benchmarks/results/flower_round.json (benchmarks/harness.py's format): rows per number of agents
K (`num_agents`), so that runs at K = 2 and K = 3 stand side by side: a run at one K replaces that K's
rows and keeps the others'; each K's run (its machine, commit, command, date and `--note`: what else the
machine ran) under `settings.by_agents`.
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

from benchmarks import common, harness
from fedjax_rl.core import agent_axis, federated
from fedjax_rl.flower import federation
from fedjax_rl.training import configs, program, run_directory

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, os.pardir, "tests")
BENCHMARK = "flower_round"
SEED = 0


def task_config(num_agents: int, rounds: int):
    # learning_starts 0: every step of the timed rounds trains, as in the bulk of a run. Two blocks of
    # `rounds` rounds: the simulation is timed over the second (the first compiles).
    return configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=dict(learning_starts=0),
                                num_agents=num_agents, steps_per_agent=100 * 2 * rounds, sync_every=100,
                                eval_every_rounds=rounds, eval_episodes=1, sweep_points=2, tensorboard=False)


def round_after_round(one_round, carry, rounds: int):
    """A timed call: `rounds` more rounds of `one_round(carry, r)`, r counting on from 1 (the setup ran
    round 0, which compiles), run to completion."""
    box = dict(carry=carry, r=1)

    def call():
        for _ in range(rounds):
            box["carry"] = one_round(box["carry"], box["r"])
            box["r"] += 1
        jax.block_until_ready(box["carry"])
        return dict(rounds=rounds)

    return call


def compiled_case(config, rounds: int) -> harness.Case:
    """The program's round over the agent axis, jitted; each call runs `rounds` more rounds."""

    def setup():
        trainer = program.make_trainer(config)
        state = jax.jit(trainer.init)(program.seed_keys(SEED, 1)[0])
        mapped = jax.jit(agent_axis.for_each_agent(functools.partial(program.agent_round, trainer.setup),
                                                  config.num_agents, in_axes=(0, None, None, None)))
        def one_round(agents, r):
            return mapped(agents, jnp.int32(r), trainer.hparams, None)[0]

        return round_after_round(one_round, jax.block_until_ready(one_round(state.agents, 0)), rounds)

    return harness.Case("compiled", setup)


def members_case(config, rounds: int) -> harness.Case:
    """Every agent a `federation.Member`, the server's rule on the stacked uploads, in this process."""

    def setup():
        members = [federation.Member(config, SEED, k) for k in range(config.num_agents)]
        aggregate = federation.Aggregation(federated.Server(config.num_agents))

        def one_round(carries, r):
            carries = [m.local_round(c, r)[0] for m, c in zip(members, carries)]
            model = aggregate([c.learner.shared for c in carries])
            return [m.with_shared(c, model) for m, c in zip(members, carries)]

        return round_after_round(one_round, jax.block_until_ready(one_round([m.init() for m in members], 0)), rounds)

    return harness.Case("members", setup)


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


def startup() -> dict:
    """A fresh interpreter importing the ClientApp (JAX, flwr, the library) and building its app: one
    `time_call` of the process (a start is what is measured, so there is nothing to warm up)."""
    def start():
        subprocess.run([sys.executable, "-c", "from fedjax_rl.flower.apps import client_app; client_app()"], check=True)

    row = harness.time_call(start)
    return dict(row, clientapp_process_start_s=row["wall_s"])


def in_flower(measure, config, rounds: int) -> dict:
    """A simulation or deployment run: the harness cannot time the rounds inside Flower's processes, so
    `measure` returns the seconds per round its own stamps give, and `time_call` records the run whole."""
    box = {}
    row = harness.time_call(lambda: box.update(round_s=measure(config, rounds)))
    return dict(row, round_s=box["round_s"])


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=1)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
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
    rows = harness.measure([compiled_case(config, args.rounds), members_case(config, args.rounds)], args.repeats,
                           warmup=0)  # each setup ran the round that compiles
    for row in rows:
        row["round_s"] = row["wall_s"] / args.rounds
    measures = [("simulation", simulation_round_s)] + ([("deployment", deployment_round_s)] if args.deployment else [])
    for name, measure in measures:
        rows.append(dict(case=name, repeat=0, **in_flower(measure, config, args.rounds)))
    compiled = harness.median(rows, "round_s", case="compiled")
    for row in rows:
        row.update(num_agents=args.agents, agent_steps_per_s=agent_steps / row["round_s"],
                   vs_compiled=row["round_s"] / compiled)
        print(json.dumps({row["case"]: {k: row[k] for k in ("round_s", "agent_steps_per_s", "vs_compiled")}}),
              flush=True)
    names = list(dict.fromkeys(row["case"] for row in rows))
    if args.startup:
        rows.append(dict(case="clientapp_process_start", num_agents=args.agents, **startup()))
    machine["load_average_1_5_15min_at_end"] = list(os.getloadavg())  # the machine is shared
    print(common.machine_line(machine))
    print(f"{'':12} {'s/round':>8} {'agent-steps/s':>14} {'x compiled':>10}")
    for name in names:
        m = harness.medians(rows, ("round_s", "agent_steps_per_s", "vs_compiled"), case=name)
        print(f"{name:12} {m['round_s']:8.3f} {m['agent_steps_per_s']:14,.0f} {m['vs_compiled']:10.2f}")
    if args.startup:
        print(f"a ClientApp process's start: {rows[-1]['clientapp_process_start_s']:.1f} s per message")
    # One run per K: a run at K = 3 keeps the rows of K = 2.
    this = harness.record(BENCHMARK, {}, rows, machine)
    kept = harness.read(args.out) if os.path.exists(args.out) else dict(rows=[], settings={"by_agents": {}})
    by_agents = {**kept["settings"]["by_agents"], str(args.agents): dict(
        {k: this[k] for k in ("machine", "commit", "argv")}, date=datetime.date.today().isoformat(), note=args.note,
        rounds=args.rounds, repeats=args.repeats)}
    rows = [r for r in kept["rows"] if r["num_agents"] != args.agents] + rows
    harness.write(args.out, BENCHMARK, dict(task="CartPole-v1", algo="fedrdqn", sync_every=config.sync_every,
                                            by_agents=dict(sorted(by_agents.items()))),
                  sorted(rows, key=lambda r: r["num_agents"]), machine)


if __name__ == "__main__":
    main()
