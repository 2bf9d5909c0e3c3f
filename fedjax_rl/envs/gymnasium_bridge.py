"""Any gymnasium environment in a federation: `--env gym:<id>`, or `gymnasium_spec(name, make_env, ...)`
for a `gymnasium.Env` class of one's own.

The environment stays gymnasium's Python code, stepped on the host from inside the compiled program
through `jax.pure_callback`; under `vmap` (agents, seeds, grid points, evaluation episodes) one call
receives the whole batch and steps it row by row. What makes this exact and repeatable is that the
callback is a pure function of its inputs:

- **The state crosses the boundary.** The environment's state lives in the JAX state (its float64
  bits as uint32 words, so a float32 program carries gymnasium's float64 trajectory exactly), and
  each step writes it into a host environment, steps once and reads it back (`HostState`: by default
  the unwrapped environment's `state` attribute, which gymnasium's classic-control tasks keep). So a
  checkpoint holds the environments' states, a resumed run continues them exactly, and one host
  object serves every row of the batch. An environment whose state is not one float array (Box2D,
  MuJoCo through gymnasium) needs a `HostState` of the user's that reads and writes it, or a JAX port.
- **Randomness comes from the run's keys.** `reset` seeds gymnasium's `reset(seed=...)` from the
  episode's key, and each step reseeds the environment's `np_random` from the step's key (a step that
  draws nothing is unaffected), so the same seed gives the same result and vmapped seeds differ.
- **Physics per agent by name.** A physical parameter is an attribute of the unwrapped environment
  (`gravity`, `length`), its nominal value read from a fresh environment; `perturb(env, name, value)`
  sets it (by default `setattr(env.unwrapped, name, value)`; give your own where a parameter has
  derived fields, as CartPole's `polemass_length` follows `length`). Values cross as float32, JAX's
  default, and a value that is the rounding of its nominal value is set to the nominal value.
- **Terminated and truncated stay apart**: gymnasium's `terminated` stops bootstrapping; the time
  limit (the registered `max_episode_steps`, or `max_steps`) and an environment's own `truncated`
  do not.

Cost: a Python step per row, so thousands of agent-steps per second, where a JAX port runs millions
(benchmarks/envs/gymnasium_bridge.py); the right choice to try a simulator one trusts, or where a port
would cost more than the runs.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from fedjax_rl.envs import host_batch
from fedjax_rl.envs.base import EnvIdentity, EnvSpec, check_scales

PREFIX = "gym:"


@dataclasses.dataclass(frozen=True)
class HostState:
    """How the bridge reads a host environment's state as one float array, and writes it back.
    The default, `HostState.attribute("state")`, is the unwrapped environment's `state` attribute."""

    get: Callable[[Any], np.ndarray]
    set: Callable[[Any, np.ndarray], None]

    @staticmethod
    def attribute(name: str = "state") -> "HostState":
        return HostState(get=functools.partial(_get_attribute, name), set=functools.partial(_set_attribute, name))


def _get_attribute(name, env):
    return np.asarray(getattr(env.unwrapped, name), dtype=np.float64)


def _set_attribute(name, env, value):
    setattr(env.unwrapped, name, np.array(value, dtype=np.float64))


def set_attribute(env, name: str, value: float) -> None:
    """The default `perturb`: the unwrapped environment's attribute `name` set to `value`."""
    setattr(env.unwrapped, name, value)


def float_attributes(env) -> tuple[str, ...]:
    """The unwrapped environment's public float attributes: the names it can be perturbed by."""
    found = []
    for name, value in sorted(vars(env.unwrapped).items()):
        if not name.startswith("_") and isinstance(value, float | np.floating) and not isinstance(value, bool):
            found.append(name)
    return tuple(found)


@struct.dataclass
class GymParams(environment.EnvParams):
    """The perturbable physics as one float vector, in the environment's `physics` order."""

    physics: jax.Array = None
    max_steps_in_episode: int = 1


@struct.dataclass
class GymState(environment.EnvState):
    """An episode's step count and the host environment's state, carried by the compiled run."""

    words: jax.Array  # the host state's float64 bits as uint32 words
    truncated: jax.Array  # whether the last step truncated its episode (the time limit or the environment's own)


class GymnasiumEnv(EnvIdentity, environment.Environment):
    """A gymnasium environment behind the contract of `fedjax_rl/envs/base.py` (module docstring).

    `make_env()` returns a fresh `gymnasium.Env`; `physics` names the attributes that may be
    perturbed; `perturb(env, name, value)` sets one; `host_state` reads and writes the state;
    `max_steps` is the time limit where the environment's registration gives none."""

    def __init__(self, name: str, make_env: Callable[[], Any], physics: Sequence[str],
                 perturb: Callable[[Any, str, float], None] | None = None,
                 host_state: HostState | None = None, max_steps: int | None = None):
        super().__init__()
        self._name = name
        self.make_env = make_env
        self.perturb = perturb or set_attribute
        self.host_state = host_state or HostState.attribute()
        self._local = threading.local()
        probe = make_env()
        allowed = float_attributes(probe)
        unknown = [p for p in physics if p not in allowed and not hasattr(probe.unwrapped, p)]
        if unknown or not physics:
            raise ValueError(f"{name}: cannot perturb by {', '.join(map(repr, unknown)) or 'no name'}: the unwrapped "
                             f"environment has no such attribute; its float attributes are: {', '.join(allowed)}")
        self.physics = tuple(physics)
        self.nominal = np.array([float(getattr(probe.unwrapped, p)) for p in self.physics], np.float64)
        for p, value in zip(self.physics, self.nominal):
            self.perturb(probe, p, value)  # a perturb function that refuses a name does so now
        probe.reset(seed=0)
        try:
            state = self.host_state.get(probe)
        except AttributeError as error:
            raise ValueError(f"{name}: the bridge reads an environment's state through a HostState, and the default "
                             f"one (the unwrapped environment's `state` attribute) cannot: {error}. Give "
                             "gymnasium_spec(..., host_state=HostState(get, set)) for this environment") from None
        self.state_size = int(np.asarray(state).size)
        limit = getattr(getattr(probe, "spec", None), "max_episode_steps", None)
        self.max_steps = int(max_steps or limit or 0)
        if self.max_steps <= 0:
            raise ValueError(f"{name}: no time limit: its registration gives no max_episode_steps, so pass max_steps")
        self._observation_shape = tuple(probe.observation_space.shape)
        self._action_space = probe.action_space
        self._start = int(getattr(probe.action_space, "start", 0))
        probe.close()

    @property
    def name(self) -> str:
        return self._name

    @property
    def num_actions(self) -> int:
        return int(getattr(self._action_space, "n", 0)) or int(np.prod(self._action_space.shape))

    def identity(self) -> tuple:
        """Equal configurations share compiled programs (gymnax jits with `self` static): `EnvIdentity`."""
        return (self._name, self.make_env, self.physics, self.perturb, self.host_state, self.max_steps)

    # -- the contract ---------------------------------------------------------------------------

    @property
    def default_params(self) -> GymParams:
        return GymParams(physics=jnp.asarray(self.nominal, jnp.float32), max_steps_in_episode=self.max_steps)

    def physics_names(self, params=None) -> tuple[str, ...]:
        return self.physics

    def _index(self, name: str) -> int:
        if name not in self.physics:
            raise ValueError(f"unknown physical parameter {name!r} for {self.name}; allowed: {', '.join(self.physics)}")
        return self.physics.index(name)

    def get_physics(self, params: GymParams, name: str):
        return params.physics[self._index(name)]

    def set_physics(self, params: GymParams, name: str, value) -> GymParams:
        return params.replace(physics=params.physics.at[self._index(name)].set(value))

    def scale_physics(self, params: GymParams, name: str, scale) -> GymParams:
        check_scales(scale)
        return self.set_physics(params, name, scale * self.get_physics(params, name))

    def observation_space(self, params=None):
        return spaces.Box(-jnp.inf, jnp.inf, self._observation_shape, jnp.float32)

    def action_space(self, params=None):
        space = self._action_space
        if hasattr(space, "n"):
            return spaces.Discrete(int(space.n))
        return spaces.Box(jnp.asarray(space.low, jnp.float32), jnp.asarray(space.high, jnp.float32),
                          tuple(space.shape), jnp.float32)

    def reset_env(self, key, params: GymParams):
        seed = jax.random.bits(key, (), jnp.uint32)
        out = (jax.ShapeDtypeStruct(self._observation_shape, jnp.float32),
               jax.ShapeDtypeStruct((2 * self.state_size,), jnp.uint32))
        obs, words = jax.pure_callback(self._host_reset, out, seed, params.physics, vmap_method="expand_dims")
        return obs, GymState(time=0, words=words, truncated=jnp.bool_(False))

    def step_env(self, key, state: GymState, action, params: GymParams):
        """One step without the reset: `step` does both in one host call."""
        obs, state, reward, terminated, truncated, _ = self._step(key, state, action, params, reset=False)
        return obs, state, reward, terminated, {}

    @functools.partial(jax.jit, static_argnames=("self",))
    def step(self, key, state: GymState, action, params: GymParams | None = None):
        """gymnax's step (auto-reset, `info["final_observation"]`) as one host call per batch, which
        resets only the rows whose episode ended: gymnax's own `step` computes a reset for every row."""
        return self._step(key, state, action, self.default_params if params is None else params, reset=True)

    def _step(self, key, state: GymState, action, params: GymParams, reset: bool):
        step_key, reset_key = jax.random.split(key)
        seeds = jnp.stack([jax.random.bits(step_key, (), jnp.uint32), jax.random.bits(reset_key, (), jnp.uint32)])
        discrete = isinstance(self.action_space(), spaces.Discrete)
        action = jnp.asarray(action, jnp.int32 if discrete else jnp.float32)
        obs_shape, words_shape = self._observation_shape, (2 * self.state_size,)
        out = (jax.ShapeDtypeStruct(obs_shape, jnp.float32), jax.ShapeDtypeStruct(obs_shape, jnp.float32),
               jax.ShapeDtypeStruct(words_shape, jnp.uint32), jax.ShapeDtypeStruct((), jnp.int32),
               jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), jnp.bool_),
               jax.ShapeDtypeStruct((), jnp.bool_))
        time = jnp.asarray(state.time, jnp.int32)
        limit = jnp.asarray(params.max_steps_in_episode, jnp.int32)
        obs, final_obs, words, time, reward, terminated, truncated = jax.pure_callback(
            functools.partial(self._host_step, reset), out, state.words, time, limit, action, params.physics, seeds,
            vmap_method="expand_dims")
        info = {"terminated": terminated, "truncated": truncated, "final_observation": final_obs}
        return obs, GymState(time=time, words=words, truncated=truncated), reward, terminated, truncated, info

    # -- on the host ----------------------------------------------------------------------------
    # numpy only: a JAX operation inside the callback would wait for the device running the program.

    def _env(self):
        """This thread's host environment: the callback may run on several of XLA's threads."""
        env = getattr(self._local, "env", None)
        if env is None:
            env = self._local.env = self.make_env()
            env.reset(seed=0)
            # What a step may change besides the state (CartPole's `steps_beyond_terminated`) is put
            # back before each row, so that no row sees another's leftovers: rebound attributes by
            # their fresh values, and arrays and containers a step may change in place by copies of
            # them (`_fresh_copies`).
            self._local.pristine = dict(vars(env.unwrapped))
            self._local.copied = _fresh_copies(self._local.pristine)
        return env

    def _prepare(self, env, physics: np.ndarray, changed: np.ndarray) -> None:
        """The environment as freshly made, then this row's physics: the nominal values are already
        there, so only the `changed` ones (indices into `physics`) are set."""
        vars(env.unwrapped).update(self._local.pristine)
        vars(env.unwrapped).update({name: copy.deepcopy(value) for name, value in self._local.copied.items()})
        for j in changed:
            self.perturb(env, self.physics[j], float(physics[j]))

    def _changed(self, physics: np.ndarray) -> list:
        """Per row, the indices of the physics that differ from their nominal values' rounding."""
        differs = physics != host_batch.rounded(self.nominal, np.float32)
        return [np.flatnonzero(row) for row in differs]

    def _host_reset(self, seed, physics):
        seed, physics = np.asarray(seed), np.asarray(physics)
        lead = host_batch.batch_shape(seed.shape, physics.shape[:-1])
        rows = math.prod(lead)
        seeds, physics = host_batch.rows(seed, lead), host_batch.rows(physics, lead, physics.shape[-1:])
        env = self._env()
        obs = np.empty((rows, *self._observation_shape), np.float32)
        states = np.empty((rows, self.state_size), np.float64)
        changed = self._changed(physics)
        for i in range(rows):
            self._prepare(env, physics[i], changed[i])
            obs[i], _ = env.reset(seed=int(seeds[i]))
            states[i] = self.host_state.get(env).reshape(-1)
        return obs.reshape(lead + obs.shape[1:]), host_batch.float_words(states, lead)

    def _host_step(self, reset, words, time, limit, action, physics, seeds):
        words, time, limit, action, physics, seeds = (np.asarray(a) for a in (words, time, limit, action, physics, seeds))
        action_shape = tuple(self._action_space.shape or ())
        lead = host_batch.batch_shape(words.shape[:-1], time.shape, limit.shape,
                                      action.shape[:action.ndim - len(action_shape)], physics.shape[:-1],
                                      seeds.shape[:-1])
        rows = math.prod(lead)
        states = host_batch.word_floats(words, lead)  # writable: a state shared by every row arrives broadcast
        time, limit = host_batch.rows(time, lead), host_batch.rows(limit, lead)
        seeds, actions = host_batch.rows(seeds, lead, (2,)), host_batch.rows(action, lead, action_shape)
        physics = host_batch.rows(physics, lead, physics.shape[-1:])
        env = self._env()
        shape = np.shape(self.host_state.get(env))
        final_obs = np.empty((rows, *self._observation_shape), np.float32)
        reward = np.empty(rows, np.float32)
        terminated = np.empty(rows, np.bool_)
        truncated = np.empty(rows, np.bool_)
        changed = self._changed(physics)
        for i in range(rows):
            self._prepare(env, physics[i], changed[i])
            self.host_state.set(env, states[i].reshape(shape))
            env.unwrapped._np_random = _KeyedGenerator(int(seeds[i, 0]))
            a = int(actions[i]) + self._start if not action_shape else actions[i].astype(self._action_space.dtype)
            try:
                final_obs[i], reward[i], terminated[i], truncated[i], _ = env.step(a)
            except Exception as error:
                physics_now = ", ".join(f"{n} = {float(v):g}" for n, v in zip(self.physics, physics[i]))
                raise RuntimeError(f"{self.name}: the environment's step raised {type(error).__name__}: {error} "
                                   f"(at step {int(time[i]) + 1} of its episode, action {a!r}, {physics_now})") from error
            states[i] = self.host_state.get(env).reshape(-1)
        time = time + 1
        truncated |= time >= limit
        obs = final_obs.copy()
        for i in np.flatnonzero(terminated | truncated) if reset else ():
            self._prepare(env, physics[i], changed[i])
            obs[i], _ = env.reset(seed=int(seeds[i, 1]))
            states[i] = self.host_state.get(env).reshape(-1)
            time[i] = 0
        return (obs.reshape(lead + obs.shape[1:]), final_obs.reshape(lead + obs.shape[1:]),
                host_batch.float_words(states, lead), time.astype(np.int32).reshape(lead),
                reward.reshape(lead), terminated.reshape(lead), truncated.reshape(lead))


class _KeyedGenerator:
    """The environment's `np_random` for one step, seeded from the step's key: made only if the step
    draws (most steps draw nothing, and making a generator costs more than the step)."""

    def __init__(self, seed: int):
        self._seed = seed
        self._generator = None

    def __getattr__(self, name):
        if self._generator is None:
            self._generator = np.random.default_rng(self._seed)
        return getattr(self._generator, name)


def _fresh_copies(attributes: dict) -> dict:
    """The attributes a step may change in place (numpy arrays, lists, dicts, sets), each restored as a
    copy before every row. One that cannot be copied (a simulator's handle, as a Box2D world) is left
    out: such state is the `HostState`'s to read and write."""
    copied = {}
    for name, value in attributes.items():
        if isinstance(value, (np.ndarray, list, dict, set, bytearray)):
            try:
                copied[name] = copy.deepcopy(value)
            except Exception:  # noqa: BLE001 - any object deepcopy refuses stays as it is
                continue
    return copied


def gymnasium_spec(name: str, make_env: Callable[[], Any], perturbed: Sequence[str],
                   perturb: Callable[[Any, str, float], None] | None = None,
                   host_state: HostState | None = None, max_steps: int | None = None,
                   physics: Sequence[str] | None = None, notes: str = ""):
    """The `EnvSpec` of a gymnasium environment of one's own, for `envs.register`: `make_env()` builds
    it, `perturbed` names the attributes that `--param` perturbs by default, `physics` every attribute
    that may be perturbed (default: `perturbed`). See the module docstring for `perturb` and
    `host_state`. Builds one environment to check the names, the state and the time limit."""
    names = tuple(dict.fromkeys((*perturbed, *(physics or ()))))
    env = GymnasiumEnv(name, make_env, names, perturb, host_state, max_steps)
    return EnvSpec(name=name, factory=lambda _names, _engine: env, perturbed=tuple(perturbed), max_steps=env.max_steps,
                   random_return=math.nan, notes=notes or "a gymnasium environment stepped on the host",
                   engines=("gymnasium",))


@functools.lru_cache(maxsize=None)
def spec_for_id(name: str):
    """The `EnvSpec` of `gym:<id>`: gymnasium's registered environment `<id>`, unwrapped (the bridge
    keeps the time limit), perturbable by any of its float attributes; `--param` chooses which
    (default: the first of them)."""
    import gymnasium

    env_id = name[len(PREFIX):]
    if env_id not in gymnasium.registry:
        close = [k for k in gymnasium.registry if k.lower().startswith(env_id.lower().split("-")[0])][:8]
        raise ValueError(f"unknown gymnasium environment {env_id!r} in {name!r}"
                         + (f"; did you mean: {', '.join(PREFIX + c for c in close)}" if close else ""))
    make_env = functools.partial(_make_registered, env_id)
    probe = make_env()
    names = float_attributes(probe)
    limit = gymnasium.spec(env_id).max_episode_steps
    probe.close()
    if not names:
        raise ValueError(f"{name}: the environment has no float attribute to perturb; register it with "
                         "fedjax_rl.envs.gymnasium_spec and a perturb function")
    return gymnasium_spec(name, make_env, perturbed=names[:1], physics=names, max_steps=limit,
                          notes=f"gymnasium's {env_id} stepped on the host; parameters: its float attributes")


def _make_registered(env_id: str):
    import gymnasium

    return gymnasium.make(env_id).unwrapped
