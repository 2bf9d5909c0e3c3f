"""Env steps per second: the MJX locomotion tasks (fedjax_rl.envs.locomotion) against MuJoCo's C.

MJX: `jit(vmap(scan(env.step)))` over B environments, each with its own body masses (agent params
from `perturb.agent_env_params`, as training batches them), random actions, auto-reset
included; B = K x seeds = 5 x 4 = 20 and a large batch (default 1024). Compile time is reported
apart from the steady-state run. C: gymnasium's v4 env stepped in Python (one env, resets included)
and `mujoco.rollout` of the same XML (B = 20 and the large batch, one thread, physics only: its
sub-steps / frame_skip, no observation, reward or reset). All in one run, float32 for MJX (the
training dtype), float64 in C. `--breakdown Hopper-v4,...` adds where MJX's time goes: one vmapped
`mjx.step` (a physics sub-step) at the large batch, in full, without contacts, and without any
constraint. `--solver Hopper-v4,...` measures the latency of one batched env step at the small
batch (a whole env step: frame_skip sub-steps in a scan) with MuJoCo's default constraint solver
(Newton, 100 iterations, 50 line-search iterations, stopping early at its tolerance), with the
iteration caps Brax's MJX training configs use, and without constraints: where a small batch's
time goes on a GPU, where each solver iteration is a round of small kernels.

    python -m benchmarks.envs.mjx_envs [--big 1024] [--steps 10] [--breakdown Hopper-v4,Ant-v4]
                                  [--solver Hopper-v4,Ant-v4] [--tasks ""]

Every figure is a case of `harness.measure`: set up (built, compiled), called once untimed, then timed
`--repeats` times, a task's cases interleaved. Results go to benchmarks/results/envs/mjx_envs.json
(benchmarks/harness.py's format): a row per task, implementation and repeat (`part` "steps"), the task's
ratios of medians ("ratios"), `--breakdown`'s ("breakdown") and `--solver`'s ("solver") rows per variant
and repeat; rewritten after every task.
"""

from __future__ import annotations

import gymnasium as gym
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx, rollout

from fedjax_rl import envs
from fedjax_rl.core import perturb
from fedjax_rl.envs import make
from fedjax_rl.envs.locomotion import gymnasium_xml_path

from benchmarks import common, harness

BENCHMARK = "envs.mjx_envs"
TASKS = ("Hopper-v4", "Walker2d-v4", "HalfCheetah-v4", "Ant-v4")


def mjx_case(name: str, num_envs: int, steps: int) -> harness.Case:
    """`jit(vmap(scan(env.step)))` of `steps` steps of `num_envs` environments, each with its own body masses."""

    def setup():
        env, nominal = make(name)
        parts = envs.get(name).perturbed
        rates = perturb.sample_rates(jax.random.key(1), num_envs * len(parts), 0.5).reshape(num_envs, -1)
        params = perturb.agent_env_params(env, nominal, parts, rates)
        low, high = env.action_space(nominal).low, env.action_space(nominal).high

        def run(key):
            reset_key, steps_key = jax.random.split(key)
            _, state = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs), params)

            def step(state, key):
                action_key, step_key = jax.random.split(key)
                actions = jax.random.uniform(action_key, (num_envs, env.num_actions), minval=low, maxval=high)
                _, state, reward, *_ = jax.vmap(env.step)(jax.random.split(step_key, num_envs), state, actions, params)
                return state, reward.sum()

            _, rewards = jax.lax.scan(step, state, jax.random.split(steps_key, steps))
            return rewards.sum()

        built = harness.time_call(lambda: {"compiled": jax.jit(run).lower(jax.random.key(0)).compile()})
        compiled = built.pop("compiled")
        return common.finished(lambda: compiled(jax.random.key(1)), dict(compile_s=built["wall_s"]))

    return harness.Case(f"mjx_{num_envs}", setup, dict(num_envs=num_envs, steps=steps))


def gymnasium_case(name: str, steps: int) -> harness.Case:
    """gymnasium's v4 env stepped in Python, one env, resets included."""

    def setup():
        env = gym.make(name)
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(steps)]

        def call():
            for action in actions:
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()

        return call

    return harness.Case("gymnasium", setup, dict(num_envs=1, steps=steps))


def rollout_case(name: str, num_envs: int, steps: int) -> harness.Case:
    """`mujoco.rollout` of the task's XML: physics only, one thread."""

    def setup():
        env, _ = make(name)
        model = env.mj_model
        data = mujoco.MjData(model)
        spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        state = np.empty(mujoco.mj_stateSize(model, spec))
        mujoco.mj_getState(model, data, state, spec)
        initial = np.repeat(state[None], num_envs, axis=0)
        initial[:, 1 : 1 + model.nq] += np.random.default_rng(0).uniform(-0.005, 0.005, (num_envs, model.nq))
        control = np.random.default_rng(1).uniform(-1, 1, (num_envs, steps * env.frame_skip, model.nu))

        def call():
            rollout.rollout(model, data, initial, control)
            return dict(frame_skip=env.frame_skip)

        return call

    return harness.Case(f"rollout_{num_envs}", setup, dict(num_envs=num_envs, steps=steps))


def env_steps_per_s(rows: list[dict]) -> list[dict]:
    for row in rows:
        row["env_steps_per_s"] = row["num_envs"] * row["steps"] / row["wall_s"]
    return rows


def _batched_physics(env, num_envs: int, disable: int = 0, iterations: int | None = None,
                     ls_iterations: int | None = None):
    """The env's XML as (MjModel, mjx.Model, batched mjx.Data near qpos0), with option overrides."""
    model = mujoco.MjModel.from_xml_path(gymnasium_xml_path(env.xml_file))
    model.opt.disableflags |= disable
    if iterations is not None:
        model.opt.iterations, model.opt.ls_iterations = iterations, ls_iterations
    mx = mjx.put_model(model)
    qpos = jnp.asarray(model.qpos0, jnp.float32) + 0.01 * jax.random.normal(jax.random.key(0), (num_envs, model.nq))
    return model, mx, jax.vmap(lambda q: mjx.make_data(mx).replace(qpos=q))(qpos)


BREAKDOWN = {  # label: the disable flag
    "full": 0,
    "no_contacts": mujoco.mjtDisableBit.mjDSBL_CONTACT,
    "no_constraints": mujoco.mjtDisableBit.mjDSBL_CONSTRAINT,
}


def breakdown_cases(name: str, num_envs: int) -> list[harness.Case]:
    """One vmapped `mjx.step` (a physics sub-step) with contacts / constraints disabled, a case each."""
    env, _ = make(name)

    def case(label, flag):
        def setup():
            _, mx, data = _batched_physics(env, num_envs, disable=flag)
            step = jax.jit(jax.vmap(mjx.step, in_axes=(None, 0)))
            return common.finished(lambda: step(mx, data))

        return harness.Case(label, setup, dict(part="breakdown", task=name, variant=label, num_envs=num_envs,
                                                frame_skip=env.frame_skip, integrator=INTEGRATORS[env.mj_model.opt.integrator]))

    return [case(label, flag) for label, flag in BREAKDOWN.items()]


INTEGRATORS = ["Euler", "RK4", "implicit", "implicitfast"]


SOLVER_VARIANTS = {  # label: (iterations, ls_iterations, disable flag); None keeps MuJoCo's default
    "default": (None, None, 0),
    "iterations_4_ls_4": (4, 4, 0),
    "iterations_1_ls_4": (1, 4, 0),
    "no_constraints": (None, None, mujoco.mjtDisableBit.mjDSBL_CONSTRAINT),
}


def solver_cases(name: str, num_envs: int, steps: int) -> list[harness.Case]:
    """A batched env step (frame_skip `mjx.step`s in a scan) under each solver variant, a case each.

    Physics only, and the capped variants are NOT the physics gymnasium steps: they show what the
    solver costs, not a setting this library uses."""
    env, _ = make(name)

    def case(label, iterations, ls_iterations, flag):
        def setup():
            model, mx, data = _batched_physics(env, num_envs, flag, iterations, ls_iterations)

            def run(data):
                substep = lambda d, _: (jax.vmap(mjx.step, in_axes=(None, 0))(mx, d), None)  # noqa: E731
                return jax.lax.scan(substep, data, None, length=steps * env.frame_skip)[0]

            compiled = jax.jit(run).lower(data).compile()
            used = dict(iterations=model.opt.iterations, ls_iterations=model.opt.ls_iterations)
            return common.finished(lambda: compiled(data), used)

        return harness.Case(label, setup, dict(part="solver", task=name, variant=label, num_envs=num_envs,
                                                steps=steps, frame_skip=env.frame_skip))

    return [case(label, *variant) for label, variant in SOLVER_VARIANTS.items()]


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=1)
    parser.add_argument("--big", type=int, default=1024, help="the large batch")
    parser.add_argument("--small", type=int, default=20, help="K x seeds (5 x 4)")
    parser.add_argument("--steps", type=int, default=10, help="env steps per MJX/rollout run")
    parser.add_argument("--gym-steps", type=int, default=2000)
    parser.add_argument("--breakdown", default="", help="comma-separated tasks to break down")
    parser.add_argument("--solver", default="", help="comma-separated tasks for the solver latency sweep")
    parser.add_argument("--tasks", default=",".join(TASKS))
    args = parser.parse_args()

    info = common.machine()
    settings = dict(vars(args), mujoco=mujoco.__version__)
    results = []
    start_all = harness.CLOCK.wall()
    print(common.machine_line(info), flush=True)
    if args.tasks:
        print(f"{'task':16s} {'impl':22s} {'envs':>6s} {'env steps/s':>12s} {'compile s':>10s}")
    for name in filter(None, args.tasks.split(",")):
        cases = [gymnasium_case(name, args.gym_steps)]
        for b in (args.small, args.big):
            cases += [rollout_case(name, b, args.steps), mjx_case(name, b, args.steps)]
        rows = env_steps_per_s(harness.measure(cases, args.repeats))
        rate = {c.name: harness.median(rows, "env_steps_per_s", case=c.name) for c in cases}
        for c in cases:
            compile_s = next(r.get("compile_s", float("nan")) for r in rows if r["case"] == c.name)
            print(f"{name:16s} {c.name:22s} {c.settings['num_envs']:6d} {rate[c.name]:12.0f} {compile_s:10.1f}", flush=True)
        results += [dict(row, part="steps", task=name, impl=row["case"]) for row in rows]
        results.append(dict(part="ratios", task=name,  # of the medians
                            mjx_big_vs_rollout_big=rate[f"mjx_{args.big}"] / rate[f"rollout_{args.big}"],
                            mjx_small_vs_gymnasium=rate[f"mjx_{args.small}"] / rate["gymnasium"]))
        if name in args.breakdown.split(","):
            timed = harness.measure(breakdown_cases(name, args.big), args.repeats)
            for row in timed:
                row.update(seconds_per_substep=row["wall_s"], us_per_env_substep=1e6 * row["wall_s"] / args.big)
            print(name, {v: f"{harness.median(timed, 'seconds_per_substep', variant=v):.4f} s/substep" for v in BREAKDOWN},
                  flush=True)
            results += timed
        _write(results, settings, info, args.out, start_all)
    if args.solver:
        print(f"{'task':16s} {'solver':22s} {'envs':>6s} {'ms/env step':>12s} {'env steps/s':>12s}")
    for name in filter(None, args.solver.split(",")):
        timed = harness.measure(solver_cases(name, args.small, args.steps), args.repeats)
        for row in timed:
            row.update(ms_per_env_step=1e3 * row["wall_s"] / args.steps, env_steps_per_s=args.small * args.steps / row["wall_s"])
        results += timed
        for label in SOLVER_VARIANTS:
            print(f"{name:16s} {label:22s} {args.small:6d} {harness.median(timed, 'ms_per_env_step', variant=label):12.1f} "
                  f"{harness.median(timed, 'env_steps_per_s', variant=label):12.0f}", flush=True)
        _write(results, settings, info, args.out, start_all)
    _write(results, settings, info, args.out, start_all)
    print(f"total {settings['total_seconds']:.0f} s -> {args.out}")


def _write(rows: list[dict], settings: dict, info: dict, path: str, start_all: float) -> None:
    """After every task, so a cut-short run keeps what it measured."""
    settings["total_seconds"] = harness.CLOCK.wall() - start_all
    harness.write(path, BENCHMARK, settings, rows, machine=info)


if __name__ == "__main__":
    main()
