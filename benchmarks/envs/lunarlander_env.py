"""Environment steps per second: fedjax_rl's JAX LunarLander-v3 against gymnasium's Box2D one.

JAX: `jit(vmap(scan(env.step)))` with random actions (auto-reset included), for 1, 64 and 1024
environments; compile time is the case's setup, apart from the steady-state calls. gymnasium: one
LunarLander-v3 stepped in Python (20x the steps), and gymnasium's synchronous vector env with 64
copies (half the steps). The five cases are timed interleaved over repeats (benchmarks/harness.py);
a row per case and repeat, with `steps_per_s` = environments x steps / wall seconds.

    python -m benchmarks.envs.lunarlander_env [--steps 1000] [--quick] [--repeats 3]

Writes benchmarks/results/envs/lunarlander_env.json.
"""

from __future__ import annotations

import statistics

import gymnasium as gym
import jax
import numpy as np

from benchmarks import common, harness
from fedjax_rl.envs.lunar_lander import LunarLander

BENCHMARK = "envs.lunarlander_env"
NOTES = ("JAX numbers include gymnax's auto-reset (a reset is computed every step). Random actions. "
         "Default solver settings (20 velocity, 6 position iterations).")


def jax_case(num_envs: int, steps: int) -> harness.Case:
    env = LunarLander()
    params = env.default_params

    def run(key):
        keys = jax.random.split(key, num_envs)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)

        def step(state, key):
            key_action, key_step = jax.random.split(key)
            actions = jax.random.randint(key_action, (num_envs,), 0, env.num_actions)
            step_keys = jax.random.split(key_step, num_envs)
            obs, state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                step_keys, state, actions, params
            )
            return state, reward.sum()

        _, rewards = jax.lax.scan(step, state, jax.random.split(key, steps))
        return rewards.sum()

    def setup():
        compiled = jax.jit(run).lower(jax.random.PRNGKey(0)).compile()
        keys = iter(range(1, 1 << 30))
        return lambda: jax.block_until_ready(compiled(jax.random.PRNGKey(next(keys))))

    return harness.Case(f"jax x{num_envs}", setup, dict(implementation="jax", num_envs=num_envs, steps=steps))


def gym_case(steps: int) -> harness.Case:
    def setup():
        env = gym.make("LunarLander-v3")
        rng = np.random.default_rng(0)
        env.reset(seed=0)

        def run():
            for _ in range(steps):
                _, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
                if terminated or truncated:
                    env.reset()

        return run

    return harness.Case("gymnasium single", setup, dict(implementation="gymnasium", num_envs=1, steps=steps))


def gym_vector_case(num_envs: int, steps: int) -> harness.Case:
    def setup():
        envs = gym.make_vec("LunarLander-v3", num_envs=num_envs, vectorization_mode="sync")
        envs.reset(seed=0)
        rng = np.random.default_rng(0)

        def run():
            for _ in range(steps):
                envs.step(rng.integers(0, 4, num_envs))  # autoreset inside

        return run

    return harness.Case("gymnasium sync vector", setup,
                        dict(implementation="gymnasium SyncVectorEnv", num_envs=num_envs, steps=steps))


def main():
    parser = harness.parser(BENCHMARK, __doc__, repeats=3)
    parser.add_argument("--steps", type=int, default=1000, help="steps per environment (JAX)")
    parser.add_argument("--quick", action="store_true", help="fewer steps, for a smoke run")
    args = parser.parse_args()
    steps = 100 if args.quick else args.steps

    machine = dict(common.machine(), gymnasium=gym.__version__)
    cases = [gym_case(20 * steps), gym_vector_case(64, max(steps // 2, 50)),
             *(jax_case(n, steps) for n in (1, 64, 1024))]
    rows = harness.measure(cases, args.repeats)
    for row in rows:
        row["steps_per_s"] = row["num_envs"] * row["steps"] / row["wall_s"]
    base = statistics.median(r["steps_per_s"] for r in rows if r["case"] == "gymnasium single")
    for row in rows:
        row["ratio_vs_gym_single"] = row["steps_per_s"] / base

    print(common.machine_line(machine))
    print(f"{'case':<34} {'envs':>6} {'steps/s':>12} {'vs gymnasium x1':>16} {'setup s':>10}")
    for case in cases:
        rate = harness.median(rows, "steps_per_s", case=case.name)
        setup = next(r["setup_wall_s"] for r in rows if r["case"] == case.name)
        print(f"{case.name:<34} {case.settings['num_envs']:>6} {rate:>12,.0f} {rate / base:>16.2f} {setup:>10.1f}")
    harness.write(args.out, BENCHMARK, dict(steps=steps, quick=args.quick, notes=NOTES), rows, machine=machine)


if __name__ == "__main__":
    main()
