"""FedRDDPG, DDPGAvg(1) and DDPGAvg(2): one agent's learning rule (DESIGN.md section 1).

    a'  = pi(s'; phi')                                         target actor
    V'  = min_i Q_i(s', a'; theta_i')                          one critic: Q'(s', a'); two: clipped double Q
    y   = r + gamma (1 - omega) V' + gamma omega D(s; psi)     (V' = 0 on termination; truncation bootstraps)
    L_Q = sum_i E (Q_i(s, a; theta_i) - y)^2                   (SB3's TD3/DDPG critic loss)
    L_D = E l_tau(V', D(s; psi))                               expectile regression (FedRDDPG only)
    L_pi = -E Q_1(s, pi(s; phi); theta_1)                      actor, after the critic step
    theta' <- eta theta + (1 - eta) theta',  phi' likewise     after every gradient step (eta = 0.005)

DDPGAvg(1) is omega = 0 with one critic and no expectile network; DDPGAvg(2) the same with two
critics. The number of critics is a setting of every variant (`num_critics`). The robust term
(omega, tau, D, L_D and the target y) is the component in `agents/robust.py`: this module hands it
V' and gets y back. Everything here is
for *one* agent; `training/program.py` maps it over the agent axis and averages `shared` (theta, theta', psi,
phi, phi') every E steps. `private` (optimizer states, replay buffer) never leaves the agent.

Actions: the actor's tanh output lives in [-1, 1]^d; exploration adds N(0, sigma^2) there and clips
(SB3's NormalActionNoise on the rescaled action), the buffer stores that normalised action, and the
environment receives it mapped affinely onto the env's Box [low, high]. During the first
`learning_starts` steps the actor is replaced by a uniform draw on [-1, 1]^d, noised and clipped
the same way (SB3's warm-up: it adds its action noise to the random actions too).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from gymnax.environments import spaces

from fedjax_rl.core import losses, settings
from fedjax_rl.agents import base, robust
from fedjax_rl.agents.base import MLP, Transition
from fedjax_rl.core.federated import FederatedState
from fedjax_rl.core.settings import Setting, at_least, interval

_PAPER = "(paper)"
_ZOO = "(RL-Zoo3 ddpg.yml/td3.yml, MuJoCo)"

NUM_CRITICS = Setting("num_critics", 1, at_least(1), kind=int,
                      help="critics; the target takes the minimum of the target critics (2: clipped double Q)",
                      source="(paper: 1 for FedRDDPG and DDPGAvg(1), 2 for DDPGAvg(2))")

# The off-policy actor-critic agents' declarations: TD3 and SAC amend these (`settings.amend`).
SETTINGS = (
    *robust.SETTINGS,
    NUM_CRITICS,
    base.HIDDEN_SIZES.with_default((400, 300), _ZOO),
    base.INIT,
    base.AGENT_REVISION,
    base.LEARNING_RATE.with_default(1e-3, _ZOO),
    base.GAMMA.with_default(0.99, "(SB3 default; RL-Zoo3 MuJoCo keeps it)"),
    base.BATCH_SIZE.with_default(64, _PAPER),
    base.BUFFER_SIZE.with_default(100_000, _PAPER),
    base.LEARNING_STARTS.with_default(10_000, _ZOO),
    base.TRAIN_FREQ.with_default(1, _ZOO),
    base.GRADIENT_STEPS.with_default(1, _ZOO),
    base.TARGET_UPDATE_RATE.with_default(0.005, "(SB3 DDPG/TD3 tau)"),
    Setting("exploration_noise", 0.1, interval(0, 10), leaf=True, source=_ZOO,
            help="std of the Gaussian exploration noise on the action rescaled to [-1, 1]"),
)


class _DDPGConfigMethods(robust.RobustVariantConfig):
    ROBUST_NAME, ROBUST_ALGO, AVG_NAME = "FedRDDPG", "fedrddpg", "DDPGAvg"


DDPGConfig = settings.config_class("DDPGConfig", SETTINGS, base=_DDPGConfigMethods,
                                   doc="Hyperparameters of one DDPG agent (FedRDDPG, DDPGAvg(1), DDPGAvg(2)).")


@struct.dataclass
class DDPGShared:
    """What the server averages: the critics, the actor, both targets and the robust term's D (None for
    DDPGAvg)."""

    critic: Any  # [num_critics, ...] stacked parameters
    critic_target: Any
    actor: Any
    actor_target: Any
    degree: Any  # the robust term's expectile network D(s; psi); None without it


@struct.dataclass
class DDPGPrivate:
    """What stays with the agent: the optimizer states (D's included) and the replay buffer."""

    critic_opt: Any
    actor_opt: Any
    degree_opt: Any  # the robust term's optimizer state; None without it
    buffer: Any


class DDPGAgent:
    """The FedRDDPG/DDPGAvg learning rule for one agent, with static shapes closed over."""

    loss_names = ("critic_loss", "actor_loss", robust.LOSS_NAME)
    loss_descriptions = {"critic_loss": "Q loss (critic_loss)", "actor_loss": "actor loss (actor_loss)",
                         **robust.LOSS_DESCRIPTIONS}
    # Eigen: 2-7% more agent-steps per CPU-second for DDPGAvg(1) and FedRDDPG (400-300 networks,
    # batch 64) on Hopper and Ant, side by side on a 2-core AVX-512 EPYC (benchmarks/README.md,
    # "Matrix products on a CPU"); TD3 inherits it.
    CPU_DOTS = "eigen"

    def __init__(self, config, obs_shape: tuple[int, ...], action_space, total_steps: int):
        config.validate()
        self.check_env("this environment", action_space)
        self.config = config
        self.obs_shape = tuple(obs_shape)
        self.action_shape = tuple(action_space.shape)
        low = np.broadcast_to(np.asarray(action_space.low, np.float32), self.action_shape)
        high = np.broadcast_to(np.asarray(action_space.high, np.float32), self.action_shape)
        self.action_low, self.action_high = low, high
        self.total_steps = int(total_steps)
        action_size = int(np.prod(self.action_shape))
        self.actor_net = MLP(config.hidden_sizes, action_size, config.init)
        self.critic_net = MLP(config.hidden_sizes, 1, config.init)
        self.optimizer = base.adam()  # SB3's DDPG/TD3: Adam, no gradient clipping
        self.robust = robust.RobustTerm(config, self.optimizer)
        self.buffer = base.item_buffer(config)

    @staticmethod
    def check_env(env_name: str, action_space) -> None:
        if not isinstance(action_space, spaces.Box):
            raise ValueError(f"the actor-critics (DDPG, TD3, SAC) need continuous (Box) actions; {env_name} has "
                             f"{type(action_space).__name__} actions (use fedrdqn or dqnavg)")
        low, high = np.asarray(action_space.low), np.asarray(action_space.high)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
            raise ValueError(f"the actor-critics (DDPG, TD3, SAC) need a bounded action Box; {env_name} has "
                             f"low={low}, high={high}")

    def hparams(self) -> settings.Hyperparams:
        return self.config.hparams()

    # -- networks ----------------------------------------------------------------------------

    def actor(self, actor_params, obs: jax.Array) -> jax.Array:
        """pi(s; phi) in [-1, 1]^d (normalised action)."""
        out = jnp.tanh(self.actor_net.apply(actor_params, obs))
        return out.reshape(out.shape[:-1] + self.action_shape)

    def critics(self, critic_params, obs: jax.Array, action: jax.Array) -> jax.Array:
        """Q_i(s, a; theta_i) for every critic: [num_critics, ...batch]."""
        flat_action = action.reshape(action.shape[: action.ndim - len(self.action_shape)] + (-1,))
        x = jnp.concatenate([obs, flat_action], axis=-1)
        return jax.vmap(lambda p: self.critic_net.apply(p, x)[..., 0])(critic_params)

    def to_env_action(self, normalised: jax.Array) -> jax.Array:
        """[-1, 1]^d -> the env's Box [low, high] (affine)."""
        return self.action_low + (normalised + 1.0) * 0.5 * (self.action_high - self.action_low)

    # -- state -------------------------------------------------------------------------------

    def init(self, key: jax.Array) -> FederatedState:
        actor_key, critic_key, degree_key = jax.random.split(key, 3)
        dummy_obs = jnp.zeros(self.obs_shape)
        dummy_action = jnp.zeros(self.action_shape)
        actor = self.actor_net.init(actor_key, dummy_obs)
        critic_input = jnp.concatenate([dummy_obs, dummy_action.reshape(-1)])
        critic = jax.vmap(lambda k: self.critic_net.init(k, critic_input))(
            jax.random.split(critic_key, self.config.num_critics)
        )
        # The expectile key is split without the robust term too, so omega = 0 FedRDDPG and
        # DDPGAvg(1) draw the same actor and critics and can be compared exactly.
        robust_shared, robust_private = self.robust.init(degree_key, dummy_obs)
        dummy = Transition(obs=dummy_obs, action=dummy_action, reward=jnp.float32(0.0), next_obs=dummy_obs,
                           terminated=jnp.bool_(False))
        return FederatedState(
            shared=DDPGShared(critic=critic, critic_target=critic, actor=actor, actor_target=actor, **robust_shared),
            private=DDPGPrivate(critic_opt=self.optimizer.init(critic), actor_opt=self.optimizer.init(actor),
                                buffer=self.buffer.init(dummy), **robust_private),
        )

    # -- acting ------------------------------------------------------------------------------

    def greedy_action(self, shared: DDPGShared, obs: jax.Array) -> jax.Array:
        return self.to_env_action(self.actor(shared.actor, obs))

    def act(self, shared: DDPGShared, obs: jax.Array, key: jax.Array, step: jax.Array, hp=None) -> jax.Array:
        """Returns the normalised action in [-1, 1]^d (what the buffer stores); `env_action` maps it."""
        noise_key, warmup_key = jax.random.split(key)
        sigma = self.config.exploration_noise if hp is None else hp.exploration_noise
        noise = sigma * jax.random.normal(noise_key, self.action_shape)
        warmup = jax.random.uniform(warmup_key, self.action_shape, minval=-1.0, maxval=1.0)
        if base.revision(self.config) < 2:  # the warm-up's uniform actions without noise
            noisy = jnp.clip(self.actor(shared.actor, obs) + noise, -1.0, 1.0)
            return jnp.where(base.is_warmup(self.config, step), warmup, noisy)
        # SB3 adds the exploration noise to the warm-up's uniform actions too, then clips.
        chosen = jnp.where(base.is_warmup(self.config, step), warmup, self.actor(shared.actor, obs))
        return jnp.clip(chosen + noise, -1.0, 1.0)

    def env_action(self, action: jax.Array) -> jax.Array:
        return self.to_env_action(action)

    def observe(self, state: FederatedState, transition: Transition) -> FederatedState:
        buffer = self.buffer.add(state.private.buffer, transition)
        return state.replace(private=state.private.replace(buffer=buffer))

    # -- learning ----------------------------------------------------------------------------

    def next_values(self, shared: DDPGShared, batch: Transition) -> jax.Array:
        """Q_i(s', pi(s'; phi'); theta_i') for every target critic: [num_critics, batch]."""
        return self.critics(shared.critic_target, batch.next_obs, self.actor(shared.actor_target, batch.next_obs))

    def critic_target(self, shared: DDPGShared, batch: Transition, hp) -> tuple[jax.Array, jax.Array]:
        """(y, V'): the critic target and the bootstrap value min_i Q_i' (before the episode-end rule)."""
        next_values = self.next_values(shared, batch)
        next_value = losses.clipped_double_q(next_values)
        target = self.robust.td_target(shared, batch, next_value, hp)
        return jax.lax.stop_gradient(target), jax.lax.stop_gradient(next_value)

    def critic_loss(self, critic_params, batch: Transition, target: jax.Array) -> jax.Array:
        q = self.critics(critic_params, batch.obs, batch.action)  # [n, batch]
        return jnp.sum(jax.vmap(lambda qi: losses.mean_squared_td(qi, target))(q))

    def actor_loss(self, actor_params, critic_params, obs: jax.Array) -> jax.Array:
        first_critic = jax.tree.map(lambda x: x[:1], critic_params)
        return losses.actor_loss(self.critics(first_critic, obs, self.actor(actor_params, obs))[0])

    def update(self, state: FederatedState, batch: Transition, hp):
        """One gradient step on `batch`: critics (and D), then the actor against the updated
        critic, then soft target updates (SB3's TD3/DDPG order)."""
        shared, private = state.shared, state.private
        target, next_value = self.critic_target(shared, batch, hp)
        critic_loss, critic_grads = jax.value_and_grad(self.critic_loss)(shared.critic, batch, target)
        critic, critic_opt = base.apply_updates(self.optimizer, shared.critic, critic_grads, private.critic_opt,
                                                hp.learning_rate)
        shared, private, degree_loss = self.robust.update(shared, private, batch, next_value, hp)
        actor_loss, actor_grads = jax.value_and_grad(self.actor_loss)(shared.actor, critic, batch.obs)
        actor, actor_opt = base.apply_updates(self.optimizer, shared.actor, actor_grads, private.actor_opt,
                                              hp.learning_rate)
        eta = hp.target_update_rate
        shared = shared.replace(
            critic=critic,
            critic_target=optax.incremental_update(critic, shared.critic_target, eta),
            actor=actor,
            actor_target=optax.incremental_update(actor, shared.actor_target, eta),
        )
        private = private.replace(critic_opt=critic_opt, actor_opt=actor_opt)
        return FederatedState(shared=shared, private=private), (critic_loss, actor_loss, degree_loss)

    def gradient_step(self, state: FederatedState, key: jax.Array, hp):
        batch = self.buffer.sample(state.private.buffer, key).experience
        return self.update(state, batch, hp)

    def learn(self, state: FederatedState, key: jax.Array, step: jax.Array, hp):
        """Called after every environment step `step` (1-based): trains on schedule."""
        return base.train_on_schedule(
            self.config, lambda s, k: self.gradient_step(s, k, hp), state, key, step, self.loss_names
        )


# -- per-task defaults ----------------------------------------------------------------------------
# RL-Zoo3's DDPG/TD3 settings per task ("steps": n_timesteps); the paper's batch 64 and replay 1e5
# (the settings' defaults above) apply to every task. RL-Zoo3's MuJoCo block (HalfCheetah, Ant,
# Hopper, Walker2d): learning_starts 10000, normal noise 0.1, train_freq 1, gradient_steps 1,
# learning_rate 1e-3, net_arch [400, 300], 1e6 steps (its batch 256 is replaced by the paper's 64).
# Pendulum-v1 (RL-Zoo3 ddpg.yml and td3.yml): gamma 0.98, noise 0.1, lr 1e-3, [400, 300], 20000 steps,
# learning_starts 10000 (its buffer 200000 is replaced by the paper's 1e5).
_MUJOCO = dict(learning_starts=10_000, exploration_noise=0.1, learning_rate=1e-3, hidden_sizes=(400, 300),
               steps=1_000_000)
ZOO_DDPG: dict[str, dict] = {
    "Pendulum-v1": dict(gamma=0.98, exploration_noise=0.1, learning_rate=1e-3, hidden_sizes=(400, 300),
                        learning_starts=10_000, steps=20_000),
    **{name: dict(_MUJOCO) for name in ("Hopper-v4", "HalfCheetah-v4", "Walker2d-v4", "Ant-v4")},
}
DEFAULT_STEPS = 1_000_000  # RL-Zoo3's MuJoCo budget, for a continuous task without an entry


def task_defaults(env_name: str) -> dict:
    """RL-Zoo3's settings for `env_name`; a continuous task without an entry gets the settings'
    declared defaults and RL-Zoo3's MuJoCo budget."""
    return ZOO_DDPG.get(env_name, dict(steps=DEFAULT_STEPS))
