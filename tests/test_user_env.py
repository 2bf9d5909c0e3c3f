"""An environment of a user's own, a plain gymnax environment meeting the contract in
fedjax_rl/envs/base.py, registered with `envs.register` (no edit of the registry) and trained through
the same door as every other task: examples/own_environment's `Slide`, the task docs/environments.md
("Your own environment") writes out."""

import dataclasses
import importlib.util
import os
import sys

import jax
import numpy as np
import pytest

from fedjax_rl import envs
from fedjax_rl.training import configs, program


def _example(name: str, path: str):
    """The module at `path` under `name` (not `slide`: tests/test_plugins.py installs it as that)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # flax's dataclasses look it up
    spec.loader.exec_module(module)
    return module


EXAMPLE = _example("own_environment_slide", os.path.join(os.path.dirname(__file__), "..", "examples",
                                                         "own_environment", "slide.py"))


@pytest.fixture
def slide():
    spec = envs.register(EXAMPLE.SPEC)
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
