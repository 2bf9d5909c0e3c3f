"""FedRSAC and SACAvg: soft actor-critic (Haarnoja et al. 2018; SB3's SAC) with the robust term,
for one agent. ::

    u ~ N(mu(s; phi), sigma(s; phi)^2),  a = tanh(u)              squashed Gaussian policy on [-1, 1]^d
    log pi(a|s) = log N(u; mu, sigma^2) - sum_i log(1 - tanh(u_i)^2)
    a' ~ pi(.|s'),  V' = min_j Q_j(s', a'; theta_j') - alpha log pi(a'|s')     soft next-state value
    y   = r + gamma (1 - omega) V' + gamma omega D(s; psi)      (V' = 0 on termination; truncation bootstraps)
    L_alpha = -E log(alpha) (log pi(a|s) + H_target),  a ~ pi(.|s),  H_target = -dim(A)
    L_Q = 1/2 sum_j E (Q_j(s, a; theta_j) - y)^2                (SB3's critic loss)
    L_D = E l_tau(V', D(s; psi))                                (FedRSAC only)
    L_pi = E [alpha log pi(a|s) - min_j Q_j(s, a; theta_j)],  a ~ pi(.|s), against the updated critics
    theta' <- eta theta + (1 - eta) theta'                       every gradient step (SB3's default)

SB3's order within a gradient step, kept here: sample a ~ pi(.|s) once; step log(alpha); the target
uses alpha from before that step; critics (and D); the actor with the same a; the critic targets.
SAC has no actor target. SACAvg is omega = 0 with no expectile network. The robust term is the
component in `agents/robust.py`: this module hands it the soft V', so D(s) estimates the worst
neighbour's *soft* value, consistently with what the critics bootstrap from.

What the server averages every E steps (`SACShared`): the actor phi, the critics theta and their
targets theta', D's psi (FedRSAC), and the temperature log(alpha). log(alpha) is averaged because
it is part of the target: V' = min Q' - alpha log pi, and averaging critics that were regressed
toward targets with different alphas would mix value functions of different entropy bonuses; a
shared alpha also keeps the global policy's entropy bonus one number. It is a single scalar, so
sharing it costs nothing. Averaging log(alpha) rather than alpha takes the geometric mean of the
agents' temperatures. What stays with the agent (`SACPrivate`): the optimizer states (the
temperature's included) and the replay buffer.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fedjax_rl.core import losses, settings
from fedjax_rl.agents import base, ddpg, robust
from fedjax_rl.agents.base import MLP, Transition
from fedjax_rl.core.federated import FederatedState
from fedjax_rl.core.settings import Setting

_SB3 = "(SB3 SAC default; RL-Zoo3 sac.yml MuJoCo keeps it)"
_ZOO = "(RL-Zoo3 sac.yml, MuJoCo)"

#: SB3's bounds on the policy's log standard deviation (LOG_STD_MIN, LOG_STD_MAX)
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

# DDPG's declarations with SB3 SAC's defaults; a stochastic policy explores without added noise.
SETTINGS = settings.amend(
    ddpg.SETTINGS,
    ddpg.NUM_CRITICS.with_default(2, "(SAC: twin critics)"),
    base.HIDDEN_SIZES.with_default((256, 256), _SB3),
    base.LEARNING_RATE.with_default(3e-4, _SB3),
    base.GAMMA.with_default(0.99, _SB3),
    base.LEARNING_STARTS.with_default(10_000, _ZOO),
    base.TRAIN_FREQ.with_default(1, _SB3),
    base.GRADIENT_STEPS.with_default(1, _SB3),
    base.TARGET_UPDATE_RATE.with_default(0.005, "(SB3 SAC tau)"),
    drop=("exploration_noise",),
    add=(Setting("initial_alpha", 1.0, settings.positive, source="(SB3 ent_coef='auto': starts at 1)",
                 help="the entropy temperature alpha at initialisation; then tuned toward the target entropy"),),
)


class _SACConfigMethods(robust.RobustVariantConfig):
    ROBUST_NAME, ROBUST_ALGO, AVG_NAME = "FedRSAC", "fedrsac", "SACAvg"


SACConfig = settings.config_class("SACConfig", SETTINGS, base=_SACConfigMethods,
                                  doc="Hyperparameters of one SAC agent (FedRSAC, SACAvg).")


@struct.dataclass
class SACShared:
    """What the server averages: the actor, the critics, their targets, log(alpha) and the robust term's D."""

    critic: Any  # [num_critics, ...] stacked parameters
    critic_target: Any
    actor: Any  # outputs (mu, log sigma) of the pre-squash Gaussian
    log_alpha: jax.Array  # the entropy temperature, log(alpha)
    degree: Any  # the robust term's expectile network D(s; psi); None without it


@struct.dataclass
class SACPrivate:
    """What stays with the agent: the optimizer states (the temperature's and D's included) and the replay
    buffer."""

    critic_opt: Any
    actor_opt: Any
    alpha_opt: Any
    degree_opt: Any  # the robust term's optimizer state; None without it
    buffer: Any


def squashed_gaussian(mean: jax.Array, log_std: jax.Array, noise: jax.Array):
    """(a, log pi(a|s)) for a = tanh(mean + exp(log_std) noise), summed over the last axis.

    The change of variables subtracts log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), the
    exact form that stays finite where tanh(u) rounds to +-1 (SB3 adds 1e-6 inside the log instead)."""
    u = mean + jnp.exp(log_std) * noise
    gaussian = -0.5 * jnp.square(noise) - log_std - 0.5 * jnp.log(2.0 * jnp.pi)
    log_det = 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.tanh(u), jnp.sum(gaussian - log_det, axis=-1)


class SACAgent:
    """The FedRSAC/SACAvg learning rule for one agent, with static shapes closed over."""

    loss_names = ("critic_loss", "actor_loss", "alpha_loss", robust.LOSS_NAME)
    loss_descriptions = {"critic_loss": "Q loss (critic_loss)", "actor_loss": "actor loss (actor_loss)",
                         "alpha_loss": "temperature loss (alpha_loss)", **robust.LOSS_DESCRIPTIONS}
    check_env = staticmethod(ddpg.DDPGAgent.check_env)  # a bounded Box, as DDPG needs
    # Eigen: 7% more agent-steps per CPU-second for SACAvg on Hopper (400-300 networks, batch 64),
    # side by side; its forward products at 256-256 run 1.46x faster (benchmarks/README.md).
    CPU_DOTS = "eigen"

    def __init__(self, config, obs_shape: tuple[int, ...], action_space, total_steps: int):
        config.validate()
        self.check_env("this environment", action_space)
        self.config = config
        self.obs_shape = tuple(obs_shape)
        self.action_shape = tuple(action_space.shape)
        self.action_low = np.broadcast_to(np.asarray(action_space.low, np.float32), self.action_shape)
        self.action_high = np.broadcast_to(np.asarray(action_space.high, np.float32), self.action_shape)
        self.total_steps = int(total_steps)
        self.action_size = int(np.prod(self.action_shape))
        self.target_entropy = -float(self.action_size)  # SB3's 'auto': -dim(A)
        # SB3's actor: ReLU layers, then linear mean and log-std heads (one Dense with both outputs:
        # the same fan-in, so `init=torch` draws both heads as PyTorch would).
        self.actor_net = MLP(config.hidden_sizes, 2 * self.action_size, config.init)
        self.critic_net = MLP(config.hidden_sizes, 1, config.init)
        self.optimizer = base.adam()  # SB3's SAC: Adam for actor, critics and temperature, one rate
        self.robust = robust.RobustTerm(config, self.optimizer)
        self.buffer = base.item_buffer(config)

    def hparams(self) -> settings.Hyperparams:
        return self.config.hparams()

    # -- networks ----------------------------------------------------------------------------

    def policy(self, actor_params, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(mean, log_std) of the pre-squash Gaussian, flat over the action, log_std clipped."""
        out = self.actor_net.apply(actor_params, obs)
        mean, log_std = out[..., : self.action_size], out[..., self.action_size:]
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, actor_params, obs: jax.Array, noise: jax.Array):
        """(a, log pi(a|s)) for standard normal `noise` [..., action_size]; a is flat, in [-1, 1]."""
        return squashed_gaussian(*self.policy(actor_params, obs), noise)

    def critics(self, critic_params, obs: jax.Array, flat_action: jax.Array) -> jax.Array:
        """Q_j(s, a; theta_j) for every critic: [num_critics, ...batch]."""
        x = jnp.concatenate([obs, flat_action], axis=-1)
        return jax.vmap(lambda p: self.critic_net.apply(p, x)[..., 0])(critic_params)

    def to_env_action(self, flat_normalised: jax.Array) -> jax.Array:
        """[-1, 1]^d (flat) -> the env's Box [low, high] (affine)."""
        normalised = flat_normalised.reshape(flat_normalised.shape[:-1] + self.action_shape)
        return self.action_low + (normalised + 1.0) * 0.5 * (self.action_high - self.action_low)

    def noise(self, key: jax.Array, batch_shape: tuple[int, ...] = ()) -> jax.Array:
        return jax.random.normal(key, batch_shape + (self.action_size,))

    # -- state -------------------------------------------------------------------------------

    def init(self, key: jax.Array) -> FederatedState:
        actor_key, critic_key, degree_key = jax.random.split(key, 3)
        dummy_obs = jnp.zeros(self.obs_shape)
        dummy_action = jnp.zeros(self.action_size)
        actor = self.actor_net.init(actor_key, dummy_obs)
        critic = jax.vmap(lambda k: self.critic_net.init(k, jnp.concatenate([dummy_obs, dummy_action])))(
            jax.random.split(critic_key, self.config.num_critics))
        log_alpha = jnp.log(jnp.float32(self.config.initial_alpha))
        # Split whether or not the robust term uses it: omega = 0 FedRSAC and SACAvg draw alike.
        robust_shared, robust_private = self.robust.init(degree_key, dummy_obs)
        dummy = Transition(obs=dummy_obs, action=dummy_action, reward=jnp.float32(0.0), next_obs=dummy_obs,
                           terminated=jnp.bool_(False))
        return FederatedState(
            shared=SACShared(critic=critic, critic_target=critic, actor=actor, log_alpha=log_alpha, **robust_shared),
            private=SACPrivate(critic_opt=self.optimizer.init(critic), actor_opt=self.optimizer.init(actor),
                               alpha_opt=self.optimizer.init(log_alpha), buffer=self.buffer.init(dummy),
                               **robust_private),
        )

    # -- acting ------------------------------------------------------------------------------

    def greedy_action(self, shared: SACShared, obs: jax.Array) -> jax.Array:
        """The deterministic policy tanh(mu(s)) (SB3's `deterministic=True`)."""
        return self.to_env_action(jnp.tanh(self.policy(shared.actor, obs)[0]))

    def act(self, shared: SACShared, obs: jax.Array, key: jax.Array, step: jax.Array, hp=None) -> jax.Array:
        """A sample of the policy, flat in [-1, 1]^d (what the buffer stores); uniform on [-1, 1]^d
        during the first `learning_starts` steps (SB3's warm-up; SAC has no action noise to add)."""
        policy_key, warmup_key = jax.random.split(key)
        action, _ = self.sample(shared.actor, obs, self.noise(policy_key))
        warmup = jax.random.uniform(warmup_key, (self.action_size,), minval=-1.0, maxval=1.0)
        return jnp.where(base.is_warmup(self.config, step), warmup, action)

    def env_action(self, action: jax.Array) -> jax.Array:
        return self.to_env_action(action)

    def observe(self, state: FederatedState, transition: Transition) -> FederatedState:
        buffer = self.buffer.add(state.private.buffer, transition)
        return state.replace(private=state.private.replace(buffer=buffer))

    # -- learning ----------------------------------------------------------------------------

    def alpha_loss(self, log_alpha, log_prob: jax.Array) -> jax.Array:
        """L_alpha = -E log(alpha) (log pi(a|s) + H_target): raises alpha while the entropy is below
        the target, lowers it above."""
        return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + self.target_entropy))

    def critic_target(self, shared: SACShared, batch: Transition, hp, alpha, next_noise: jax.Array):
        """(y, V'): the critic target and the soft value `min_j Q_j(s', a'; theta_j') - alpha log pi(a'|s')`,
        a' = the policy's sample for standard normal `next_noise` (before the episode-end rule)."""
        next_action, next_log_prob = self.sample(shared.actor, batch.next_obs, next_noise)
        next_q = losses.clipped_double_q(self.critics(shared.critic_target, batch.next_obs, next_action))
        next_value = next_q - alpha * next_log_prob
        target = self.robust.td_target(shared, batch, next_value, hp)
        return jax.lax.stop_gradient(target), jax.lax.stop_gradient(next_value)

    def critic_loss(self, critic_params, batch: Transition, target: jax.Array) -> jax.Array:
        q = self.critics(critic_params, batch.obs, batch.action)  # [n, batch]
        return 0.5 * jnp.sum(jax.vmap(lambda qi: losses.mean_squared_td(qi, target))(q))

    def actor_loss(self, actor_params, critic_params, obs: jax.Array, alpha, noise: jax.Array) -> jax.Array:
        action, log_prob = self.sample(actor_params, obs, noise)
        return jnp.mean(alpha * log_prob - losses.clipped_double_q(self.critics(critic_params, obs, action)))

    def update(self, state: FederatedState, batch: Transition, hp, noise: jax.Array, next_noise: jax.Array):
        """One gradient step on `batch` in SB3's order (module docstring); `noise` draws a ~ pi(.|s),
        `next_noise` a' ~ pi(.|s')."""
        shared, private = state.shared, state.private
        _, log_prob = self.sample(shared.actor, batch.obs, noise)
        alpha = jnp.exp(shared.log_alpha)  # the temperature before its own step, for this whole step
        alpha_loss, alpha_grad = jax.value_and_grad(self.alpha_loss)(shared.log_alpha, log_prob)
        log_alpha, alpha_opt = base.apply_updates(self.optimizer, shared.log_alpha, alpha_grad, private.alpha_opt,
                                                  hp.learning_rate)
        target, next_value = self.critic_target(shared, batch, hp, alpha, next_noise)
        critic_loss, critic_grads = jax.value_and_grad(self.critic_loss)(shared.critic, batch, target)
        critic, critic_opt = base.apply_updates(self.optimizer, shared.critic, critic_grads, private.critic_opt,
                                                hp.learning_rate)
        shared, private, degree_loss = self.robust.update(shared, private, batch, next_value, hp)
        actor_loss, actor_grads = jax.value_and_grad(self.actor_loss)(shared.actor, critic, batch.obs, alpha, noise)
        actor, actor_opt = base.apply_updates(self.optimizer, shared.actor, actor_grads, private.actor_opt,
                                              hp.learning_rate)
        critic_target = optax.incremental_update(critic, shared.critic_target, hp.target_update_rate)
        shared = shared.replace(critic=critic, critic_target=critic_target, actor=actor, log_alpha=log_alpha)
        private = private.replace(critic_opt=critic_opt, actor_opt=actor_opt, alpha_opt=alpha_opt)
        return FederatedState(shared=shared, private=private), (critic_loss, actor_loss, alpha_loss, degree_loss)

    def gradient_step(self, state: FederatedState, key: jax.Array, hp):
        sample_key, noise_key, next_noise_key = jax.random.split(key, 3)
        batch = self.buffer.sample(state.private.buffer, sample_key).experience
        noise, next_noise = (self.noise(k, batch.reward.shape) for k in (noise_key, next_noise_key))
        return self.update(state, batch, hp, noise, next_noise)

    def learn(self, state: FederatedState, key: jax.Array, step: jax.Array, hp):
        """Called after every environment step `step` (1-based): trains on schedule."""
        return base.train_on_schedule(
            self.config, lambda s, k: self.gradient_step(s, k, hp), state, key, step, self.loss_names
        )


# -- per-task defaults ----------------------------------------------------------------------------
# RL-Zoo3's SAC settings per task ("steps": n_timesteps), over SB3's SAC defaults (net_arch
# [256, 256], learning_rate 3e-4, gamma 0.99, tau 0.005, train_freq 1, gradient_steps 1, ent_coef
# 'auto' starting at 1 with target entropy -dim(A), learning_starts 100); the paper's batch 64 and
# replay 1e5 replace SB3's 256 and 1e6 for every task. RL-Zoo3's sac.yml MuJoCo block
# (`mujoco-defaults`: HalfCheetah, Ant, Hopper, Walker2d): learning_starts 10000, 1e6 steps, the
# rest SB3's. Pendulum-v1 (sac.yml): learning_rate 1e-3, 20000 steps, the rest SB3's (so
# learning_starts 100).
_MUJOCO = dict(learning_starts=10_000, steps=1_000_000)
ZOO_SAC: dict[str, dict] = {
    "Pendulum-v1": dict(learning_rate=1e-3, learning_starts=100, steps=20_000),
    **{name: dict(_MUJOCO) for name in ("Hopper-v4", "HalfCheetah-v4", "Walker2d-v4", "Ant-v4")},
}


def task_defaults(env_name: str) -> dict:
    """RL-Zoo3's SAC settings for `env_name`; a continuous task without an entry gets the settings'
    declared defaults and RL-Zoo3's MuJoCo budget."""
    return ZOO_SAC.get(env_name, dict(steps=ddpg.DEFAULT_STEPS))
