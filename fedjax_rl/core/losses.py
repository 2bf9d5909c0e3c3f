"""The expectile loss, the episode-end rule and clipped double Q (DESIGN.md section 1); the robust
TD target, where omega enters, is `agents/robust.robust_td_target`, beside the rest of the robust term.

Every function here is pure and shape-polymorphic over a leading batch axis, so the same code is
used by FedRDQN and FedRDDPG and checked by hand-computed cases in the tests.

Episode ends: a *terminated* transition has next-state value 0 (in the TD target and in the
expectile regression target); a *truncated* one bootstraps as usual, so callers pass `terminated`,
never `done`. The robust term gamma * omega * D(s) is an estimate of min over the neighbour set of
s, a property of s rather than of the sampled s', so it is not masked by the sample's termination:
terminal neighbours enter it through the expectile regression target, which is 0 for them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def next_state_value(next_value: jax.Array, terminated: jax.Array) -> jax.Array:
    """V(s') with the episode-end rule: 0 where the transition terminated, V(s') otherwise."""
    return jnp.where(terminated, 0.0, next_value)


def expectile_loss(target: jax.Array, prediction: jax.Array, tau: float | jax.Array) -> jax.Array:
    """l_tau(y, x) = tau (y - x)^2 if y >= x else (1 - tau) (y - x)^2, elementwise.

    With tau < 0.5 the minimiser of E l_tau(Y, x) is a low expectile of Y: the regression leans
    towards the smallest targets, which is how D(s) estimates a minimum over next states.
    """
    diff = target - prediction
    weight = jnp.where(diff >= 0, tau, 1.0 - tau)
    return weight * jnp.square(diff)


def expectile_target(next_value: jax.Array, terminated: jax.Array) -> jax.Array:
    """The expectile network's regression target V(s'), 0 for terminated transitions."""
    return next_state_value(next_value, terminated)


def clipped_double_q(next_values: jax.Array) -> jax.Array:
    """Minimum over the critic axis (axis 0) of target-critic values: the clipped double-Q value."""
    return jnp.min(next_values, axis=0)


def mean_squared_td(prediction: jax.Array, target: jax.Array) -> jax.Array:
    """E (Q(s, a) - y)^2 with the target treated as a constant."""
    return jnp.mean(jnp.square(prediction - jax.lax.stop_gradient(target)))


def actor_loss(q_values: jax.Array) -> jax.Array:
    """DDPG's actor loss -E Q(s, pi(s; phi); theta): minimising it raises the critic's value."""
    return -jnp.mean(q_values)
