"""gymnasium's v4 MuJoCo locomotion tasks (`fedjax_rl.envs.locomotion`) on their physics engines,
against gymnasium.

gymnasium 1.3.0's Hopper-v4, Walker2d-v4, HalfCheetah-v4 and Ant-v4 (MuJoCo's C `mj_step`) are the
reference. The perturbed masses are set in gymnasium the way a user would:
`env.unwrapped.model.body_mass[i] = c * nominal`.

The C engine (the default) is gymnasium's physics: its state equals gymnasium's exactly, step for
step, over free-running episodes with terminations, truncations and auto-resets, on all four robots,
in float64 and (through the float64 bits it carries) in a float32 program; observations and rewards
agree to 1e-12 in float64 (the control cost's sum is ordered differently) and to float32 rounding
in float32. Its batching and threads change no number.

What MJX can and cannot reproduce (measured here, mujoco 4.0 C against mujoco-mjx 3.17, float64,
with each task's line-search cap):
- Hopper and Walker2d follow gymnasium to ~1e-12 for whole episodes (random actions end them within
  ~20-70 steps; both restart from gymnasium's reset state).
- HalfCheetah never terminates, and its contact-rich gait is chaotic: a 1e-14 difference after two
  steps grows fast (1e-9 at step 40, 1e-4 at step 60, 0.1 at step 100, O(1) after 140). So the free
  run is compared for its first 40 steps, and the *step map* for 200 steps along gymnasium's own
  trajectory (each step starts from gymnasium's state: qpos, qvel, solver warm start).
- Ant: the step map itself differs. Without contacts by ~1e-5 per step (RK4 with the free joint's
  quaternion), and at foot contacts by up to O(1) in the velocities: MJX's contact solution is not
  C's. So Ant gets its first step compared (no contact yet) and statistics over episodes.
"""

from __future__ import annotations

import subprocess
import sys

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl import envs
from fedjax_rl.core import perturb
from fedjax_rl.envs import base as envs_base
from fedjax_rl.envs import check_engine, check_physics_param, make, mujoco_engines
from fedjax_rl.envs.locomotion import TASKS

EXACT = ("Hopper-v4", "Walker2d-v4", "HalfCheetah-v4")
SCALES = (0.5, 1.5)
STEPS = 200
TRUNCATE = 150  # a short time limit on both sides, so truncation and its auto-reset are compared
ATOL = 1e-6


@pytest.fixture(scope="module")
def x64():
    """float64 for the rest of this module. The float32 tests come first in the file, for two
    reasons: the mode stays on until the module ends (each MJX compile is paid once), and programs
    traced in one mode must not meet the other's caches: with jax 0.10 and mjx 3.17, a model with
    the RK4 integrator compiled in one mode fails to lower in the other ("func.call op operand type
    mismatch", mjx's `jnp.tril` of a numpy constant) unless `jax.clear_caches()` runs in between."""
    jax.clear_caches()
    with jax.enable_x64(True):
        yield
    jax.clear_caches()


def _strong(tree):
    """Leaves as committed arrays of their own dtype (no weak Python scalars), so that nominal,
    perturbed and swept params all hit the same compiled step."""
    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), tree)


def _copy(x):
    # A fresh device array: jnp.asarray may alias numpy memory that MuJoCo then overwrites.
    return jnp.array(np.array(x, copy=True))


def _gym_env(name, part_bodies=(), scale=1.0, max_steps=TRUNCATE):
    env = gym.make(name, max_episode_steps=max_steps)
    masses = env.unwrapped.model.body_mass
    for i in part_bodies:
        masses[i] = scale * masses[i]
    return env


def _settings(name):
    """(part, scale) pairs: nominal, and two scales of each of the paper's two parts."""
    return [(None, 1.0)] + [(part, c) for part in envs.get(name).perturbed for c in SCALES]


def _state_of(env, gym_env, elapsed):
    data = gym_env.unwrapped.data
    state = env.state_from(
        _copy(data.qpos), _copy(data.qvel), _copy(data.qacc_warmstart), _copy(data.xpos[1, :2])
    )
    return state.replace(time=jnp.int32(elapsed))


def _compare(name, part, scale, steps, resync, seed=0, engine="mjx"):
    """Worst |difference| of obs and reward over `steps` steps of fixed random actions; asserts the
    terminated/truncated flags agree on every step. `resync`: each step starts from gymnasium's
    state (the step map); otherwise the state runs free, restarted from gymnasium's resets. With
    the C engine the free state must also equal gymnasium's exactly, after every step."""
    env = TASKS[name](engine)
    params = env.default_params.replace(max_steps_in_episode=TRUNCATE)
    bodies = ()
    if part is not None:
        params = env.scale_physics(params, part, scale)
        bodies = env._part_bodies[part]
    params = _strong(params)
    reference = _gym_env(name, bodies, scale)
    reference.reset(seed=seed)
    state = _state_of(env, reference, 0)
    actions = np.random.default_rng(seed).uniform(-1.0, 1.0, (steps, env.num_actions))
    keys = jax.random.split(jax.random.key(seed), steps)
    elapsed, worst, episodes = 0, 0.0, 1
    for t in range(steps):
        if resync:
            state = _state_of(env, reference, elapsed)
        obs_ref, reward_ref, term_ref, trunc_ref, _ = reference.step(actions[t])
        elapsed += 1
        obs, state, reward, terminated, truncated, info = env.step(keys[t], state, _copy(actions[t]), params)
        assert bool(terminated) == term_ref and bool(truncated) == trunc_ref, (name, part, scale, t)
        if engine == "c" and not (term_ref or trunc_ref):
            data = reference.unwrapped.data
            for field in ("qpos", "qvel", "qacc_warmstart"):
                np.testing.assert_array_equal(np.asarray(getattr(state, field)), getattr(data, field), err_msg=field)
        worst = max(worst, np.abs(np.asarray(info["final_observation"]) - obs_ref).max())
        worst = max(worst, abs(float(reward) - reward_ref))
        if term_ref or trunc_ref:
            assert int(state.time) == 0  # auto-reset
            reference.reset()
            state, elapsed, episodes = _state_of(env, reference, 0), 0, episodes + 1
        else:
            np.testing.assert_array_equal(np.asarray(obs), np.asarray(info["final_observation"]))
    return worst, episodes


# --------------------------------------------------------------------------------------------------
# float32 (the training dtype) first: see the `x64` fixture. Ant's one compiled program is a
# jitted vmap of `env.step` over ANT_BATCH environments, each with its own params.

ANT_BATCH = 8
ANT_MAX_STEPS = 300
ANT_EPISODES = 48


@pytest.fixture(scope="module")
def ant():
    assert jnp.zeros(()).dtype == jnp.float32, "float32 tests must run before the x64 ones"
    env, nominal = make("Ant-v4", engine="mjx")
    return env, nominal, jax.jit(jax.vmap(env.step))


def _batch(tree, size=ANT_BATCH):
    return jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (size, *jnp.shape(x))), tree)


def test_ant_first_step_matches_gymnasium(ant):
    """MJX: from 8 of gymnasium's reset states, the first step (no contact yet) agrees to 1e-4 in
    float32 (float64: 4e-6, the RK4/free-joint difference; later steps differ more, see the module
    docstring). The reset observations agree to float32 rounding."""
    env, nominal, batched_step = ant
    params = _batch(_strong(nominal.replace(max_steps_in_episode=ANT_MAX_STEPS)))
    references = [gym.make("Ant-v4") for _ in range(ANT_BATCH)]
    starts = [r.reset(seed=seed)[0] for seed, r in enumerate(references)]
    states = jax.tree.map(lambda *x: jnp.stack(x), *[_state_of(env, r, 0) for r in references])
    obs0 = jax.vmap(env.observation)(states.qpos, states.qvel)
    np.testing.assert_allclose(np.asarray(obs0), np.stack(starts), atol=1e-6)
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, (ANT_BATCH, env.num_actions))
    results = [r.step(a) for r, a in zip(references, actions)]
    keys = jax.random.split(jax.random.key(0), ANT_BATCH)
    obs, _, reward, terminated, _, _ = batched_step(keys, states, jnp.asarray(actions, jnp.float32), params)
    np.testing.assert_allclose(np.asarray(obs), np.stack([r[0] for r in results]), atol=1e-4)
    np.testing.assert_allclose(np.asarray(reward), [r[1] for r in results], atol=1e-4)
    np.testing.assert_array_equal(np.asarray(terminated), [r[2] for r in results])


@pytest.mark.slow
def test_ant_episode_statistics_match_gymnasium(ant):
    """MJX: 48 random-action episodes (time limit 300) on each side, in float32: mean returns within 4
    standard errors of their difference, and the episode lengths' two-sample Kolmogorov-Smirnov
    distance below 0.40 (its 0.1% critical value at 48 + 48 episodes). Slow (MJX's Ant on CPU:
    about 14k env steps, a minute of CPU), so marked `slow`."""
    env, nominal, batched_step = ant
    params = _batch(_strong(nominal.replace(max_steps_in_episode=ANT_MAX_STEPS)))
    returns, lengths = [], []
    for batch_key in jax.random.split(jax.random.key(1), ANT_EPISODES // ANT_BATCH):
        reset_key, action_key, step_key = jax.random.split(batch_key, 3)
        _, states = jax.vmap(env.reset)(jax.random.split(reset_key, ANT_BATCH), params)
        alive = np.ones(ANT_BATCH, bool)
        ret, length = np.zeros(ANT_BATCH), np.zeros(ANT_BATCH, int)
        for t in range(ANT_MAX_STEPS):
            actions = jax.random.uniform(
                jax.random.fold_in(action_key, t), (ANT_BATCH, env.num_actions), minval=-1.0, maxval=1.0
            )
            keys = jax.random.split(jax.random.fold_in(step_key, t), ANT_BATCH)
            _, states, reward, terminated, truncated, _ = batched_step(keys, states, actions, params)
            ret += np.where(alive, np.asarray(reward), 0.0)
            length += alive
            alive &= ~np.asarray(terminated | truncated)
            if not alive.any():
                break
        returns.append(ret)
        lengths.append(length)
    returns, lengths = np.concatenate(returns), np.concatenate(lengths)

    reference = gym.make("Ant-v4", max_episode_steps=ANT_MAX_STEPS)
    reference.action_space.seed(0)
    ref_returns, ref_lengths = [], []
    for seed in range(ANT_EPISODES):
        reference.reset(seed=seed)
        ret, length, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, _ = reference.step(reference.action_space.sample())
            ret, length, done = ret + reward, length + 1, terminated or truncated
        ref_returns.append(ret)
        ref_lengths.append(length)
    ref_returns, ref_lengths = np.array(ref_returns), np.array(ref_lengths)
    se = np.sqrt(returns.var(ddof=1) / len(returns) + ref_returns.var(ddof=1) / len(ref_returns))
    assert abs(returns.mean() - ref_returns.mean()) < 4 * se, (returns.mean(), ref_returns.mean(), se)
    grid = np.arange(1, ANT_MAX_STEPS + 1)
    ks = np.abs((lengths[:, None] <= grid).mean(0) - (ref_lengths[:, None] <= grid).mean(0)).max()
    assert ks < 0.40, (ks, np.sort(lengths), np.sort(ref_lengths))


def test_batched_model_is_the_agents_perturbations_in_order(ant):
    """MJX: per-agent params (perturb.agent_env_params) give a model batched only in body_mass,
    row k = agent k; and row k of a vmapped step is, bit for bit, what every row gives when all
    rows carry agent k's params."""
    env, nominal, batched_step = ant
    parts = envs.get("Ant-v4").perturbed
    rates = jax.random.uniform(jax.random.key(5), (ANT_BATCH, len(parts)), minval=-0.5, maxval=0.5)
    params = perturb.agent_env_params(env, _strong(nominal), parts, rates)
    model, in_axes = env.batched_physics_model(params)
    masses = np.asarray(model.body_mass)
    nominal_masses = np.asarray(env.mj_model.body_mass, np.float32)
    assert masses.shape == (ANT_BATCH, env.mj_model.nbody)
    for k in range(ANT_BATCH):
        expected = nominal_masses.copy()
        for j, part in enumerate(parts):
            bodies = list(env._part_bodies[part])
            expected[bodies] = nominal_masses[bodies] * (1.0 + float(rates[k, j]))
        np.testing.assert_allclose(masses[k], expected, rtol=1e-6)
    assert in_axes.body_mass == 0 and in_axes.geom_size is None and in_axes.body_inertia is None
    assert model.geom_size.shape == env.mj_model.geom_size.shape  # shared, not batched

    keys = jax.random.split(jax.random.key(3), ANT_BATCH)
    _, states = jax.vmap(env.reset)(keys, params)
    actions = jax.random.uniform(jax.random.key(4), (ANT_BATCH, env.num_actions), minval=-1.0, maxval=1.0)
    def stepped(p):  # the same compiled program as the other Ant tests
        return batched_step(keys, states, actions, p)[:2]

    obs, next_states = stepped(params)
    for k in (0, 3, ANT_BATCH - 1):
        obs_k, states_k = stepped(jax.tree.map(lambda x: jnp.broadcast_to(x[k], x.shape), params))
        np.testing.assert_array_equal(np.asarray(obs[k]), np.asarray(obs_k[k]))
        np.testing.assert_array_equal(np.asarray(next_states.qvel[k]), np.asarray(states_k.qvel[k]))
    obs_as_agent_1, _ = stepped(jax.tree.map(lambda x: jnp.broadcast_to(x[1], x.shape), params))
    assert np.abs(np.asarray(obs[0]) - np.asarray(obs_as_agent_1[0])).max() > 0


WARP_BATCH, WARP_STEPS = 8, 5
# float32 against C's float64 after WARP_STEPS steps (a float32 rounding grows on the way; HalfCheetah
# is chaotic): worst |obs difference| measured with these seeds on a CPU, Hopper / Walker2d /
# HalfCheetah: mjx 1.7e-6 / 6.0e-5 / 5.9e-5, warp's CPU kernels 1.2e-6 / 4.0e-5 / 8.6e-5, warp on
# an H200 (benchmarks/results/envs/gpu_h200/warp_parity_test.log) 7.2e-7 / 1.3e-4 / 1.0e-4.
WARP_ATOL = 5e-4


def _batch_against_c(name, engine):
    """Worst |obs difference| between `engine` and the C engine (gymnasium's physics exactly), both
    stepping WARP_BATCH environments with their own masses of the paper's parts (x U(0.5, 1.5)) in
    one vmapped program, WARP_STEPS steps from the same resets with the same actions (auto-resets
    included); asserts the terminations agree."""
    parts = envs.get(name).perturbed
    made = {each: make(name, engine=each) for each in ("c", engine)}
    rates = jax.random.uniform(jax.random.key(5), (WARP_BATCH, len(parts)), minval=-0.5, maxval=0.5)
    actions = jax.random.uniform(jax.random.key(6), (WARP_STEPS, WARP_BATCH, made["c"][0].num_actions),
                                 minval=-1.0, maxval=1.0)
    keys = jax.random.split(jax.random.key(7), (WARP_STEPS + 1, WARP_BATCH))
    runs = {}
    for each, (env, nominal) in made.items():
        params = perturb.agent_env_params(env, _strong(nominal), parts, rates)
        _, state = jax.vmap(env.reset)(keys[0], params)
        step = jax.jit(jax.vmap(env.step))
        trace = []
        for t in range(WARP_STEPS):
            obs, state, _, terminated, _, info = step(keys[t + 1], state, actions[t], params)
            trace.append((np.asarray(info["final_observation"]), np.asarray(terminated)))
        runs[each] = trace
    worst = 0.0
    for (obs_c, done_c), (obs_e, done_e) in zip(runs["c"], runs[engine]):
        np.testing.assert_array_equal(done_c, done_e)
        worst = max(worst, float(np.abs(obs_c - obs_e).max()))
    return worst


@pytest.mark.parametrize("name", EXACT)
def test_warp_batch_follows_the_c_engine_per_environment(name):
    """MuJoCo Warp (NVIDIA GPUs only; skipped elsewhere), float32: each environment of a batch follows
    the C engine at its own masses (per-world body_mass through mjx's Warp FFI). Ant is left out: its
    capsule-plane contact frames differ from C's in every MJX implementation (module docstring)."""
    try:
        check_engine(name, "warp")
    except ValueError as why:
        pytest.skip(str(why))
    worst = _batch_against_c(name, "warp")
    print(f"{name}: warp against C, worst |obs difference| {worst:.2e}")
    assert worst < WARP_ATOL, (name, worst)


@pytest.mark.parametrize("name", tuple(TASKS))
def test_c_engine_float32_program_carries_float64_physics(name):
    """In a float32 program the C engine's state carries float64 bits: from a start float32 can hold
    the trajectory is gymnasium's exactly, step after step, with the perturbed part's float32 masses
    set in gymnasium and every other body at its nominal float64 mass; observations and rewards are
    their float32 roundings."""
    import mujoco

    env = TASKS[name]("c")
    part = envs.get(name).perturbed[0]
    params = _strong(env.scale_physics(env.default_params.replace(max_steps_in_episode=TRUNCATE), part, 1.5))
    reference = _gym_env(name)
    bodies = list(env._part_bodies[part])
    reference.unwrapped.model.body_mass[bodies] = np.asarray(params.model_fields["body_mass"], np.float64)[bodies]
    step = jax.jit(env.step)

    def start():
        data = reference.unwrapped.data
        data.qpos[:] = data.qpos.astype(np.float32)
        data.qvel[:] = data.qvel.astype(np.float32)
        mujoco.mj_forward(reference.unwrapped.model, data)
        return env.state_from(_copy(data.qpos.astype(np.float32)), _copy(data.qvel.astype(np.float32)),
                              com_xy=_copy(data.xpos[1, :2].astype(np.float32)))

    reference.reset(seed=3)
    state = start()
    actions = np.random.default_rng(3).uniform(-1.0, 1.0, (STEPS, env.num_actions)).astype(np.float32)
    worst, compared = 0.0, 0
    for t in range(STEPS):
        obs_ref, reward_ref, term_ref, trunc_ref, _ = reference.step(actions[t].astype(np.float64))
        _, state, reward, terminated, truncated, info = step(jax.random.key(t), state, actions[t], params)
        assert bool(terminated) == term_ref and bool(truncated) == trunc_ref, t
        worst = max(worst, np.abs(np.asarray(info["final_observation"]) - obs_ref).max(), abs(float(reward) - reward_ref))
        if term_ref or trunc_ref:
            reference.reset()
            state = start()
            continue
        exact = np.asarray(state.exact.bits).view(np.float64)
        data = reference.unwrapped.data
        np.testing.assert_array_equal(exact, np.concatenate([data.qpos, data.qvel, data.qacc_warmstart]), err_msg=str(t))
        np.testing.assert_array_equal(np.asarray(state.qpos), data.qpos.astype(np.float32))
        compared += 1
    assert compared > STEPS // 2 and worst < 1e-4, (compared, worst)


def test_c_engine_batches_and_threads_change_no_number(monkeypatch):
    """One host call steps a whole vmapped batch: nested vmaps (seeds x agents, params shared along
    one axis, per-agent masses along the other) give, row by row, the single-environment steps bit
    for bit, whatever the number of threads, and the callback touches its inputs only as numpy."""
    env, nominal = make("Hopper-v4")
    parts = envs.get("Hopper-v4").perturbed
    rates = jax.random.uniform(jax.random.key(5), (4, len(parts)), minval=-0.5, maxval=0.5)
    params = _strong(perturb.agent_env_params(env, nominal, parts, rates))  # [4 agents]
    keys = jax.random.split(jax.random.key(6), (3, 4))  # [3 seeds, 4 agents]
    _, states = jax.vmap(jax.vmap(env.reset), in_axes=(0, None))(keys, params)
    actions = jax.random.uniform(jax.random.key(7), (3, 4, env.num_actions), minval=-1.0, maxval=1.0)

    def nested():
        step = jax.vmap(jax.vmap(env.step), in_axes=(0, 0, 0, None))
        stepped = jax.jit(step)(keys, states, actions, params)
        return jax.jit(step)(keys, stepped[1], actions, params)  # a second step: from the exact bits

    batched = nested()
    single = jax.jit(env.step)
    for seed, agent in ((0, 0), (1, 3), (2, 1)):
        row = lambda tree: jax.tree.map(lambda x: x[seed, agent], tree)  # noqa: E731
        agent_params = jax.tree.map(lambda x: x[agent], params)
        _, state, *_ = single(keys[seed, agent], row(states), actions[seed, agent], agent_params)
        one = single(keys[seed, agent], state, actions[seed, agent], agent_params)
        chex.assert_trees_all_equal(row(batched), one)
    monkeypatch.setattr(mujoco_engines, "_threads", lambda: 1)
    env.engine._batches.clear()

    # The callback's inputs are used only as numpy arrays: a JAX operation on them inside the
    # callback waits for the device that runs the calling program (a deadlock, seen under load).
    class ArrayOnly:
        def __init__(self, array):
            self.array = np.asarray(array)

        def __array__(self, dtype=None, copy=None):
            return self.array

    host_step = mujoco_engines.CEngine._host_step
    monkeypatch.setattr(mujoco_engines.CEngine, "_host_step",
                        lambda self, names, words, *arrays: host_step(self, names, words, *map(ArrayOnly, arrays)))
    chex.assert_trees_all_equal(nested(), batched)


HEALTH_CASES = {
    # task: [(qpos entries set, qvel entries set)], each a boundary or just beside it
    "Hopper-v4": [({1: 0.7}, {}), ({1: 0.7 + 1e-9}, {}), ({2: 0.2}, {}), ({2: -0.2}, {}), ({2: 0.2 - 1e-9}, {}),
                  ({}, {0: 100.0}), ({}, {3: -100.0}), ({}, {3: 99.999}), ({4: 100.0}, {}), ({1: 0.7, 2: 0.5}, {})],
    "Walker2d-v4": [({1: 0.8}, {}), ({1: 0.8 + 1e-9}, {}), ({1: 2.0}, {}), ({1: 2.0 - 1e-9}, {}), ({2: 1.0}, {}),
                    ({2: -1.0}, {}), ({2: -1.0 + 1e-9}, {}), ({}, {0: 1e3})],
    "Ant-v4": [({2: 0.2}, {}), ({2: 0.2 - 1e-9}, {}), ({2: 1.0}, {}), ({2: 1.0 + 1e-9}, {}), ({}, {4: np.nan}),
               ({5: np.inf}, {}), ({}, {0: 1e6})],
    "HalfCheetah-v4": [({1: 100.0}, {}), ({}, {2: np.nan})],
}


def test_warp_runs_too_wide_for_its_contact_buffers_are_refused(monkeypatch):
    from fedjax_rl.training import configs, loop

    monkeypatch.setattr(mujoco_engines, "check_engine", lambda engine: None)  # no GPU needed to refuse
    monkeypatch.setattr(mujoco_engines, "WARP_MAX_WORLDS", 12)

    class Compiling(Exception):
        pass

    def compile_programs(*args, **kwargs):
        raise Compiling

    monkeypatch.setattr(loop, "compile_programs", compile_programs)
    # One evaluation episode over 2 sweep points: the widest batch is training's, runs x 3 agents.
    config = configs.train_config("ddpgavg1", "Hopper-v4", engine="warp", num_agents=3, steps_per_agent=200,
                                  eval_episodes=1, sweep_points=2)
    with pytest.raises(ValueError, match=r"engine 'warp' steps at most 12 .* 6 runs x max\(3 agents, 2 sweep points\) "
                                         r"x 1 episodes = 18; use a smaller run_batch"):
        loop.run(config, num_seeds=6, progress=False)
    with pytest.raises(ValueError, match=r"5 runs x .* = 15"):  # with run_batch: one program's runs
        loop.run(config, num_seeds=6, progress=False, run_batch=5)
    with pytest.raises(Compiling):  # 4 x 3 = 12 worlds fit
        loop.run(config, num_seeds=6, progress=False, run_batch=4)
    # Training fits (2 runs x 3 agents), the final evaluation does not: 2 x 4 sweep points x 2 episodes.
    wide_evaluation = config.replace(sweep_points=4, eval_episodes=2)
    with pytest.raises(ValueError, match=r"2 runs x max\(3 agents, 4 sweep points\) x 2 episodes = 16"):
        loop.run(wide_evaluation, num_seeds=2, progress=False)


def test_engines_are_checked_before_compiling(monkeypatch):
    with pytest.raises(ValueError, match="engine for Hopper-v4 must be one of c, mjx, warp, got 'bullet'"):
        make("Hopper-v4", engine="bullet")
    with pytest.raises(ValueError, match="engine for CartPole-v1 must be one of jax, got 'c'"):
        check_engine("CartPole-v1", "c")
    with pytest.raises(ValueError, match="engine 'warp' .*NVIDIA GPU.*use engine 'c'"):
        check_engine("Ant-v4", "warp")  # this CPU-only suite has no GPU (and usually no warp-lang)
    assert check_engine("Ant-v4", None) == "c" and check_engine("Pendulum-v1", None) == "jax"
    assert make("Ant-v4", engine="mjx")[0] != make("Ant-v4")[0]  # distinct programs for jit's caches
    monkeypatch.setattr(mujoco_engines.CEngine, "expandable", staticmethod(lambda field: field != "dof_damping"))
    env, params = make("Walker2d-v4")
    with pytest.raises(ValueError, match="dof_damping.*cannot differ between simulations.*C engine.*'mjx'"):
        env.set_physics(params, "dof_damping", 2.0)
    # MJX's line-search cap is MJX's alone: Warp's search stops when it converges, and it reached the
    # cap on an H200. (Building the engine compiles nothing; the GPU check is bypassed for that.)
    monkeypatch.setattr(mujoco_engines, "check_engine", lambda engine: None)
    mjx_env, warp_env = TASKS["Ant-v4"]("mjx"), TASKS["Ant-v4"]("warp")
    mjx_cap, warp_cap = mjx_env.engine.mj_model.opt.ls_iterations, warp_env.engine.mj_model.opt.ls_iterations
    assert mjx_cap == mjx_env.mjx_ls_iterations < warp_cap == 50


@pytest.mark.heavy
@pytest.mark.parametrize("name", [name for name, task in TASKS.items() if task.mjx_ls_iterations is not None])
def test_mjx_line_search_cap_changes_no_state(name):
    """A task's MJX line-search cap is kept only where it changes nothing: 1024 float32 states (256
    environments with their own masses x U(0.5, 1.5), 15, 30, 45 and 60 steps into random-action
    episodes on the C engine), each stepped capped and with MuJoCo's default 50, give identical
    states. Four MJX compilations per task, so `heavy` (`make test-heavy`), not in `make test`;
    the capped engine's parity tests above run in every suite."""
    c_env, nominal = make(name)
    scales = jax.random.uniform(jax.random.key(1), (256, c_env.mj_model.nbody), minval=0.5, maxval=1.5)
    params = jax.vmap(lambda s: nominal.replace(model_fields={"body_mass": nominal.model_fields["body_mass"] * s}))(scales)
    _, states = jax.vmap(c_env.reset)(jax.random.split(jax.random.key(0), 256), params)
    c_step, starts = jax.jit(jax.vmap(c_env.step)), []
    for t in range(60):
        actions = jax.random.uniform(jax.random.fold_in(jax.random.key(2), t), (256, c_env.num_actions),
                                     minval=-1.0, maxval=1.0)
        states = c_step(jax.random.split(jax.random.key(t), 256), states, actions, params)[1]
        if t % 15 == 14:
            starts.append(states)
    starts = jax.tree.map(lambda *x: jnp.concatenate(x), *starts)
    params = jax.tree.map(lambda x: jnp.concatenate([x] * 4), params)
    actions = jax.random.uniform(jax.random.key(9), (1024, c_env.num_actions), minval=-1.0, maxval=1.0)
    keys = jax.random.split(jax.random.key(3), 1024)
    capped = make(name, engine="mjx")[0]
    uncapped = TASKS[name]("mjx", mjx_ls_iterations=c_env.mj_model.opt.ls_iterations)
    assert capped.engine.mj_model.opt.ls_iterations == capped.mjx_ls_iterations < 50
    one = jax.jit(jax.vmap(capped.step))(keys, starts, actions, params)[1]
    full = jax.jit(jax.vmap(uncapped.step))(keys, starts, actions, params)[1]
    for field in ("qpos", "qvel", "qacc_warmstart"):
        np.testing.assert_array_equal(np.asarray(getattr(one, field)), np.asarray(getattr(full, field)))


def test_bad_names_and_scales_raise_before_compiling():
    with pytest.raises(ValueError, match="allowed.*torso.*thigh"):
        make("Hopper-v4", ("tail",))
    with pytest.raises(ValueError, match="back_left_leg"):
        check_physics_param("Ant-v4", "back_left_foot")
    env, params = make("Walker2d-v4")
    with pytest.raises(ValueError, match="left_leg.*body_mass"):
        env.get_physics(params, "left_arm")
    for bad in (0.0, -1.0, [1.0, 0.0]):
        with pytest.raises(ValueError, match="scale must be > 0"):
            env.scale_physics(params, "left_leg", bad) if np.ndim(bad) == 0 else envs_base.check_scales(bad)
    with pytest.raises(ValueError, match="scale must be > 0"):
        perturb.scaled_env_params(env, params, ("left_leg",), np.array([0.0, 1.0]))


def test_names_spaces_and_fields():
    for name, cls in TASKS.items():
        env, params = make(name)
        spec = envs.get(name)
        assert params.max_steps_in_episode == spec.max_steps == 1000
        nu, nq, nv = env.mj_model.nu, env.mj_model.nq, env.mj_model.nv
        space = env.action_space(params)
        assert space.shape == (nu,) and np.all(space.low == -1.0) and np.all(space.high == 1.0)
        obs_dim = {"Hopper-v4": 11, "Walker2d-v4": 17, "HalfCheetah-v4": 17, "Ant-v4": 27}[name]
        assert env.observation_space(params).shape == (obs_dim,) == (nq - env.obs_skip_qpos + nv,)
        names = env.physics_names(params)
        assert set(spec.perturbed) <= set(names) and {"body_mass", "opt.gravity", "dof_damping"} <= set(names)
    env, params = make("Ant-v4")
    # A paper leg is its whole chain; the hip segment alone stays addressable.
    leg = env._part_bodies["back_left_leg"]
    assert [env.mj_model.body(i).name for i in leg] == ["back_leg", "aux_3", ""]
    doubled = env.set_physics(params, "back_left_leg", 2 * env.get_physics(params, "back_left_leg"))
    np.testing.assert_allclose(
        np.asarray(doubled.model_fields["body_mass"])[list(leg)], 2 * env.mj_model.body_mass[list(leg)], rtol=1e-6
    )
    assert float(env.get_physics(params, "body5")) == pytest.approx(env.mj_model.body_mass[5])
    # Any float model field, applied to the model that (MJX's) step uses.
    env, params = make("Ant-v4", engine="mjx")
    params = env.set_physics(params, "opt.gravity", 0.5 * env.get_physics(params, "opt.gravity"))
    params = env.set_physics(params, "dof_damping", 2.0)
    model = env.physics_model(params)
    np.testing.assert_allclose(np.asarray(model.opt.gravity), 0.5 * env.mj_model.opt.gravity, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(model.dof_damping), 2.0)


@pytest.mark.parametrize("name", ("Hopper-v4", "HalfCheetah-v4"))
def test_reset_noise(name):
    """Hopper: qpos0 + U(-5e-3, 5e-3), qvel U(-5e-3, 5e-3); HalfCheetah: qvel 0.1 N(0, 1)."""
    env, params = make(name)
    obs, states = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 4000), params)
    dq = np.asarray(states.qpos) - env.mj_model.qpos0
    s = env.reset_noise_scale
    assert np.all(np.abs(dq) <= s) and np.allclose(dq.std(0), s / np.sqrt(3), rtol=0.05)
    qvel = np.asarray(states.qvel)
    if env.reset_qvel_normal:
        assert np.allclose(qvel.std(0), s, rtol=0.05) and np.abs(qvel).max() > 3 * s
    else:
        assert np.all(np.abs(qvel) <= s) and np.allclose(qvel.std(0), s / np.sqrt(3), rtol=0.05)
    np.testing.assert_array_equal(np.asarray(obs), np.asarray(jax.vmap(env.observation)(states.qpos, states.qvel)))


# --------------------------------------------------------------------------------------------------
# float64 parity with gymnasium (one compiled step per task, shared by the tests below)


@pytest.mark.parametrize("name", tuple(TASKS))
def test_c_engine_is_gymnasium_exactly(name, x64):
    """The C engine's free run, 200 steps at nominal mass and two scales of each paper part: the
    state equals gymnasium's after every step (`_compare`), and obs and reward agree to 1e-12."""
    for part, scale in _settings(name):
        worst, episodes = _compare(name, part, scale, STEPS, resync=False, engine="c")
        assert worst < 1e-12, (name, part, scale, worst)
        assert episodes > (1 if name in ("HalfCheetah-v4", "Ant-v4") else 2)  # resets compared too


@pytest.mark.parametrize("name", EXACT)
def test_step_map_matches_gymnasium(name, x64):
    """MJX: 200 steps along gymnasium's trajectory at nominal mass and two scales of each paper part."""
    for part, scale in _settings(name):
        worst, episodes = _compare(name, part, scale, STEPS, resync=True)
        assert worst < ATOL, (name, part, scale, worst)
        if name != "HalfCheetah-v4":
            assert episodes > 2  # terminations (and their auto-resets) were compared too
        else:
            assert episodes == STEPS // TRUNCATE + 1  # truncation at the time limit


@pytest.mark.parametrize("name", ("Hopper-v4", "Walker2d-v4"))
def test_free_run_matches_gymnasium(name, x64):
    """MJX: nominal, and one scale of each paper part (the step map above covers all five)."""
    for part, scale in _settings(name)[::2]:
        worst, episodes = _compare(name, part, scale, STEPS, resync=False)
        assert worst < ATOL, (name, part, scale, worst)
        assert episodes > 2


def test_halfcheetah_free_run_before_chaos(x64):
    """MJX: HalfCheetah's free run agrees until chaos takes over (module docstring): 40 steps."""
    for part, scale in _settings("HalfCheetah-v4"):
        worst, _ = _compare("HalfCheetah-v4", part, scale, 40, resync=False)
        assert worst < ATOL, (part, scale, worst)


@pytest.mark.parametrize("name", EXACT)
def test_scale_one_is_bit_identical_and_scales_differ(name, x64):
    env, nominal = make(name, engine="mjx")
    parts = envs.get(name).perturbed
    unit = perturb.agent_env_params(env, nominal, parts, jnp.zeros((3, len(parts))))
    swept = perturb.scaled_env_params(env, nominal, parts, np.array([0.5, 1.0, 1.5]))
    candidates = {
        "nominal": nominal,
        "rate 0": jax.tree.map(lambda x: x[1], unit),
        "sweep 1.0": jax.tree.map(lambda x: x[1], swept),
        **{f"{p} x1": env.scale_physics(nominal, p, 1.0) for p in parts},
        "sweep 0.5": jax.tree.map(lambda x: x[0], swept),
        "sweep 1.5": jax.tree.map(lambda x: x[2], swept),
    }
    reference = _gym_env(name)
    reference.reset(seed=1)
    state0 = _state_of(env, reference, 0)
    actions = np.random.default_rng(2).uniform(-1.0, 1.0, (30, env.num_actions))
    runs = {}
    for label, params in candidates.items():
        params = _strong(params)
        state, obs = state0, []
        for t in range(30):
            o, state, *_ = env.step(jax.random.key(t), state, _copy(actions[t]), params)
            obs.append(np.asarray(o))
        runs[label] = np.stack(obs)
    for label in ("rate 0", "sweep 1.0", *[f"{p} x1" for p in parts]):
        np.testing.assert_array_equal(runs[label], runs["nominal"], err_msg=label)
    assert np.abs(runs["sweep 0.5"] - runs["sweep 1.5"]).max() > 1e-2
    assert np.abs(runs["sweep 0.5"] - runs["nominal"]).max() > 1e-3


@pytest.mark.parametrize("name", tuple(HEALTH_CASES))
def test_termination_at_its_boundaries_matches_gymnasium(name, x64):
    """Each task's health rule at states on and beside its boundaries (gymnasium's strict or
    inclusive inequalities), against gymnasium's `is_healthy` at the same state (HalfCheetah never
    terminates). Both outcomes occur among each task's cases."""
    env, _ = make(name)
    reference = gym.make(name).unwrapped
    reference.reset(seed=0)
    healthy = jax.jit(env.healthy)
    outcomes = set()
    for qpos_set, qvel_set in HEALTH_CASES[name]:
        qpos, qvel = reference.init_qpos.copy(), reference.init_qvel.copy()
        qpos[2 if name == "Ant-v4" else 1] = 0.75 if name == "Ant-v4" else 1.25  # a healthy height
        qpos[list(qpos_set)] = list(qpos_set.values())
        qvel[list(qvel_set)] = list(qvel_set.values())
        reference.set_state(qpos, qvel)
        expected = True if name == "HalfCheetah-v4" else bool(reference.is_healthy)
        assert bool(healthy(jnp.asarray(qpos), jnp.asarray(qvel))) == expected, (qpos_set, qvel_set, expected)
        outcomes.add(expected)
    assert outcomes == ({True} if name == "HalfCheetah-v4" else {True, False})


def test_importing_the_mujoco_envs_prints_nothing():
    # mjx prints "Failed to import warp" when its optional GPU backend is absent; users saw it on
    # every MuJoCo command (train, reproduce, even --status). A fresh interpreter, so mjx is not cached.
    done = subprocess.run([sys.executable, "-c", "import fedjax_rl.envs.locomotion"], capture_output=True, text=True,
                          check=True)
    assert done.stdout == ""


def test_making_every_task_prints_nothing():
    """MuJoCo printed "compiler attribute 'settotalmass' is deprecated" (HalfCheetah's XML) before every
    MuJoCo run's output and `reproduce table2 --status`'s answer. A fresh interpreter builds all four."""
    code = "from fedjax_rl import envs\nfor name in ('Hopper-v4', 'Walker2d-v4', 'HalfCheetah-v4', 'Ant-v4'):\n" \
           "    envs.make(name)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "" and "settotalmass" not in done.stderr, (done.stdout, done.stderr[-2000:])


def _model_fields(model) -> dict:
    """Every array and number of an MjModel, its option, statistics and visual settings included."""
    import mujoco

    fields = {}
    for prefix, part in (("", model), ("opt.", model.opt), ("stat.", model.stat), ("vis.global.", model.vis.global_),
                         ("vis.quality.", model.vis.quality), ("vis.map.", model.vis.map),
                         ("vis.scale.", model.vis.scale)):
        for name in dir(part):
            value = getattr(part, name) if not name.startswith("_") else None
            if isinstance(value, np.ndarray | int | float | bytes | str):
                fields[prefix + name] = value
    assert mujoco.mj_sizeModel(model) and len(fields) > 300  # the walk found the model's fields
    return fields


@pytest.mark.parametrize("xml_file", ["hopper.xml", "walker2d.xml", "half_cheetah.xml", "ant.xml"])
def test_the_model_is_the_one_the_xml_compiles_to(xml_file, capfd):
    """locomotion.load_model compiles HalfCheetah without its deprecated `settotalmass` and applies the
    total mass itself (mj_setTotalmass, mj_setConst, the compiler's mass statistics): every field equals,
    bit for bit, the model MuJoCo compiles from the file with the attribute, and nothing is printed."""
    import mujoco

    from fedjax_rl.envs import locomotion

    old = mujoco.MjModel.from_xml_path(locomotion.gymnasium_xml_path(xml_file))
    printed_old = "".join(capfd.readouterr())
    new = locomotion.load_model(xml_file)
    assert "settotalmass" not in "".join(capfd.readouterr())
    assert ("settotalmass" in printed_old) == (xml_file == "half_cheetah.xml")  # what the old way printed
    old_fields, new_fields = _model_fields(old), _model_fields(new)
    assert old_fields.keys() == new_fields.keys()
    different = [name for name, value in old_fields.items()
                 if not np.array_equal(value, new_fields[name], equal_nan=isinstance(value, np.ndarray)
                                       and value.dtype.kind == "f")]
    assert different == []
    if xml_file == "half_cheetah.xml":
        assert float(np.sum(new.body_mass)) == pytest.approx(14.0)
