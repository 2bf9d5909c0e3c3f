"""One batched env step of the MuJoCo tasks on each physics engine, with where the time goes.

For each task and batch size B (32, 256, 2048 environments, each with its own body masses x U(0.5,
1.5) of the task's two paper parts, as federated training batches them), in one run:

  c        `jit(vmap(env.step))` on MuJoCo's C engine (the pure callback, float64, threads), and
           its parts: `physics`, MuJoCo's batch alone (`mujoco.batch.Batch.step`, the same
           simulations and threads, no JAX), and `callback` = c - physics (JAX's callback, copying
           and packing the states, the observation, reward and termination code).
  mjx      `jit(vmap(env.step))` on MJX with the task's line-search cap (`mjx_ls_iterations`) and
           `mjx_uncapped` with MuJoCo's default 50 (the same where the task has no cap).
  warp     `jit(vmap(env.step))` on MuJoCo Warp through mjx (NVIDIA GPUs), and `warp_vs_c`: the
           states after the step against the C engine's from the same states (max |dqvel|, |dqpos|).
  networks one agent-step of network work for B agents: DDPGAvg(1)'s vmapped `act` + `learn` (one
           gradient update of the 400-300 actor and critic at batch 64, soft target updates), so
           an engine's step can be set against what a training step spends besides physics.

Each figure is the median of `--repeats` timed calls after a warm-up call (compilation reported
apart), a task and size's cases interleaved (`harness.measure`; MJX above 256 environments timed once,
after the others: it is slow). The line-search check compares capped and uncapped MJX states after the
step (max |dqvel|, max |dqpos| over the B environments): a cap is kept only where they are identical.

    .venv/bin/python -m benchmarks.envs.mujoco_engines [--tasks Hopper-v4,Ant-v4] [--sizes 32,256,2048]
                                                   [--engines c,mjx,warp] [--repeats 5] [--no-uncapped]

Results go to benchmarks/results/envs/mujoco_engines.json (or --out; benchmarks/harness.py's format: a
row per task, size, case and repeat (`part` "timed": `step_ms`, and `env_steps_per_sec` for an engine) and
one per task and size (`part` "checks": `c_callback_ms` of the medians, the cap and Warp checks),
rewritten as each size lands).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common, harness
from fedjax_rl import envs
from fedjax_rl.agents.base import Transition
from fedjax_rl.core import perturb
from fedjax_rl.envs import make, mujoco_engines
from fedjax_rl.training import configs

BENCHMARK = "envs.mujoco_engines"
TASKS = ("Hopper-v4", "Walker2d-v4", "HalfCheetah-v4", "Ant-v4")


def batch_of(name: str, engine: str, size: int, uncapped: bool = False):
    """Env, per-env params (the task's two parts x U(0.5, 1.5)), reset states, and actions.
    `uncapped`: MJX with MuJoCo's default line search (ls_iterations 50), not the task's cap."""
    env, nominal = make(name, engine=engine)
    if uncapped:
        env = type(env)(engine, mjx_ls_iterations=env.mj_model.opt.ls_iterations)
    parts = envs.get(name).perturbed
    rates = jax.random.uniform(jax.random.key(1), (size, len(parts)), minval=-0.5, maxval=0.5)
    params = perturb.agent_env_params(env, nominal, parts, rates)
    _, states = jax.vmap(env.reset)(jax.random.split(jax.random.key(2), size), params)
    actions = jax.random.uniform(jax.random.key(3), (size, env.num_actions), minval=-1.0, maxval=1.0)
    return env, params, states, actions


def engine_case(name: str, engine: str, size: int, states: dict, uncapped: bool = False, label: str | None = None):
    """`jit(vmap(env.step))` from the same states every call (a step in); `states[label]` gets the
    states after the step, for the checks."""
    label = label or engine

    def setup():
        env, params, start, actions = batch_of(name, engine, size, uncapped)
        keys = jax.random.split(jax.random.key(4), size)
        step = jax.jit(jax.vmap(env.step))
        warm = step(keys, start, actions, params)[1]  # a step in, from there every call
        states[label] = jax.tree.map(np.asarray, step(keys, warm, actions, params)[1])
        return common.finished(lambda: step(keys, warm, actions, params))

    return harness.Case(label, setup, dict(engine=engine))


def c_physics_case(name: str, size: int) -> harness.Case:
    """MuJoCo's batch alone: the same simulations (masses, states, controls) and threads."""

    def setup():
        from mujoco import batch

        env, params, states, actions = batch_of(name, "c", size)
        sim = batch.Batch(env.mj_model, size, min(size, mujoco_engines._threads()))
        sim.expand("body_mass")[:] = np.asarray(params.model_fields["body_mass"], np.float64)
        qpos, qvel, ctrl = (np.asarray(x, np.float64) for x in (states.qpos, states.qvel, actions))

        def call():
            sim.qpos[:], sim.qvel[:], sim.qacc_warmstart[:], sim.ctrl[:] = qpos, qvel, 0.0, ctrl
            sim.step(nstep=env.frame_skip)
            return {"threads": sim.nthread}

        return call

    return harness.Case("c_physics", setup, dict(engine="c"))


def networks_case(name: str, size: int) -> harness.Case:
    """DDPGAvg(1)'s act + one gradient update for `size` agents (vmapped), replay pre-filled."""
    return harness.Case("networks", lambda: networks(name, size), dict(engine=None))


def networks(name: str, size: int):
    # A small replay: its size does not change an update's work, and 2048 agents x 1e5 transitions
    # would not fit in memory.
    config = configs.train_config("ddpgavg1", name, steps_per_agent=100, sync_every=100, eval_every_rounds=1,
                                  agent_overrides=dict(buffer_size=1000))
    env, nominal = make(name)
    agent = config.algorithm.agent(config.agent, env.observation_space(nominal).shape, env.action_space(nominal),
                                   total_steps=10 ** 6)
    hp = agent.hparams()
    obs_size, act_size = env.observation_space(nominal).shape[0], env.num_actions
    learners = jax.vmap(agent.init)(jax.random.split(jax.random.key(5), size))

    def fill(learner, key):
        def add(learner, key):
            k1, k2 = jax.random.split(key)
            transition = Transition(obs=jax.random.normal(k1, (obs_size,)), action=jax.random.uniform(k2, (act_size,)),
                                    reward=jnp.float32(1.0), next_obs=jax.random.normal(k2, (obs_size,)),
                                    terminated=jnp.bool_(False))
            return agent.observe(learner, transition), None

        return jax.lax.scan(add, learner, jax.random.split(key, 128))[0]

    learners = jax.jit(jax.vmap(fill))(learners, jax.random.split(jax.random.key(6), size))
    step = jnp.int32(config.agent.learning_starts + 1)
    obs = jax.random.normal(jax.random.key(7), (size, obs_size))

    # Compiled as a run compiles it: with DDPG's CPU matrix-product library, Eigen (the rows in
    # benchmarks/results/envs/mujoco_engines.json, measured before that setting existed, used YNNPACK).
    @functools.partial(jax.jit, compiler_options=config.compiler_options)
    def agent_step(learners, keys):
        def one(learner, o, key):
            act_key, learn_key = jax.random.split(key)
            action = agent.act(learner.shared, o, act_key, step, hp)
            learner, losses = agent.learn(learner, learn_key, step, hp)
            return learner, action

        return jax.vmap(one)(learners, obs, keys)

    keys = jax.random.split(jax.random.key(8), size)
    return common.finished(lambda: agent_step(learners, keys))


def main() -> None:
    p = harness.parser(BENCHMARK, __doc__, repeats=5)
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--sizes", default="32,256,2048")
    p.add_argument("--engines", default="c,mjx", help="comma-separated: c, mjx (mjx also times it uncapped), warp")
    p.add_argument("--no-uncapped", action="store_true", help="skip MJX without its line-search cap")
    p.add_argument("--mjx-max-size", type=int, default=2048, help="largest batch MJX is timed at (it is slow)")
    p.add_argument("--networks-max-size", type=int, default=256,
                   help="largest batch the networks are timed at (their work grows linearly beyond)")
    args = p.parse_args()
    info = common.machine()
    rows = []
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    print(common.machine_line(info))
    header = f"{'task':<15}{'B':>6}{'c ms':>9}{'physics':>9}{'callback':>9}{'mjx ms':>9}{'uncapped':>10}{'networks':>10}  cap check"
    print(header)
    for name in args.tasks.split(","):
        for size in map(int, args.sizes.split(",")):
            states, cases, slow = {}, [], []
            checks = {"part": "checks", "task": name, "size": size}
            if "c" in args.engines:
                cases += [engine_case(name, "c", size, states), c_physics_case(name, size)]
            if "mjx" in args.engines and size <= args.mjx_max_size:
                env = make(name, engine="mjx")[0]
                checks["mjx_ls_iterations"] = env.mjx_ls_iterations
                mjx = [engine_case(name, "mjx", size, states)]
                if env.mjx_ls_iterations is not None and not args.no_uncapped:
                    mjx.append(engine_case(name, "mjx", size, states, uncapped=True, label="mjx_uncapped"))
                (cases if size <= 256 else slow).extend(mjx)
            if "warp" in args.engines:
                cases.append(engine_case(name, "warp", size, states))
            if size <= args.networks_max_size:
                cases.append(networks_case(name, size))
            timed = harness.measure(cases, args.repeats) + harness.measure(slow, 1)
            for row in timed:
                row.update(part="timed", task=name, size=size, step_ms=1e3 * row["wall_s"])
                if row["engine"] is not None and row["case"] != "c_physics":
                    row["env_steps_per_sec"] = size / row["wall_s"]
            ms = {c.name: harness.median(timed, "step_ms", case=c.name) for c in cases + slow}
            if "c" in ms:
                checks["c_callback_ms"] = ms["c"] - ms["c_physics"]
            if "mjx_uncapped" in states:
                capped, full = states["mjx"], states["mjx_uncapped"]
                checks["cap_check"] = {"max_abs_dqvel": float(np.abs(capped.qvel - full.qvel).max()),
                                       "max_abs_dqpos": float(np.abs(capped.qpos - full.qpos).max())}
            if "warp" in states and "c" in states:
                warp, c = states["warp"], states["c"]
                checks["warp_vs_c"] = {"max_abs_dqvel": float(np.abs(warp.qvel - c.qvel).max()),
                                       "max_abs_dqpos": float(np.abs(warp.qpos - c.qpos).max())}
            rows += timed + [checks]

            def show(key):
                return f"{ms[key]:9.2f}" if key in ms else f"{'-':>9}"

            check = checks.get("cap_check", {})
            print(f"{name:<15}{size:>6}{show('c')}{show('c_physics')}"
                  f"{checks.get('c_callback_ms', float('nan')):9.2f}{show('mjx')}{' ' + show('mjx_uncapped')}"
                  f"{ms.get('networks', float('nan')):10.2f}  "
                  f"{check.get('max_abs_dqvel', '')}"
                  + (f"  warp {show('warp')} ms, vs c max|dqvel| {checks['warp_vs_c']['max_abs_dqvel']:.2e}"
                     if "warp_vs_c" in checks else ""), flush=True)
            # each size as it lands: a run cut short keeps what it measured
            harness.write(args.out, BENCHMARK, settings, rows, machine=info)


if __name__ == "__main__":
    main()
