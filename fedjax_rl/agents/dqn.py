"""FedRDQN and DQNAvg: one agent's learning rule (DESIGN.md section 1).

    y   = r + gamma (1 - omega) max_a' Q(s', a'; theta') + gamma omega D(s; psi)     (0 for V(s') on termination)
    L_Q = E (Q(s, a; theta) - y)^2
    L_D = E l_tau(max_a' Q(s', a'; theta'), D(s; psi))                              (expectile regression)
    theta' <- eta theta + (1 - eta) theta'   every `target_update_interval` steps (hard update: eta = 1)

DQNAvg is FedRDQN with omega = 0 and no expectile network (`robust=False`). Its hyperparameters have
no omega leaf, so a sweep cannot give it a robustness term by accident. The robust term (omega, tau,
D, L_D and the target y) is the component in `agents/robust.py`: this module hands it
V(s') = max_a' Q(s', a'; theta') and gets y back.

Everything in this module is written for *one* agent; `training/program.py` maps it over the agent axis.
The state is a `FederatedState`: `shared` (theta, theta', psi) is what the server averages every
E steps; `private` (optimizer states, replay buffer) never leaves the agent.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from gymnax.environments import spaces

from fedjax_rl.core import losses, settings
from fedjax_rl.agents import base, robust
from fedjax_rl.agents.base import MLP, Transition
from fedjax_rl.core.federated import FederatedState
from fedjax_rl.core.settings import Setting, interval

__all__ = ["DQNAgent", "DQNConfig", "Transition", "SETTINGS"]

_ZOO = "(RL-Zoo3 dqn.yml, CartPole-v1)"
_PAPER = "(paper, federated replay)"

# Defaults: RL-Zoo3's CartPole-v1 DQN with the paper's federated replay settings (batch 16, buffer
# 1000). `ZOO_DQN` below holds the other tasks' sets.
SETTINGS = (
    *robust.SETTINGS,
    base.HIDDEN_SIZES.with_default((256, 256), _ZOO),
    base.INIT,
    base.AGENT_REVISION,
    base.LEARNING_RATE.with_default(2.3e-3, _ZOO),
    base.GAMMA.with_default(0.99, _ZOO),
    base.BATCH_SIZE.with_default(16, _PAPER),
    base.BUFFER_SIZE.with_default(1000, _PAPER),
    base.LEARNING_STARTS.with_default(1000, _ZOO),
    base.TRAIN_FREQ.with_default(256, _ZOO),
    base.GRADIENT_STEPS.with_default(128, _ZOO),
    base.TARGET_UPDATE_INTERVAL.with_default(10, _ZOO),
    base.TARGET_UPDATE_RATE.with_default(1.0, "(SB3 DQN: hard copy)"),
    Setting("exploration_fraction", 0.16, interval(0, 1, low_open=True), source=_ZOO,
            help="share of training over which epsilon decays linearly"),
    Setting("exploration_initial_eps", 1.0, interval(0, 1), source="(SB3)"),
    Setting("exploration_final_eps", 0.04, interval(0, 1), source=_ZOO),
    Setting("max_grad_norm", 10.0, settings.positive, source="(SB3 DQN)", help="global-norm gradient clipping"),
)


class _DQNConfigMethods(robust.RobustVariantConfig):
    ROBUST_NAME, ROBUST_ALGO, AVG_NAME = "FedRDQN", "fedrdqn", "DQNAvg"


DQNConfig = settings.config_class("DQNConfig", SETTINGS, base=_DQNConfigMethods,
                                  doc="Hyperparameters of one DQN agent (FedRDQN or DQNAvg).")


@struct.dataclass
class DQNShared:
    """What the server averages: the Q network, its target and the robust term's D (None for DQNAvg)."""

    q: Any
    q_target: Any
    degree: Any  # the robust term's expectile network D(s; psi); None for DQNAvg


@struct.dataclass
class DQNPrivate:
    """What stays with the agent: the optimizer states (D's included) and the replay buffer."""

    q_opt: Any
    degree_opt: Any  # the robust term's optimizer state; None for DQNAvg
    buffer: Any


def linear_epsilon(config, step: jax.Array, total_steps: int) -> jax.Array:
    """SB3's linear schedule: initial -> final over the first `exploration_fraction` of training."""
    schedule = optax.linear_schedule(
        config.exploration_initial_eps, config.exploration_final_eps, config.exploration_fraction * total_steps
    )
    return schedule(step)


class DQNAgent:
    """The FedRDQN/DQNAvg learning rule for one agent, with static shapes closed over."""

    loss_names = ("td_loss", robust.LOSS_NAME)
    loss_descriptions = {"td_loss": "Q loss (td_loss)", **robust.LOSS_DESCRIPTIONS}
    # YNNPACK (XLA's default): with Eigen, FedRDQN and DQNAvg on CartPole ran at 0.75-0.80x, side by
    # side (its input-gradient products at batch 16: 0.43x; benchmarks/README.md, "Matrix products
    # on a CPU").
    CPU_DOTS = "ynnpack"

    def __init__(self, config, obs_shape: tuple[int, ...], action_space, total_steps: int):
        config.validate()
        self.config = config
        self.obs_shape = tuple(obs_shape)
        # An int is the number of actions, for a caller without a gymnax space.
        self.num_actions = int(action_space if isinstance(action_space, int) else action_space.n)
        self.total_steps = int(total_steps)
        self.q_net = MLP(config.hidden_sizes, self.num_actions, config.init)
        self.optimizer = base.adam(config.max_grad_norm)
        self.robust = robust.RobustTerm(config, self.optimizer)
        self.buffer = base.item_buffer(config)
        self.gradient_steps = base.num_gradient_steps(config)

    @staticmethod
    def check_env(env_name: str, action_space) -> None:
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"DQN needs discrete actions; {env_name} has {type(action_space).__name__} actions "
                             "(use fedrddpg, ddpgavg1 or ddpgavg2)")

    def hparams(self) -> settings.Hyperparams:
        return self.config.hparams()

    # -- state -------------------------------------------------------------------------------

    def init(self, key: jax.Array) -> FederatedState:
        q_key, degree_key = jax.random.split(key)
        dummy_obs = jnp.zeros(self.obs_shape)
        q = self.q_net.init(q_key, dummy_obs)
        # The expectile key is split for DQNAvg too, so omega = 0 FedRDQN and DQNAvg draw the
        # same Q initialisation and can be compared exactly.
        robust_shared, robust_private = self.robust.init(degree_key, dummy_obs)
        dummy = Transition(
            obs=dummy_obs,
            action=jnp.int32(0),
            reward=jnp.float32(0.0),
            next_obs=dummy_obs,
            terminated=jnp.bool_(False),
        )
        return FederatedState(
            shared=DQNShared(q=q, q_target=q, **robust_shared),
            private=DQNPrivate(q_opt=self.optimizer.init(q), buffer=self.buffer.init(dummy), **robust_private),
        )

    # -- acting ------------------------------------------------------------------------------

    def q_values(self, q_params, obs: jax.Array) -> jax.Array:
        return self.q_net.apply(q_params, obs)

    def greedy_action(self, shared: DQNShared, obs: jax.Array) -> jax.Array:
        return jnp.argmax(self.q_values(shared.q, obs), axis=-1)

    def epsilon(self, step: jax.Array) -> jax.Array:
        """The exploration rate at environment step `step` (1-based): the schedule at the steps
        already taken, step - 1, as SB3 updates its exploration rate after each step from
        num_timesteps (revision 1: at `step`)."""
        taken = step - 1 if base.revision(self.config) >= 2 else step
        return linear_epsilon(self.config, taken, self.total_steps)

    def act(self, shared: DQNShared, obs: jax.Array, key: jax.Array, step: jax.Array, hp=None) -> jax.Array:
        """SB3's DQN: a uniform random action during the warm-up (the first `learning_starts` steps),
        then epsilon-greedy (revision 1: epsilon-greedy from the first step)."""
        explore_key, random_action_key = jax.random.split(key)
        random_action = jax.random.randint(random_action_key, (), 0, self.num_actions)
        explore = jax.random.uniform(explore_key) < self.epsilon(step)
        if base.revision(self.config) >= 2:
            explore = base.is_warmup(self.config, step) | explore
        return jnp.where(explore, random_action, self.greedy_action(shared, obs)).astype(jnp.int32)

    def env_action(self, action: jax.Array) -> jax.Array:
        return action

    def observe(self, state: FederatedState, transition: Transition) -> FederatedState:
        buffer = self.buffer.add(state.private.buffer, transition)
        return state.replace(private=state.private.replace(buffer=buffer))

    # -- learning ----------------------------------------------------------------------------

    def next_value(self, shared: DQNShared, batch: Transition) -> jax.Array:
        """max_a' Q(s', a'; theta'), the bootstrap value shared by the TD and expectile targets."""
        return jnp.max(self.q_values(shared.q_target, batch.next_obs), axis=-1)

    def td_loss(self, q_params, target: jax.Array, batch: Transition) -> jax.Array:
        """L_Q = E (Q(s, a; theta) - y)^2 with y the robust TD target (a constant for the gradient)."""
        q_all = self.q_values(q_params, batch.obs)
        q_taken = jnp.take_along_axis(q_all, batch.action[..., None], axis=-1)[..., 0]
        return losses.mean_squared_td(q_taken, target)

    def gradient_step(self, state: FederatedState, key: jax.Array, hp):
        batch = self.buffer.sample(state.private.buffer, key).experience
        shared, private = state.shared, state.private
        next_value = jax.lax.stop_gradient(self.next_value(shared, batch))
        target = self.robust.td_target(shared, batch, next_value, hp)
        td_loss, q_grads = jax.value_and_grad(self.td_loss)(shared.q, target, batch)
        q, q_opt = base.apply_updates(self.optimizer, shared.q, q_grads, private.q_opt, hp.learning_rate)
        shared, private, degree_loss = self.robust.update(shared, private, batch, next_value, hp)
        state = FederatedState(shared=shared.replace(q=q), private=private.replace(q_opt=q_opt))
        return state, (td_loss, degree_loss)

    def learn(self, state: FederatedState, key: jax.Array, step: jax.Array, hp):
        """Called after every environment step `step` (1-based): trains and updates the target on schedule."""
        config = self.config
        state, metrics = base.train_on_schedule(
            config, lambda s, k: self.gradient_step(s, k, hp), state, key, step, self.loss_names
        )

        def update_target(shared):
            return shared.replace(q_target=optax.incremental_update(shared.q, shared.q_target, hp.target_update_rate))

        should_update_target = step % config.target_update_interval == 0
        shared = jax.lax.cond(should_update_target, update_target, lambda s: s, state.shared)
        return state.replace(shared=shared), metrics


# -- per-task defaults ----------------------------------------------------------------------------
# RL-Zoo3's tuned DQN hyperparameters (hyperparams/dqn.yml) for each task; "steps" is its training
# budget (n_timesteps). The paper's federated replay settings (batch 16, buffer 1000) are the
# settings' defaults above and apply to every task. RL-Zoo3's `gradient_steps: -1` means "as many
# gradient steps as environment steps collected" (= train_freq). LunarLander-v3 uses RL-Zoo3's
# LunarLander-v2 entry (the task is unchanged apart from the version bump).
ZOO_DQN: dict[str, dict] = {
    "CartPole-v1": dict(
        learning_rate=2.3e-3, gamma=0.99, learning_starts=1000, target_update_interval=10,
        train_freq=256, gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
        hidden_sizes=(256, 256), steps=50_000,
    ),
    "Acrobot-v1": dict(
        learning_rate=6.3e-4, gamma=0.99, learning_starts=0, target_update_interval=250,
        train_freq=4, gradient_steps=-1, exploration_fraction=0.12, exploration_final_eps=0.1,
        hidden_sizes=(256, 256), steps=100_000,
    ),
    "MountainCar-v0": dict(
        learning_rate=4e-3, gamma=0.98, learning_starts=1000, target_update_interval=600,
        train_freq=16, gradient_steps=8, exploration_fraction=0.2, exploration_final_eps=0.07,
        hidden_sizes=(256, 256), steps=120_000,
    ),
    "LunarLander-v3": dict(
        learning_rate=6.3e-4, gamma=0.99, learning_starts=0, target_update_interval=250,
        train_freq=4, gradient_steps=-1, exploration_fraction=0.12, exploration_final_eps=0.1,
        hidden_sizes=(256, 256), steps=100_000,
    ),
}


DEFAULT_STEPS = 50_000  # RL-Zoo3's CartPole-v1 budget, for a discrete task without an entry


def task_defaults(env_name: str) -> dict:
    """RL-Zoo3's settings for `env_name`; a discrete task without an entry (one of your own, see
    `fedjax_rl.envs.register`) gets the settings' declared defaults."""
    return ZOO_DQN.get(env_name, dict(steps=DEFAULT_STEPS))
