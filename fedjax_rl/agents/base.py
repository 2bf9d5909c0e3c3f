"""The agent protocol that `training/program.py` drives, the settings every off-policy agent shares, and the
pieces of the learning loop written once for all of them (replay, the training schedule).

An agent is the learning rule of *one* client, with static shapes closed over. `training/program.py` maps it
over the agent axis, steps the environments, and averages `state.shared` every E steps:

    agent = Agent(config, obs_shape, action_space, total_steps)
    state = agent.init(key)                              # FederatedState(shared=..., private=...)
    action = agent.act(state.shared, obs, key, step, hp) # with exploration; step counts from 1
    env_action = agent.env_action(action)                # what the env receives (the buffer keeps `action`)
    action = agent.greedy_action(state.shared, obs)      # evaluation
    state = agent.observe(state, transition)             # into the agent's own replay buffer
    state, metrics = agent.learn(state, key, step, hp)   # gradient steps and target updates on schedule
    hp = agent.hparams()                                 # the vmappable numeric hyperparameters

`shared` holds what the server averages (networks, their targets, the expectile network); `private`
holds optimizer states and the replay buffer, which never leave the agent.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, Sequence

import flashbax as fbx
import flax.linen as nn
import optax
import jax
import jax.numpy as jnp
from flax import struct

from fedjax_rl.core import settings
from fedjax_rl.core.federated import FederatedState
from fedjax_rl.core.settings import Hyperparams, Setting, at_least, interval, positive, positive_sizes


@struct.dataclass
class Transition:
    """One stored step of one agent: s, a, r, s' (before any reset) and whether the episode terminated."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array  # pre-reset observation
    terminated: jax.Array  # a time-limit truncation is not a termination: it bootstraps


class Agent(Protocol):
    """What `training/program.py` needs from an algorithm (see the module docstring)."""

    #: per-update metrics, averaged over the gradient steps of a block ("td_loss", ...)
    loss_names: ClassVar[tuple[str, ...]]
    #: loss name -> how a message names it when it turns non-finite ("Q loss")
    loss_descriptions: ClassVar[dict[str, str]]
    #: the CPU matrix-product library measured faster for this agent's networks (`machine.CPU_DOTS`;
    #: a run's `cpu_dots` setting overrides it)
    CPU_DOTS: ClassVar[str]

    def __init__(self, config: Any, obs_shape: tuple[int, ...], action_space: Any, total_steps: int): ...

    def init(self, key: jax.Array) -> FederatedState: ...

    def act(self, shared: Any, obs: jax.Array, key: jax.Array, step: jax.Array, hp: Hyperparams) -> jax.Array: ...

    def env_action(self, action: jax.Array) -> jax.Array: ...

    @staticmethod
    def check_env(env_name: str, action_space: Any) -> None:
        """Raise a ValueError if the agent cannot act in this action space."""

    def greedy_action(self, shared: Any, obs: jax.Array) -> jax.Array: ...

    def observe(self, state: FederatedState, transition: Transition) -> FederatedState: ...

    def learn(self, state: FederatedState, key: jax.Array, step: jax.Array, hp: Hyperparams): ...

    def hparams(self) -> Hyperparams: ...


# How the agents act and learn where no other setting says: the `revision` setting's default, recorded
# in every run directory as `agent_revision` (training.records.recorded_config), so that runs of
# different revisions never resume into, merge with or read back as each other. 2: SB3's warm-up and
# first gradient step: random actions during the first learning_starts steps (DDPG and TD3 add their
# exploration noise to them and clip, as SB3 does), DQN's epsilon counted from the first step, and the
# first gradient step after step learning_starts, not at it. 1: the first rule, that of every run
# recorded without the field: the policy acts from step 1 (DQN epsilon-greedy with epsilon at the step
# taken; DDPG and SAC uniform before step learning_starts, DDPG's without noise) and the first
# gradient step runs at step learning_starts.
REVISION = 2
REVISIONS = (1, 2)


def torch_linear_init(fan_in: int):
    """PyTorch's `nn.Linear` default (what SB3's off-policy networks keep): weights and biases uniform
    on [-1/sqrt(fan_in), 1/sqrt(fan_in)] (``kaiming_uniform_`` with a = sqrt(5) for the weights)."""
    bound = 1.0 / float(fan_in) ** 0.5

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class MLP(nn.Module):
    """The networks of every agent: ReLU hidden layers, a linear output. `initializer` is the `init`
    setting: "flax" (LeCun-normal weights, zero biases, Flax's Dense default) or "torch" (PyTorch's
    Linear default, as SB3 runs the paper's baselines). The parameters have the same names and
    shapes either way. (The field is not called `init`, which is the Module's own method.)"""

    hidden_sizes: Sequence[int]
    out_size: int
    initializer: str = "flax"

    def dense(self, size: int, fan_in: int) -> nn.Dense:
        if self.initializer == "torch":
            return nn.Dense(size, kernel_init=torch_linear_init(fan_in), bias_init=torch_linear_init(fan_in))
        return nn.Dense(size)

    @nn.compact
    def __call__(self, x):
        for size in self.hidden_sizes:
            x = nn.relu(self.dense(size, x.shape[-1])(x))
        return self.dense(self.out_size, x.shape[-1])(x)


# -- settings every off-policy agent has (declared once; DQN and DDPG add their own; the robust
# term's omega and tau are declared in agents/robust.py) ------------------------------------------

GAMMA = Setting("gamma", 0.99, interval(0, 1, low_open=True), leaf=True, help="discount")
LEARNING_RATE = Setting("learning_rate", 1e-3, positive, leaf=True)
HIDDEN_SIZES = Setting("hidden_sizes", (256, 256), positive_sizes, kind="ints", help="MLP hidden layers")
INIT = Setting("init", "flax", settings.one_of("flax", "torch"), kind=str,
               help="network initialisation: flax (LeCun-normal weights, zero biases) or torch (PyTorch's "
                    "Linear default, uniform +-1/sqrt(fan_in) weights and biases, as SB3 runs)",
               source="(flax: Flax's Dense default)")
BATCH_SIZE = Setting("batch_size", 16, at_least(1), kind=int)
BUFFER_SIZE = Setting("buffer_size", 1000, at_least(1), kind=int, help="replay capacity per agent")
LEARNING_STARTS = Setting("learning_starts", 1000, at_least(0), kind=int,
                          help="warm-up environment steps (random actions) before the policy acts and learns")
TRAIN_FREQ = Setting("train_freq", 1, at_least(1), kind=int, help="environment steps between training phases")
GRADIENT_STEPS = Setting(
    "gradient_steps", 1, lambda v: None if v >= 1 or v == -1 else "must be >= 1 or -1 (= train_freq)", kind=int,
    help="gradient steps per training phase (-1: as many as environment steps since the last)")
TARGET_UPDATE_INTERVAL = Setting("target_update_interval", 1, at_least(1), kind=int)
AGENT_REVISION = Setting(
    "revision", REVISION, settings.one_of(*REVISIONS), kind=int,
    help="how the agent acts and learns where no other setting says (REVISION above): 2, SB3's warm-up and "
         "first gradient step; 1, the first rule, so that a table row begun with it grows by the same algorithm. "
         "A run records it as agent_revision",
    source="(2: SB3's timing)")
TARGET_UPDATE_RATE = Setting("target_update_rate", 1.0, interval(0, 1, low_open=True), leaf=True,
                             help="eta in theta' <- eta theta + (1 - eta) theta'; 1 is a hard copy")


def check_replay(config) -> None:
    """Refuse a batch larger than the replay buffer (ValueError naming both sizes)."""
    if config.batch_size > config.buffer_size:
        raise ValueError(f"batch_size ({config.batch_size}) must be <= buffer_size ({config.buffer_size})")


class OffPolicyConfig(settings.SettingsConfig):
    """Config methods of every replay-based agent: the cross-setting replay check."""

    def check_together(self) -> None:
        check_replay(self)


def item_buffer(config):
    """The agent's replay buffer (flashbax, uniform sampling, one transition added per step)."""
    return fbx.make_item_buffer(
        max_length=config.buffer_size,
        min_length=config.batch_size,
        sample_batch_size=config.batch_size,
        add_batches=False,
    )


def num_gradient_steps(config) -> int:
    """Gradient steps per training phase (every `train_freq` environment steps): `gradient_steps`, or
    `train_freq` when it is -1 (SB3's convention: as many as the environment steps)."""
    return config.train_freq if config.gradient_steps == -1 else config.gradient_steps


def revision(config) -> int:
    """The agent revision `config` runs (`AGENT_REVISION`; REVISION for an agent that does not declare it)."""
    return getattr(config, "revision", REVISION)


def is_warmup(config, step: jax.Array) -> jax.Array:
    """Whether environment step `step` (1-based) acts at random: the first `learning_starts` steps,
    as SB3 (`_sample_action` draws from the action space while num_timesteps, the steps already
    taken, is below learning_starts); revision 1: the steps before step `learning_starts`."""
    return step <= config.learning_starts if revision(config) >= 2 else step < config.learning_starts


def first_training_step(config) -> int:
    """The environment step (1-based) after which the first gradient step runs: the first multiple of
    `train_freq` above `learning_starts`, as SB3 (it trains after a rollout of train_freq steps once
    num_timesteps > learning_starts); revision 1: the first at or above it (and at least the first step)."""
    if revision(config) < 2:
        return -(-max(1, config.learning_starts) // config.train_freq) * config.train_freq
    return (config.learning_starts // config.train_freq + 1) * config.train_freq


def train_on_schedule(config, gradient_step, state, key, step, loss_names):
    """After environment step `step` (1-based): if `step > learning_starts` (revision 1: `>=`) and
    `step` is a multiple of `train_freq` (SB3's schedule; `first_training_step`), run
    `gradient_step(state, key) -> (state, losses tuple)` for every gradient step (a scan). Returns
    (state, {loss: mean over the gradient steps, "trained": 1 or 0}).

    `step` must not carry the agent axis, so the conditional stays a real branch under vmap.
    """

    def train(state):
        keys = jax.random.split(key, num_gradient_steps(config))
        state, per_step = jax.lax.scan(gradient_step, state, keys)
        return state, tuple(jnp.mean(x) for x in per_step), jnp.float32(1.0)

    def skip(state):
        return state, tuple(jnp.float32(0.0) for _ in loss_names), jnp.float32(0.0)

    started = step > config.learning_starts if revision(config) >= 2 else step >= config.learning_starts
    should_train = started & (step % config.train_freq == 0)
    state, means, trained = jax.lax.cond(should_train, train, skip, state)
    return state, {**dict(zip(loss_names, means)), "trained": trained}


def adam(max_grad_norm: float | None = None) -> optax.GradientTransformation:
    """Adam (optionally after global-norm clipping) whose learning rate is an injected
    hyperparameter (`optax.inject_hyperparams`), set from the traced `hp.learning_rate` at every
    update (`apply_updates`), so the learning rate is a vmappable leaf like the others."""
    clip = [optax.clip_by_global_norm(max_grad_norm)] if max_grad_norm is not None else []
    return optax.chain(
        *clip, optax.scale_by_adam(), optax.inject_hyperparams(optax.scale_by_learning_rate)(learning_rate=1.0)
    )


def apply_updates(optimizer, params, grads, opt_state, learning_rate):
    """One optimizer step with the learning rate `learning_rate` (may be traced)."""
    *head, lr_state = opt_state
    lr_state = lr_state._replace(hyperparams={**lr_state.hyperparams, "learning_rate": learning_rate})
    updates, opt_state = optimizer.update(grads, (*head, lr_state), params)
    return optax.apply_updates(params, updates), opt_state
