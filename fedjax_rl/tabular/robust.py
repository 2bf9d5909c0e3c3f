"""Robust Bellman operators, robust value iteration and exact policy evaluation (DESIGN.md section 1).

The operators::

  T_k Q(s,a)  = r(s,a) + gamma [ (1-omega) sum_s' P_k(s'|s,a) V(s') + omega min_{s' in N_k^s} V(s') ]
  T_bar Q     = the same with P_bar and N^s,       V(s') = max_a' Q(s', a').

T_bar is a gamma-contraction whose fixed point Q_R* is the optimal robust Q function for the
rectangular set P_omega: the inner minimum over q (a distribution on N^s) of
(1-omega) P_bar V + omega q.V puts all of q's mass on the lowest-valued neighbour. omega = 0 gives the
ordinary Bellman operator of P_bar.

All functions take the support-list form `TabularArrays` (see mdp.py) and are pure jax (jit/vmap
them freely); `omega` may be traced.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_rl.tabular.mdp import TabularArrays, TabularMDP


def robust_backup(
    v: jax.Array,
    next_states: jax.Array,
    probs: jax.Array,
    neighbours: jax.Array,
    reward: jax.Array,
    gamma: jax.Array,
    omega: jax.Array,
) -> jax.Array:
    """r + gamma [(1-omega) E_{s'~p} v(s') + omega min_{N^s} v], shape [S, A], for one kernel.

    v: [S]; next_states: [S, A, m]; probs: [S, A, m]; neighbours: [S, n]; reward: [S, A].
    """
    # Support lists are built in bounds (mdp.to_arrays): promising so skips XLA's index clamping.
    expectation = jnp.sum(probs * v.at[next_states].get(mode="promise_in_bounds"), axis=-1)
    worst = jnp.min(v.at[neighbours].get(mode="promise_in_bounds"), axis=-1)
    return reward + gamma * ((1.0 - omega) * expectation + omega * worst[:, None])


def agent_operator(problem: TabularArrays, q: jax.Array, omega, agent: int | jax.Array) -> jax.Array:
    """T_k Q for agent k = `agent`; q: [S, A]."""
    return robust_backup(
        q.max(-1), problem.next_states, problem.probs[agent], problem.neighbours[agent],
        problem.reward, problem.gamma, omega,
    )


def agent_operators(problem: TabularArrays, q: jax.Array, omega) -> jax.Array:
    """[T_1 Q, ..., T_K Q], shape [K, S, A]; q: [S, A] (the same Q for every agent) or [K, S, A]."""
    q = jnp.broadcast_to(q, (problem.num_agents,) + q.shape[-2:])
    return jax.vmap(
        lambda qk, probs, neighbours: robust_backup(
            qk.max(-1), problem.next_states, probs, neighbours, problem.reward, problem.gamma, omega
        )
    )(q, problem.probs, problem.neighbours)


def average_operator(problem: TabularArrays, q: jax.Array, omega) -> jax.Array:
    """T_bar Q, shape [S, A]."""
    return robust_backup(
        q.max(-1), problem.next_states, problem.probs_bar, problem.neighbours_bar,
        problem.reward, problem.gamma, omega,
    )


def _default_tol(q_scale, dtype):
    # A few ulps of the largest value: the fixed-point iteration cannot resolve below this.
    return 8.0 * jnp.finfo(dtype).eps * jnp.maximum(1.0, q_scale)


def _fixed_point(update, q0, tol, max_iters):
    def cond(carry):
        _, diff, i = carry
        return (diff > (tol if tol is not None else _default_tol(jnp.abs(carry[0]).max(), q0.dtype))) & (i < max_iters)

    def body(carry):
        q, _, i = carry
        q_new = update(q)
        return q_new, jnp.abs(q_new - q).max(), i + 1

    q, _, _ = jax.lax.while_loop(cond, body, (q0, jnp.asarray(jnp.inf, q0.dtype), 0))
    return q


def robust_value_iteration(problem: TabularArrays, omega, tol=None, max_iters: int = 100_000) -> jax.Array:
    """Q_R*, the fixed point of T_bar (omega = 0: the optimal Q of P_bar), shape [S, A].

    Iterates Q <- T_bar Q from 0 until successive iterates differ by at most `tol` (default: a few
    ulps of `max |Q|`), so the error is at most gamma tol / (1 - gamma).
    """
    q0 = jnp.zeros_like(problem.reward)
    return _fixed_point(lambda q: average_operator(problem, q, omega), q0, tol, max_iters)


def greedy_policy(q: jax.Array) -> jax.Array:
    """argmax_a Q(s, a), shape [S] (ties to the lowest action)."""
    return jnp.argmax(q, axis=-1)


def robust_policy_q(problem: TabularArrays, policy: jax.Array, omega, tol=None, max_iters: int = 100_000) -> jax.Array:
    """Q^pi_R: the worst-case Q function of a deterministic policy over P_omega, shape [S, A].

    Fixed point of Q(s,a) = r + gamma [(1-omega) P_bar V + omega min_{N^s} V] with V(s) = Q(s, pi(s)):
    for a fixed policy the adversary's best reply, per (s, a), puts all omega mass on the
    lowest-valued neighbour (robust policy evaluation, iterated to the fixed point).
    """
    states = jnp.arange(problem.reward.shape[0])

    def update(q):
        v = q[states, policy]
        return robust_backup(
            v, problem.next_states, problem.probs_bar, problem.neighbours_bar,
            problem.reward, problem.gamma, omega,
        )

    return _fixed_point(update, jnp.zeros_like(problem.reward), tol, max_iters)


def robust_policy_value(problem: TabularArrays, policy: jax.Array, omega, tol=None) -> jax.Array:
    """V^pi_R(s) = min over P in P_omega of the value of pi, shape [S]."""
    q = robust_policy_q(problem, policy, omega, tol)
    return q[jnp.arange(q.shape[0]), policy]


@jax.jit
def _policy_values(P: jax.Array, r: jax.Array, gamma: jax.Array, policy: jax.Array) -> jax.Array:
    K, S = P.shape[0], P.shape[1]
    P_pi = P[:, jnp.arange(S), policy, :]  # [K, S, S]
    r_pi = r[jnp.arange(S), policy]
    lhs = jnp.eye(S, dtype=P.dtype)[None] - gamma * P_pi
    return jnp.linalg.solve(lhs, jnp.broadcast_to(r_pi, (K, S))[..., None])[..., 0]


def policy_values(mdp: TabularMDP, policy: jax.Array, dtype=None) -> jax.Array:
    """The ordinary value of a deterministic policy in each agent's MDP, shape [K, S].

    Solves (I - gamma P_k^pi) V_k = r^pi exactly for every k (dense linear solves).
    """
    dtype = dtype or jax.dtypes.canonicalize_dtype(jnp.float64)
    return _policy_values(
        jnp.asarray(mdp.P, dtype), jnp.asarray(mdp.r, dtype), jnp.asarray(mdp.gamma, dtype), jnp.asarray(policy)
    )
