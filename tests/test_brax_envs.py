"""Brax's own environments behind the environment contract (fedjax_rl/envs/brax_envs.py), and an
environment of a user's own, registered without editing the registry.

Compiling Brax's physics takes minutes on a 2-core CPU, so the tests that step it are `heavy`
(`make test-heavy`); the rest check, without compiling a step, that the registry, the settings and
the per-agent `System` are right.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl import envs
from fedjax_rl.core import perturb
from fedjax_rl.training import configs
from fedjax_rl.envs import base

brax_envs = pytest.importorskip("fedjax_rl.envs.brax_envs")


@pytest.fixture(scope="module")
def hopper():
    return envs.make("brax:hopper", ("torso",))


def test_brax_hopper_is_registered_with_its_bodies_and_pipelines(hopper):
    env, nominal = hopper
    assert isinstance(env, base.EnvIdentity) and env == envs.make("brax:hopper")[0]
    assert env != envs.make("brax:hopper", None, "mjx")[0]  # another pipeline: another program
    assert env.physics_names(nominal) == ("torso", "thigh", "leg", "foot", "gravity")
    assert envs.get("brax:hopper").engines == ("generalized", "mjx")
    with pytest.raises(ValueError, match="unknown Brax environment 'pong'.*brax:hopper"):
        envs.get("brax:pong")
    with pytest.raises(ValueError, match="engine for brax:hopper must be one of generalized, mjx, got 'positional'"):
        configs.train_config("fedrddpg", "brax:hopper", engine="positional")
    with pytest.raises(ValueError, match="unknown physical parameter 'wings' for brax:hopper"):
        configs.train_config("fedrddpg", "brax:hopper", physics=("wings",))
    config = configs.train_config("fedrddpg", "brax:hopper", physics=("thigh", "gravity"))
    assert config.engine == "generalized" and config.physics == ("thigh", "gravity")


def test_per_agent_physics_reach_the_system(hopper):
    """Each agent's params give a System with its own masses and gravity (Brax's DR pattern: the
    batched System a vmapped step sees), the other bodies' untouched."""
    env, nominal = hopper
    rates = jnp.array([[0.0, 0.0], [0.5, -0.2]])
    params = perturb.agent_env_params(env, nominal, ("torso", "gravity"), rates)
    systems = jax.vmap(env.system)(params)
    mass0 = np.asarray(nominal.link_mass)
    np.testing.assert_allclose(systems.link.inertia.mass[1], mass0 * np.array([1.5, 1, 1, 1]), rtol=1e-6)
    np.testing.assert_allclose(systems.body_mass[1, 1:], systems.link.inertia.mass[1])
    np.testing.assert_array_equal(systems.link.inertia.mass[0], mass0)
    np.testing.assert_allclose(systems.gravity[1], [0, 0, -9.81 * 0.8], rtol=1e-6)
    np.testing.assert_allclose(env.get_physics(env.scale_physics(nominal, "thigh", 2.0), "thigh"), 2 * mass0[1])
    with pytest.raises(ValueError, match="physics scale must be > 0"):
        env.scale_physics(nominal, "thigh", 0.0)


@pytest.mark.heavy
def test_different_masses_step_differently_same_masses_identically(hopper):
    """Three agents, the third's torso 1.5x heavier, the same keys and actions: agents 0 and 1 are
    bit-identical, agent 2 differs (the perturbation reaches Brax's physics)."""
    env, nominal = hopper
    params = perturb.agent_env_params(env, nominal, ("torso",), jnp.array([0.0, 0.0, 0.5]))

    def two_steps(p, key):
        _, state = env.reset(key, p)
        obs, state, *_ = env.step(key, state, jnp.full((3,), 0.5), p)
        obs, *_ = env.step(key, state, jnp.full((3,), -0.5), p)
        return obs

    obs = jax.jit(jax.vmap(two_steps, in_axes=(0, None)))(params, jax.random.key(0))
    np.testing.assert_array_equal(obs[0], obs[1])
    assert np.abs(obs[2] - obs[0]).max() > 1e-4


@pytest.mark.heavy
def test_fedrddpg_trains_a_tiny_block_on_brax_hopper():
    from fedjax_rl.training import loop

    config = configs.train_config(
        "fedrddpg", "brax:hopper", physics=("torso",), num_agents=2, sync_every=5, steps_per_agent=10,
        eval_every_rounds=2, eval_episodes=1, sweep_points=2,
        agent_overrides=dict(hidden_sizes=(8,), batch_size=4, buffer_size=16, learning_starts=5))
    result = loop.run(config, num_seeds=1, progress=False)
    assert np.all(np.isfinite(result["curve"]["nominal_return"]))
    assert result["final"]["physics_values"].shape == (1, 2, 1)
