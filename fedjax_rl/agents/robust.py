"""The robust term of the FedR* algorithms as one component that a base algorithm composes
(DESIGN.md, "The robust term on any actor-critic").

The base algorithm (DQN, DDPG, TD3, SAC) computes the next-state value V(s') it bootstraps
from and hands it over; the component returns the target and trains the expectile network::

    y   = r + gamma (1 - omega) V(s') + gamma omega D(s; psi)       V(s') = 0 on termination
    L_D = E l_tau(V(s'), D(s; psi))                                  expectile regression, same V(s')

It holds

  * its settings, declared once (`SETTINGS`: robust, omega, tau), which an agent puts first in its
    own, and the config methods that go with them (`RobustVariantConfig`);
  * the expectile network D(s; psi) (an MLP with the agent's hidden sizes), its loss and its
    gradient step with the agent's optimizer;
  * the robust TD target;
  * its leaves: psi is *shared* (the field `degree` of the agent's shared dataclass: the server
    averages it with the base networks), psi's optimizer state is *private* (the field
    `degree_opt` of the agent's private dataclass: it never leaves the agent).

What the `*Avg` baselines (robust=False) lack: an omega hyperparameter leaf, the D network and its
optimizer state (both fields hold None, an empty pytree, so their state is only the base
algorithm's), and the robust part of the target: omega = 0 and D = 0 give the ordinary TD target.

An agent composes it, and this is the whole contract (the field names are the component's)::

    SETTINGS = (*robust.SETTINGS, ...the base algorithm's settings...)
    Config = settings.config_class(..., base=<subclass of robust.RobustVariantConfig>)
    loss_names = (..., robust.LOSS_NAME);  loss_descriptions = {..., **robust.LOSS_DESCRIPTIONS}
    shared dataclass: a field `degree`;  private dataclass: a field `degree_opt`
    self.robust = robust.RobustTerm(config, optimizer)
    shared_leaves, private_leaves = self.robust.init(key, dummy_obs)     # {"degree": psi}, {"degree_opt": ...}
    y = self.robust.td_target(shared, batch, next_value, hp)             # next_value: V(s'), unmasked
    shared, private, degree_loss = self.robust.update(shared, private, batch, next_value, hp)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from fedjax_rl.core import losses
from fedjax_rl.agents import base
from fedjax_rl.agents.base import MLP, Transition
from fedjax_rl.core.settings import Hyperparams, Setting, interval

ROBUST = Setting("robust", True, kind=bool,
                 help="expectile network and omega term (set by the algorithm's name, not by hand)")
OMEGA = Setting("omega", 0.1, interval(0, 1, high_open=True), leaf=True,
                help="robustness level of the covering set", source="(our default)")
TAU = Setting("tau", 0.01, interval(0, 0.5, low_open=True, high_open=True), leaf=True,
              help="expectile level of the degree network D(s)", source="(paper)")
SETTINGS = (ROBUST, OMEGA, TAU)

LOSS_NAME = "degree_loss"
LOSS_DESCRIPTIONS = {LOSS_NAME: "expectile loss (degree_loss)"}


class RobustVariantConfig(base.OffPolicyConfig):
    """Config methods of an algorithm family with a robust variant (FedR*: expectile network and
    omega term) and averaging baselines (`*Avg`: omega = 0, no expectile network). Subclasses name the
    two: `ROBUST_NAME = "FedRDQN"`, `ROBUST_ALGO = "fedrdqn"`, `AVG_NAME = "DQNAvg"`."""

    ROBUST_NAME = ROBUST_ALGO = AVG_NAME = ""

    def check_together(self) -> None:
        super().check_together()
        if not self.robust and self.omega != 0.0:
            raise ValueError(
                f"omega must be 0 for {self.AVG_NAME} (robust=False: no expectile network), got {self.omega}; "
                f"{self.ROBUST_NAME} (algo {self.ROBUST_ALGO}) is the algorithm with omega > 0"
            )

    def hparams(self) -> Hyperparams:
        """The vmappable leaves: the settings declared `leaf=True`, as the pytree the compiled
        program takes (its caller, `loop.compile_programs`, makes it here, from the config,
        once). The `*Avg` baselines have no omega leaf (their target has no robustness term), so a
        sweep cannot silently change their discount."""
        leaves = {s.name: getattr(self, s.name) for s in self.SETTINGS
                  if s.leaf and (self.robust or s.name != OMEGA.name)}
        owner = self.ROBUST_NAME if self.robust else (
            f"{self.AVG_NAME} (omega is {self.ROBUST_NAME}'s; use algo {self.ROBUST_ALGO} to vary it)")
        return Hyperparams(leaves, owner)


def robust_td_target(
    reward: jax.Array,
    next_value: jax.Array,
    terminated: jax.Array,
    degree: jax.Array,
    gamma: float | jax.Array,
    omega: float | jax.Array,
) -> jax.Array:
    """y = r + gamma (1 - omega) V(s') + gamma omega D(s), with V(s') = 0 on termination.

    `next_value` is max_a' Q(s', a'; theta') (DQN) or Q(s', pi(s'; phi'); theta') (DDPG);
    `degree` is D(s; psi), not masked by termination (fedjax_rl/core/losses.py says why). omega = 0
    gives the ordinary TD target exactly.
    """
    bootstrap = losses.next_state_value(next_value, terminated)
    return reward + gamma * (1.0 - omega) * bootstrap + gamma * omega * degree


class RobustTerm:
    """The robust term of one agent (see the module docstring). `config` has the `SETTINGS` fields
    and `hidden_sizes`, and `init` where the agent declares it (else Flax's initialisation, so an
    agent that does not declare it composes the term too); `optimizer` is the one the agent
    trains its own networks with."""

    def __init__(self, config, optimizer):
        self.enabled = bool(config.robust)
        self.net = MLP(config.hidden_sizes, 1, getattr(config, "init", "flax"))
        self.optimizer = optimizer

    def init(self, key: jax.Array, dummy_obs: jax.Array) -> tuple[dict, dict]:
        """({"degree": psi}, {"degree_opt": psi's optimizer state}): the component's shared and
        private leaves, by field name, for the agent's dataclasses; None for the `*Avg` baselines.
        The agent splits `key` off whether or not it is used, so that omega = 0 `FedR*` and `*Avg`
        draw the same base networks."""
        if not self.enabled:
            return {"degree": None}, {"degree_opt": None}
        params = self.net.init(key, dummy_obs)
        return {"degree": params}, {"degree_opt": self.optimizer.init(params)}

    def degree(self, degree_params, obs: jax.Array) -> jax.Array:
        """D(s; psi) for a batch of observations."""
        return self.net.apply(degree_params, obs)[..., 0]

    def omega(self, hp: Hyperparams):
        return hp.omega if self.enabled else 0.0  # the *Avg baselines: the robust term vanishes

    def td_target(self, shared: Any, batch: Transition, next_value: jax.Array, hp: Hyperparams) -> jax.Array:
        """y = r + gamma (1 - omega) V(s') + gamma omega D(s; psi), V(s') = 0 on termination.
        `next_value` is the base algorithm's V(s') before the episode-end rule; for the `*Avg`
        baselines (omega = 0, D = 0) y is the ordinary TD target."""
        degree = self.degree(shared.degree, batch.obs) if self.enabled else jnp.zeros_like(next_value)
        return robust_td_target(batch.reward, next_value, batch.terminated, degree, hp.gamma, self.omega(hp))

    def loss(self, degree_params, batch: Transition, next_value: jax.Array, hp: Hyperparams) -> jax.Array:
        """L_D = E l_tau(V(s'), D(s; psi)), V(s') = 0 on termination."""
        target = losses.expectile_target(next_value, batch.terminated)
        return jnp.mean(losses.expectile_loss(target, self.degree(degree_params, batch.obs), hp.tau))

    def update(self, shared: Any, private: Any, batch: Transition, next_value: jax.Array, hp: Hyperparams):
        """One gradient step of psi toward the expectile of `next_value` (which must carry no
        gradient). Returns (shared, private, L_D); the `*Avg` baselines get their state back and a
        loss of 0."""
        if not self.enabled:
            return shared, private, jnp.float32(0.0)
        loss, grads = jax.value_and_grad(self.loss)(shared.degree, batch, next_value, hp)
        degree, degree_opt = base.apply_updates(self.optimizer, shared.degree, grads, private.degree_opt,
                                                hp.learning_rate)
        return shared.replace(degree=degree), private.replace(degree_opt=degree_opt), loss
