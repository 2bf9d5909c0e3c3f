"""FedRDQN and DQNAvg: one agent's learning rule (DESIGN.md section 1).

    y   = r + gamma (1 - omega) max_a' Q(s', a'; theta') + gamma omega D(s; psi)     (0 for V(s') on termination)
    L_Q = E (Q(s, a; theta) - y)^2
    L_D = E l_tau(max_a' Q(s', a'; theta'), D(s; psi))                              (expectile regression)
    theta' <- eta theta + (1 - eta) theta'   every `target_update_interval` steps (hard update: eta = 1)

DQNAvg is FedRDQN with omega = 0 and no expectile network (`robust=False`).

Everything in this module is written for *one* agent; `train.py` maps it over the agent axis.
The state is a `FederatedState`: `shared` (theta, theta', psi) is what the server averages every
E steps; `private` (optimizer states, replay buffer) never leaves the agent.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import flashbax as fbx
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from fedjax_rl import losses
from fedjax_rl.federated import FederatedState


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """Hyperparameters of one DQN agent. Defaults: RL-Zoo3's CartPole-v1 DQN, with the paper's
    federated replay settings (batch 16, buffer 1000). `fedjax_rl.configs` holds per-task sets."""

    robust: bool = True  # FedRDQN (expectile network and omega term) or DQNAvg
    omega: float = 0.1
    tau: float = 0.01
    hidden_sizes: tuple[int, ...] = (256, 256)
    learning_rate: float = 2.3e-3
    gamma: float = 0.99
    batch_size: int = 16
    buffer_size: int = 1000
    learning_starts: int = 1000
    train_freq: int = 256
    gradient_steps: int = 128
    target_update_interval: int = 10
    target_update_rate: float = 1.0  # eta; 1.0 is a hard copy
    exploration_fraction: float = 0.16
    exploration_initial_eps: float = 1.0
    exploration_final_eps: float = 0.04
    max_grad_norm: float = 10.0

    def hparams(self) -> "DQNHyperparams":
        return DQNHyperparams(
            omega=self.omega if self.robust else 0.0,
            tau=self.tau,
            learning_rate=self.learning_rate,
            gamma=self.gamma,
            target_update_rate=self.target_update_rate,
        )

    def validate(self) -> None:
        if not 0.0 <= self.omega < 1.0:
            raise ValueError(f"omega must be in [0, 1), got {self.omega}")
        if not 0.0 < self.tau < 0.5:
            raise ValueError(f"tau must be in (0, 0.5), got {self.tau}")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.batch_size < 1 or self.buffer_size < 1:
            raise ValueError(
                f"batch_size and buffer_size must be >= 1, got {self.batch_size}, {self.buffer_size}"
            )
        if self.batch_size > self.buffer_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be <= buffer_size ({self.buffer_size})"
            )
        for name in ("train_freq", "target_update_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.gradient_steps < 1 and self.gradient_steps != -1:
            raise ValueError(f"gradient_steps must be >= 1 or -1 (= train_freq), got {self.gradient_steps}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts must be >= 0, got {self.learning_starts}")
        if not 0.0 < self.target_update_rate <= 1.0:
            raise ValueError(f"target_update_rate must be in (0, 1], got {self.target_update_rate}")
        if not 0.0 < self.exploration_fraction <= 1.0:
            raise ValueError(f"exploration_fraction must be in (0, 1], got {self.exploration_fraction}")
        for name in ("exploration_initial_eps", "exploration_final_eps"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not self.hidden_sizes or min(self.hidden_sizes) < 1:
            raise ValueError(f"hidden_sizes must be positive, got {self.hidden_sizes}")


@struct.dataclass
class DQNHyperparams:
    """Numeric hyperparameters as pytree leaves, so a sweep over them is a `vmap`."""

    omega: Any
    tau: Any
    learning_rate: Any
    gamma: Any
    target_update_rate: Any


@struct.dataclass
class DQNShared:
    q: Any
    q_target: Any
    degree: Any  # expectile network D(s; psi); None for DQNAvg


@struct.dataclass
class DQNPrivate:
    q_opt: Any
    degree_opt: Any
    buffer: Any


@struct.dataclass
class Transition:
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array  # pre-reset observation
    terminated: jax.Array


class MLP(nn.Module):
    hidden_sizes: Sequence[int]
    out_size: int

    @nn.compact
    def __call__(self, x):
        for size in self.hidden_sizes:
            x = nn.relu(nn.Dense(size)(x))
        return nn.Dense(self.out_size)(x)


def linear_epsilon(config: DQNConfig, step: jax.Array, total_steps: int) -> jax.Array:
    """SB3's linear schedule: initial -> final over the first `exploration_fraction` of training."""
    progress = jnp.clip(step / (config.exploration_fraction * total_steps), 0.0, 1.0)
    return config.exploration_initial_eps + progress * (
        config.exploration_final_eps - config.exploration_initial_eps
    )


class DQNAgent:
    """The FedRDQN/DQNAvg learning rule for one agent, with static shapes closed over."""

    def __init__(self, config: DQNConfig, obs_shape: tuple[int, ...], num_actions: int, total_steps: int):
        config.validate()
        self.config = config
        self.obs_shape = tuple(obs_shape)
        self.num_actions = int(num_actions)
        self.total_steps = int(total_steps)
        self.q_net = MLP(config.hidden_sizes, self.num_actions)
        self.degree_net = MLP(config.hidden_sizes, 1)
        # Learning rate is applied outside the optax chain so it can be a traced hyperparameter.
        self.optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.scale_by_adam())
        self.buffer = fbx.make_item_buffer(
            max_length=config.buffer_size,
            min_length=config.batch_size,
            sample_batch_size=config.batch_size,
            add_batches=False,
        )
        self.gradient_steps = config.train_freq if config.gradient_steps == -1 else config.gradient_steps

    # -- state -------------------------------------------------------------------------------

    def init(self, key: jax.Array) -> FederatedState:
        q_key, degree_key = jax.random.split(key)
        dummy_obs = jnp.zeros(self.obs_shape)
        q = self.q_net.init(q_key, dummy_obs)
        # The expectile key is split for DQNAvg too, so omega = 0 FedRDQN and DQNAvg draw the
        # same Q initialisation and can be compared exactly.
        degree = self.degree_net.init(degree_key, dummy_obs) if self.config.robust else None
        dummy = Transition(
            obs=dummy_obs,
            action=jnp.int32(0),
            reward=jnp.float32(0.0),
            next_obs=dummy_obs,
            terminated=jnp.bool_(False),
        )
        return FederatedState(
            shared=DQNShared(q=q, q_target=q, degree=degree),
            private=DQNPrivate(
                q_opt=self.optimizer.init(q),
                degree_opt=self.optimizer.init(degree) if degree is not None else None,
                buffer=self.buffer.init(dummy),
            ),
        )

    # -- acting ------------------------------------------------------------------------------

    def q_values(self, q_params, obs: jax.Array) -> jax.Array:
        return self.q_net.apply(q_params, obs)

    def greedy_action(self, shared: DQNShared, obs: jax.Array) -> jax.Array:
        return jnp.argmax(self.q_values(shared.q, obs), axis=-1)

    def act(self, shared: DQNShared, obs: jax.Array, key: jax.Array, step: jax.Array) -> jax.Array:
        explore_key, random_action_key = jax.random.split(key)
        eps = linear_epsilon(self.config, step, self.total_steps)
        random_action = jax.random.randint(random_action_key, (), 0, self.num_actions)
        explore = jax.random.uniform(explore_key) < eps
        return jnp.where(explore, random_action, self.greedy_action(shared, obs))

    def observe(self, state: FederatedState, transition: Transition) -> FederatedState:
        buffer = self.buffer.add(state.private.buffer, transition)
        return state.replace(private=state.private.replace(buffer=buffer))

    # -- learning ----------------------------------------------------------------------------

    def next_value(self, shared: DQNShared, batch: Transition) -> jax.Array:
        """max_a' Q(s', a'; theta'), the bootstrap value shared by the TD and expectile targets."""
        return jnp.max(self.q_values(shared.q_target, batch.next_obs), axis=-1)

    def degree(self, degree_params, obs: jax.Array) -> jax.Array:
        return self.degree_net.apply(degree_params, obs)[..., 0]

    def td_loss(self, q_params, degree: jax.Array, next_value: jax.Array, batch: Transition, hp) -> jax.Array:
        """L_Q = E (Q(s, a; theta) - y)^2 with y the robust TD target (a constant for the gradient)."""
        target = losses.robust_td_target(batch.reward, next_value, batch.terminated, degree, hp.gamma, hp.omega)
        q_all = self.q_values(q_params, batch.obs)
        q_taken = jnp.take_along_axis(q_all, batch.action[..., None], axis=-1)[..., 0]
        return losses.mean_squared_td(q_taken, target)

    def degree_loss(self, degree_params, next_value: jax.Array, batch: Transition, hp) -> jax.Array:
        """L_D = E l_tau(V(s'), D(s; psi)), V(s') = 0 on termination."""
        target = losses.expectile_target(next_value, batch.terminated)
        return jnp.mean(losses.expectile_loss(target, self.degree(degree_params, batch.obs), hp.tau))

    def gradient_step(self, state: FederatedState, key: jax.Array, hp: DQNHyperparams):
        batch = self.buffer.sample(state.private.buffer, key).experience
        shared, private = state.shared, state.private
        next_value = jax.lax.stop_gradient(self.next_value(shared, batch))
        if self.config.robust:
            degree = jax.lax.stop_gradient(self.degree(shared.degree, batch.obs))
        else:
            degree = jnp.zeros_like(next_value)  # omega = 0: the robust term vanishes
        td_loss, q_grads = jax.value_and_grad(self.td_loss)(shared.q, degree, next_value, batch, hp)
        q, q_opt = self._apply(shared.q, q_grads, private.q_opt, hp.learning_rate)
        degree_params, degree_opt, degree_loss = shared.degree, private.degree_opt, jnp.float32(0.0)
        if self.config.robust:
            degree_loss, degree_grads = jax.value_and_grad(self.degree_loss)(shared.degree, next_value, batch, hp)
            degree_params, degree_opt = self._apply(shared.degree, degree_grads, private.degree_opt, hp.learning_rate)
        state = FederatedState(
            shared=shared.replace(q=q, degree=degree_params),
            private=private.replace(q_opt=q_opt, degree_opt=degree_opt),
        )
        return state, (td_loss, degree_loss)

    def _apply(self, params, grads, opt_state, learning_rate):
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        params = jax.tree.map(lambda p, u: p - learning_rate * u, params, updates)
        return params, opt_state

    def learn(self, state: FederatedState, key: jax.Array, step: jax.Array, hp: DQNHyperparams):
        """Called after every environment step `step` (1-based); trains and updates targets on schedule.

        `step` must not carry the agent axis, so these conditionals stay real branches under vmap.
        """
        config = self.config

        def train(state):
            keys = jax.random.split(key, self.gradient_steps)
            state, (td_losses, degree_losses) = jax.lax.scan(
                lambda s, k: self.gradient_step(s, k, hp), state, keys
            )
            return state, jnp.mean(td_losses), jnp.mean(degree_losses), jnp.float32(1.0)

        def skip(state):
            return state, jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.0)

        should_train = (step >= config.learning_starts) & (step % config.train_freq == 0)
        state, td_loss, degree_loss, trained = jax.lax.cond(should_train, train, skip, state)

        def update_target(shared):
            eta = hp.target_update_rate
            return shared.replace(
                q_target=optax.incremental_update(shared.q, shared.q_target, eta)
            )

        should_update_target = step % config.target_update_interval == 0
        shared = jax.lax.cond(should_update_target, update_target, lambda s: s, state.shared)
        return state.replace(shared=shared), {"td_loss": td_loss, "degree_loss": degree_loss, "trained": trained}
