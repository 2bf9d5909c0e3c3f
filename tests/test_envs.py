"""Perturbable classic-control environments and the registry.

gymnasium is the reference physics: under 64-bit floats (scoped with `jax.enable_x64`, so nothing
leaks into other tests) the project's envs and gymnasium's are stepped from the same states with the
same actions, with the same perturbed attributes, and must agree to 1e-6.
"""

from __future__ import annotations

import functools
import importlib.util

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.envs.classic_control import AcrobotEnv, CartPoleEnv, MountainCarEnv

from fedjax_rl import envs
from fedjax_rl.core import perturb
from fedjax_rl.envs import (
    EnvSpec,
    check_physics_param,
    make,
    physics_names,
    random_policy_returns,
)
from fedjax_rl.envs.classic_control import Acrobot, CartPole, MountainCar, acrobot_dsdt, acrobot_rk4

CLASSIC = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")
HAVE_LUNAR = importlib.util.find_spec("fedjax_rl.envs.lunar_lander") is not None
PARITY_STEPS = 600
ATOL = 1e-6

# --------------------------------------------------------------------------------------------------
# Policies used for the rollouts: mostly random, with a pumping heuristic where a random policy
# would never reach the goal, so that terminations and auto-resets are exercised too.


def _random_policy(obs, key, num_actions):
    return jax.random.randint(key, (), 0, num_actions)


def _pumping_policy(velocity, key, num_actions, eps=0.1):
    """Push along a velocity (reaches MountainCar's and Acrobot's goals); a fraction eps random."""
    k_eps, k_act = jax.random.split(key)
    greedy = jnp.where(velocity >= 0, num_actions - 1, 0)
    explore = jax.random.uniform(k_eps) < eps
    return jnp.where(explore, _random_policy(None, k_act, num_actions), greedy)


def policy_for(env_name):
    if env_name == "CartPole-v1":
        return lambda obs, key: _random_policy(obs, key, 2)
    if env_name == "MountainCar-v0":
        return lambda obs, key: _pumping_policy(obs[1], key, 3)
    return lambda obs, key: _pumping_policy(obs[5], key, 3)  # Acrobot: torque along dtheta2


@functools.partial(jax.jit, static_argnames=("env", "env_name", "num_steps"))
def rollout(env, env_name, params, key, num_steps):
    """Per step: the state before it, the action, and the step's outputs (pre-reset observation)."""
    policy = policy_for(env_name)
    key_reset, key_steps = jax.random.split(key)
    obs, state = env.reset(key_reset, params)

    def step(carry, key):
        obs, state = carry
        key_policy, key_step = jax.random.split(key)
        action = policy(obs, key_policy)
        obs_next, state_next, reward, terminated, truncated, info = env.step(
            key_step, state, action, params
        )
        out = dict(
            state=state,
            action=action,
            final_obs=info["final_observation"],
            obs=obs_next,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
        )
        return (obs_next, state_next), out

    _, traj = jax.lax.scan(step, (obs, state), jax.random.split(key_steps, num_steps))
    return traj


# --------------------------------------------------------------------------------------------------
# gymnasium side: the same physics set on `env.unwrapped`, with gymnasium's own derived formulas.


def _gym_cartpole(length=None, masscart=None):
    env = CartPoleEnv()
    env.reset(seed=0)
    if length is not None:
        env.length = length
    if masscart is not None:
        env.masscart = masscart
    # As gymnasium's own constructor derives them.
    env.total_mass = env.masspole + env.masscart
    env.polemass_length = env.masspole * env.length
    return env


def _gym_acrobot(length=None):
    env = AcrobotEnv()
    env.reset(seed=0)
    if length is not None:
        env.LINK_LENGTH_1 = length
        env.LINK_COM_POS_1 = length / 2.0  # the centre of mass of a uniform link is its middle
    return env


def _gym_mountain_car(gravity=None, force=None):
    env = MountainCarEnv()
    env.reset(seed=0)
    if gravity is not None:
        env.gravity = gravity
    if force is not None:
        env.force = force
    return env


def _gym_state(env_name, state, t):
    if env_name == "CartPole-v1":
        return np.array([state.x[t], state.x_dot[t], state.theta[t], state.theta_dot[t]])
    if env_name == "Acrobot-v1":
        return np.array(
            [state.joint_angle1[t], state.joint_angle2[t], state.velocity_1[t], state.velocity_2[t]]
        )
    return np.array([state.position[t], state.velocity[t]])


def _gym_obs64(env_name, gym_env):
    """gymnasium's observation from its internal float64 state (its returned obs is float32)."""
    s = np.asarray(gym_env.state, dtype=np.float64)
    if env_name == "Acrobot-v1":
        return np.array([np.cos(s[0]), np.sin(s[0]), np.cos(s[1]), np.sin(s[1]), s[2], s[3]])
    return s


PARITY_CASES = [
    ("CartPole-v1", {}),
    ("CartPole-v1", {"length": 0.25}),
    ("CartPole-v1", {"length": 0.95}),
    ("CartPole-v1", {"masscart": 0.5}),
    ("CartPole-v1", {"masscart": 1.7}),
    ("CartPole-v1", {"length": 0.3, "masscart": 1.4}),
    ("Acrobot-v1", {}),
    ("Acrobot-v1", {"length": 0.6}),
    ("Acrobot-v1", {"length": 1.5}),
    ("MountainCar-v0", {}),
    ("MountainCar-v0", {"gravity": 0.0025 * 0.6}),
    ("MountainCar-v0", {"gravity": 0.0025 * 1.5}),
    ("MountainCar-v0", {"force": 0.001 * 0.7}),
    ("MountainCar-v0", {"force": 0.001 * 1.8, "gravity": 0.0025 * 1.3}),
]
GYM_FACTORY = {
    "CartPole-v1": _gym_cartpole,
    "Acrobot-v1": _gym_acrobot,
    "MountainCar-v0": _gym_mountain_car,
}


@pytest.mark.parametrize(
    "env_name,physics", PARITY_CASES, ids=[f"{n}-{p}" for n, p in PARITY_CASES]
)
def test_parity_with_gymnasium(env_name, physics):
    with jax.enable_x64(True):
        env, params = make(env_name)
        for name, value in physics.items():
            params = env.set_physics(params, name, value)
        traj = jax.device_get(
            rollout(env, env_name, params, jax.random.key(len(str(physics))), PARITY_STEPS)
        )
        assert traj["final_obs"].dtype == np.float64
    assert jnp.zeros(()).dtype == jnp.float32, "x64 leaked out of its scope"

    gym_env = GYM_FACTORY[env_name](**physics)
    num_terminated = 0
    for t in range(PARITY_STEPS):
        gym_env.state = _gym_state(env_name, traj["state"], t)
        if env_name == "CartPole-v1":
            gym_env.steps_beyond_terminated = None  # each step starts from a live state
        _, reward, terminated, _, _ = gym_env.step(int(traj["action"][t]))
        np.testing.assert_allclose(
            traj["final_obs"][t], _gym_obs64(env_name, gym_env), rtol=0, atol=ATOL,
            err_msg=f"step {t}",
        )
        assert traj["reward"][t] == reward, f"step {t}"
        assert bool(traj["terminated"][t]) == terminated, f"step {t}"
        num_terminated += terminated
    # The trajectories really cross episode ends (auto-reset from a terminal state is compared too).
    assert num_terminated >= 1
    assert not traj["truncated"].any()


def test_acrobot_default_gravity_is_gymnasiums():
    env, params = make("Acrobot-v1")
    assert params.gravity == 9.8
    assert "gravity" in env.physics_names(params)


def _acrobot_params(**physics):
    env = Acrobot()
    params = env.default_params
    for name, value in physics.items():
        params = env.set_physics(params, name, value)
    return params


def test_acrobot_gravity_scales_accelerations_at_rest():
    """At zero velocity and torque the only force is gravity: accelerations are linear in g."""
    with jax.enable_x64(True):
        angles = jax.random.uniform(jax.random.key(0), (64, 2), minval=-np.pi, maxval=np.pi)
        s = jnp.concatenate([angles, jnp.zeros((64, 3))], axis=1)

        @jax.jit
        def acc_under(params):
            return jax.vmap(lambda y: acrobot_dsdt(y, params)[2:4])(s)

        def acc(g):
            return acc_under(_acrobot_params(gravity=g))

        base = acc(9.8)
        assert np.abs(base).max() > 1.0
        for c in (0.0, 0.3, 1.7, 4.0):
            np.testing.assert_allclose(acc(c * 9.8), c * base, rtol=1e-12, atol=1e-12)


def test_acrobot_gravity_time_scaling():
    """theta(t) solves the unforced equations under g iff theta(c t) solves them under c^2 g.

    So one RK4 step of dt/c under c^2 g from (theta, c omega) lands on (theta', c omega') where
    (theta', omega') is one step of dt under g from (theta, omega). A property of the physics that
    only holds if gravity enters the dynamics as g, everywhere.
    """
    with jax.enable_x64(True):
        key_a, key_v = jax.random.split(jax.random.key(1))
        angles = jax.random.uniform(key_a, (32, 2), minval=-np.pi, maxval=np.pi)
        velocities = jax.random.uniform(key_v, (32, 2), minval=-2.0, maxval=2.0)
        integrate = jax.jit(jax.vmap(acrobot_rk4, in_axes=(0, None)))
        for c in (0.5, 1.5, 3.0):
            p1 = _acrobot_params(gravity=9.8)
            pc = _acrobot_params(gravity=c**2 * 9.8, dt=0.2 / c)
            s1 = jnp.concatenate([angles, velocities, jnp.zeros((32, 1))], axis=1)
            sc = jnp.concatenate([angles, c * velocities, jnp.zeros((32, 1))], axis=1)
            out1 = integrate(s1, p1)
            outc = integrate(sc, pc)
            np.testing.assert_allclose(outc[:, :2], out1[:, :2], rtol=0, atol=1e-10)
            np.testing.assert_allclose(outc[:, 2:4], c * out1[:, 2:4], rtol=0, atol=1e-10)
            # And gravity does change the motion (the property is not vacuous).
            pg = _acrobot_params(gravity=c**2 * 9.8)
            outg = integrate(s1, pg)
            assert np.abs(outg[:, :4] - out1[:, :4]).max() > 1e-2


def test_acrobot_motion_under_four_g_is_twice_as_fast():
    """The same time scaling through the whole env step (wrap, clip, many steps): with zero torque,
    under 4g and dt/2 the acrobot passes through the same angles with twice the angular velocity,
    i.e. every period of its motion halves, as a pendulum's period goes with 1/sqrt(g)."""
    with jax.enable_x64(True):
        env = Acrobot()
        p1 = _acrobot_params(gravity=9.8)
        p4 = _acrobot_params(gravity=4 * 9.8, dt=0.1)
        _, state = env.reset(jax.random.key(0), p1)
        state = state.replace(joint_angle1=0.8, joint_angle2=-0.5, velocity_1=0.3, velocity_2=0.1)
        state4 = state.replace(velocity_1=0.6, velocity_2=0.2)

        @jax.jit
        def run(state, params):
            def step(state, _):
                obs, state, *_ = env.step_env(jax.random.key(0), state, 1, params)
                return state, obs

            return jax.lax.scan(step, state, length=60)[1]

        obs1, obs4 = run(state, p1), run(state4, p4)
        np.testing.assert_allclose(obs4[:, :4], obs1[:, :4], rtol=0, atol=1e-8)
        np.testing.assert_allclose(obs4[:, 4:], 2 * obs1[:, 4:], rtol=0, atol=1e-8)
        assert np.abs(np.diff(np.sign(obs1[:, 1]))).sum() >= 4  # it does swing back and forth


# --------------------------------------------------------------------------------------------------
# Derived fields and names


def test_cartpole_derived_fields_follow():
    env = CartPole()
    p = env.default_params
    assert p.total_mass == pytest.approx(1.1) and p.polemass_length == pytest.approx(0.05)
    p = env.set_physics(p, "length", 0.8)
    assert p.length == 0.8 and p.polemass_length == pytest.approx(0.1 * 0.8)
    p = env.set_physics(p, "masscart", 2.0)
    assert p.total_mass == pytest.approx(2.1)
    p = env.set_physics(p, "masspole", 0.3)
    assert p.total_mass == pytest.approx(2.3) and p.polemass_length == pytest.approx(0.3 * 0.8)
    for derived in ("total_mass", "polemass_length"):
        assert derived not in env.physics_names(p)
        with pytest.raises(ValueError, match="allowed"):
            env.set_physics(p, derived, 1.0)


def test_acrobot_length_is_link_one_and_centres_of_mass_follow():
    env = Acrobot()
    p = env.set_physics(env.default_params, "length", 1.4)
    assert p.link_length_1 == 1.4 and p.link_com_pos_1 == pytest.approx(0.7)
    assert p.link_length_2 == 1.0 and p.link_com_pos_2 == 0.5
    assert env.get_physics(p, "length") == 1.4
    p = env.set_physics(p, "link_length_2", 0.6)
    assert p.link_com_pos_2 == pytest.approx(0.3)
    for derived in ("link_com_pos_1", "link_com_pos_2"):
        with pytest.raises(ValueError, match="allowed"):
            env.set_physics(p, derived, 1.0)


@pytest.mark.parametrize("env_name", CLASSIC)
def test_paper_parameters_are_physical_names(env_name):
    spec = envs.get(env_name)
    env, params = make(env_name)
    assert set(spec.perturbed) <= set(env.physics_names(params))
    assert spec.max_steps == params.max_steps_in_episode
    for name in spec.perturbed:
        check_physics_param(env_name, name)
    # Every float field that is not derived may be perturbed by name.
    assert set(physics_names(env_name)) == set(env.physics_names(params))


def test_registry_names_and_errors():
    assert isinstance(make("CartPole-v1")[0], CartPole)
    assert isinstance(make("Acrobot-v1")[0], Acrobot)
    assert isinstance(make("MountainCar-v0")[0], MountainCar)
    assert envs.built_in() == (
        "CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "LunarLander-v3",
        "Hopper-v4", "Walker2d-v4", "HalfCheetah-v4", "Ant-v4",  # tests/test_mujoco_envs.py
    )
    assert isinstance(envs.get("CartPole-v1"), EnvSpec)
    assert envs.get("CartPole-v1").perturbed == ("length", "masscart")
    assert envs.get("Acrobot-v1").perturbed == ("gravity", "length")
    assert envs.get("MountainCar-v0").perturbed == ("gravity", "force")
    assert envs.get("LunarLander-v3").perturbed == ("gravity", "wind")
    with pytest.raises(ValueError, match="CartPole-v1.*Acrobot-v1.*MountainCar-v0.*LunarLander-v3"):
        make("Pong-v0")
    with pytest.raises(ValueError, match="allowed"):
        check_physics_param("Pong-v0", "length")
    with pytest.raises(ValueError, match=r"'mass'.*allowed:.*masscart"):
        check_physics_param("CartPole-v1", "mass")
    with pytest.raises(ValueError, match=r"'total_mass'.*allowed"):
        check_physics_param("CartPole-v1", "total_mass")
    with pytest.raises(ValueError, match="allowed:.*gravity"):
        make("Acrobot-v1", perturbed=("wind",))
    env, params = make("CartPole-v1")
    with pytest.raises(ValueError, match="allowed:.*length"):
        env.set_physics(params, "lenght", 1.0)
    # Fresh envs of one kind compare equal, so jitted steps are shared, not recompiled.
    assert make("CartPole-v1")[0] == env and hash(make("CartPole-v1")[0]) == hash(env)


@pytest.mark.skipif(not HAVE_LUNAR, reason="fedjax_rl.envs.lunar_lander not written yet")
def test_lunar_lander_registry():
    env, params = make("LunarLander-v3")
    assert {"gravity", "wind"} <= set(env.physics_names(params))
    check_physics_param("LunarLander-v3", "gravity")
    check_physics_param("LunarLander-v3", "wind")
    with pytest.raises(ValueError, match="allowed"):
        check_physics_param("LunarLander-v3", "length")
    env, params = make("LunarLander-v3", perturbed=("gravity",))
    assert "gravity" in env.physics_names(params)


# --------------------------------------------------------------------------------------------------
# Step API: terminated vs truncated, auto-reset, pre-reset final observation


def test_cartpole_termination_is_not_truncation():
    env, params = make("CartPole-v1")
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(theta=jnp.float32(0.2094), theta_dot=jnp.float32(1.0), time=7)
    obs, new_state, reward, terminated, truncated, info = env.step(
        jax.random.key(1), state, 1, params
    )
    assert bool(terminated) and not bool(truncated)
    assert bool(info["terminated"]) and not bool(info["truncated"])
    assert reward == 1.0  # gymnasium's CartPole pays 1 on the step on which the pole falls
    final = np.asarray(info["final_observation"])
    assert final[2] > params.theta_threshold_radians  # pre-reset: the pole has fallen
    assert np.abs(np.asarray(obs)).max() <= 0.05  # post-reset: a fresh start
    assert int(new_state.time) == 0
    np.testing.assert_array_equal(obs, env.get_obs(new_state))


def test_mountain_car_truncation_is_not_termination():
    env, params = make("MountainCar-v0")
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(position=jnp.float32(-0.3), velocity=jnp.float32(0.01), time=199)
    obs, new_state, _, terminated, truncated, info = env.step(jax.random.key(1), state, 2, params)
    assert bool(truncated) and not bool(terminated)
    final = np.asarray(info["final_observation"])
    expected_velocity = 0.01 + params.force - np.cos(3 * -0.3) * params.gravity
    np.testing.assert_allclose(final, [-0.3 + expected_velocity, expected_velocity], rtol=1e-5)
    assert int(new_state.time) == 0 and float(new_state.velocity) == 0.0
    assert -0.6 <= float(obs[0]) <= -0.4

    # And one step earlier nothing ends.
    _, s, _, terminated, truncated, info = env.step(
        jax.random.key(1), state.replace(time=198), 2, params
    )
    assert not bool(truncated) and not bool(terminated) and int(s.time) == 199
    np.testing.assert_array_equal(info["final_observation"], env.get_obs(s))


def test_acrobot_goal_terminates_with_zero_reward():
    env, params = make("Acrobot-v1")
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(joint_angle1=jnp.float32(np.pi - 0.05), joint_angle2=jnp.float32(0.0))
    key = jax.random.key(1)
    _, new_state, reward, terminated, truncated, info = env.step(key, state, 1, params)
    assert bool(terminated) and not bool(truncated) and reward == 0.0
    final = np.asarray(info["final_observation"])
    assert -final[0] - (final[0] * final[2] - final[1] * final[3]) > 1.0  # tip above the bar
    assert int(new_state.time) == 0


# --------------------------------------------------------------------------------------------------
# Heterogeneity: per-agent params really differ, sweeps run, rate 0 is nominal


@functools.partial(jax.jit, static_argnames=("env", "num_steps"))
def _fixed_action_rollout(env, params, state, actions, num_steps):
    def step(state, action):
        obs, state, *_ = env.step_env(jax.random.key(0), state, action, params)
        return state, obs

    return jax.lax.scan(step, state, actions[:num_steps])[1]


@pytest.mark.parametrize("env_name", CLASSIC)
def test_agent_params_give_different_trajectories(env_name):
    env, nominal = make(env_name)
    spec = envs.get(env_name)
    num_agents = 5
    for names in [(spec.perturbed[0],), (spec.perturbed[1],), spec.perturbed]:
        rates = perturb.sample_rates(jax.random.key(3), num_agents * len(names), 0.5)
        rates = rates.reshape(num_agents, len(names)) if len(names) > 1 else rates
        params = perturb.agent_env_params(env, nominal, names, rates)
        rates2 = rates.reshape(num_agents, len(names))
        for i, name in enumerate(names):
            values = np.asarray(env.get_physics(params, name))
            chex.assert_shape(values, (num_agents,))
            np.testing.assert_allclose(
                values, env.get_physics(nominal, name) * (1 + np.asarray(rates2[:, i])), rtol=1e-6
            )
            assert len(np.unique(values)) == num_agents
        # Same start, same actions, different physics: every pair of trajectories differs.
        _, state = env.reset(jax.random.key(0), nominal)
        actions = jax.random.randint(jax.random.key(4), (40,), 0, env.num_actions)
        if env_name == "MountainCar-v0":
            actions = jnp.full((40,), 2)  # no clipping at the walls in 40 steps of pushing right
        obs = jax.vmap(_fixed_action_rollout, in_axes=(None, 0, None, None, None))(
            env, params, state, actions, 40
        )
        obs = np.asarray(obs).reshape(num_agents, -1)
        for a in range(num_agents):
            for b in range(a + 1, num_agents):
                assert np.abs(obs[a] - obs[b]).max() > 1e-5, (names, a, b)


def test_cartpole_agent_params_recompute_derived_fields():
    env, nominal = make("CartPole-v1")
    rates = perturb.sample_rates(jax.random.key(0), 10, 0.5).reshape(5, 2)
    params = perturb.agent_env_params(env, nominal, ("length", "masscart"), rates)
    np.testing.assert_allclose(params.total_mass, params.masscart + nominal.masspole, rtol=1e-6)
    np.testing.assert_allclose(params.polemass_length, nominal.masspole * params.length, rtol=1e-6)


@pytest.mark.parametrize("env_name", CLASSIC)
def test_zero_rates_reproduce_nominal_exactly(env_name):
    env, nominal = make(env_name)
    names = envs.get(env_name).perturbed
    params = perturb.agent_env_params(env, nominal, names, jnp.zeros((4, len(names))))

    def check(batched, single):
        batched = np.asarray(batched)
        single = np.asarray(single, dtype=batched.dtype)
        for k in range(4):
            np.testing.assert_array_equal(batched[k], single)

    jax.tree.map(check, params, nominal)


@pytest.mark.parametrize("env_name", CLASSIC)
def test_sweep_params_run(env_name):
    env, nominal = make(env_name)
    names = envs.get(env_name).perturbed
    scales = perturb.sweep_scales()
    params = perturb.scaled_env_params(env, nominal, names, scales)
    for name in names:
        np.testing.assert_allclose(
            env.get_physics(params, name), scales * env.get_physics(nominal, name), rtol=1e-6
        )
    # Every sweep point steps (no NaNs from, e.g., a 0.1x pole), and c = 1 is the nominal env.
    _, state = env.reset(jax.random.key(0), nominal)
    actions = jax.random.randint(jax.random.key(4), (40,), 0, env.num_actions)
    obs = jax.vmap(_fixed_action_rollout, in_axes=(None, 0, None, None, None))(
        env, params, state, actions, 40
    )
    nominal_obs = _fixed_action_rollout(env, nominal, state, actions, 40)
    chex.assert_shape(obs, (len(scales), 40, *nominal_obs.shape[1:]))
    chex.assert_tree_all_finite(obs)
    one = int(np.argmin(np.abs(scales - 1.0)))
    assert scales[one] == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(obs[one], nominal_obs, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# Reference numbers


@pytest.mark.parametrize("env_name", CLASSIC)
def test_documented_random_return(env_name):
    """The registry's random-policy return is what its documented measurement gives (key 0, 1000
    episodes; recorded to 3 decimals), and every episode's return lies in the declared range."""
    env, params = make(env_name)
    returns = np.asarray(random_policy_returns(env, params, jax.random.key(0), 1000))
    low, high = envs.get(env_name).return_range
    assert low <= returns.min() and returns.max() <= high
    assert high - low == params.max_steps_in_episode  # one unit of reward per step at most
    assert returns.mean() == pytest.approx(envs.get(env_name).random_return, abs=5e-4)


def test_pendulum_return_range_is_its_worst_step_for_every_step():
    """Pendulum-v1's declared lower bound is 200 steps at the largest cost there is: the pole down
    (theta = pi), at the speed limit, at full torque. One step from there costs exactly that much."""
    from gymnax.environments.classic_control.pendulum import EnvState

    env, params = make("Pendulum-v1")
    low, high = envs.get("Pendulum-v1").return_range
    worst = EnvState(theta=jnp.float32(np.pi), theta_dot=jnp.float32(params.max_speed), last_u=jnp.float32(0.0), time=0)
    _, _, reward, _, _, _ = env.step(jax.random.key(0), worst, jnp.array([params.max_torque]), params)
    assert high == 0.0 and params.max_steps_in_episode == 200
    assert float(reward) * 200 == pytest.approx(low, rel=1e-6)
