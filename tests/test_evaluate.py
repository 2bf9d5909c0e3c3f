"""Evaluation episodes stop early (a while_loop) yet return what a fixed-length masked scan returns."""

import chex
import jax
import jax.numpy as jnp

from fedjax_rl import envs, evaluate


def masked_scan_return(env, env_params, policy, key, max_steps):
    """The reference: exactly `max_steps` steps, rewards counted until the first termination or truncation."""
    reset_key, steps_key = jax.random.split(key)
    obs, env_state = env.reset(reset_key, env_params)

    def step(carry, step_key):
        obs, env_state, total, alive = carry
        obs, env_state, reward, terminated, truncated, _ = env.step(step_key, env_state, policy(obs), env_params)
        return (obs, env_state, total + jnp.where(alive, reward, 0.0), alive & ~(terminated | truncated)), None

    init = (obs, env_state, jnp.float32(0.0), jnp.bool_(True))
    return jax.lax.scan(step, init, jax.random.split(steps_key, max_steps))[0][2]


def test_early_stopping_episode_equals_the_masked_scan():
    env, params = envs.make("CartPole-v1", ("length",))

    def policy(obs):  # deterministic, keeps the pole up for a while, then fails: episodes of varied length
        return (obs[2] > 0.0).astype(jnp.int32)

    keys = jax.random.split(jax.random.key(3), 16)
    for max_steps in (500, 20):  # episodes end before the cap; every episode is cut by the cap
        ours = jax.jit(jax.vmap(lambda k: evaluate.episode_return(env, params, policy, k, max_steps)))(keys)
        ref = jax.jit(jax.vmap(lambda k: masked_scan_return(env, params, policy, k, max_steps)))(keys)
        chex.assert_trees_all_equal(ours, ref)
        if max_steps == 20:
            chex.assert_trees_all_equal(ours, jnp.full(16, 20.0))
        else:
            assert 20 < float(ours.min()) < float(ours.max()) < 500, ours  # really of varied lengths
