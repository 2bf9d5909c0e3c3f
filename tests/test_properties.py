"""Laws that hold for every input, checked with Hypothesis on drawn inputs (issue 33).

Each law is one jitted function of fixed shapes, so it compiles once however many examples are
drawn. The number of examples is a Hypothesis profile (tests/conftest.py): few and derandomized in
CI, more under `make mutation` (HYPOTHESIS_PROFILE=mutation).
"""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedjax_rl import envs
from fedjax_rl.core import agent_axis, aggregation, federated, losses, perturb
from fedjax_rl.agents import robust
from fedjax_rl.core.federated import FederatedState

BATCH, NUM_AGENTS = 8, 5


def floats32(low, high):
    return st.floats(float(np.float32(low)), float(np.float32(high)), width=32, allow_nan=False, allow_infinity=False)


def vectors(n, low=-100.0, high=100.0):
    return hnp.arrays(np.float32, (n,), elements=floats32(low, high))


# -- the robust TD target at omega = 0 is the TD target ------------------------------------------


@jax.jit
def _targets(reward, next_value, terminated, degree, gamma):
    target = robust.robust_td_target(reward, next_value, terminated, degree, gamma, 0.0)
    return target, reward + gamma * jnp.where(terminated, 0.0, next_value)


@given(vectors(BATCH), vectors(BATCH), hnp.arrays(np.bool_, (BATCH,)), vectors(BATCH), floats32(0.01, 1.0))
def test_robust_target_at_omega_zero_is_the_td_target(reward, next_value, terminated, degree, gamma):
    """Whatever D(s) says: at omega = 0 the target is r + gamma V(s'), V(s') = 0 on termination."""
    target, td = _targets(reward, next_value, terminated, degree, gamma)
    np.testing.assert_array_equal(target, td)


# -- the expectile loss is minimised at the tau-expectile ----------------------------------------


def tau_expectile(y: np.ndarray, tau: float) -> float:
    """The e with tau E[(y - e)+] = (1 - tau) E[(e - y)+] (float64 bisection; the left side minus
    the right decreases strictly in e)."""
    low, high = float(y.min()), float(y.max())
    for _ in range(200):
        e = 0.5 * (low + high)
        balance = tau * np.maximum(y - e, 0).sum() - (1 - tau) * np.maximum(e - y, 0).sum()
        low, high = (e, high) if balance > 0 else (low, e)
    return 0.5 * (low + high)


@jax.jit
def _expectile_losses(y, predictions, tau):
    """Mean loss of every candidate prediction, and its derivative."""
    mean_loss = lambda x: jnp.mean(losses.expectile_loss(y, x, tau))  # noqa: E731
    return jax.vmap(mean_loss)(predictions), jax.vmap(jax.grad(mean_loss))(predictions)


@given(vectors(16, -10.0, 10.0).filter(lambda y: np.ptp(y) > 0.1), st.floats(0.01, 0.49))
def test_expectile_loss_is_minimised_at_the_tau_expectile(y, tau):
    expectile = tau_expectile(y.astype(np.float64), tau)
    h = 0.05 * float(np.ptp(y))
    candidates = np.array([expectile - h, expectile, expectile + h], np.float32)
    loss, grad = _expectile_losses(y, candidates, np.float32(tau))
    # Strictly convex (curvature 2 E[weight] >= 2 tau): moving by h costs at least tau h^2.
    assert loss[1] + 0.5 * tau * h * h < min(loss[0], loss[2])
    assert grad[0] < 0 < grad[2]
    assert abs(grad[1]) < 1e-4 * (1 + np.abs(y).max())
    # tau < 1/2 leans towards the smallest targets: the minimiser is below the mean.
    assert expectile < y.astype(np.float64).mean()


# -- federated_mean with weights is the weighted mean --------------------------------------------


@jax.jit
def _weighted_mean(tree, weights):
    return agent_axis.for_each_agent(aggregation.federated_mean, NUM_AGENTS)(tree, weights)


@given(hnp.arrays(np.float32, (NUM_AGENTS, 3), elements=floats32(-100, 100)), vectors(NUM_AGENTS),
       hnp.arrays(np.float32, (NUM_AGENTS,), elements=floats32(0.0, 1.0)).filter(lambda w: w.sum() > 0.1))
def test_weighted_federated_mean_is_the_weighted_mean(w, b, weights):
    averaged = _weighted_mean({"w": w, "b": b}, weights)
    p = weights.astype(np.float64) / weights.astype(np.float64).sum()
    for name, leaf in {"w": w, "b": b}.items():
        expected = np.tensordot(p, leaf.astype(np.float64), axes=1)
        scale = 1 + np.abs(leaf).max()
        for k in range(NUM_AGENTS):  # every agent receives the same global value
            np.testing.assert_allclose(averaged[name][k], expected, rtol=0, atol=1e-5 * scale)


# -- the perturbation sampler keeps m_k within (1 - p, 1 + p) m ----------------------------------

CARTPOLE, CARTPOLE_NOMINAL = envs.make("CartPole-v1", ("length", "masscart"))


@jax.jit
def _perturbed(key, max_rate):
    rates = jnp.stack([perturb.sample_rates(k, NUM_AGENTS, max_rate) for k in jax.random.split(key)], -1)
    params = perturb.agent_env_params(CARTPOLE, CARTPOLE_NOMINAL, ("length", "masscart"), rates)
    return rates, jnp.stack([params.length, params.masscart], -1)


@given(st.integers(0, 2**31 - 1), st.floats(0.0, 0.99))
def test_perturbed_parameters_stay_within_the_rate(seed, max_rate):
    rates, values = _perturbed(jax.random.key(seed), np.float32(max_rate))
    p = np.float32(max_rate)
    nominal = np.array([CARTPOLE_NOMINAL.length, CARTPOLE_NOMINAL.masscart], np.float32)
    assert np.all(-p <= rates) and np.all(rates <= p)
    np.testing.assert_allclose(values, nominal * (1 + rates), rtol=1e-6)  # m_k = m (1 + n_k)
    ulp = np.spacing(nominal * (1 + p))
    assert np.all(values >= nominal * (1 - p) - ulp) and np.all(values <= nominal * (1 + p) + ulp)
    if max_rate == 0:
        np.testing.assert_array_equal(values, np.broadcast_to(nominal, values.shape))
    elif max_rate > 0.05:  # per agent and per parameter, a draw of its own
        assert len(np.unique(values[:, 0])) == NUM_AGENTS and not np.array_equal(rates[:, 0], rates[:, 1])


# -- a partial round with every weight one is a full round ---------------------------------------


def _local_step(state: FederatedState, x):
    # Agents diverge (the update depends on the agent index) and keep a private running sum.
    i = agent_axis.agent_index().astype(jnp.float32)
    shared = jax.tree.map(lambda leaf: leaf * 0.9 + x * (i + 1), state.shared)
    return FederatedState(shared=shared, private=state.private + x), x


@jax.jit
def _rounds(state, xs, weights):
    def full(s, x):
        return federated.federated_round(_local_step, s, x)

    def partial(s, x, w):
        return federated.federated_round(_local_step, s, x, weight=w)

    mapped_full = agent_axis.for_each_agent(full, NUM_AGENTS, in_axes=(0, None))
    mapped_partial = agent_axis.for_each_agent(partial, NUM_AGENTS, in_axes=(0, None, 0))
    return mapped_full(state, xs)[0], mapped_partial(state, xs, jnp.ones(NUM_AGENTS)), mapped_partial(state, xs, weights)


@given(hnp.arrays(np.float32, (NUM_AGENTS, 2), elements=floats32(-10, 10)), vectors(4, -1.0, 1.0),
       st.integers(0, NUM_AGENTS - 1))
def test_partial_round_with_every_weight_one_is_a_full_round(shared, xs, absent):
    state = FederatedState(shared={"theta": shared}, private=jnp.zeros(NUM_AGENTS))
    weights = np.ones(NUM_AGENTS, np.float32)
    weights[absent] = 0.0
    full, (all_ones, summary), (one_absent, _) = _rounds(state, xs, weights)
    jax.tree.map(np.testing.assert_array_equal, all_ones, full)
    np.testing.assert_array_equal(summary, np.broadcast_to(xs, (NUM_AGENTS, 4)))  # the local steps' outputs
    np.testing.assert_allclose(full.private, np.full(NUM_AGENTS, xs.astype(np.float64).sum()), rtol=1e-5, atol=1e-5)
    # Against the local steps worked out in float64: theta_k = 0.9^4 theta_k + sum_j 0.9^(3-j) x_j (k + 1).
    decay = 0.9 ** np.arange(3, -1, -1)
    local = 0.9**4 * shared.astype(np.float64) + (decay @ xs.astype(np.float64)) * np.arange(1, NUM_AGENTS + 1)[:, None]
    present = np.arange(NUM_AGENTS) != absent
    for averaged, expected in ((full, local.mean(0)), (one_absent, local[present].mean(0))):
        np.testing.assert_allclose(averaged.shared["theta"], np.broadcast_to(expected, (NUM_AGENTS, 2)),
                                   rtol=1e-5, atol=1e-5)
