"""Environment steps per second: fedjax_rl's JAX LunarLander-v3 against gymnasium's Box2D one.

JAX: `jit(vmap(scan(env.step)))` with random actions (auto-reset included), for 1, 64 and 1024
environments; compile time is reported separately from the steady-state run. gymnasium: one
LunarLander-v3 stepped in Python, and gymnasium's synchronous vector env with 64 copies.
Results (numbers and ratios) go to benchmarks/results/lunarlander_env.json.

    python benchmarks/lunarlander_env.py [--steps 1000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import gymnasium as gym
import jax
import numpy as np

from fedjax_rl.envs.lunar_lander import LunarLander

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def jax_steps_per_second(num_envs: int, steps: int, repeats: int = 3) -> dict:
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

    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    compiled = jax.jit(run).lower(key).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(key))  # warm-up
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.PRNGKey(i + 1)))
        times.append(time.perf_counter() - start)
    best = min(times)
    return {"num_envs": num_envs, "steps": steps, "compile_s": compile_s, "run_s": best,
            "steps_per_s": num_envs * steps / best}


def gym_steps_per_second(steps: int) -> dict:
    env = gym.make("LunarLander-v3")
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
        if terminated or truncated:
            env.reset()
    elapsed = time.perf_counter() - start
    return {"num_envs": 1, "steps": steps, "run_s": elapsed, "steps_per_s": steps / elapsed}


def gym_vector_steps_per_second(num_envs: int, steps: int) -> dict:
    envs = gym.make_vec("LunarLander-v3", num_envs=num_envs, vectorization_mode="sync")
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(steps):
        envs.step(rng.integers(0, 4, num_envs))  # autoreset inside
    elapsed = time.perf_counter() - start
    envs.close()
    return {"num_envs": num_envs, "steps": steps, "run_s": elapsed, "steps_per_s": num_envs * steps / elapsed}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps per environment (JAX)")
    parser.add_argument("--quick", action="store_true", help="fewer steps, for a smoke run")
    args = parser.parse_args()
    steps = 100 if args.quick else args.steps

    machine = dict(common.machine(), gymnasium=gym.__version__)
    gym_single = gym_steps_per_second(20 * steps)
    gym_vec = gym_vector_steps_per_second(64, max(steps // 2, 50))
    jax_rows = [jax_steps_per_second(n, steps) for n in (1, 64, 1024)]
    machine["load_average_1_5_15min_at_end"] = list(os.getloadavg())

    base = gym_single["steps_per_s"]
    print(common.machine_line(machine))
    print(f"{'implementation':<34} {'envs':>6} {'steps/s':>12} {'vs gymnasium x1':>16} {'compile s':>10}")
    print(f"{'gymnasium Box2D (Python loop)':<34} {1:>6} {base:>12,.0f} {1.0:>16.2f} {'-':>10}")
    print(f"{'gymnasium SyncVectorEnv':<34} {64:>6} {gym_vec['steps_per_s']:>12,.0f} "
          f"{gym_vec['steps_per_s'] / base:>16.2f} {'-':>10}")
    for row in jax_rows:
        row["ratio_vs_gym_single"] = row["steps_per_s"] / base
        print(f"{'fedjax_rl JAX (jit+vmap+scan)':<34} {row['num_envs']:>6} {row['steps_per_s']:>12,.0f} "
              f"{row['ratio_vs_gym_single']:>16.2f} {row['compile_s']:>10.1f}")
    gym_vec["ratio_vs_gym_single"] = gym_vec["steps_per_s"] / base

    out = {
        "machine": machine,
        "gymnasium_single": gym_single,
        "gymnasium_sync_vector": gym_vec,
        "jax": jax_rows,
        "notes": "JAX numbers include gymnax's auto-reset (a reset is computed every step). Random actions. "
                 "Default solver settings (20 velocity, 6 position iterations).",
    }
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", "lunarlander_env.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2, default=float)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
