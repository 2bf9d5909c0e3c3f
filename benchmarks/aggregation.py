"""What a robust aggregation rule costs: `--aggregation mean | median | trimmed_mean`.

Times, for each rule, (1) the aggregation alone: one `for_each_agent(rule)` over a FedRDQN agent's
shared leaves (Q, target Q and expectile networks), K agents x seeds vmapped, and (2) a training
block: `trainer.run_block` of FedRDQN on CartPole-v1 (RL-Zoo3's settings, 256 x 256 networks,
training from the first step, K = 5, E = 100), seeds vmapped, so the rule's share of a round shows.
Rules are interleaved over repeats (the machine's load drifts); the minimum is reported.
Compilation is excluded (one untimed call first).

`--part sort` times why the robust rules sort with a network of elementwise minima and maxima up to
32 agents (`federated.sorting_network`) rather than XLA's sort (`jnp.sort` over the agent axis): both
ways of sorting, for one seed's FedRDQN shared leaves under the agent vmap, compile time and run time
of the median and the trimmed mean.

    .venv/bin/python benchmarks/aggregation.py
    .venv/bin/python benchmarks/aggregation.py --agents 5,20 --seeds 5 --repeats 5
    .venv/bin/python benchmarks/aggregation.py --part sort --agents 5,20,32

Writes its part of benchmarks/results/aggregation.json (`results` for the rules, `sort` for the
sorting), keeping the other part's record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, machine_line  # noqa: E402

from fedjax_rl.core import federated  # noqa: E402
from fedjax_rl.training import configs, program

RULES = ("mean", "median", "trimmed_mean")


def trainer_for(aggregation: str, num_agents: int, rounds: int):
    config = configs.train_config("fedrdqn", "CartPole-v1", physics=("length",), num_agents=num_agents,
                                  steps_per_agent=100 * rounds, eval_every_rounds=rounds, eval_episodes=1,
                                  aggregation=aggregation, agent_overrides=dict(learning_starts=0))
    return program.make_trainer(config)


def timed(fn: dict, repeats: int, rules) -> dict:
    """Seconds of every call of `fn[rule]()`, the rules interleaved over `repeats` rounds."""
    seconds = {rule: [] for rule in rules}
    for _ in range(repeats):
        for rule in rules:
            start = time.perf_counter()
            fn[rule]()
            seconds[rule].append(time.perf_counter() - start)
    return seconds


def sort_comparison(agent_counts, repeats: int) -> dict:
    """Compile and run seconds of each robust rule over one seed's shared leaves, with the agents'
    values sorted by the network (as `federated` does up to 32 agents) or by XLA's sort."""
    rows = {}
    print(f"{'K':>3s} {'rule':13s} {'sort':9s} {'compile s':>10s} {'run ms':>9s}")
    for num_agents in agent_counts:
        trainer = trainer_for("mean", num_agents, 1)
        shapes = jax.eval_shape(trainer.init, jax.random.key(0)).agents.learner.shared
        leaves = [jax.random.normal(jax.random.key(i), x.shape) for i, x in enumerate(jax.tree.leaves(shapes))]
        shared = jax.tree.unflatten(jax.tree.structure(shapes), leaves)  # [K, ...]
        for rule in RULES[1:]:
            for sort, network_max in (("network", federated._NETWORK_MAX_AGENTS), ("xla_sort", 0)):
                server_rule = federated.Server(num_agents, aggregation=rule).rule
                mapped = jax.jit(federated.for_each_agent(lambda tree, r=server_rule: r(tree, None), num_agents))
                saved, federated._NETWORK_MAX_AGENTS = federated._NETWORK_MAX_AGENTS, network_max
                try:
                    start = time.perf_counter()
                    compiled = mapped.lower(shared).compile()
                    compile_s = time.perf_counter() - start
                finally:
                    federated._NETWORK_MAX_AGENTS = saved
                run_s = timed({sort: lambda c=compiled: jax.block_until_ready(c(shared))}, repeats + 1, (sort,))[sort][1:]
                rows.setdefault(str(num_agents), {}).setdefault(rule, {})[sort] = dict(
                    compile_s=compile_s, run_ms=1e3 * min(run_s), run_seconds=run_s)
                print(f"{num_agents:3d} {rule:13s} {sort:9s} {compile_s:10.2f} {1e3 * min(run_s):9.1f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="5,20", help="values of K")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of E = 100 steps per timed block")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=("rules", "sort"), default="rules",
                        help="rules: each rule's cost in a training block; sort: network against XLA's sort")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "aggregation.json"))
    args = parser.parse_args()
    host = machine()
    print(machine_line(host))
    previous = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            previous = json.load(f)
    if args.part == "sort":
        print(f"FedRDQN CartPole-v1, 256 x 256, one seed's shared leaves, K agents vmapped; best of {args.repeats}")
        record = dict(machine=host, repeats=args.repeats, results=sort_comparison(
            [int(k) for k in args.agents.split(",")], args.repeats))
        host["load_average_1_5_15min_at_end"] = list(os.getloadavg())
        write(args.out, {**previous, "sort": record})
        print(machine_line(host))
        return
    print(f"FedRDQN CartPole-v1, 256 x 256, {args.seeds} seeds vmapped; block = {args.rounds} rounds x 100 steps")
    print(f"{'K':>3s} {'rule':13s} {'aggregation ms':>15s} {'block s':>8s} {'block vs mean':>14s}")
    record = {"machine": host, "seeds": args.seeds, "rounds_per_block": args.rounds, "repeats": args.repeats,
              "results": {}}
    for num_agents in (int(k) for k in args.agents.split(",")):
        trainers = {rule: trainer_for(rule, num_agents, args.rounds) for rule in RULES}
        mean_trainer = trainers["mean"]
        state = jax.jit(jax.vmap(mean_trainer.init))(program.seed_keys(0, args.seeds))
        shared = state.agents.learner.shared  # [seeds, K, ...]
        aggregate, block = {}, {}
        for rule, trainer in trainers.items():
            server = federated.Server(num_agents, aggregation=rule)
            mapped = jax.jit(jax.vmap(federated.for_each_agent(lambda tree, s=server: s.rule(tree, None), num_agents)))
            run_block = jax.jit(jax.vmap(trainer.run_block, in_axes=(0, None, None)))
            aggregate[rule] = lambda m=mapped: jax.block_until_ready(m(shared))
            block[rule] = lambda r=run_block, t=trainer: jax.block_until_ready(r(state, t.hparams, 1))
            aggregate[rule]()  # compile
            block[rule]()
        agg_s = timed(aggregate, args.repeats, RULES)
        block_s = timed(block, args.repeats, RULES)
        rows = {}
        for rule in RULES:
            rows[rule] = dict(aggregation_ms=1e3 * min(agg_s[rule]), block_s=min(block_s[rule]),
                              aggregation_seconds=agg_s[rule], block_seconds=block_s[rule])
        for rule, row in rows.items():
            row["block_vs_mean"] = row["block_s"] / rows["mean"]["block_s"]
            print(f"{num_agents:3d} {rule:13s} {row['aggregation_ms']:15.2f} {row['block_s']:8.2f} "
                  f"{row['block_vs_mean']:13.2f}x", flush=True)
        params = sum(x[0, 0].size for x in jax.tree.leaves(shared))
        record["results"][str(num_agents)] = dict(shared_params_per_agent=int(params), rules=rows)
    host["load_average_1_5_15min_at_end"] = list(os.getloadavg())
    write(args.out, {**record, "sort": previous.get("sort")} if previous.get("sort") else record)
    print(machine_line(host))


def write(path: str, record: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
