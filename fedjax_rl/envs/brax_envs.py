"""Brax's own environments (`brax.envs.get_environment`) behind this library's environment contract
(`fedjax_rl/envs/base.py`), with per-agent physics through Brax's domain-randomisation pattern.

`--env brax:hopper` (any name Brax registers: ant, halfcheetah, hopper, walker2d, ...) runs Brax's
task on one of its physics pipelines, chosen by the `engine` setting: generalized (the default) or
mjx. Brax's positional and spring pipelines are not offered: they scale masses by
`mass ** (1 - sys.spring_mass_scale)`, and Brax's Hopper sets that scale to 1, so a perturbed mass
would not reach their physics (measured: bit-identical trajectories at 1.0 and 1.5 x the torso).

Per-agent physics. Brax randomises a model as `DomainRandomizationVmapWrapper`
(brax/envs/wrappers/training.py) does: a batched `System` and a vmap of `step` over it, with the
env's `sys` swapped for each batch member. Here the perturbed values live in the params pytree
(`BraxParams`), which the loop already vmaps over agents, and `system(params)` is the one place the
swapped `System` is made from them; `reset` and `step` run Brax's env on a shallow copy holding it,
so the shared env object is never changed while tracing. Values are drawn once per run (per agent),
not on reset.

Physical parameters: a body's mass by its name (`torso`, `thigh`, ...: `sys.link.inertia.mass`, read
by the generalized pipeline, and `sys.body_mass`, read by mjx), and `gravity`
(the magnitude of `sys.gravity`).

The gymnax 1.x step: Brax's env neither limits time nor resets, so `step` does both: `terminated`
is Brax's `done` (Hopper fell), `truncated` is the time limit `params.max_steps_in_episode`, and the
episode resets itself, keeping the reached observation in `info["final_observation"]`.
"""

from __future__ import annotations

import copy
import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from fedjax_rl.envs.base import EnvIdentity, PerturbablePhysics

PREFIX = "brax:"
BACKENDS = ("generalized", "mjx")  # the default first; both read the true masses
MAX_STEPS = 1000  # Brax's training episode length (brax.envs.training.EpisodeWrapper's default use)


@struct.dataclass
class BraxParams(environment.EnvParams):
    """A Brax task's perturbable physics: each body's mass and the magnitude of gravity, plus the time limit."""

    link_mass: jax.Array = None  # [links] each body's mass
    gravity: jax.Array = None  # |g|


@struct.dataclass
class BraxState:
    """Brax's own state of the environment and the step count the adapter's time limit reads."""

    brax_state: Any  # brax.envs.base.State
    time: jax.Array


# Brax warns at every model it loads that it is no longer actively maintained (brax/io/mjcf.py): the
# documentation says so once, where Brax's environments are described (docs/environments.md),
# instead of every run.
BRAX_NOTICE = r"Brax System, piplines and environments are not actively being maintained"


def _brax_envs():
    """brax.envs, imported without the line mjx prints when its optional Warp backend is absent (the
    MuJoCo engines import mjx the same way)."""
    from fedjax_rl.envs import mujoco_engines  # noqa: F401  (imports mjx quietly first)
    from brax import envs as brax_envs

    return brax_envs


@functools.lru_cache(maxsize=None)
def _brax_env(name: str, backend: str):
    # Building parses the task's MJCF (seconds): one per (task, pipeline), as the registry's other
    # tasks share one model per engine.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=BRAX_NOTICE, category=UserWarning)
        return _brax_envs().get_environment(name, backend=backend)


def brax_names() -> tuple[str, ...]:
    """The names of Brax's registered environments (`--env brax:<name>`), sorted."""
    return tuple(sorted(_brax_envs()._envs))


class BraxEnv(EnvIdentity, PerturbablePhysics, environment.Environment):
    """One of Brax's environments, as a perturbable gymnax environment (see the module docstring)."""

    def __init__(self, task: str, backend: str = BACKENDS[0]):
        if task not in brax_names():
            raise ValueError(f"unknown Brax environment {task!r}; allowed: {', '.join(brax_names())}")
        if backend not in BACKENDS:
            raise ValueError(f"engine for {PREFIX}{task} must be one of {', '.join(BACKENDS)}, got {backend!r}")
        super().__init__()
        self.task, self.backend = task, backend
        self.brax = _brax_env(task, backend)
        sys = self.brax.sys
        self.link_names = tuple(sys.link_names)
        self._gravity_direction = sys.gravity / jnp.linalg.norm(sys.gravity)

    def identity(self) -> tuple:
        return (self.task, self.backend)

    @property
    def name(self) -> str:
        return PREFIX + self.task

    @property
    def default_params(self) -> BraxParams:
        sys = self.brax.sys
        return BraxParams(max_steps_in_episode=MAX_STEPS, link_mass=sys.link.inertia.mass,
                          gravity=jnp.linalg.norm(sys.gravity))

    # -- physics -----------------------------------------------------------------------------------

    def physics_names(self, params=None) -> tuple[str, ...]:
        return (*self.link_names, "gravity")

    def get_physics(self, params: BraxParams, name: str):
        self._field(params, name)  # PerturbablePhysics' check: a ValueError naming the allowed names
        if name == "gravity":
            return params.gravity
        return params.link_mass[self.link_names.index(name)]

    def set_physics(self, params: BraxParams, name: str, value):
        self._field(params, name)
        if name == "gravity":
            return params.replace(gravity=jnp.asarray(value, params.gravity.dtype))
        index = self.link_names.index(name)
        return params.replace(link_mass=params.link_mass.at[index].set(value))

    def system(self, params: BraxParams):
        """Brax's `System` with `params`' physics: what the domain-randomisation wrapper swaps in."""
        sys = self.brax.sys
        body_mass = sys.body_mass.at[1:].set(params.link_mass)  # body 0 is the world
        return sys.tree_replace({"link.inertia.mass": params.link_mass, "body_mass": body_mass,
                                 "gravity": self._gravity_direction * params.gravity})

    def _with_system(self, params: BraxParams):
        env = copy.copy(self.brax)
        env.sys = self.system(params)
        return env

    # -- the gymnax interface ---------------------------------------------------------------------

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, (self.brax.observation_size,), jnp.float32)

    def action_space(self, params=None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (self.brax.action_size,), jnp.float32)

    def reset(self, key, params=None):
        params = self.default_params if params is None else params
        state = self._with_system(params).reset(key)
        return state.obs, BraxState(brax_state=state, time=jnp.int32(0))

    def step(self, key, state: BraxState, action, params=None):
        params = self.default_params if params is None else params
        reached = self._with_system(params).step(state.brax_state, action)
        time = state.time + 1
        terminated = reached.done > 0.5
        truncated = (time >= params.max_steps_in_episode) & ~terminated
        done = terminated | truncated
        reset_obs, reset_state = self.reset(key, params)
        next_state = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_state,
                                  BraxState(brax_state=reached, time=time))
        obs = jnp.where(done, reset_obs, reached.obs)
        info = {"final_observation": reached.obs, "discount": 1.0 - terminated.astype(jnp.float32)}
        return obs, next_state, reached.reward, terminated, truncated, info

    # gymnax's Environment defines these through step_env/reset_env; this env is its own loop.
    def step_env(self, key, state, action, params):
        raise NotImplementedError("BraxEnv.step handles time limits and resets itself")

    def reset_env(self, key, params):
        raise NotImplementedError("BraxEnv.reset runs Brax's own reset")
