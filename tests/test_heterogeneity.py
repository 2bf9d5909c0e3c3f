"""The per-agent perturbation sampler m_k = m (1 + n_k), n_k ~ U(-p, p), and the sweep grid."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl.core import perturb
from fedjax_rl.envs.classic_control import CartPole


def test_paper_defaults():
    assert perturb.PAPER_NUM_AGENTS == 5
    assert perturb.PAPER_SYNC_EVERY == 100
    assert perturb.PAPER_MAX_RATE == 0.5


@pytest.mark.parametrize("max_rate", [0.0, 0.1, 0.5, 0.9])
def test_rates_shape_and_range(max_rate):
    rates = perturb.sample_rates(jax.random.key(0), 5, max_rate)
    chex.assert_shape(rates, (5,))
    assert jnp.issubdtype(rates.dtype, jnp.floating)
    assert (np.abs(np.asarray(rates)) <= max_rate).all()
    if max_rate == 0.0:
        np.testing.assert_array_equal(rates, np.zeros(5))


def test_rates_are_uniform_on_the_interval():
    rates = np.asarray(perturb.sample_rates(jax.random.key(1), 20_000, 0.5))
    assert rates.min() >= -0.5 and rates.max() <= 0.5
    # Both ends are reached and the mass is spread evenly: U(-0.5, 0.5) has mean 0, variance 1/12,
    # and a fifth of its mass in each fifth of the interval (20k draws: s.e. of a bin ~ 0.0028).
    assert rates.min() < -0.499 and rates.max() > 0.499
    assert abs(rates.mean()) < 0.01
    assert rates.var() == pytest.approx(1 / 12, rel=0.03)
    counts, _ = np.histogram(rates, bins=5, range=(-0.5, 0.5))
    np.testing.assert_allclose(counts / len(rates), 0.2, atol=0.012)


def test_different_keys_differ_same_key_repeats():
    a = perturb.sample_rates(jax.random.key(0), 5, 0.5)
    b = perturb.sample_rates(jax.random.key(1), 5, 0.5)
    assert np.abs(np.asarray(a) - np.asarray(b)).min() > 0
    np.testing.assert_array_equal(a, perturb.sample_rates(jax.random.key(0), 5, 0.5))
    assert len(np.unique(np.asarray(a))) == 5  # agents differ from each other too


def test_max_rate_may_be_traced():
    """p is a numeric hyperparameter: a sweep over p is a vmap, and n_k scales with p."""
    max_rates = jnp.array([0.1, 0.5, 0.9])
    sample = jax.vmap(perturb.sample_rates, in_axes=(None, None, 0))
    rates = jax.jit(sample, static_argnums=1)(jax.random.key(2), 5, max_rates)
    chex.assert_shape(rates, (3, 5))
    unit = np.asarray(rates[0] / 0.1)
    np.testing.assert_allclose(rates / max_rates[:, None], np.broadcast_to(unit, (3, 5)), rtol=1e-5)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, float("nan")])
def test_check_max_rate_rejects(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        perturb.check_max_rate(bad)


@pytest.mark.parametrize("good", [0.0, 0.5, 0.999])
def test_check_max_rate_accepts(good):
    perturb.check_max_rate(good)


def test_perturb():
    np.testing.assert_allclose(
        perturb.perturb(2.0, jnp.array([-0.5, 0.0, 0.25])), [1.0, 2.0, 2.5]
    )


def test_sweep_grid_is_point_one_to_one_point_nine():
    scales = perturb.sweep_scales()
    chex.assert_shape(scales, (19,))
    np.testing.assert_allclose(scales, np.arange(1, 20) / 10, rtol=0, atol=1e-12)
    assert scales[0] == pytest.approx(0.1) and scales[-1] == pytest.approx(1.9)
    np.testing.assert_allclose(np.diff(scales), 0.1, atol=1e-12)


def test_agent_env_params_one_draw_per_parameter():
    env = CartPole()
    nominal = env.default_params
    rates = perturb.sample_rates(jax.random.key(3), 10, 0.5).reshape(5, 2)
    params = perturb.agent_env_params(env, nominal, ("length", "masscart"), rates)
    np.testing.assert_allclose(params.length, 0.5 * (1 + rates[:, 0]), rtol=1e-6)
    np.testing.assert_allclose(params.masscart, 1.0 * (1 + rates[:, 1]), rtol=1e-6)
    # Untouched physics is nominal for every agent.
    np.testing.assert_array_equal(params.gravity, np.full(5, np.float32(9.8)))
    # A single name takes rates of shape [K].
    single = perturb.agent_env_params(env, nominal, ("length",), rates[:, 0])
    np.testing.assert_array_equal(single.length, params.length)
    np.testing.assert_array_equal(single.masscart, np.ones(5, np.float32))


def test_scaled_env_params_is_c_times_nominal():
    env = CartPole()
    nominal = env.default_params
    scales = perturb.sweep_scales()
    params = perturb.scaled_env_params(env, nominal, ("length", "masscart"), scales)
    np.testing.assert_allclose(params.length, 0.5 * scales, rtol=1e-6)
    np.testing.assert_allclose(params.masscart, 1.0 * scales, rtol=1e-6)
    np.testing.assert_allclose(params.total_mass, scales + 0.1, rtol=1e-6)


@pytest.mark.parametrize("bad", [[1.0, 0.0], [-0.5], [0.5, np.nan]])
def test_scales_must_be_positive(bad):
    """c = 0 is the smallest bad scale: a massless pole is no physics to evaluate in."""
    with pytest.raises(ValueError, match="physics scale must be > 0"):
        perturb.scaled_env_params(CartPole(), CartPole().default_params, ("length",), np.asarray(bad))


def test_traced_scales_pass_unchecked():
    env = CartPole()
    lengths = jax.jit(lambda c: perturb.scaled_env_params(env, env.default_params, ("length",), c).length)(
        jnp.array([1e-3, 1.9]))
    np.testing.assert_allclose(lengths, [5e-4, 0.95], rtol=1e-6)
