"""Slide-v0: a block on ice, pushed left or right toward x = 0, whose mass each agent may have perturbed
(a heavier block accelerates less). A gymnax environment meeting the contract in
fedjax_rl/envs/base.py, and the `EnvSpec` that registers it (docs/environments.md, "Your own
environment"): the entry point `Slide-v0` in pyproject.toml names `SPEC`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from fedjax_rl import envs
from fedjax_rl.envs.base import EnvIdentity, PerturbablePhysics


@struct.dataclass
class SlideParams(environment.EnvParams):
    """Every float field is a perturbable physical parameter: here the block's mass."""

    mass: float = 1.0
    max_steps_in_episode: int = 20


@struct.dataclass
class SlideState(environment.EnvState):
    x: jax.Array
    v: jax.Array


class Slide(EnvIdentity, PerturbablePhysics, environment.Environment):
    """A block on ice, pushed left or right toward x = 0; reward -|x|, terminated beyond |x| = 2."""

    name = "Slide-v0"

    @property
    def default_params(self) -> SlideParams:
        return SlideParams()

    def reset_env(self, key, params):
        state = SlideState(time=0, x=jax.random.uniform(key, minval=-1.0, maxval=1.0), v=jnp.float32(0.0))
        return jnp.stack([state.x, state.v]), state

    def step_env(self, key, state, action, params):
        v = state.v + 0.1 * jnp.where(action == 1, 1.0, -1.0) / params.mass
        x = state.x + 0.1 * v
        state = SlideState(time=state.time + 1, x=x, v=v)
        return jnp.stack([x, v]), state, -jnp.abs(x), jnp.abs(x) > 2.0, {}

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)


SPEC = envs.EnvSpec(name="Slide-v0", factory=lambda perturbed, engine: Slide(), perturbed=("mass",), max_steps=20,
                    random_return=math.nan, notes="examples/own_environment: a block on ice")
