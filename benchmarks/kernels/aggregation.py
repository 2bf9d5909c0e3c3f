"""What a robust aggregation rule costs: `--aggregation mean | median | trimmed_mean`.

Times, for each rule, (1) the aggregation alone: one `for_each_agent(rule)` over a FedRDQN agent's
shared leaves (Q, target Q and expectile networks), K agents x seeds vmapped, and (2) a training
block: `trainer.run_block` of FedRDQN on CartPole-v1 (RL-Zoo3's settings, 256 x 256 networks,
training from the first step, K = 5, E = 100), seeds vmapped, so the rule's share of a round shows.
The six cases (each rule alone and in a block) are timed interleaved over repeats by benchmarks/harness.py
(the machine's load drifts); the table prints the minimum. Compilation is excluded (the cases' setup).

`--part sort` times why the robust rules sort with a network of elementwise minima and maxima up to
32 agents (`aggregation.sorting_network`) rather than XLA's sort (`jnp.sort` over the agent axis): both
ways of sorting, for one seed's FedRDQN shared leaves under the agent vmap, compile time and run time
of the median and the trimmed mean (compile time: the case's setup).

    .venv/bin/python -m benchmarks.kernels.aggregation
    .venv/bin/python -m benchmarks.kernels.aggregation --agents 5,20 --seeds 5 --repeats 5
    .venv/bin/python -m benchmarks.kernels.aggregation --part sort --agents 5,20,32

Writes benchmarks/results/kernels/aggregation.json (the rules) or aggregation_sort.json (`--part sort`),
a row per case and repeat.
"""

from __future__ import annotations

import os

import jax

from benchmarks import common, harness
from fedjax_rl.core import agent_axis, aggregation, federated
from fedjax_rl.training import configs, program

BENCHMARK = "kernels.aggregation"
RULES = ("mean", "median", "trimmed_mean")


def trainer_for(rule: str, num_agents: int, rounds: int):
    config = configs.train_config("fedrdqn", "CartPole-v1", physics=("length",), num_agents=num_agents,
                                  steps_per_agent=100 * rounds, eval_every_rounds=rounds, eval_episodes=1,
                                  aggregation=rule, agent_overrides=dict(learning_starts=0))
    return program.make_trainer(config)


def sort_case(num_agents: int, rule: str, sort: str, shared) -> harness.Case:
    """One robust rule over one seed's shared leaves, its agents' values sorted by the network (as
    `aggregation` does up to 32 agents) or by XLA's sort; the setup compiles."""
    network_max = aggregation._NETWORK_MAX_AGENTS if sort == "network" else 0

    def setup():
        server_rule = federated.Server(num_agents, aggregation=rule).rule
        mapped = jax.jit(agent_axis.for_each_agent(lambda tree: server_rule(tree, None), num_agents))
        saved, aggregation._NETWORK_MAX_AGENTS = aggregation._NETWORK_MAX_AGENTS, network_max
        try:
            compiled = mapped.lower(shared).compile()
        finally:
            aggregation._NETWORK_MAX_AGENTS = saved
        return lambda: jax.block_until_ready(compiled(shared))

    return harness.Case(f"K={num_agents} {rule} {sort}", setup, dict(agents=num_agents, rule=rule, sort=sort))


def sort_comparison(agent_counts, repeats: int) -> list[dict]:
    rows = []
    print(f"{'K':>3s} {'rule':13s} {'sort':9s} {'compile s':>10s} {'run ms':>9s}")
    for num_agents in agent_counts:
        trainer = trainer_for("mean", num_agents, 1)
        shapes = jax.eval_shape(trainer.init, jax.random.key(0)).agents.learner.shared
        leaves = [jax.random.normal(jax.random.key(i), x.shape) for i, x in enumerate(jax.tree.leaves(shapes))]
        shared = jax.tree.unflatten(jax.tree.structure(shapes), leaves)  # [K, ...]
        cases = [sort_case(num_agents, rule, sort, shared) for rule in RULES[1:] for sort in ("network", "xla_sort")]
        timed = harness.measure(cases, repeats)
        for c in cases:
            mine = [r for r in timed if r["case"] == c.name]
            print(f"{num_agents:3d} {c.settings['rule']:13s} {c.settings['sort']:9s} {mine[0]['setup_wall_s']:10.2f} "
                  f"{1e3 * min(r['wall_s'] for r in mine):9.1f}", flush=True)
        rows += timed
    return rows


def rule_cases(num_agents: int, seeds: int, rounds: int) -> list[harness.Case]:
    """Per rule: the aggregation alone over FedRDQN's shared leaves, and a training block."""
    trainers = {rule: trainer_for(rule, num_agents, rounds) for rule in RULES}
    state = jax.jit(jax.vmap(trainers["mean"].init))(program.seed_keys(0, seeds))
    shared = state.agents.learner.shared  # [seeds, K, ...]
    params = int(sum(x[0, 0].size for x in jax.tree.leaves(shared)))
    cases = []
    for rule, trainer in trainers.items():
        server = federated.Server(num_agents, aggregation=rule)

        def aggregate(s=server):
            mapped = jax.jit(jax.vmap(agent_axis.for_each_agent(lambda tree: s.rule(tree, None), num_agents)))
            return lambda: jax.block_until_ready(mapped(shared))

        def block(t=trainer):
            run_block = jax.jit(jax.vmap(t.run_block, in_axes=(0, None, None)))
            return lambda: jax.block_until_ready(run_block(state, t.hparams, 1))

        settings = dict(agents=num_agents, rule=rule, shared_params_per_agent=params)
        cases += [harness.Case(f"K={num_agents} {rule} aggregation", aggregate, dict(settings, part="aggregation")),
                  harness.Case(f"K={num_agents} {rule} block", block, dict(settings, part="block"))]
    return cases


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=3)
    parser.set_defaults(out=None)
    parser.add_argument("--agents", default="5,20", help="values of K")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of E = 100 steps per timed block")
    parser.add_argument("--part", choices=("rules", "sort"), default="rules",
                        help="rules: each rule's cost in a training block; sort: network against XLA's sort")
    args = parser.parse_args()
    host = common.machine()
    print(common.machine_line(host))
    agent_counts = [int(k) for k in args.agents.split(",")]
    if args.part == "sort":
        print(f"FedRDQN CartPole-v1, 256 x 256, one seed's shared leaves, K agents vmapped; best of {args.repeats}")
        rows = sort_comparison(agent_counts, args.repeats)
        harness.write(args.out or harness.default_out(BENCHMARK + "_sort"), BENCHMARK,
                      dict(part="sort", repeats=args.repeats), rows, machine=host)
        return
    print(f"FedRDQN CartPole-v1, 256 x 256, {args.seeds} seeds vmapped; block = {args.rounds} rounds x 100 steps")
    print(f"{'K':>3s} {'rule':13s} {'aggregation ms':>15s} {'block s':>8s} {'block vs mean':>14s}")
    rows = []
    for num_agents in agent_counts:
        timed = harness.measure(rule_cases(num_agents, args.seeds, args.rounds), args.repeats)
        best = {(r["rule"], r["part"]): min(x["wall_s"] for x in timed if x["case"] == r["case"]) for r in timed}
        for row in timed:
            if row["part"] == "block":
                row["block_vs_mean"] = row["wall_s"] / best[("mean", "block")]
        for rule in RULES:
            print(f"{num_agents:3d} {rule:13s} {1e3 * best[(rule, 'aggregation')]:15.2f} {best[(rule, 'block')]:8.2f} "
                  f"{best[(rule, 'block')] / best[('mean', 'block')]:13.2f}x", flush=True)
        rows += timed
    host["load_average_1_5_15min_at_end"] = list(os.getloadavg())
    harness.write(args.out, BENCHMARK, dict(part="rules", seeds=args.seeds, rounds_per_block=args.rounds,
                                            repeats=args.repeats), rows, machine=host)


if __name__ == "__main__":
    main()
