"""Any gymnasium environment in a federation (`fedjax_rl/envs/gymnasium_bridge.py`): gymnasium's own
Python stepped on the host from inside the compiled program. Parity with the library's JAX CartPole
and with gymnasium stepped by hand under a perturbed attribute; names refused before compiling; and
an environment that exists only as a gymnasium class learns, gives one result per seed, and resumes
from a checkpoint to the same bits."""

import functools
import os

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl import envs
from fedjax_rl.envs.gymnasium_bridge import GymnasiumEnv
from fedjax_rl.training import configs, loop
from test_reproducibility import _assert_results_identical, _crash_after_first_checkpoint
from test_user_env import _example


# examples/gymnasium_environment: the block on ice in plain gymnasium, state in `self.state`, mass an attribute.
EXAMPLE = _example("gymnasium_environment_gym_slide", os.path.join(
    os.path.dirname(__file__), "..", "examples", "gymnasium_environment", "gym_slide.py"))
GymSlide = EXAMPLE.GymSlide


class Diverging(GymSlide):
    """A simulator that fails on its 400th step (counted over every environment it steps)."""

    steps = 0

    def step(self, action):
        Diverging.steps += 1
        if Diverging.steps == 400:
            raise FloatingPointError("the integrator diverged")
        return super().step(action)


class Stateless(GymSlide):
    """An environment whose state the bridge cannot read: none in a `state` attribute."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        self.position = self.__dict__.pop("state")
        return obs, info


class ProbeSlide(GymSlide):
    """GymSlide with what the bridge must handle besides its state, one feature per promise tested:
    - its step draws from `self.np_random`: noise on the reward;
    - it keeps mutable state besides its physics and its `state` (as CartPole's
      `steps_beyond_terminated`), rebound and changed in place: `steps_taken`, an int each step rebinds,
      `visits`, an array each step adds to in place, and `history`, a list each step appends to; observed
      as a third coordinate, steps_taken + 10 visits + 100 len(history) (111 after one step from new);
    - its nominal mass, 0.1, is a value float32 cannot represent (its rounding is 0.100000001490116...);
      one push from rest gives the velocity 0.1 / mass, in the float64 state."""

    def __init__(self):
        super().__init__()
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.mass = 0.1
        self.steps_taken = 0
        self.visits = np.zeros(1)
        self.history = []

    def _seen(self):
        return np.float32(self.steps_taken + 10 * self.visits[0] + 100 * len(self.history))

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return np.append(obs, self._seen()), info

    def step(self, action):
        self.steps_taken += 1
        self.visits += 1  # in place: the array object the fresh environment held
        self.history.append(int(action))
        obs, reward, terminated, truncated, info = super().step(action)
        noisy = reward + self.np_random.normal()
        return np.append(obs, self._seen()), noisy, terminated, truncated, info


@pytest.fixture(scope="module")
def gym_slide():
    spec = envs.register(EXAMPLE.SPEC)
    yield spec
    envs.REGISTRY.entries.pop(spec.name)
    envs.REGISTRY.origins.pop(spec.name)


ROWS = 4  # the batch the `probe` tests step: one compiled step serves them all


@pytest.fixture(scope="module")
def probe():
    """ProbeSlide behind the bridge, its nominal params, and a state reset from them."""
    env = GymnasiumEnv("ProbeSlide-v0", ProbeSlide, ("mass",), max_steps=20)
    params = env.default_params
    _, state = env.reset(jax.random.key(0), params)
    # the time typed as a step returns it, so that one compiled step serves states from either
    return env, params, state.replace(time=jnp.asarray(state.time, jnp.int32))


def _episode(env, params, state, actions):
    """Steps `actions` from `state`; per step the observation reached (before any reset), the
    reward, terminated and truncated."""
    def step(state, inputs):
        key, action = inputs
        _, state, reward, terminated, truncated, info = env.step(key, state, action, params)
        return state, (info["final_observation"], reward, terminated, truncated)

    keys = jax.random.split(jax.random.key(3), len(actions))
    return jax.lax.scan(step, state, (keys, actions))[1]


def _rows(tree, n):
    """`tree` repeated as n rows (the leading axis the bridge's vmaps give)."""
    return jax.tree.map(lambda x: jnp.repeat(jnp.asarray(x)[None], n, axis=0), tree)


@functools.partial(jax.jit, static_argnums=0)
def _step_rows(env, keys, states, actions, params):
    """One bridge step of a batch of rows, one host call: row i steps `states[i]` with `keys[i]`,
    `actions[i]` and `params[i]`."""
    return jax.vmap(env.step)(keys, states, actions, params)


def _first_end(terminated, truncated):
    ends = np.flatnonzero(np.asarray(terminated) | np.asarray(truncated))
    return int(ends[0]) + 1 if ends.size else len(terminated)


def test_gym_cartpole_steps_as_the_jax_cartpole():
    """`gym:CartPole-v1` through the bridge and the library's JAX CartPole, from the same initial
    states (gymnasium's float64 ones, rounded to float32 for the JAX task) under the same actions:
    the same trajectories to float32 rounding, the same rewards and the same step of termination."""
    from fedjax_rl.envs.classic_control import CartPoleState

    bridged, bridged_params = envs.make("gym:CartPole-v1", ("length",))
    native, native_params = envs.make("CartPole-v1", ("length",))
    actions = jnp.asarray(np.random.default_rng(0).integers(0, 2, 200), jnp.int32)
    for seed in range(3):
        _, state = bridged.reset(jax.random.key(seed), bridged_params)
        x = np.asarray(state.words).view(np.float64)
        jax_state = CartPoleState(x=jnp.float32(x[0]), x_dot=jnp.float32(x[1]), theta=jnp.float32(x[2]),
                                  theta_dot=jnp.float32(x[3]), time=0)
        ours = _episode(bridged, bridged_params, state, actions)
        theirs = _episode(native, native_params, jax_state, actions)
        end = _first_end(*theirs[2:])
        assert end == _first_end(*ours[2:]) and 5 < end < 200
        np.testing.assert_allclose(ours[0][:end], theirs[0][:end], rtol=0, atol=1e-5)
        for a, b in zip(ours[1:], theirs[1:]):
            np.testing.assert_array_equal(np.asarray(a)[:end], np.asarray(b)[:end])


def test_a_perturbed_attribute_steps_as_gymnasium_by_hand(gym_slide):
    """Per-agent physics by attribute: the bridge at mass x 1.3 gives bit for bit what gymnasium
    gives stepped by hand with that attribute set, from the same state, vmapped over agents; the
    time limit truncates without terminating, the environment's own end terminates."""
    env, nominal = envs.make("GymSlide-v0")
    scales = jnp.asarray([1.0, 1.3, 0.7])
    params = jax.vmap(lambda c: env.scale_physics(nominal, "mass", c))(scales)
    _, states = jax.vmap(env.reset, in_axes=(0, 0))(jax.random.split(jax.random.key(0), 3), params)
    actions = jnp.ones(30, jnp.int32)  # always right: some run off the ice within the time limit
    obs, reward, terminated, truncated = jax.vmap(_episode, in_axes=(None, 0, 0, None))(env, params, states, actions)
    for agent in range(3):
        by_hand = GymSlide()
        by_hand.mass = float(np.asarray(params.physics)[agent, 0])
        by_hand.state = np.asarray(states.words[agent]).view(np.float64).copy()
        end = _first_end(terminated[agent], truncated[agent])
        for t in range(end):
            o, r, term, trunc, _ = by_hand.step(1)
            np.testing.assert_array_equal(np.asarray(obs[agent, t]), o)
            assert float(reward[agent, t]) == np.float32(r) and bool(terminated[agent, t]) == term
            assert bool(truncated[agent, t]) == (t + 1 == 20 and not term)
    ends = [_first_end(terminated[a], truncated[a]) for a in range(3)]
    assert len(set(ends)) > 1  # the masses made a difference
    assert bool(truncated[0].any()) or bool(terminated[0].any())


def test_each_row_draws_from_a_generator_seeded_by_its_own_key(probe):
    """Randomness from the run's keys: each row's step reseeds the environment's `np_random` from
    that row's own key. Rows stepped from the same state with different keys draw differently; the
    same keys draw the same again; and a row's draw follows its key, not its place in the batch."""
    env, params, state = probe
    keys = jax.random.split(jax.random.key(1), ROWS)
    states, actions, row_params = _rows(state, ROWS), jnp.ones(ROWS, jnp.int32), _rows(params, ROWS)

    def rewards(keys):
        return np.asarray(_step_rows(env, keys, states, actions, row_params)[2])

    first = rewards(keys)
    assert len(set(first.tolist())) == ROWS, first  # without the noise every row's reward is the same
    np.testing.assert_array_equal(rewards(keys), first)
    np.testing.assert_array_equal(rewards(keys[::-1]), first[::-1])


def test_rows_that_share_one_state_each_step_from_it(probe):
    """A vmap over keys alone (the state, action and physics unbatched) hands the host callback a state
    broadcast to every row, not contiguous in memory; each row steps from it as if it had its own copy."""
    env, params, state = probe
    keys = jax.random.split(jax.random.key(2), ROWS)
    shared = jax.jit(jax.vmap(env.step, in_axes=(0, None, None, None)))(keys, state, jnp.int32(1), params)
    own = _step_rows(env, keys, _rows(state, ROWS), jnp.ones(ROWS, jnp.int32), _rows(params, ROWS))
    for ours, theirs in zip(jax.tree.leaves(shared), jax.tree.leaves(own)):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_no_row_sees_mutable_state_another_row_or_step_left_behind(probe):
    """One host environment steps every row: before each row the bridge puts back what a step
    changes besides the state and the physics, rebound (`steps_taken`) or changed in place (`visits`,
    `history`), so every row's step, at every step of the episode, sees them as freshly made and
    observes 111."""
    env, params, state = probe
    states, actions, row_params = _rows(state, ROWS), jnp.ones(ROWS, jnp.int32), _rows(params, ROWS)
    for t in range(3):
        keys = jax.random.split(jax.random.key(t), ROWS)
        obs, states, _, _, _, _ = _step_rows(env, keys, states, actions, row_params)
        np.testing.assert_array_equal(np.asarray(obs)[:, 2], np.full(ROWS, 111.0, np.float32), err_msg=f"step {t}")


def test_a_value_that_is_its_nominal_values_rounding_is_set_to_the_nominal_value(probe):
    """Values cross as float32: the nominal mass 0.1 reaches the host as its rounding
    0.100000001490116..., and the bridge sets the environment's mass to 0.1 exactly, so an agent at
    the nominal physics steps gymnasium's own float64 trajectory; any other value (0.2, arriving as
    0.200000002980232...) is set as it arrives. Seen in the float64 state one push from rest reaches,
    with the rows alternating nominal and perturbed."""
    env, nominal, state = probe
    perturbed = env.set_physics(nominal, "mass", 0.2)
    assert float(nominal.physics[0]) == float(np.float32(0.1)) != 0.1  # what the float32 program carries
    row_params = jax.tree.map(lambda *leaves: jnp.stack([jnp.asarray(x) for x in leaves]),
                              *[nominal, perturbed] * (ROWS // 2))
    keys = jax.random.split(jax.random.key(1), ROWS)
    _, after, _, _, _, _ = _step_rows(env, keys, _rows(state, ROWS), jnp.ones(ROWS, jnp.int32), row_params)
    after = np.asarray(after.words).view(np.float64)

    def pushed(mass):
        by_hand = ProbeSlide()
        by_hand.mass, by_hand.state = mass, np.asarray(state.words).view(np.float64).copy()
        by_hand.step(1)
        return by_hand.state

    for row in range(ROWS):
        meant, not_meant = [(0.1, float(np.float32(0.1))), (float(np.float32(0.2)), 0.2)][row % 2]
        assert not np.array_equal(pushed(meant), pushed(not_meant))  # the state tells the two apart
        np.testing.assert_array_equal(after[row], pushed(meant), err_msg=f"row {row}: mass {meant!r} meant")


def test_names_the_bridge_cannot_serve_are_refused_before_compiling(gym_slide):
    with pytest.raises(ValueError, match=r"cannot perturb by 'friction'.*float attributes are: mass"):
        envs.gymnasium_spec("Mine-v0", GymSlide, perturbed=("friction",), max_steps=20)
    with pytest.raises(ValueError, match="unknown physical parameter 'friction' for GymSlide-v0; allowed: mass"):
        configs.train_config("fedrdqn", "GymSlide-v0", physics=("friction",))
    with pytest.raises(ValueError, match="unknown physical parameter 'lenght' for gym:CartPole-v1; allowed: .*length"):
        configs.train_config("fedrdqn", "gym:CartPole-v1", physics=("lenght",))
    with pytest.raises(ValueError, match="unknown gymnasium environment 'CartPol-v1'.*gym:CartPole-v1"):
        envs.get("gym:CartPol-v1")
    with pytest.raises(ValueError, match="HostState"):
        envs.gymnasium_spec("Stateless-v0", Stateless, perturbed=("mass",), max_steps=20)
    with pytest.raises(ValueError, match="no time limit"):
        envs.gymnasium_spec("Endless-v0", GymSlide, perturbed=("mass",))
    with pytest.raises(ValueError, match="DQN needs discrete actions; gym:Pendulum-v1 has Box actions"):
        configs.train_config("fedrdqn", "gym:Pendulum-v1", physics=("g",))
    with pytest.raises(ValueError, match="'gym:' are gymnasium's"):
        envs.register(envs.gymnasium_spec("gym:Mine-v0", GymSlide, perturbed=("mass",), max_steps=20))


@pytest.mark.learning
def test_fedrdqn_learns_a_gymnasium_class_and_resumes_to_the_same_bits(gym_slide, tmp_path, monkeypatch):
    """FedRDQN, K = 3 agents with perturbed mass (p = 0.5), 3,000 steps per agent, 4 seeds vmapped in
    one program, on an environment that exists only as a gymnasium class. A uniformly random policy
    returns -10.1 (200 episodes). Measured on an AMD EPYC (AVX2; there the default ISA is AVX2), per
    seed (nominal / local):
      seeds 0-3: -5.19 -3.00 -4.03 -5.80 / -3.87 -3.99 -2.14 -4.35 (medians -4.61 / -3.93)
    Threshold -7 on both medians: the smallest margin is 2.4 (nominal). The same numbers on a 2-core
    Intel Xeon (AVX-512) as the suite compiles it, under the default ISA and AVX2 (2026-11-29).
    The same run crashed after its first checkpoint and resumed gives the same bits: the host
    environments' states are in the checkpoint."""
    config = configs.train_config(
        "fedrdqn", "GymSlide-v0", num_agents=3, sync_every=20, steps_per_agent=3000, eval_every_rounds=30,
        eval_episodes=5, sweep_points=3,
        agent_overrides=dict(hidden_sizes=(32, 32), batch_size=32, buffer_size=2000, learning_starts=200,
                             train_freq=1, gradient_steps=1, target_update_interval=100, exploration_fraction=0.3,
                             omega=0.1, learning_rate=1e-3))
    result = loop.run(config, num_seeds=4, seed=0, progress=False, out_dir=str(tmp_path / "whole"))
    nominal = np.asarray(result["curve"]["nominal_return"])[:, -3:].mean(axis=1)
    local = np.asarray(result["final"]["local_average"])
    print(f"nominal per seed {np.round(nominal, 2)}, local per seed {np.round(local, 2)}")
    assert np.median(nominal) >= -7.0 and np.median(local) >= -7.0

    out = str(tmp_path / "resumed")
    _crash_after_first_checkpoint(monkeypatch, config, num_seeds=4, out_dir=out)
    resumed = loop.run(config, num_seeds=4, seed=0, progress=False, out_dir=out)
    assert resumed["timing"]["resumed_at_block"] == 1
    _assert_results_identical(resumed, result)


def test_an_environment_that_raises_stops_the_run_with_its_error_and_keeps_finished_blocks(tmp_path):
    Diverging.steps = 0
    spec = envs.register(envs.gymnasium_spec("Diverging-v0", Diverging, perturbed=("mass",), max_steps=20))
    try:
        config = configs.train_config(
            "dqnavg", "Diverging-v0", num_agents=2, sync_every=10, steps_per_agent=200, eval_every_rounds=2,
            eval_episodes=1, sweep_points=2, agent_overrides=dict(hidden_sizes=(8,), batch_size=4, buffer_size=16,
                                                                  learning_starts=5, train_freq=1, gradient_steps=1))
        with pytest.raises(Exception, match=r"Diverging-v0: the environment's step raised FloatingPointError: the "
                                            r"integrator diverged \(at step \d+ of its episode, action \d, mass = [\d.]+\)"):
            loop.run(config, num_seeds=1, seed=0, progress=False, out_dir=str(tmp_path))
        blocks = int(np.load(tmp_path / "checkpoint.npz")["extra:blocks_done"])
        assert 1 <= blocks < config.num_evals  # the blocks finished before the failure are kept
    finally:
        envs.REGISTRY.entries.pop(spec.name)
        envs.REGISTRY.origins.pop(spec.name)


class Numbered(GymSlide):
    """GymSlide whose actions are numbered from 5 (gymnasium's `Discrete(2, start=5)`: 6 pushes right), whose
    reward draws noise from the step's `np_random`, and whose step fails at a mass above 10."""

    def __init__(self):
        super().__init__()
        self.action_space = gymnasium.spaces.Discrete(2, start=5)

    def step(self, action):
        if action not in (5, 6) or self.mass > 10:
            raise FloatingPointError("the integrator diverged")
        obs, reward, terminated, truncated, info = super().step(action - 5)
        return obs, reward + self.np_random.normal(), terminated, truncated, info


class Pushed(GymSlide):
    """GymSlide pushed by a force in [-1, 1] (a Box action of shape (1,))."""

    def __init__(self):
        super().__init__()
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def step(self, action):
        return super().step(1 if float(action[0]) > 0 else 0)


def _words(*states):
    """Host states as the bridge carries them: float64 bits as uint32 words, one row each."""
    return np.stack([np.asarray(s, np.float64) for s in states]).view(np.uint32)


def test_the_host_side_steps_resets_and_broadcasts_rows_by_hand():
    """The numpy side of the callback, called as vmap's `expand_dims` calls it (an unbatched input has
    a leading 1), against gymnasium stepped by hand, without compiling: rows follow whichever input is
    batched; a row steps from its own step key and, where its episode ended (terminated, or at the time
    limit), resets from its reset key to time 0; without reset it keeps the ended state; an action is
    numbered from its space's start; Box actions keep their shape; a failing step names its step."""
    env = GymnasiumEnv("Numbered-v0", Numbered, ("mass",), max_steps=3)
    masses = np.array([[1.0], [0.5], [0.01]], np.float32)

    def by_hand(mass, state, action=6, seed=None):
        numbered = Numbered()
        numbered.mass, numbered.state = float(mass), np.array(state, np.float64)
        if seed is not None:
            numbered._np_random = np.random.default_rng(seed)
        return numbered, numbered.step(action)

    obs, words = env._host_reset(np.array([7], np.uint32), masses)  # one key, three physics
    reset = GymSlide().reset(seed=7)[0]
    np.testing.assert_array_equal(obs, np.stack([reset] * 3))
    assert words.shape == (3, 4)

    start = [1.9, 0.5]  # the last row's light block runs off the ice; the second row reaches the time limit
    seeds = np.array([[11, 21], [12, 22], [13, 23]], np.uint32)
    out = env._host_step(True, _words(start), np.array([0, 2, 0], np.int32), np.array([3], np.int32),
                         np.array([1], np.int32), masses, seeds)
    obs, final_obs, words, time, reward, terminated, truncated = out
    np.testing.assert_array_equal(terminated, [False, False, True])
    np.testing.assert_array_equal(truncated, [False, True, False])
    np.testing.assert_array_equal(time, [1, 0, 0])
    for row in range(3):
        numbered, (o, r, _, _, _) = by_hand(masses[row, 0], start, seed=int(seeds[row, 0]))
        np.testing.assert_array_equal(final_obs[row], o)
        assert reward[row] == np.float32(r), row
        fresh = GymSlide()
        ended = fresh.reset(seed=int(seeds[row, 1]))[0] if row else o
        np.testing.assert_array_equal(obs[row], ended)
        np.testing.assert_array_equal(words[row].view(np.float64), fresh.state if row else numbered.state)
    kept = env._host_step(False, _words(start), np.array([0, 2, 0], np.int32), np.array([3], np.int32),
                          np.array([1], np.int32), masses, seeds)
    np.testing.assert_array_equal(kept[0], kept[1])
    np.testing.assert_array_equal(kept[3], [1, 3, 1])

    # The states alone batched, then the physics alone: each gives the rows.
    states = [[0.0, 0.1], [0.5, -0.2], [-1.0, 0.0]]
    one = dict(time=np.array([0], np.int32), limit=np.array([3], np.int32), action=np.array([1], np.int32),
               seeds=np.array([[11, 21]], np.uint32))
    by_state = env._host_step(False, _words(*states), physics=masses[:1], **one)
    by_physics = env._host_step(False, _words(start), physics=masses, **one)
    for row in range(3):
        np.testing.assert_array_equal(by_state[1][row], by_hand(1.0, states[row], seed=11)[1][0])
        np.testing.assert_array_equal(by_physics[1][row], by_hand(masses[row, 0], start, seed=11)[1][0])

    pushed = GymnasiumEnv("Pushed-v0", Pushed, ("mass",), max_steps=3)
    forces = np.array([[0.5], [-0.5], [0.5]], np.float32)
    stepped = pushed._host_step(False, _words(*states), np.array([0], np.int32), np.array([3], np.int32), forces,
                                np.array([[1.0]], np.float32), np.array([[11, 21]], np.uint32))
    for row in range(3):
        slide = GymSlide()
        slide.state = np.array(states[row], np.float64)
        np.testing.assert_array_equal(stepped[1][row], slide.step(int(forces[row, 0] > 0))[0])

    with pytest.raises(RuntimeError, match=r"Numbered-v0: the environment's step raised FloatingPointError: the integrator "
                                           r"diverged \(at step 5 of its episode, action 6, mass = 20\)"):
        env._host_step(False, _words(start), np.array([4], np.int32), np.array([9], np.int32), np.array([1], np.int32),
                       np.array([[20.0]], np.float32), np.array([[11, 21]], np.uint32))


def test_the_command_line_refuses_a_name_gym_cartpole_lacks_before_compiling():
    from fedjax_rl.cli import commands

    with pytest.raises(SystemExit, match="fedjax-rl: error: unknown physical parameter 'lenght' for gym:CartPole-v1; "
                                         "allowed: force_mag, gravity, length"):
        commands.main(["train", "--algo", "fedrdqn", "--env", "gym:CartPole-v1", "--param", "lenght", "--no-progress"])
