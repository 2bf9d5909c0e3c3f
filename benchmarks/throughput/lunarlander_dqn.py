"""FedRDQN agent-steps per second on the JAX LunarLander-v3, K = 5 agents x 5 vmapped seeds.

An agent-step is one environment step of one agent plus its share of the learning rule. Settings
are RL-Zoo3's LunarLander DQN (net [256, 256], train_freq 4, gradient_steps = train_freq, so one
gradient update per agent-step on average) with the paper's federated batch 16 / buffer 1000,
E = 100, p = 0.5 on gravity. Compile time is reported separately; the rate is the median over
steady-state calls of the compiled block (`Trainer.run_block`: rounds of local steps, federated
averages and one greedy evaluation of the global policy in the nominal environment).

The two algorithms are timed interleaved over repeats after one warm-up call each (benchmarks/harness.py);
a row per algorithm and repeat. The environment-only comparison with gymnasium's Box2D LunarLander is
`benchmarks.envs.lunarlander_env`.

    python -m benchmarks.throughput.lunarlander_dqn [--seeds 5] [--rounds-per-call 10] [--repeats 3]

Writes benchmarks/results/throughput/lunarlander_dqn.json.
"""

from __future__ import annotations

import jax

from benchmarks import common, harness
from fedjax_rl.training import configs, program

BENCHMARK = "throughput.lunarlander_dqn"
DESCRIPTION = "LunarLander-v3 (JAX port): FedRDQN/DQNAvg agent-steps per second, K=5 x seeds vmapped"


def case(algo: str, num_seeds: int, rounds_per_call: int, calls: int, hidden: tuple[int, ...]) -> harness.Case:
    """One algorithm's compiled block (setup: build and compile); each call runs the next block."""
    steps = 100 * rounds_per_call * calls
    config = configs.train_config(
        algo, "LunarLander-v3", physics=("gravity",), steps_per_agent=steps, eval_every_rounds=rounds_per_call,
        eval_episodes=1, agent_overrides=dict(hidden_sizes=hidden),
    )
    agent_steps = num_seeds * config.num_agents * 100 * rounds_per_call

    def setup():
        trainer = program.make_trainer(config)
        state = jax.jit(jax.vmap(trainer.init))(program.seed_keys(0, num_seeds))
        block = jax.jit(jax.vmap(trainer.run_block, in_axes=(0, None, None)))
        compiled = block.lower(state, trainer.hparams, 0).compile()
        carry = {"state": state, "block": 0}

        def call():
            carry["state"], metrics = compiled(carry["state"], trainer.hparams, carry["block"])
            carry["block"] += 1
            jax.block_until_ready(metrics)
            return dict(agent_steps_per_call=agent_steps)

        return call

    return harness.Case(algo, setup, dict(algo=algo, num_seeds=num_seeds, num_agents=config.num_agents,
                                          hidden_sizes=list(hidden), train_freq=config.agent.train_freq,
                                          gradient_steps=config.agent.gradient_steps))


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=3)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds-per-call", type=int, default=10)
    args = parser.parse_args()

    info = common.machine()
    cases = [case(algo, args.seeds, args.rounds_per_call, args.repeats + 1, (256, 256)) for algo in ("fedrdqn", "dqnavg")]
    rows = harness.measure(cases, args.repeats)  # the warm-up call crosses learning_starts
    for row in rows:
        row["agent_steps_per_sec"] = row["agent_steps_per_call"] / row["wall_s"]
    print(common.machine_line(info))
    print(f"{'algo':8} {'seeds x K':>9} {'compile s':>9} {'agent-steps/s':>14}")
    for c in cases:
        first = next(r for r in rows if r["case"] == c.name)
        print(f"{c.name:8} {args.seeds:>4} x {first['num_agents']:<2} {first['setup_wall_s']:9.1f} "
              f"{harness.median(rows, 'agent_steps_per_sec', case=c.name):14.0f}")
    harness.write(args.out, BENCHMARK, dict(description=DESCRIPTION, env="LunarLander-v3", physics="gravity",
                                            rounds_per_call=args.rounds_per_call), rows, machine=info)


if __name__ == "__main__":
    main()
