"""Where a Table 2 FedRDDPG piece's CPU time goes: the networks' updates, the physics, the acting, the
evaluation on the way and the final evaluation with its robustness sweep.

A narrowed one-seed piece of Table 2 at 5% (`fedjax-rl reproduce table2 --budget 0.05 ... --program
fedrddpg --piece A:B --new-seeds-at chosen`) trains one program of two runs, DDPGAvg(1) (omega 0) and
the row's headline omega, over 20 blocks of 25 rounds of 100 steps per agent, then evaluates. Its
parts are timed here with the library's own compiled functions, built from the same config, on the
same run shape (grid points x seeds):

  collecting block  `run_block` before `learning_starts`: acting with exploration noise, the
                    physics, replay inserts, the federated average, and the block's evaluation;
  training block    `run_block` once learning has started: the same plus one gradient step per
                    agent-step (critic, actor, FedRDDPG's D, both targets' Polyak updates);
  evaluation        the block's evaluation alone: the global policy's nominal episodes and its
                    episodes in each agent's environment, as `run_block` plays them;
  physics           the block's environment steps alone (every agent, 100 x 25 steps, actions 0)
                    through the row's engine, with no network;
  finalize          the final evaluation: each agent's environment and the 19-point sweep.

The piece's time is then split by the schedule: updates = training blocks x (training - collecting),
evaluation = blocks x evaluation, acting and replay = blocks x (collecting - evaluation - physics),
physics = blocks x physics, and the final evaluation once. Timed in process CPU-seconds by
benchmarks/harness.py, cases interleaved over repeats (the machine is shared); compilation is
timed apart (`setup_cpu_s`).

    python -m benchmarks.throughput.ddpg_piece [--row HalfCheetah-v4/front_foot] [--omega 0.1] [--repeats 2]
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from benchmarks import common, harness
from fedjax_rl.core import evaluate
from fedjax_rl.reproduce import plan as reproduce_plan
from fedjax_rl.reproduce import tables
from fedjax_rl.training import loop, program

BENCHMARK = "throughput.ddpg_piece"


def piece_plan(row_key: str, omega: float, budget: float, num_seeds: int):
    """The run plan of a narrowed piece of `row_key`'s FedRDDPG program: its config, the grid of
    omega 0 and `omega`, `num_seeds` seeds."""
    table = tables.get_table("table2")
    (row,) = reproduce_plan.select_rows(table, [row_key])
    planned = next(p for p in reproduce_plan.row_programs(table, row, budget, (omega,))
                   if p.program.algo == "fedrddpg")
    return loop.plan_run(planned.config, num_seeds=num_seeds, progress=False, grid={"omega": [0.0, omega]})


def over_runs(fn):
    """`fn(state)` mapped over the grid's points and the seeds, as the programs map the trainer's parts."""
    return jax.jit(jax.vmap(jax.vmap(fn)))


def block_evaluation(setup: program.Setup, state):
    """What `run_block` plays after its rounds: the nominal episodes and each agent's environment's."""
    config = setup.config
    policy = program.global_policy(setup, state)
    nominal = evaluate.episode_returns(setup.env, setup.nominal_params, policy, state.eval_key,
                                       config.eval_episodes, setup.max_steps)
    local = evaluate.returns_over_params(setup.env, state.agents.env_params, policy, state.eval_key,
                                         config.eval_episodes, setup.max_steps)
    return nominal, local


def block_physics(setup: program.Setup, state):
    """One block's environment steps for every agent with action 0: the physics and nothing else."""
    config, env = setup.config, setup.env
    steps = config.sync_every * config.eval_every_rounds
    action = jnp.zeros(env.action_space(setup.nominal_params).shape, jnp.float32)

    def agent(key, params):
        _, env_state = env.reset(key, params)

        def step(carry, _):
            key, env_state = carry
            key, step_key = jax.random.split(key)
            _, env_state, reward, *_ = env.step(step_key, env_state, action, params)
            return (key, env_state), reward

        _, rewards = jax.lax.scan(step, (key, env_state), None, length=steps)
        return jnp.sum(rewards)

    keys = jax.random.split(state.eval_key, config.num_agents)
    return jax.vmap(agent)(keys, state.agents.env_params)


def cases(plan, repeats: int) -> tuple[list[harness.Case], dict]:
    """The five parts as harness cases, all from one state trained up to the first learning block."""
    programs = loop.compile_programs(plan)
    setup = plan.trainer.setup
    config = plan.config
    steps_per_block = config.sync_every * config.eval_every_rounds
    first_learning_block = -(-config.agent.learning_starts // steps_per_block)
    state = program.strongly_typed(programs.init(program.seed_keys(plan.seed, plan.num_seeds)))
    copy = functools.partial(jax.tree.map, jnp.copy)
    # The block donates its input: each timed call gets a copy of its own, made before any is timed.
    fresh = copy(state)
    learned, _ = programs.run_block(copy(state), first_learning_block - 1)
    jax.block_until_ready(learned)

    def block(start, index):
        compiled = programs.run_block.compiled_for(start, index)
        inputs = [copy(start) for _ in range(repeats)]
        return lambda: jax.block_until_ready(compiled(inputs.pop(), index))

    def part(fn, start):
        compiled = over_runs(functools.partial(fn, setup)).lower(start).compile()
        return lambda: jax.block_until_ready(compiled(start))

    def final():
        compiled = programs.finalize.compiled_for(learned)
        return lambda: jax.block_until_ready(compiled(learned))

    schedule = dict(blocks=config.num_evals, collecting_blocks=first_learning_block,
                    training_blocks=config.num_evals - first_learning_block, steps_per_block=steps_per_block)
    return [
        harness.Case("collecting block", lambda: block(fresh, 0)),
        harness.Case("training block", lambda: block(learned, first_learning_block)),
        harness.Case("evaluation", lambda: part(block_evaluation, learned)),
        harness.Case("physics", lambda: part(block_physics, learned)),
        harness.Case("finalize", final),
    ], schedule


def split(rows: list[dict], schedule: dict) -> dict:
    """A piece's CPU-seconds by part, from the cases' median CPU-seconds and the schedule."""
    cpu = {name: harness.median(rows, "cpu_s", case=name)
           for name in ("collecting block", "training block", "evaluation", "physics", "finalize")}
    blocks, training = schedule["blocks"], schedule["training_blocks"]
    parts = {
        "updates": training * (cpu["training block"] - cpu["collecting block"]),
        "evaluation on the way": blocks * cpu["evaluation"],
        "physics": blocks * cpu["physics"],
        "acting, replay, averaging": blocks * (cpu["collecting block"] - cpu["evaluation"] - cpu["physics"]),
        "final evaluation and sweep": cpu["finalize"],
    }
    total = sum(parts.values())
    return {name: dict(cpu_s=value, share=value / total) for name, value in parts.items()} | {
        "total": dict(cpu_s=total, share=1.0)}


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=2)
    parser.add_argument("--row", default="HalfCheetah-v4/front_foot", help="a Table 2 row (default: %(default)s)")
    parser.add_argument("--omega", type=float, default=0.1,
                        help="the row's headline omega, trained beside omega 0 (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=0.05, help="fraction of the paper's steps (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds in the program, as a piece has (default: %(default)s)")
    args = parser.parse_args()
    plan = piece_plan(args.row, args.omega, args.budget, args.seeds)
    built, schedule = cases(plan, args.repeats)
    rows = harness.measure(built, repeats=args.repeats, warmup=0)
    parts = split(rows, schedule)
    settings = dict(row=args.row, omega=args.omega, budget=args.budget, seeds=args.seeds, runs=2 * args.seeds,
                    engine=plan.config.engine, num_agents=plan.config.num_agents, **schedule)
    rows += [dict(part=name, **value) for name, value in parts.items()]
    harness.write(args.out, BENCHMARK, settings, rows)
    print(common.machine_line(common.machine()))
    print(f"{args.row}, FedRDDPG piece of {2 * args.seeds} runs: {schedule['blocks']} blocks "
          f"({schedule['collecting_blocks']} collecting), CPU-seconds per piece")
    print("| part | CPU s | share |\n| --- | --- | --- |")
    for name, value in parts.items():
        print(f"| {name} | {value['cpu_s']:,.0f} | {value['share']:.0%} |")


if __name__ == "__main__":
    main()
