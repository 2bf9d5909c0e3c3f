"""Evaluation of a global policy: nominal learning curve, each agent's own environment, and the
robustness sweep m' = c m (DESIGN.md section 1). All functions are pure and run inside the compiled
training program.

An episode is run for exactly `max_steps` environment steps with a mask that switches off after the
first termination or truncation, so every episode in a batch has the same static length.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

Policy = Callable[[jax.Array], jax.Array]  # observation -> action (deterministic)


def episode_return(env, env_params, policy: Policy, key: jax.Array, max_steps: int) -> jax.Array:
    """Undiscounted return of one episode of `policy` in `env` with physics `env_params`."""
    reset_key, steps_key = jax.random.split(key)
    obs, env_state = env.reset(reset_key, env_params)

    def step(carry, step_key):
        obs, env_state, total, alive = carry
        action = policy(obs)
        obs, env_state, reward, terminated, truncated, _ = env.step(step_key, env_state, action, env_params)
        total = total + jnp.where(alive, reward, 0.0)
        alive = alive & ~(terminated | truncated)
        return (obs, env_state, total, alive), None

    init = (obs, env_state, jnp.float32(0.0), jnp.bool_(True))
    (_, _, total, _), _ = jax.lax.scan(step, init, jax.random.split(steps_key, max_steps))
    return total


def mean_return(env, env_params, policy: Policy, key: jax.Array, num_episodes: int, max_steps: int) -> jax.Array:
    """Mean return over `num_episodes` independent episodes (vmapped)."""
    keys = jax.random.split(key, num_episodes)
    returns = jax.vmap(lambda k: episode_return(env, env_params, policy, k, max_steps))(keys)
    return jnp.mean(returns)


def mean_returns_over_params(
    env, batched_params: Any, policy: Policy, key: jax.Array, num_episodes: int, max_steps: int
) -> jax.Array:
    """Mean return in each of a batch of environments (leading axis of `batched_params`).

    The same episode keys are used in every environment (common random numbers), so differences
    between entries come from the physics, not from the draw of initial states.
    """
    return jax.vmap(lambda p: mean_return(env, p, policy, key, num_episodes, max_steps))(batched_params)
