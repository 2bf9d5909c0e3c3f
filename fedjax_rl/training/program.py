"""The compiled federated loop: `make_train(config) -> train(key) -> (state, metrics)`, for any agent
that implements the protocol in `fedjax_rl/agents/base.py` (the algorithm comes from the registry). ::

    train(key):
      env_params[K] <- heterogeneity sampler                     per-agent physics
      carry[K]      <- init                                       agent states, envs
      round         = scan(local_step, length=E), then federated_average   (agents: named vmap axis)
      block         = scan(round, length=eval_every_rounds), then evaluate the global policy (nominal env,
                      and every agent's own)
      scan(block, length=num_evals), then evaluate in every agent's env and over the sweep

The loop is built from named parts, module-level functions over a small frozen `Setup` (the env,
its nominal params, the agent, the config), as brax builds `training_epoch` from `training_step`
from `sgd_step`::

    local_step(setup, carry, step, hp)               one agent, one environment step and its learning
    agent_round(setup, carry, round_index, hp, w)    one agent: E local steps, then the server's aggregate
    run_block(setup, state, hp, block_index)         every agent: eval_every_rounds rounds, then evaluate
    finalize(setup, state, hp)                       local-env and robustness-sweep evaluations
    train(setup, key, hp)                            init, scan(run_block), finalize

`hp` is the agent's numeric hyperparameters (`config.agent.hparams()`), a pytree argument rather than
a constant, so a sweep over them is a vmap. The run's settings (`TrainConfig`) live in
`fedjax_rl.training.configs`; this module names no algorithm.

`train` is pure: jit and vmap (over seeds, over hyperparameters) are applied by the caller. The same
parts, bound to one setup by `make_trainer(config)` (`.init`, `.run_block`, `.finalize`), let a host
loop run the program block by block with a progress bar and checkpoints (`fedjax_rl.training.loop.run`,
the CLI's and the API's door, whose numbers are bit-identical across entry points and resumes).
`train` as one fused program computes the same thing but XLA rounds a few fused operations
differently (1-2 ulps after one update; docs/reproducibility.md).

Non-finite values: every block reports, per seed, the first environment step at which each of the
agent's losses (and, checked at the end of every round, its shared parameters) was not finite, and
which agent it was (`nonfinite_step/<quantity>`, `nonfinite_agent/<quantity>`; step 0: none). The
host loop stops a run on them (`loop.run`). Shared parameters are checked as uploaded under
the mean (a non-finite upload makes the mean non-finite); under a robust aggregation rule, which
exists to absorb a faulty upload, the aggregated model is checked (naming the agents whose uploads
were non-finite), and `nonfinite_uploads` [K] counts the rounds whose upload the rule absorbed.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_rl import envs
from fedjax_rl.core import agent_axis, attacks, evaluate, federated, perturb
from fedjax_rl.agents.base import Transition
from fedjax_rl.training import checkpoint
from fedjax_rl.training.configs import TrainConfig

PARAMETERS = "parameters"  # the quantity name for non-finite shared parameters
_SERVER_STREAM = 0x5E  # fold_in tag of the server's key stream (participant draws)
_NO_STEP = jnp.iinfo(jnp.int32).max


@struct.dataclass
class AgentCarry:
    """Everything one agent carries. Only `learner.shared` ever crosses the agent axis."""

    learner: federated.FederatedState
    env_state: Any
    obs: jax.Array
    env_params: Any
    key: jax.Array
    episode_return: jax.Array
    # Its initial shared leaves, kept where the run's attack is `stale` (`core.attacks`); None (no leaves)
    # otherwise, so that every other run's carry and checkpoint are what they were.
    frozen: Any = None


@struct.dataclass
class TrainState:
    """One seed's run. Every leaf of `agents` has the agent axis first."""

    agents: AgentCarry
    rates: jax.Array  # [K, len(physics)] perturbation rates n_k
    eval_key: jax.Array
    server_key: jax.Array  # the server's draws of participants (partial participation)


@dataclasses.dataclass(frozen=True, eq=False)
class Setup:
    """What every part of the loop closes over, made once per run (static: nothing here is traced)."""

    config: TrainConfig
    env: Any
    nominal_params: Any
    agent: Any  # the protocol of fedjax_rl.agents.base
    server: federated.Server

    @property
    def max_steps(self) -> int:
        return int(self.nominal_params.max_steps_in_episode)

    @property
    def watched(self) -> tuple[str, ...]:
        """The quantities checked for non-finite values."""
        return (*self.agent.loss_names, PARAMETERS)


def make_setup(config: TrainConfig) -> Setup:
    """Validate `config` (once: see `TrainConfig.validate`) and build its env, agent and server."""
    config.validate()
    env, nominal_params = envs.make(config.env_name, config.physics, config.engine)
    obs_shape = env.observation_space(nominal_params).shape
    agent = config.algorithm.agent(config.agent, obs_shape, env.action_space(nominal_params),
                                   total_steps=config.steps_per_agent)
    server = federated.Server(config.num_agents, config.participation, config.aggregation, config.trim,
                              config.krum_byzantine, config.krum_keep)
    return Setup(config=config, env=env, nominal_params=nominal_params, agent=agent, server=server)


def _first_step(bad: jax.Array, steps: jax.Array) -> jax.Array:
    """The first of `steps` where `bad` holds (_NO_STEP if none)."""
    return jnp.min(jnp.where(bad, steps, _NO_STEP))


def _all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def _judge_aggregate(first_bad: dict, agents_state: AgentCarry, last_step) -> tuple[dict, jax.Array]:
    """Under a robust rule: shared parameters are bad when the model the agents received is not
    finite, blaming the agents whose uploads were not (all agents when none was). Returns the
    updated `first_bad` and [K] 1.0 where an agent's upload was not finite."""
    bad_upload = first_bad[PARAMETERS] != _NO_STEP
    bad_model = ~jax.vmap(_all_finite)(agents_state.learner.shared)
    blamed = bad_model & (bad_upload | ~jnp.any(bad_upload))
    return {**first_bad, PARAMETERS: jnp.where(blamed, last_step, _NO_STEP)}, bad_upload.astype(jnp.float32)


def local_metrics(local_episodes: jax.Array) -> dict:
    """The paper's metrics over the local environments from the global policy's returns
    `local_episodes` [K, episodes] in each agent's own environment: every agent's mean return,
    their Average and their Minimum."""
    local = jnp.mean(local_episodes, axis=-1)
    return {
        "local_returns": local,
        "local_average": jnp.mean(local),
        "local_minimum": jnp.min(local),
        "local_episode_returns": local_episodes,  # [K, eval_episodes]
    }


def for_each_agent(setup: Setup, fn, in_axes):
    """`fn` of one agent over the agent axis (vmap, or shard_map over `num_devices`)."""
    return agent_axis.for_each_agent(fn, setup.config.num_agents, setup.config.num_devices, in_axes=in_axes)


# -- one agent -------------------------------------------------------------------------------------


def init_agent(setup: Setup, key, env_params) -> AgentCarry:
    """One agent's initial carry: its learner, its environment reset under `env_params`, its loop key and a
    zero episode return."""
    learner_key, reset_key, loop_key = jax.random.split(key, 3)
    obs, env_state = setup.env.reset(reset_key, env_params)
    learner = setup.agent.init(learner_key)
    config = setup.config
    return AgentCarry(
        learner=learner,
        env_state=env_state,
        obs=obs,
        env_params=env_params,
        key=loop_key,
        episode_return=jnp.float32(0.0),
        frozen=learner.shared if config.attackers > 0 and config.attack == "stale" else None,
    )


def local_step(setup: Setup, carry: AgentCarry, step, hp) -> tuple[AgentCarry, dict]:
    """One environment step of one agent, into its replay buffer, then its learning on schedule."""
    agent = setup.agent
    key, act_key, env_key, learn_key = jax.random.split(carry.key, 4)
    action = agent.act(carry.learner.shared, carry.obs, act_key, step, hp)
    obs, env_state, reward, terminated, truncated, info = setup.env.step(
        env_key, carry.env_state, agent.env_action(action), carry.env_params
    )
    transition = Transition(
        obs=carry.obs,
        action=action,
        reward=reward.astype(jnp.float32),
        next_obs=info["final_observation"],
        terminated=terminated,
    )
    learner = agent.observe(carry.learner, transition)
    learner, losses = agent.learn(learner, learn_key, step, hp)
    episode_return = carry.episode_return + reward
    done = terminated | truncated
    metrics = {
        "episodes": done.astype(jnp.float32),
        "episode_return_sum": jnp.where(done, episode_return, 0.0),
        **losses,
    }
    carry = carry.replace(
        learner=learner,
        env_state=env_state,
        obs=obs,
        key=key,
        episode_return=jnp.where(done, 0.0, episode_return),
    )
    return carry, metrics


def round_steps(setup: Setup, round_index):
    """The environment steps of round `round_index`, counted from 1: E consecutive steps."""
    # Env steps are counted from 1 and carry no agent axis, so schedules stay real branches.
    E = setup.config.sync_every
    return round_index * E + 1 + jnp.arange(E)


def summarize(setup: Setup, carry: AgentCarry, per_step, steps):
    """A round's per-step metrics summed, and the first step each watched quantity was not finite."""
    metrics = jax.tree.map(jnp.sum, per_step)
    first_bad = {name: _first_step(~jnp.isfinite(per_step[name]), steps) for name in setup.agent.loss_names}
    first_bad[PARAMETERS] = jnp.where(_all_finite(carry.learner.shared), _NO_STEP, steps[-1])
    return metrics, first_bad


def agent_local_round(setup: Setup, carry: AgentCarry, round_index, hp):
    """E local steps of one agent, no aggregation."""
    steps = round_steps(setup, round_index)
    carry, per_step = jax.lax.scan(lambda c, s: local_step(setup, c, s, hp), carry, steps)
    return carry, summarize(setup, carry, per_step, steps)


def agent_round(setup: Setup, carry: AgentCarry, round_index, hp, weight, attacker=None, attack_key=None):
    """E local steps of one agent, then the server's aggregate of its shared leaves over the agents
    (`weight`: its weight in the aggregate, under partial participation). `attacker` (this agent's bool,
    with the round's `attack_key`; None where the run has no attackers): an attacker's upload is
    replaced by the config's attack (`fedjax_rl.core.attacks`) before the aggregate."""
    carry, summary = agent_local_round(setup, carry, round_index, hp)
    if attacker is not None:
        config = setup.config
        honest = carry.learner.shared
        hostile = attacks.attacked(honest, config.attack, config.attack_scale,
                                   jax.random.fold_in(attack_key, agent_axis.agent_index()), carry.frozen, attacker)
        uploaded = jax.tree.map(lambda h, x: jnp.where(attacker, x, h), honest, hostile)
        carry = carry.replace(learner=carry.learner.replace(shared=uploaded))
    return federated.average_shared(carry, weight, setup.server.rule), summary


# -- one seed --------------------------------------------------------------------------------------


def global_policy(setup: Setup, state: TrainState):
    """The global model's greedy policy, obs -> action (agent 0's shared leaves, the same on every agent after
    a sync)."""
    # After a sync every agent holds the same shared leaves; agent 0's copy is the global model.
    shared = jax.tree.map(lambda leaf: leaf[0], state.agents.learner.shared)
    return lambda obs: setup.agent.greedy_action(shared, obs)


def strongly_typed(tree: Any) -> Any:
    """`tree` without weakly typed leaves (the type JAX gives values made from Python numbers, such as
    env params and step counters), which no restored copy has (a checkpoint, a message's arrays): a
    state fed to a program in both forms would compile it twice, so a resumed run or a client's later
    round would compile what the first already compiled. Each leaf keeps its dtype, and so its
    arithmetic; strongly typed arrays are returned as they are, not copied."""
    return jax.tree.map(lambda leaf: leaf if checkpoint.is_key(leaf) else jnp.asarray(leaf, dtype=jnp.result_type(leaf)),
                        tree)


def init(setup: Setup, key, max_rate=None) -> TrainState:
    """Per-agent physics (m_k = m (1 + n_k)), then every agent's learner and environment.

    `max_rate`: p, the config's when None (then a constant of the program). A
    traced p (a grid over the heterogeneity level, `loop.run(grid={"max_rate": [...]})`)
    vmaps: p enters nothing but this draw, and the env params it makes are data carried in the
    state. No key depends on p, so a seed draws the same u_k ~ U(-1, 1) at every level and
    n_k = p u_k: runs at different p are paired."""
    config, K = setup.config, setup.config.num_agents
    max_rate = config.max_rate if max_rate is None else max_rate
    keys = run_keys(key)
    rates = sample_agent_rates(config, keys.physics, max_rate)
    env_params = perturb.agent_env_params(setup.env, setup.nominal_params, config.physics, rates)
    agents_state = for_each_agent(setup, functools.partial(init_agent, setup), in_axes=(0, 0))(
        jax.random.split(keys.agents, K), env_params)
    return TrainState(agents=agents_state, rates=rates, eval_key=keys.evaluation, server_key=keys.server)


class RunKeys(NamedTuple):
    """The named key streams of one run (one seed): the agents' physics draw, the agents' own keys
    (split K ways), the evaluations', and the server's (participants, attacks)."""

    physics: jax.Array
    agents: jax.Array
    evaluation: jax.Array
    server: jax.Array


def run_keys(key) -> RunKeys:
    """The streams `init` gives a run keyed `key` (`seed_keys`), for any process that plays a part of
    the run (a federation's clients and server, `fedjax_rl.flower`)."""
    physics_key, agents_key, eval_key = jax.random.split(key, 3)
    return RunKeys(physics_key, agents_key, eval_key, server_key(key))


def sample_agent_rates(config: TrainConfig, physics_key, max_rate) -> jax.Array:
    """[K, len(physics)] perturbation rates n_k, one independent draw per physical parameter."""
    return jnp.stack([perturb.sample_rates(k, config.num_agents, max_rate)
                      for k in jax.random.split(physics_key, len(config.physics))], axis=-1)


def final_evaluation_keys(eval_key, num_rounds: int) -> tuple[jax.Array, jax.Array]:
    """(local episodes' key, robustness sweep's key) of the final evaluation (`finalize`)."""
    # Curve evaluations fold in rounds_done <= num_rounds; this index is never one of them.
    return tuple(jax.random.split(jax.random.fold_in(eval_key, num_rounds + 1)))


def server_key(key) -> jax.Array:
    """The server's key stream (its draws of participants) of the run keyed `key`."""
    # Folded in rather than split off, so adding this stream left every other key unchanged.
    return jax.random.fold_in(key, _SERVER_STREAM)


def run_block(setup: Setup, state: TrainState, hp, block_index) -> tuple[TrainState, dict]:
    """`eval_every_rounds` rounds then a nominal evaluation. `block_index` must not be batched
    (pass it with in_axes=None under a seed vmap): every schedule derives from it, and an
    unbatched step keeps `lax.cond` a real branch instead of a select that runs both sides."""
    config, server = setup.config, setup.server
    E = config.sync_every
    partial = server.partial
    attacked = config.attackers > 0  # static: without attackers the program is the one without the setting
    mapped_round = for_each_agent(setup, functools.partial(agent_round, setup),
                                  in_axes=(0, None, None, 0 if partial else None) + ((0, None) if attacked else ()))

    def round_fn(agents_state, round_index):
        weights = server.weights(state.server_key, round_index)
        attack = ((attacks.attacker_mask(state.server_key, config.num_agents, config.attackers),
                   attacks.round_key(state.server_key, round_index)) if attacked else ())
        agents_state, (outputs, first_bad) = mapped_round(agents_state, round_index, hp, weights, *attack)
        bad_uploads = None
        if server.robust:
            first_bad, bad_uploads = _judge_aggregate(first_bad, agents_state, (round_index + 1) * E)
        return agents_state, ((outputs, first_bad), weights, bad_uploads)

    round_indices = block_index * config.eval_every_rounds + jnp.arange(config.eval_every_rounds)
    agents_state, ((per_round, first_bad), participants, bad_uploads) = jax.lax.scan(
        round_fn, state.agents, round_indices)
    rounds_done = (block_index + 1) * config.eval_every_rounds
    state = state.replace(agents=agents_state)
    eval_key = jax.random.fold_in(state.eval_key, rounds_done)
    totals = jax.tree.map(jnp.sum, per_round)  # over rounds and agents
    policy = global_policy(setup, state)
    nominal = evaluate.episode_returns(setup.env, setup.nominal_params, policy, eval_key, config.eval_episodes,
                                       setup.max_steps)
    # The paper's metrics on the way: the global policy in every agent's own environment, as the final
    # evaluation measures it, from the nominal episodes' initial-state keys (common random numbers).
    # Its own loop, so that the nominal evaluation computes exactly what it did before.
    local_episodes = evaluate.returns_over_params(setup.env, state.agents.env_params, policy, eval_key,
                                                  config.eval_episodes, setup.max_steps)
    metrics = block_record(setup, rounds_done, nominal, local_episodes, totals)
    if partial:
        metrics["participants"] = participants  # [eval_every_rounds, K]: 1 where agent k was averaged
    if server.robust:
        metrics["nonfinite_uploads"] = jnp.sum(bad_uploads, axis=0)  # [K]: rounds of the block
    for name in setup.watched:
        per_agent = jnp.min(first_bad[name], axis=0)  # [K]: first bad step of each agent
        step = jnp.min(per_agent)
        metrics[f"nonfinite_step/{name}"] = jnp.where(step == _NO_STEP, 0, step)
        metrics[f"nonfinite_agent/{name}"] = jnp.where(step == _NO_STEP, -1, jnp.argmin(per_agent))
    return state, metrics


def block_record(setup: Setup, rounds_done, nominal, local_episodes, totals: dict) -> dict:
    """One evaluation block's curve record, after `rounds_done` rounds: the global policy's
    `nominal` returns [eval_episodes], its returns in each agent's own environment `local_episodes`
    [K, eval_episodes], and the block's training `totals` (summed over rounds and agents: steps
    trained, episodes, their returns, each loss). `run_block`'s, and a federation's
    (`fedjax_rl.flower`) from its clients' replies."""
    local = local_metrics(local_episodes)
    train_steps = jnp.maximum(totals["trained"], 1.0)
    return {
        "env_steps": rounds_done * setup.config.sync_every,
        "nominal_return": jnp.mean(nominal, axis=-1),
        "nominal_episode_returns": nominal,  # [eval_episodes]: the figures' band is over episodes
        **{name: local[name] for name in ("local_average", "local_minimum", "local_returns")},
        "train_return": totals["episode_return_sum"] / jnp.maximum(totals["episodes"], 1.0),
        **{name: totals[name] / train_steps for name in setup.agent.loss_names},
    }


def local_round(setup: Setup, state: TrainState, hp, round_index) -> TrainState:
    """E local steps of every agent *without* the federated average (for tests and debugging)."""
    agents_state, _ = for_each_agent(setup, functools.partial(agent_local_round, setup), in_axes=(0, None, None))(
        state.agents, round_index, hp)
    return state.replace(agents=agents_state)


def finalize(setup: Setup, state: TrainState, hp) -> dict:
    """The global policy in every agent's own environment and over the robustness sweep; in a run with
    attackers, which agents attacked ("attackers", [K] bool, `attacks.attacker_mask`); a run without
    records nothing more."""
    del hp  # evaluation is greedy; kept in the signature for symmetry with run_block
    config, env = setup.config, setup.env
    policy = global_policy(setup, state)
    local_key, sweep_key = final_evaluation_keys(state.eval_key, config.num_rounds)
    local_episodes = evaluate.returns_over_params(
        env, state.agents.env_params, policy, local_key, config.eval_episodes, setup.max_steps
    )
    physics_values = jnp.stack(
        [jax.vmap(lambda p, n=name: env.get_physics(p, n))(state.agents.env_params) for name in config.physics],
        axis=-1,
    )
    record = final_record(setup, policy, sweep_key, state.rates, physics_values, local_episodes)
    if config.attackers > 0:  # who attacked, [K] bool: the honest agents' Minimum reads it (reproduce.attacks)
        record["attackers"] = attacks.attacker_mask(state.server_key, config.num_agents, config.attackers)
    return record


def final_record(setup: Setup, policy, sweep_key, rates, physics_values, local_episodes) -> dict:
    """The final evaluation's record: each agent's physics (`rates`, `physics_values`, [K,
    len(physics)]), the global `policy`'s returns in each agent's environment `local_episodes` [K,
    eval_episodes], and its robustness sweep, played here from `sweep_key`. `finalize`'s, and a
    federation's (`fedjax_rl.flower`) from its clients' replies."""
    config, env = setup.config, setup.env
    sweep_scales = perturb.sweep_scales(config.sweep_points)
    sweep_params = perturb.scaled_env_params(env, setup.nominal_params, config.physics, sweep_scales)
    sweep_episodes = evaluate.returns_over_params(
        env, sweep_params, policy, sweep_key, config.eval_episodes, setup.max_steps
    )
    return {
        "rates": rates,
        "physics_values": physics_values,  # [K, len(physics)]: each agent's perturbed parameters
        **local_metrics(local_episodes),
        "sweep_scales": jnp.asarray(sweep_scales, jnp.float32),
        "sweep_returns": jnp.mean(sweep_episodes, axis=-1),
        "sweep_episode_returns": sweep_episodes,  # [sweep_points, eval_episodes]
    }


def train(setup: Setup, key, hparams=None):
    """The whole run as one program: init, every block, finalize. `hparams` None: the config's."""
    hp = setup.agent.hparams() if hparams is None else hparams
    state = init(setup, key)
    state, curve = jax.lax.scan(lambda s, b: run_block(setup, s, hp, b), state,
                                jnp.arange(setup.config.num_evals))
    return state, {"curve": curve, "final": finalize(setup, state, hp)}


class Trainer(NamedTuple):
    """The loop's parts bound to one `Setup`, for a host loop (`loop.run`) or a caller who
    composes them (jit, vmap over seeds or hyperparameters)."""

    setup: Setup
    init: Any  # (key, max_rate=None) -> TrainState
    run_block: Any  # (TrainState, hparams, block_index) -> (TrainState, block metrics)
    finalize: Any  # (TrainState, hparams) -> final metrics
    train: Any  # (key, hparams=None) -> (TrainState, metrics)
    local_round: Any  # (TrainState, hparams, round_index) -> TrainState, no averaging

    @property
    def config(self) -> TrainConfig:
        return self.setup.config

    @property
    def agent(self):
        return self.setup.agent

    @property
    def hparams(self):
        """The config's numeric hyperparameters as a pytree (`settings.Hyperparams`), to vmap over."""
        return self.setup.agent.hparams()


def _bind(part, setup: Setup):
    """`part` with `setup` bound: a function (not a `functools.partial`), named and documented as
    `part`, so tools that read a function's source (chex's trace counters) see the part's."""
    @functools.wraps(part)
    def bound(*args, **kwargs):
        return part(setup, *args, **kwargs)

    bound.__signature__ = inspect.signature(functools.partial(part, setup))  # without `setup`
    return bound


def make_trainer(config: TrainConfig) -> Trainer:
    """The loop's parts bound to one `Setup` built from `config` (`init`, `run_block`, `finalize`, `train`,
    `local_round`)."""
    setup = make_setup(config)
    return Trainer(setup=setup, init=_bind(init, setup), run_block=_bind(run_block, setup),
                   finalize=_bind(finalize, setup), train=_bind(train, setup),
                   local_round=_bind(local_round, setup))


def make_train(config):
    """`train(key, hparams=None) -> (TrainState, metrics)`; pure, to be jitted/vmapped by the caller."""
    return make_trainer(config).train


def seed_keys(seed: int, num_seeds: int, first: int = 0) -> jax.Array:
    """Independent keys for `num_seeds` vmapped runs (they differ in init, exploration, physics): seed
    indices first, ..., first + num_seeds - 1 of `seed`'s sequence. A seed index always gets the same
    key, whatever the run's width (JAX's partitionable threefry, the default: split(key, n)[i] does not
    depend on n; tests/test_pieces.py checks it), so a run of seeds [a, b) trains exactly those seeds
    of a wider run."""
    return jax.random.split(jax.random.key(seed), first + num_seeds)[first:]


def over_runs(fn: Callable, run_shape: tuple[int, ...], run_batch: int | None) -> Callable:
    """`fn(state, hparams, *static)` of one run, mapped over runs laid out as `run_shape`: [seeds], with
    `hparams` shared, or [grid points, seeds], with `hparams` carrying the grid axis.
    `*static` (a block index) is never batched, so the schedules derived from it stay real branches.

    The runs are flattened to one axis (a vmap of vmaps would add a batch dimension to every array of
    the physics, see `evaluate.returns_over_params`). run_batch None vmaps them all at once; otherwise
    `lax.map` vmaps `run_batch` of them at a time (a smaller last batch if they do not divide). The
    state keeps its layout."""
    num_runs, num_seeds, grid_hparams = math.prod(run_shape), run_shape[-1], len(run_shape) == 2

    def mapped(state, hparams, *static):
        flat = jax.tree.map(lambda x: x.reshape((num_runs, *x.shape[len(run_shape):])), state)
        if grid_hparams:  # [points] -> [points * seeds], the flattened order of the state
            per_run = jax.tree.map(lambda x: jnp.repeat(x, num_seeds, axis=0), hparams)
            one_run, runs = (lambda xs: fn(xs[0], xs[1], *static)), (flat, per_run)
        else:
            one_run, runs = (lambda s: fn(s, hparams, *static)), flat
        out = jax.vmap(one_run)(runs) if run_batch is None else jax.lax.map(one_run, runs, batch_size=run_batch)
        return jax.tree.map(lambda x: x.reshape((*run_shape, *x.shape[1:])), out)

    return mapped


def communication(trainer) -> dict:
    """What crosses the network in this run (`federated.communication`), from the shapes of one
    agent's shared leaves (nothing is computed)."""
    config = trainer.config
    shapes = jax.eval_shape(trainer.init, jax.random.key(0)).agents.learner.shared
    one_agent = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), shapes)
    return federated.communication(one_agent, config.num_agents, config.participation, config.num_rounds)
