"""FedRDQN-min: FedRDQN whose covering-set value never exceeds the sampled next state's.

FedRDQN's robust target mixes the sampled next-state value V(s') with D(s), a low expectile of
V(s') over the next states seen from s (the covering set's pessimistic value)::

    y = r + gamma (1 - omega) V(s') + gamma omega D(s)

D(s) is a regression: where the sampled V(s') is already below it, the target still credits the
covering set with D(s). FedRDQN-min takes the smaller of the two on such transitions, with a
`pessimism` kappa in [0, 1] blending the two forms::

    C(s, s') = kappa min(V(s'), D(s)) + (1 - kappa) D(s)
    y        = r + gamma (1 - omega) V(s') + gamma omega C(s, s')

kappa = 0 is FedRDQN exactly; kappa = 1 (the default) never values the covering set above the
next state actually reached. D(s) is trained as in FedRDQN (expectile regression on V(s')).

The whole algorithm is the three pieces below: a robust term with another target, a DQN agent
that composes it, and the settings (FedRDQN's plus `pessimism`, a vmappable leaf); `ALGORITHM`
registers them under the entry point `fedrdqn_min` (pyproject.toml).
"""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_rl import agents
from fedjax_rl.agents import dqn, robust
from fedjax_rl.core import losses, settings
from fedjax_rl.core.settings import Setting, interval

PESSIMISM = Setting("pessimism", 1.0, interval(0, 1), leaf=True, source="(FedRDQN-min)",
                    help="kappa: the covering-set value is kappa min(V(s'), D(s)) + (1 - kappa) D(s); "
                         "0 is FedRDQN")

SETTINGS = settings.amend(dqn.SETTINGS, add=(PESSIMISM,))


class MinConfigMethods(robust.RobustVariantConfig):
    ROBUST_NAME, ROBUST_ALGO, AVG_NAME = "FedRDQN-min", "fedrdqn_min", "DQNAvg"


MinDQNConfig = settings.config_class("MinDQNConfig", SETTINGS, base=MinConfigMethods,
                                     doc="Hyperparameters of one FedRDQN-min agent.")


def covering_value(next_value, terminated, degree, pessimism):
    """C(s, s') = kappa min(V(s'), D(s)) + (1 - kappa) D(s), V(s') = 0 on termination."""
    bootstrap = losses.next_state_value(next_value, terminated)
    return pessimism * jnp.minimum(bootstrap, degree) + (1.0 - pessimism) * degree


class MinRobustTerm(robust.RobustTerm):
    """FedRDQN's robust term with C(s, s') in the target in place of D(s); D's training unchanged."""

    def td_target(self, shared, batch, next_value, hp):
        if not self.enabled:
            return super().td_target(shared, batch, next_value, hp)
        degree = self.degree(shared.degree, batch.obs)
        covering = covering_value(next_value, batch.terminated, degree, hp.pessimism)
        return robust.robust_td_target(batch.reward, next_value, batch.terminated, covering, hp.gamma, hp.omega)


class MinDQNAgent(dqn.DQNAgent):
    """A DQN agent composing `MinRobustTerm`: everything else (networks, replay, exploration) is DQN's."""

    def __init__(self, config, obs_shape, action_space, total_steps):
        super().__init__(config, obs_shape, action_space, total_steps)
        self.robust = MinRobustTerm(config, self.optimizer)


ALGORITHM = agents.Algorithm(
    "fedrdqn_min", "FedRDQN-min", MinDQNAgent, MinDQNConfig, fixed=dict(robust=True), defaults={},
    task_defaults=dqn.task_defaults, family="FedRDQN-min")
