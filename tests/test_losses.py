"""Robust TD target and expectile loss against values worked by hand."""

import chex
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl.core import losses
from fedjax_rl.agents import robust

# Three transitions: an ordinary one, a terminated one (pole fell: V(s') = 0) and a time-limit
# truncation, which is not a termination and therefore bootstraps.
REWARD = jnp.array([1.0, 0.5, 2.0])
NEXT_VALUE = jnp.array([10.0, 4.0, 6.0])
TERMINATED = jnp.array([False, True, False])
DEGREE = jnp.array([3.0, 2.0, 5.0])
GAMMA, OMEGA, TAU = 0.9, 0.2, 0.01


def test_robust_td_target_by_hand():
    y = robust.robust_td_target(REWARD, NEXT_VALUE, TERMINATED, DEGREE, GAMMA, OMEGA)
    # y = r + gamma (1 - omega) V(s') + gamma omega D(s)
    expected = [
        1.0 + 0.9 * 0.8 * 10.0 + 0.9 * 0.2 * 3.0,  # 8.74
        0.5 + 0.0 + 0.9 * 0.2 * 2.0,  # 0.86: terminated, V(s') = 0
        2.0 + 0.9 * 0.8 * 6.0 + 0.9 * 0.2 * 5.0,  # 7.22: truncated bootstraps
    ]
    chex.assert_trees_all_close(y, jnp.array(expected), rtol=1e-6)
    chex.assert_trees_all_close(y, jnp.array([8.74, 0.86, 7.22]), rtol=1e-6)


def test_omega_zero_is_ordinary_td_target_exactly():
    y = robust.robust_td_target(REWARD, NEXT_VALUE, TERMINATED, DEGREE, GAMMA, 0.0)
    np.testing.assert_array_equal(y, REWARD + GAMMA * jnp.where(TERMINATED, 0.0, NEXT_VALUE))


def test_expectile_loss_weights_tau_above_and_one_minus_tau_below():
    target = losses.expectile_target(NEXT_VALUE, TERMINATED)  # [10, 0, 6]
    chex.assert_trees_all_close(target, jnp.array([10.0, 0.0, 6.0]))
    loss = losses.expectile_loss(target, DEGREE, TAU)
    # y - x = [7, -2, 1]: tau * 49, (1 - tau) * 4, tau * 1
    chex.assert_trees_all_close(loss, jnp.array([0.01 * 49, 0.99 * 4, 0.01 * 1]), rtol=1e-6)
    assert float(jnp.mean(loss)) == pytest.approx((0.49 + 3.96 + 0.01) / 3, rel=1e-6)


def test_expectile_minimiser_is_low_expectile():
    # The minimiser of mean l_tau(y_i, x) solves sum_i w_i (y_i - x) = 0 with w = tau above, 1 - tau below.
    y = jnp.array([0.0, 1.0, 2.0, 10.0])
    xs = jnp.linspace(-1, 11, 120001)
    objective = jnp.mean(losses.expectile_loss(y[None, :], xs[:, None], TAU), axis=1)
    x_star = float(xs[jnp.argmin(objective)])
    w = np.where(np.asarray(y) >= x_star, TAU, 1 - TAU)
    assert x_star == pytest.approx(float(np.sum(w * y) / np.sum(w)), abs=1e-3)
    assert x_star < float(jnp.mean(y))  # leans towards the minimum
    assert x_star < 0.2


def test_clipped_double_q_takes_minimum_over_critics():
    values = jnp.array([[1.0, 5.0, -2.0], [3.0, 4.0, -1.0]])
    chex.assert_trees_all_close(losses.clipped_double_q(values), jnp.array([1.0, 4.0, -2.0]))
