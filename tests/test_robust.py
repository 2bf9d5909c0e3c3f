"""The robust term as a component (agents/robust.py), composed into a base algorithm that is
neither DQN nor DDPG: a toy agent's config built from the component's settings, a V(s') handed
over, the target and the expectile step against float64 numpy; the *Avg side has no leaves."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from fedjax_rl.core import settings
from fedjax_rl.agents import base, robust
from fedjax_rl.agents.base import Transition
from references import numpy_mlp

class _ToyConfigMethods(robust.RobustVariantConfig):
    ROBUST_NAME, ROBUST_ALGO, AVG_NAME = "FedRToy", "fedrtoy", "ToyAvg"


ToyConfig = settings.config_class(
    "ToyConfig", (*robust.SETTINGS, base.HIDDEN_SIZES.with_default((4,)), base.GAMMA.with_default(0.9),
                  base.LEARNING_RATE.with_default(0.1), base.BATCH_SIZE.with_default(3), base.BUFFER_SIZE),
    base=_ToyConfigMethods)


@struct.dataclass
class ToyShared:
    critic: jax.Array
    degree: object  # the component's field


@struct.dataclass
class ToyPrivate:
    degree_opt: object  # the component's field


OBS = jax.random.normal(jax.random.key(3), (3, 2))
BATCH = Transition(obs=OBS, action=jnp.zeros(3), reward=jnp.array([1.0, -0.5, 0.25]), next_obs=OBS,
                   terminated=jnp.array([False, True, False]))  # ordinary, terminated, truncated (bootstraps)
NEXT_VALUE = jnp.array([2.0, 7.0, -1.0])  # V(s') as some base algorithm computes it


def _compose(robust_flag, omega):
    config = ToyConfig(robust=robust_flag, omega=omega)
    config.validate()
    term = robust.RobustTerm(config, base.adam())
    shared_leaves, private_leaves = term.init(jax.random.key(1), jnp.zeros(2))
    return config, term, ToyShared(critic=jnp.ones(2), **shared_leaves), ToyPrivate(**private_leaves)


def test_target_and_expectile_step_of_a_composed_robust_term():
    config, term, shared, private = _compose(True, 0.3)
    hp = config.hparams()
    d = numpy_mlp(shared.degree, np.asarray(OBS, np.float64))[:, 0]
    v = np.where([False, True, False], 0.0, np.asarray(NEXT_VALUE, np.float64))
    np.testing.assert_allclose(term.td_target(shared, BATCH, NEXT_VALUE, hp),
                               [1.0, -0.5, 0.25] + 0.9 * 0.7 * v + 0.9 * 0.3 * d, rtol=1e-5, atol=1e-6)
    diff = v - d
    expected_loss = np.mean(np.where(diff >= 0, 0.01, 0.99) * diff**2)
    new_shared, new_private, loss = jax.jit(term.update)(shared, private, BATCH, NEXT_VALUE, hp)
    assert float(loss) == pytest.approx(expected_loss, rel=1e-5)
    # Only psi (shared) and its optimizer state (private) move; the base algorithm's leaves do not.
    np.testing.assert_array_equal(new_shared.critic, shared.critic)
    assert float(term.loss(new_shared.degree, BATCH, NEXT_VALUE, hp)) < float(loss)
    assert int(jax.tree.leaves(new_private.degree_opt)[0]) == 1  # Adam's step count


def test_the_avg_baseline_has_no_omega_leaf_no_network_and_the_plain_target():
    config, term, shared, private = _compose(False, 0.0)
    assert shared.degree is None and private.degree_opt is None
    assert jax.tree.leaves(shared) == [shared.critic] and jax.tree.leaves(private) == []
    hp = config.hparams()
    assert "omega" not in hp.names() and "tau" in hp.names()
    np.testing.assert_array_equal(term.td_target(shared, BATCH, NEXT_VALUE, hp),
                                  BATCH.reward + 0.9 * jnp.where(BATCH.terminated, 0.0, NEXT_VALUE))
    new_shared, new_private, loss = term.update(shared, private, BATCH, NEXT_VALUE, hp)
    chex.assert_trees_all_equal((new_shared, new_private, loss), (shared, private, jnp.float32(0.0)))
    with pytest.raises(ValueError, match=r"omega must be 0 for ToyAvg .* FedRToy \(algo fedrtoy\)"):
        ToyConfig(robust=False, omega=0.1).validate()
