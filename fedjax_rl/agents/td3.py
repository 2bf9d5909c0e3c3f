"""FedRTD3 and TD3Avg: TD3 (Fujimoto et al. 2018; SB3's TD3) with the robust term, for one agent. ::

    a~  = clip(pi(s'; phi') + clip(eps, -c, c), -1, 1),  eps ~ N(0, sigma~^2)   target policy smoothing
    V'  = min_j Q_j(s', a~; theta_j')                                             twin critics, clipped double Q
    y   = r + gamma (1 - omega) V' + gamma omega D(s; psi)      (V' = 0 on termination; truncation bootstraps)
    L_Q = sum_j E (Q_j(s, a; theta_j) - y)^2                    every gradient step (SB3's critic loss)
    L_D = E l_tau(V', D(s; psi))                                every gradient step (FedRTD3 only)
    L_pi = -E Q_1(s, pi(s; phi); theta_1)                       every `policy_delay`-th gradient step only,
    theta' <- eta theta + (1 - eta) theta', phi' likewise       against the just-updated critics, and then
                                                                the soft target updates (SB3's order)

TD3Avg is omega = 0 with no expectile network. The reported `actor_loss` is 0 on the gradient steps
without an actor step, so a block's mean is the actor loss times the fraction of steps that had one. TD3 is DDPG with three changes (twin critics,
smoothing, delay), so the agent is `DDPGAgent` with its target and its gradient step replaced;
acting (Gaussian exploration noise on the [-1, 1] action, uniform warm-up), the networks and the
replay are DDPG's. The robust term is the component in `agents/robust.py`: this module hands it V'.

What the server averages every E steps (`TD3Shared`): the critics theta and their targets theta',
the actor phi and its target phi', and D's psi (FedRTD3), as FedRDDPG does: every network that
enters the target or the policy, so that after a sync every agent bootstraps from the same
functions. What stays with the agent (`TD3Private`): the optimizer states, the replay buffer, and
the count of gradient steps that schedules the delay (every agent trains on the same schedule, so
the counts agree anyway; they are bookkeeping, not a model).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from fedjax_rl.core import losses, settings
from fedjax_rl.agents import base, ddpg, robust
from fedjax_rl.agents.base import Transition
from fedjax_rl.core.federated import FederatedState
from fedjax_rl.core.settings import Setting, at_least, interval

_SB3 = "(SB3 TD3 default)"

# DDPG's declarations (its RL-Zoo3 MuJoCo defaults), with twin critics and TD3's three settings after them.
SETTINGS = settings.amend(
    ddpg.SETTINGS,
    ddpg.NUM_CRITICS.with_default(2, "(TD3: twin critics)"),
    add=(
        Setting("policy_delay", 2, at_least(1), kind=int, source=_SB3,
                help="gradient steps per actor step and target update"),
        Setting("target_policy_noise", 0.2, interval(0, 10), leaf=True, source=_SB3,
                help="std of the target policy smoothing noise on the [-1, 1] action"),
        Setting("target_noise_clip", 0.5, interval(0, 10), leaf=True, source=_SB3,
                help="the smoothing noise is clipped to [-c, c]"),
    ),
)


class _TD3ConfigMethods(robust.RobustVariantConfig):
    ROBUST_NAME, ROBUST_ALGO, AVG_NAME = "FedRTD3", "fedrtd3", "TD3Avg"


TD3Config = settings.config_class("TD3Config", SETTINGS, base=_TD3ConfigMethods,
                                  doc="Hyperparameters of one TD3 agent (FedRTD3, TD3Avg).")


TD3Shared = ddpg.DDPGShared  # TD3 shares what DDPG shares: the same networks, field for field


@struct.dataclass
class TD3Private:
    """What stays with the agent: the optimizer states, the replay buffer and the count of gradient steps that
    schedules the delay."""

    critic_opt: Any
    actor_opt: Any
    degree_opt: Any  # the robust term's optimizer state; None without it
    buffer: Any
    updates: jax.Array  # gradient steps taken so far (schedules the delayed actor and target updates)


class TD3Agent(ddpg.DDPGAgent):
    """The FedRTD3/TD3Avg learning rule for one agent: DDPG's acting and networks, TD3's update."""

    def init(self, key: jax.Array) -> FederatedState:
        state = super().init(key)  # the same key use as DDPG: omega = 0 FedRTD3 and TD3Avg draw alike
        private = {f: getattr(state.private, f) for f in ("critic_opt", "actor_opt", "degree_opt", "buffer")}
        return FederatedState(shared=state.shared,
                              private=TD3Private(**private, updates=jnp.int32(0)))

    def smoothed_target_action(self, shared: TD3Shared, next_obs: jax.Array, noise: jax.Array, hp) -> jax.Array:
        """a~ = clip(pi(s'; phi') + clip(sigma~ noise, -c, c), -1, 1) for standard normal `noise`."""
        smoothing = jnp.clip(hp.target_policy_noise * noise, -hp.target_noise_clip, hp.target_noise_clip)
        return jnp.clip(self.actor(shared.actor_target, next_obs) + smoothing, -1.0, 1.0)

    def critic_target(self, shared: TD3Shared, batch: Transition, hp, noise: jax.Array):
        """(y, V'): the critic target and min_j Q_j(s', a~; theta_j') (before the episode-end rule),
        for the standard normal smoothing `noise`, shape `[batch, *action_shape]`."""
        next_action = self.smoothed_target_action(shared, batch.next_obs, noise, hp)
        next_value = losses.clipped_double_q(self.critics(shared.critic_target, batch.next_obs, next_action))
        target = self.robust.td_target(shared, batch, next_value, hp)
        return jax.lax.stop_gradient(target), jax.lax.stop_gradient(next_value)

    def update(self, state: FederatedState, batch: Transition, hp, noise: jax.Array):
        """One gradient step: critics (and D) always; on every `policy_delay`-th step the actor
        against the updated critics, then the soft target updates."""
        shared, private = state.shared, state.private
        target, next_value = self.critic_target(shared, batch, hp, noise)
        critic_loss, critic_grads = jax.value_and_grad(self.critic_loss)(shared.critic, batch, target)
        critic, critic_opt = base.apply_updates(self.optimizer, shared.critic, critic_grads, private.critic_opt,
                                                hp.learning_rate)
        shared, private, degree_loss = self.robust.update(shared, private, batch, next_value, hp)
        updates = private.updates + 1
        shared = shared.replace(critic=critic)
        private = private.replace(critic_opt=critic_opt, updates=updates)

        def delayed(shared, private):
            actor_loss, grads = jax.value_and_grad(self.actor_loss)(shared.actor, shared.critic, batch.obs)
            actor, actor_opt = base.apply_updates(self.optimizer, shared.actor, grads, private.actor_opt,
                                                  hp.learning_rate)
            eta = hp.target_update_rate
            shared = shared.replace(
                actor=actor,
                critic_target=optax.incremental_update(shared.critic, shared.critic_target, eta),
                actor_target=optax.incremental_update(actor, shared.actor_target, eta),
            )
            return shared, private.replace(actor_opt=actor_opt), actor_loss

        def skip(shared, private):
            return shared, private, jnp.float32(0.0)

        # SB3 counts its updates from 1 and steps the actor when the count is a multiple of the delay.
        shared, private, actor_loss = jax.lax.cond(updates % self.config.policy_delay == 0, delayed, skip,
                                                   shared, private)
        return FederatedState(shared=shared, private=private), (critic_loss, actor_loss, degree_loss)

    def gradient_step(self, state: FederatedState, key: jax.Array, hp):
        sample_key, noise_key = jax.random.split(key)
        batch = self.buffer.sample(state.private.buffer, sample_key).experience
        noise = jax.random.normal(noise_key, batch.action.shape)
        return self.update(state, batch, hp, noise)


# -- per-task defaults ----------------------------------------------------------------------------
# RL-Zoo3's TD3 settings per task ("steps": n_timesteps); the paper's batch 64 and replay 1e5 (the
# settings' defaults above) apply to every task, and SB3's policy_delay 2, target_policy_noise 0.2
# and target_noise_clip 0.5 (RL-Zoo3 keeps them). RL-Zoo3's td3.yml MuJoCo block (HalfCheetah, Ant,
# Hopper, Walker2d): learning_starts 10000, normal noise 0.1, train_freq 1, gradient_steps 1,
# learning_rate 1e-3, net_arch [400, 300], 1e6 steps (its batch 256 is replaced by the paper's 64),
# the block `agents/ddpg.py` uses too. Pendulum (td3.yml): gamma 0.98, learning_starts 10000, noise
# 0.1, learning_rate 1e-3, net_arch [400, 300], 20000 steps (its buffer 200000 is replaced by the
# paper's 1e5; its training once per 200-step episode with as many gradient steps is the same count
# of gradient steps as train_freq 1, gradient_steps 1, which we use).
_MUJOCO = dict(learning_starts=10_000, exploration_noise=0.1, learning_rate=1e-3, hidden_sizes=(400, 300),
               steps=1_000_000)
ZOO_TD3: dict[str, dict] = {
    "Pendulum-v1": dict(gamma=0.98, learning_starts=10_000, exploration_noise=0.1, learning_rate=1e-3,
                        hidden_sizes=(400, 300), steps=20_000),
    **{name: dict(_MUJOCO) for name in ("Hopper-v4", "HalfCheetah-v4", "Walker2d-v4", "Ant-v4")},
}


def task_defaults(env_name: str) -> dict:
    """RL-Zoo3's TD3 settings for `env_name`; a continuous task without an entry gets the settings'
    declared defaults and RL-Zoo3's MuJoCo budget."""
    return ZOO_TD3.get(env_name, dict(steps=ddpg.DEFAULT_STEPS))
