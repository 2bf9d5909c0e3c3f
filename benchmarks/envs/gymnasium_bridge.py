"""What stepping a gymnasium environment through the host bridge costs (`--env gym:<id>`,
fedjax_rl/envs/gymnasium_bridge.py), beside the library's JAX port of the same task and beside
gymnasium's vectorised environment, the loop SB3's DummyVecEnv runs (one Python `step` per env).

CartPole-v1, uniformly random actions, N environments side by side (the agents x seeds x grid points
of a run), T steps each; episodes reset themselves in all three. Timed in process CPU-seconds after a
warm-up call (compilation excluded), interleaved case by case over repeats (benchmarks/harness.py); the rate is
environment steps (agent-steps) per CPU-second, and the ratios are against the bridge, measured side
by side in one run.

  bridge     `envs.make("gym:CartPole-v1")` stepped in a jitted `lax.scan` of `vmap`ped steps: one
             host callback per step for the whole batch, a Python `step` per environment inside it;
  jax        `envs.make("CartPole-v1")`, the same program on the JAX port;
  vector     `gymnasium.vector.SyncVectorEnv` of N `gymnasium.make("CartPole-v1")`, stepped from Python
             with numpy actions (SB3's DummyVecEnv is the same loop).

    python -m benchmarks.envs.gymnasium_bridge [--envs 8,64] [--steps 2000] [--repeats 3]

Writes benchmarks/results/envs/gymnasium_bridge.json: a row per number of environments, case and repeat.
"""

from __future__ import annotations

import gymnasium
import jax
import numpy as np

from benchmarks import common, harness
from fedjax_rl import envs

BENCHMARK = "envs.gymnasium_bridge"


def scanned(name: str, num_envs: int, steps: int):
    """A jitted call stepping `num_envs` environments `steps` times with random actions."""
    env, params = envs.make(name, ("length",) if name.endswith("CartPole-v1") else None)

    @jax.jit
    def run(key):
        reset_key, steps_key = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)

        def step(state, key):
            action_key, step_key = jax.random.split(key)
            actions = jax.random.randint(action_key, (num_envs,), 0, 2)
            _, state, reward, _, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(step_key, num_envs), state, actions, params)
            return state, reward.sum()

        return jax.lax.scan(step, state, jax.random.split(steps_key, steps))[1].sum()

    return lambda: jax.block_until_ready(run(jax.random.key(0)))


def vectorised(num_envs: int, steps: int):
    vector = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(num_envs)])
    vector.reset(seed=0)
    rng = np.random.default_rng(0)

    def run():
        for _ in range(steps):
            vector.step(rng.integers(0, 2, num_envs))

    return run


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=3)
    parser.add_argument("--envs", default="8,64", help="environments side by side, comma-separated")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    info = common.machine()
    rows = []
    for num_envs in map(int, args.envs.split(",")):
        steps = {"bridge": args.steps, "jax": args.steps * 20, "vector": args.steps}  # jax: long enough to time
        cases = [harness.Case("bridge", lambda: scanned("gym:CartPole-v1", num_envs, steps["bridge"])),
                 harness.Case("jax", lambda: scanned("CartPole-v1", num_envs, steps["jax"])),
                 harness.Case("vector", lambda: vectorised(num_envs, steps["vector"]))]
        cases = [harness.Case(c.name, c.setup, dict(envs=num_envs, steps=steps[c.name])) for c in cases]
        timed = harness.measure(cases, args.repeats)
        for row in timed:
            row["agent_steps_per_cpu_second"] = row["envs"] * row["steps"] / row["cpu_s"]
        rates = {c.name: harness.median(timed, "agent_steps_per_cpu_second", case=c.name) for c in cases}
        print(dict(envs=num_envs, agent_steps_per_cpu_second={k: round(v) for k, v in rates.items()},
                   jax_over_bridge=round(rates["jax"] / rates["bridge"], 1),
                   vector_over_bridge=round(rates["vector"] / rates["bridge"], 2)))
        rows += timed
    print(common.machine_line(info))
    harness.write(args.out, BENCHMARK, dict(steps=args.steps, repeats=args.repeats, task="CartPole-v1",
                                            gymnasium=gymnasium.__version__, jax=jax.__version__), rows, machine=info)


if __name__ == "__main__":
    main()
