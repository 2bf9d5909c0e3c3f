"""An environment of a user's own, a plain gymnax environment meeting the contract in
fedjax_rl/envs/base.py, registered with `envs.register` (no edit of the registry) and trained through
the same door as every other task. The example in docs/environments.md ("Your own environment") is
this file's `Slide`."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from fedjax_rl import envs
from fedjax_rl.training import configs, program
from fedjax_rl.envs import base


@struct.dataclass
class SlideParams(environment.EnvParams):
    mass: float = 1.0
    max_steps_in_episode: int = 20


@struct.dataclass
class SlideState(environment.EnvState):
    x: jax.Array
    v: jax.Array


class Slide(base.EnvIdentity, base.PerturbablePhysics, environment.Environment):
    """A block on ice, pushed left or right toward x = 0; a heavier block accelerates less."""

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


@pytest.fixture
def slide():
    spec = envs.register(envs.EnvSpec(name="Slide-v0", factory=lambda perturbed, engine: Slide(),
                                      perturbed=("mass",), max_steps=20, random_return=math.nan))
    yield spec
    envs.REGISTRY.entries.pop(spec.name)
    envs.REGISTRY.origins.pop(spec.name)


def test_a_registered_env_of_ones_own_trains_with_per_agent_physics(slide):
    # The rules of every registry: the same spec again is fine, another under its name is refused.
    assert envs.register(slide) is slide
    with pytest.raises(ValueError, match=r"my code: the environment name 'Slide-v0' is already taken \(by user code\)"):
        envs.register(dataclasses.replace(slide, max_steps=30), "my code")
    with pytest.raises(ValueError, match="are Brax's"):
        envs.register(envs.EnvSpec(name="brax:mine", factory=None, perturbed=("m",), max_steps=1, random_return=0.0))
    with pytest.raises(ValueError, match="unknown physical parameter 'friction' for Slide-v0; allowed: mass"):
        configs.train_config("dqnavg", "Slide-v0", physics=("friction",))
    config = configs.train_config(
        "dqnavg", "Slide-v0", num_agents=2, sync_every=5, steps_per_agent=10, eval_every_rounds=2, eval_episodes=1,
        sweep_points=2, agent_overrides=dict(hidden_sizes=(8,), batch_size=4, buffer_size=16, learning_starts=5,
                                             train_freq=1, gradient_steps=1))
    # One compiled program (the whole run), the cheapest way through the loop.
    _, result = jax.jit(jax.vmap(program.make_train(config)))(program.seed_keys(0, 1))
    final = result["final"]
    # Each agent's block has its own mass, m_k = m (1 + n_k), and the run trained and evaluated.
    np.testing.assert_allclose(final["physics_values"][0, :, 0], 1.0 + final["rates"][0, :, 0], rtol=1e-6)
    assert final["physics_values"][0, 0, 0] != final["physics_values"][0, 1, 0]
    assert np.all(np.isfinite(result["curve"]["td_loss"])) and np.all(result["curve"]["td_loss"] > 0)
    assert final["sweep_returns"].shape == (1, 2) and np.all(final["sweep_returns"] < 0)
