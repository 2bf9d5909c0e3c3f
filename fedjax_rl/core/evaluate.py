"""Evaluation of a global policy: nominal learning curve, each agent's own environment, and the
robustness sweep m' = c m (DESIGN.md section 1). All functions are pure and run inside the compiled
training program.

An episode runs until its first termination or truncation, at most `max_steps` environment steps.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

Policy = Callable[[jax.Array], jax.Array]  # observation -> action (deterministic)


def episode_return(env, env_params, policy: Policy, key: jax.Array, max_steps: int) -> jax.Array:
    """Undiscounted return of one episode of `policy` in `env` with physics `env_params`.

    A `while_loop` that stops once the episode has ended: the return is the same as a masked scan of
    `max_steps` steps (later steps would add 0), but under `vmap` the loop runs only until the
    longest episode of the batch ends, which matters for 1000-step MuJoCo tasks whose early
    policies fall within tens of steps."""
    reset_key, steps_key = jax.random.split(key)
    step_keys = jax.random.split(steps_key, max_steps)
    obs, env_state = env.reset(reset_key, env_params)

    def running(carry):
        i, _, _, _, alive = carry
        return alive & (i < max_steps)

    def step(carry):
        i, obs, env_state, total, _ = carry
        action = policy(obs)
        obs, env_state, reward, terminated, truncated, _ = env.step(step_keys[i], env_state, action, env_params)
        return i + 1, obs, env_state, total + reward, ~(terminated | truncated)

    init = (jnp.int32(0), obs, env_state, jnp.float32(0.0), jnp.bool_(True))
    return jax.lax.while_loop(running, step, init)[3]


def episode_returns(env, env_params, policy: Policy, key: jax.Array, num_episodes: int, max_steps: int) -> jax.Array:
    """[num_episodes] returns of independent episodes (vmapped)."""
    keys = jax.random.split(key, num_episodes)
    return jax.vmap(lambda k: episode_return(env, env_params, policy, k, max_steps))(keys)


def mean_return(env, env_params, policy: Policy, key: jax.Array, num_episodes: int, max_steps: int) -> jax.Array:
    """Mean return over `num_episodes` independent episodes."""
    return jnp.mean(episode_returns(env, env_params, policy, key, num_episodes, max_steps), axis=-1)


def returns_over_params(
    env, batched_params: Any, policy: Policy, key: jax.Array, num_episodes: int, max_steps: int
) -> jax.Array:
    """[environments, num_episodes] returns in each of a batch of environments (leading axis of
    `batched_params`).

    The same episode keys are used in every environment (common random numbers), so differences
    between entries come from the physics, not from the draw of initial states.
    """
    # One vmap over (environment, episode) pairs, not a vmap of vmaps: fewer batch dimensions in the
    # physics' dots. Nested, a robot's [runs..., environments, episodes, bodies, 3, 3] rotations reach
    # rank 7 and crash XLA's CPU YNNPACK transpose (jaxlib 0.10.2, REPRODUCTION.md).
    num_envs = jax.tree.leaves(batched_params)[0].shape[0]
    per_pair_params = jax.tree.map(lambda x: jnp.repeat(x, num_episodes, axis=0), batched_params)
    per_pair_keys = jnp.tile(jax.random.split(key, num_episodes), num_envs)
    returns = jax.vmap(lambda p, k: episode_return(env, p, policy, k, max_steps))(per_pair_params, per_pair_keys)
    return returns.reshape(num_envs, num_episodes)


def mean_returns_over_params(
    env, batched_params: Any, policy: Policy, key: jax.Array, num_episodes: int, max_steps: int
) -> jax.Array:
    """Mean return in each of a batch of environments (`returns_over_params` averaged over episodes)."""
    return jnp.mean(returns_over_params(env, batched_params, policy, key, num_episodes, max_steps), axis=-1)
