"""Per-agent physics: m_k = m (1 + n_k), n_k ~ Uniform(-p, p), and the robustness sweep grid.

DESIGN.md section 1. The sampler returns perturbation *rates* n_k; environments turn a rate into
parameters with `env.set_physics(params, name, value)`, which also recomputes derived fields
(CartPole's `total_mass`, ...). Keeping the rate separate lets the same draw be reported and reused.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_rl.envs.base import check_scales

PAPER_NUM_AGENTS = 5
PAPER_SYNC_EVERY = 100
PAPER_MAX_RATE = 0.5
SWEEP_MIN, SWEEP_MAX, SWEEP_NUM = 0.1, 1.9, 19


def check_max_rate(max_rate: float) -> None:
    """Refuse a perturbation rate p outside [0, 1) (ValueError)."""
    if not 0.0 <= float(max_rate) < 1.0:
        raise ValueError(f"max perturbation rate p must be in [0, 1), got {max_rate}")


def sample_rates(key: jax.Array, num_agents: int, max_rate: float | jax.Array) -> jax.Array:
    """n_k ~ Uniform(-p, p) for k = 1..K, shape [K]. `max_rate` may be traced (sweeps)."""
    return jax.random.uniform(key, (num_agents,), minval=-1.0, maxval=1.0) * max_rate


def perturb(nominal: float | jax.Array, rates: jax.Array) -> jax.Array:
    """m_k = m (1 + n_k)."""
    return nominal * (1.0 + rates)


def sweep_scales(num: int = SWEEP_NUM) -> np.ndarray:
    """Scales c in m' = c m for the robustness sweep: 0.1, 0.2, ..., 1.9 by default."""
    return np.linspace(SWEEP_MIN, SWEEP_MAX, num)


def agent_env_params(env, nominal_params, param_names, rates: jax.Array):
    """Batched env params [K]: each named physical parameter of agent k scaled by (1 + rates[k]).

    `param_names` is a tuple of names; `rates` has shape [K, len(param_names)] (one independent
    draw per parameter) or [K] for a single name.
    """
    rates = jnp.asarray(rates)
    if rates.ndim == 1:
        rates = rates[:, None]

    def one_agent(agent_rates):
        params = nominal_params
        for i, name in enumerate(param_names):
            nominal = env.get_physics(nominal_params, name)
            params = env.set_physics(params, name, perturb(nominal, agent_rates[i]))
        return params

    return jax.vmap(one_agent)(rates)


def scaled_env_params(env, nominal_params, param_names, scales: jax.Array):
    """Batched env params [len(scales)]: every named parameter set to c * nominal (the sweep).
    Concrete scales must be > 0 (checked here, before anything compiles)."""
    check_scales(scales)

    def one_scale(c):
        params = nominal_params
        for name in param_names:
            params = env.set_physics(params, name, c * env.get_physics(nominal_params, name))
        return params

    return jax.vmap(one_scale)(jnp.asarray(scales))
