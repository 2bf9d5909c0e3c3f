"""Every termination rule at its boundary (issue 33): a state exactly on it and the floats just beside
it, our environment against gymnasium at the same state.

Classic control runs in float64 (scoped `jax.enable_x64`, as tests/test_envs.py), from states whose
step leaves the quantity that decides termination exactly where it was put, so both sides judge the
same number: CartPole from zero velocities (Euler moves x and theta by tau * 0), MountainCar with
gravity 0 and no push (the velocity stays, the position moves by exactly it), Acrobot at rest with
gravity 0 and no torque (the integration adds exactly 0), judged by gymnasium's own `_terminal()`.
LunarLander (float32, as the port) is judged by gymnasium's own step code with its Box2D world step
frozen, so the state gymnasium tests is the one it was given.
"""

import math

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.envs.classic_control import AcrobotEnv, CartPoleEnv, MountainCarEnv

from fedjax_rl.envs import lunar_lander as ll
from fedjax_rl.envs import lunar_lander_physics as physics
from fedjax_rl.envs import make


def beside(value, dtype=np.float64):
    """The float just below `value`, `value` itself, and the float just above."""
    value = dtype(value)
    return [np.nextafter(value, dtype(-np.inf)), value, np.nextafter(value, dtype(np.inf))]


def _stack(states):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)


def _our_steps(env_name, params, states, action):
    """One `step_env` (no auto-reset) from each state: (terminated, reward, next states)."""
    env, _ = make(env_name)
    step = jax.jit(jax.vmap(lambda s: env.step_env(jax.random.key(0), s, action, params)))
    _, next_states, reward, terminated, _ = step(_stack(states))
    return np.asarray(terminated), np.asarray(reward), next_states


def test_cartpole_angle_and_position_thresholds_match_gymnasium():
    threshold = 12 * 2 * math.pi / 360  # gymnasium's theta_threshold_radians
    cases = [(x, 0.0) for bound in (-2.4, 2.4) for x in beside(bound)]
    cases += [(0.0, theta) for bound in (-threshold, threshold) for theta in beside(bound)]
    with jax.enable_x64(True):
        env, params = make("CartPole-v1")
        _, state = env.reset(jax.random.key(0), params)
        states = [state.replace(x=jnp.float64(x), x_dot=jnp.float64(0.0), theta=jnp.float64(theta),
                                theta_dot=jnp.float64(0.0), time=0) for x, theta in cases]
        terminated, reward, after = _our_steps("CartPole-v1", params, states, 1)
    assert params.theta_threshold_radians == threshold and params.x_threshold == 2.4
    gym_env = CartPoleEnv()
    gym_env.reset(seed=0)
    for i, (x, theta) in enumerate(cases):
        gym_env.state = np.array([x, 0.0, theta, 0.0])
        gym_env.steps_beyond_terminated = None
        state, gym_reward, gym_terminated, _, _ = gym_env.step(1)
        assert (after.x[i], after.theta[i]) == (x, theta) == (gym_env.state[0], gym_env.state[2])  # judged where put
        assert terminated[i] == gym_terminated, (x, theta)
        if not terminated[i]:  # (gymnax pays 0 for a step taken *from* a fallen pole; gymnasium warns)
            assert reward[i] == gym_reward == 1.0
    # Strict thresholds: on the boundary the pole still stands, one float beyond it has fallen.
    np.testing.assert_array_equal(terminated, [True, False, False, False, False, True] * 2)


def test_mountain_car_goal_position_and_velocity_match_gymnasium():
    tiny = np.finfo(np.float64).tiny  # the smallest normal float: XLA may flush subnormals to 0
    cases = [(position, 0.0) for position in beside(0.5)]  # the goal position, at rest
    cases += [(0.55, velocity) for velocity in (-tiny, 0.0, tiny)]  # past the goal: velocity >= 0
    with jax.enable_x64(True):
        env, params = make("MountainCar-v0")
        params = env.set_physics(params, "gravity", 0.0)
        _, state = env.reset(jax.random.key(0), params)
        states = [state.replace(position=jnp.float64(p), velocity=jnp.float64(v), time=0) for p, v in cases]
        terminated, reward, after = _our_steps("MountainCar-v0", params, states, 1)
    gym_env = MountainCarEnv()
    gym_env.reset(seed=0)
    gym_env.gravity = 0.0
    for i, (position, velocity) in enumerate(cases):
        gym_env.state = np.array([position, velocity])
        _, gym_reward, gym_terminated, _, _ = gym_env.step(1)
        assert (after.position[i], after.velocity[i]) == tuple(gym_env.state) == (position + velocity, velocity)
        assert terminated[i] == gym_terminated, (position, velocity)
        assert reward[i] == gym_reward == -1.0
    np.testing.assert_array_equal(terminated, [False, True, True, False, True, True])


# -cos(t1) - cos(t1 + t2) is exactly 1.0 here (found by search; the goal height rule is strict).
ACROBOT_ON_GOAL = (2.3465310371786177, -0.47129445132707415)


def _acrobot_height(t1, t2):
    return -math.cos(t1) - math.cos(t2 + t1)  # gymnasium's goal rule: terminated when > 1


def test_acrobot_goal_height_matches_gymnasium():
    t1, on = ACROBOT_ON_GOAL
    cases = [(t1, on)]
    for direction in (-np.inf, np.inf):  # the nearest t2 on either side whose height is not 1.0
        t2 = on
        while _acrobot_height(t1, t2) == 1.0:
            t2 = float(np.nextafter(t2, direction))
        cases.append((t1, t2))
    heights = [_acrobot_height(a, b) for a, b in cases]
    assert heights[0] == 1.0 and min(heights) < 1.0 < max(heights)
    with jax.enable_x64(True):
        env, params = make("Acrobot-v1")
        params = env.set_physics(params, "gravity", 0.0)  # at rest, no torque: the step moves nothing
        _, state = env.reset(jax.random.key(0), params)
        states = [state.replace(joint_angle1=jnp.float64(a), joint_angle2=jnp.float64(b), velocity_1=jnp.float64(0.0),
                                velocity_2=jnp.float64(0.0), time=0) for a, b in cases]
        terminated, reward, after = _our_steps("Acrobot-v1", params, states, 1)
        judged = np.asarray(jax.vmap(lambda s: env.is_terminal(s, params))(_stack(states)))
    np.testing.assert_array_equal(after.joint_angle1, [a for a, _ in cases])
    np.testing.assert_array_equal(after.joint_angle2, [b for _, b in cases])
    gym_env = AcrobotEnv()
    gym_env.reset(seed=0)
    expected = []
    for a, b in cases:
        gym_env.state = np.array([a, b, 0.0, 0.0])
        expected.append(gym_env._terminal())
    np.testing.assert_array_equal(terminated, expected)
    np.testing.assert_array_equal(judged, expected)
    np.testing.assert_array_equal(reward, np.where(expected, 0.0, -1.0))  # gymnasium: 0 at the goal, else -1
    assert expected == [False, heights[1] > 1, heights[2] > 1]


def test_acrobot_time_limit_truncates_and_does_not_terminate():
    env, params = make("Acrobot-v1")
    _, state = env.reset(jax.random.key(0), params)
    step = jax.jit(lambda s: env.step(jax.random.key(1), s, 1, params))
    for time, truncated in ((params.max_steps_in_episode - 2, False), (params.max_steps_in_episode - 1, True)):
        _, after, _, terminated, is_truncated, info = step(state.replace(time=time))
        assert bool(is_truncated) == truncated and not bool(terminated)
        assert int(after.time) == (0 if truncated else time + 1)  # auto-reset after the 500th step


def test_acrobot_torque_noise_is_symmetric():
    """gymnasium adds U(-n, n) to the torque: from rest with gravity 0 and no torque, the first
    step's angular acceleration takes both signs over keys, as large as n allows."""
    env, params = make("Acrobot-v1")
    params = env.set_physics(env.set_physics(params, "gravity", 0.0), "torque_noise_max", 0.5)
    _, state = env.reset(jax.random.key(0), params)
    rest = state.replace(joint_angle1=0.3, joint_angle2=-0.2, velocity_1=0.0, velocity_2=0.0)
    step = jax.jit(jax.vmap(lambda k: env.step_env(k, rest, 1, params)[1].velocity_2))
    velocity = np.asarray(step(jax.random.split(jax.random.key(2), 64)))
    assert velocity.min() < 0 < velocity.max()
    assert 0.5 < velocity.max() / -velocity.min() < 2


# -- LunarLander --------------------------------------------------------------------------------


class _FrozenWorld:
    """gymnasium's Box2D world with `Step` a no-op: its step code then judges the state it was given."""

    def __init__(self, world):
        self._world = world

    def Step(self, *args):  # noqa: N802 (Box2D's name)
        pass

    def __getattr__(self, name):
        return getattr(self._world, name)


def _lander_cases():
    """(origin x, game_over, awake): x on and beside both edges of the screen (|obs[0]| = 1),
    then a crash and a lander at rest well inside it."""
    # At the left edge the floats next to 0 are subnormal (XLA flushes them to 0) and vanish in
    # (x - W/2) / (W/2) anyway: 2e-6 is the nearest offset that moves obs[0] off -1.
    xs = [np.float32(-2e-6), np.float32(0.0), np.float32(2e-6), *beside(ll.W, np.float32)]
    return [(x, False, True) for x in xs] + [(10.0, True, True), (10.0, False, False), (10.0, False, True)]


def test_lunar_lander_termination_and_terminal_rewards_match_gymnasium():
    cases = _lander_cases()
    y, prev_shaping = np.float32(8.0), -50.0
    # A tilted, moving, turning lander, so every entry of the observation is compared too.
    angle, velocity, spin = np.float32(0.1), np.array([0.7, -1.3], np.float32), np.float32(0.4)
    env, params = ll.make_env()
    _, state = env.reset(jax.random.key(0), params)
    center = np.asarray(physics.LANDER_LOCAL_CENTER)

    def placed(x, game_over, awake):
        origin = np.array([x, y], np.float32)
        pos = np.asarray(state.pos).copy()
        pos[0] = origin + np.asarray(physics._rot(angle, jnp.asarray(center)))
        # The lander's centre of mass from its origin in float32 may round: nudge it until the
        # port's `lander_origin` gives back exactly `x`.
        for _ in range(4):
            back = float(ll.lander_origin(jnp.asarray(pos), jnp.full(3, angle))[0])
            if back == x:
                break
            pos[0, 0] = np.nextafter(pos[0, 0], np.float32(np.inf) if back < x else np.float32(-np.inf))
        moving = float(awake)  # Box2D: a body put to sleep has no velocity
        legs = np.array([[1.0], [-2.0], [3.0]], np.float32)  # the legs move otherwise: only the lander counts
        return state.replace(pos=jnp.asarray(pos), angle=jnp.full(3, angle), vel=jnp.asarray(moving * legs * velocity),
                             angvel=jnp.asarray(moving * legs[:, 0] * spin),
                             leg_contact=jnp.array([True, False]), game_over=jnp.asarray(game_over),
                             awake=jnp.asarray(awake))

    states = _stack([placed(*case) for case in cases])

    @jax.jit
    @jax.vmap
    def judge(s):
        obs = ll.observation(s)
        crashed = s.game_over | (jnp.abs(obs[0]) >= 1.0)
        reward, _ = ll.reward_fn(obs, prev_shaping, 0.0, 0.0, crashed, ~s.awake)
        return env.is_terminated(s, params), reward, ll.lander_origin(s.pos, s.angle)[0], obs

    terminated, reward, origin_x, observations = (np.asarray(a) for a in judge(states))
    # Where the centre of mass cannot put the origin exactly (next to 0, positions are coarser
    # than the offset), gymnasium gets the origin the port has; the edges themselves are exact.
    assert origin_x[1] == 0.0 and origin_x[4] == ll.W
    assert origin_x[0] < 0.0 < origin_x[2] and origin_x[3] < ll.W < origin_x[5]

    gym_env = gym.make("LunarLander-v3")
    gym_env.reset(seed=0)
    u = gym_env.unwrapped
    u.world = _FrozenWorld(u.world)
    for i, (_, game_over, awake) in enumerate(cases):
        x = float(origin_x[i])
        u.lander.position = (x, float(y))
        u.lander.angle = float(angle)
        u.lander.linearVelocity = tuple(float(v) for v in velocity)
        u.lander.angularVelocity = float(spin)
        u.lander.awake = awake
        u.legs[0].ground_contact, u.legs[1].ground_contact = True, False  # which leg is which counts
        u.game_over = game_over
        u.prev_shaping = prev_shaping
        obs, gym_reward, gym_terminated, _, _ = gym_env.step(0)
        assert u.lander.position.x == x  # Box2D keeps the float32 it was given
        np.testing.assert_allclose(observations[i], obs, rtol=0, atol=1e-6)
        assert terminated[i] == gym_terminated, (x, game_over, awake)
        assert reward[i] == pytest.approx(gym_reward, abs=1e-3), (x, game_over, awake)
    gym_env.close()
    # On either edge (|obs[0]| = 1 exactly) the lander is out; one float inside, it is not.
    np.testing.assert_array_equal(terminated, [True, True, False, False, True, True, True, True, False])
    np.testing.assert_array_equal(reward[[0, 1, 4, 5, 6]], -100.0)
    assert reward[7] == 100.0
    # gymnasium's reset step has no previous shaping: only the fuel is paid (0.3 for the main engine).
    first, _ = ll.reward_fn(observations[2], prev_shaping, 1.0, 0.0, False, False, first_step=True)
    assert float(first) == pytest.approx(-0.3)


def test_lunar_lander_step_judges_the_same_edges():
    """The same rules through a whole step (world step, then the step's crash and rest flags):
    with gravity and the leg motors off, a lander at rest high above the ground does not move, so
    the step judges the edge exactly where the lander was put. A crash stays a crash, and a lander
    whose sleep timer runs out comes to rest (+100)."""
    env, params = ll.make_env()
    params = params.replace(gravity=0.0, leg_spring_torque=0.0)
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(vel=jnp.zeros((3, 2)), angvel=jnp.zeros(3), angle=state.angle - state.angle[0])
    center = np.asarray(physics.LANDER_LOCAL_CENTER)

    def placed(x, game_over=False, sleep_time=0.0):
        pos = np.asarray(state.pos).copy()
        pos[0] = np.array([x, 8.0], np.float32) + center
        for _ in range(4):  # until the origin is exactly x (see the test above)
            back = float(ll.lander_origin(jnp.asarray(pos), state.angle)[0])
            if back == x:
                break
            pos[0, 0] = np.nextafter(pos[0, 0], np.float32(np.inf) if back < x else np.float32(-np.inf))
        return state.replace(pos=jnp.asarray(pos), game_over=jnp.asarray(game_over),
                             sleep_time=jnp.full(3, sleep_time, jnp.float32))

    xs = [np.float32(0.0), *beside(ll.W, np.float32)]
    cases = [placed(x) for x in xs] + [placed(np.float32(10.0), game_over=True),
                                       placed(np.float32(10.0), sleep_time=physics.TIME_TO_SLEEP)]
    before = np.asarray([ll.lander_origin(s.pos, s.angle)[0] for s in cases])
    step = jax.jit(jax.vmap(lambda s: env.step_with_noise(jnp.zeros(2), s, 0, params)))
    _, after, reward, terminated, info = step(_stack(cases))
    np.testing.assert_array_equal(jax.vmap(ll.lander_origin)(after.pos, after.angle)[:, 0], before)
    assert before[0] == 0.0 and before[2] == ll.W
    np.testing.assert_array_equal(terminated, [True, False, True, True, True, True])
    np.testing.assert_array_equal(info["crashed"], [True, False, True, True, True, False])
    np.testing.assert_array_equal(info["at_rest"], [False, False, False, False, False, True])
    np.testing.assert_array_equal(np.asarray(reward)[[0, 2, 3, 4, 5]], [-100, -100, -100, -100, 100])
    np.testing.assert_array_equal(terminated, jax.vmap(lambda s: env.is_terminated(s, params))(after))
