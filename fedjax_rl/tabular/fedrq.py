"""FedRQ (tabular) and QAvg = FedRQ with omega = 0 (DESIGN.md section 1).

Every agent k keeps Q_k [S, A] and repeats
    local step t:  Q_k <- (1 - lambda_t) Q_k + lambda_t T_k Q_k      (exact: all (s, a) at once)
or, sampled, the same with the expectation replaced by V(s'), s' ~ P_k(.|s, a) drawn for every
(s, a) (the min over N_k^s is still taken over the support). After every E local steps the server
averages, Q_bar = mean_k Q_k, and broadcasts Q_k <- Q_bar. Default step size (Theorem 1):
lambda_t = 2 / ((1 - gamma)(t + E)), t = 0, 1, ... counting local steps.

Structure of one compiled run (`make_fedrq(config)` returns `run(key, problem, omega, target)`):

    for_each_agent(agent_run)                 # agents: named vmap axis (or shard_map over devices)
      agent_run = scan(round, length=num_rounds)
        round   = federated.federated_round: scan(local_step, length=E) then the average

Q_k is the `shared` part of a `FederatedState`; `private` (AgentPrivate) holds the agent's kernel,
neighbour sets and sampling key. With a target (Q_R* for FedRQ, Q* of P_bar for QAvg) the run also
returns ||Q_bar_t - target||_inf for every t = 0..T, where Q_bar_t = mean_k Q_k at time t (also
between syncs).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_rl.core import agent_axis, federated
from fedjax_rl.core.agent_axis import for_each_agent
from fedjax_rl.core.aggregation import federated_mean
from fedjax_rl.core.federated import FederatedState
from fedjax_rl.tabular.mdp import TabularArrays, TabularMDP, require_assumption1, to_arrays
from fedjax_rl.tabular.robust import robust_backup, robust_value_iteration


def theorem_step_size(t: jax.Array, gamma: jax.Array, sync_every: int) -> jax.Array:
    """lambda_t = 2 / ((1 - gamma)(t + E)), Theorem 1's schedule (> 1 for small t + E)."""
    return 2.0 / ((1.0 - gamma) * (t + sync_every))


def capped_step_size(t: jax.Array, gamma: jax.Array, sync_every: int) -> jax.Array:
    """min(1, lambda_t): Theorem 1's schedule without over-relaxation. Not the paper's schedule;
    it keeps every local step a convex combination of Q_k and T_k Q_k (see tests/test_tabular.py:
    for gamma = 0.9, E = 2 the uncapped schedule violates the bound and this one does not)."""
    return jnp.minimum(1.0, theorem_step_size(t, gamma, sync_every))


@dataclasses.dataclass(frozen=True)
class FedRQConfig:
    """Static settings of a run (hashable; closed over, not traced).

    num_rounds: R; the run makes T = R * E local steps.
    sync_every: E, local steps between averages.
    sampled: draw s' ~ P_k(.|s, a) instead of the exact expectation.
    step_size: (t, gamma, E) -> lambda_t; t is the local step counter (traced).
    num_devices: None: agents are a vmap axis on one device; n: sharded over n devices.
    record: return the per-step gap, the per-round Q_bar and the drift / spread diagnostics.
    """

    num_rounds: int
    sync_every: int = 100
    sampled: bool = False
    step_size: Callable[[jax.Array, jax.Array, int], jax.Array] = theorem_step_size
    num_devices: int | None = None
    record: bool = True

    def __post_init__(self):
        if int(self.num_rounds) < 1:
            raise ValueError(f"num_rounds must be >= 1, got {self.num_rounds}")
        if int(self.sync_every) < 1:
            raise ValueError(f"sync_every (E) must be >= 1, got {self.sync_every}")
        if self.num_devices is not None and int(self.num_devices) < 1:
            raise ValueError(f"num_devices must be >= 1, got {self.num_devices}")


class FedRQResult(NamedTuple):
    """What a run returns. Fields marked (record) are None when `config.record` is False.

    q_bar: [S, A] the final average (= every agent's Q after the last sync).
    q_agents: [K, S, A] every agent's final Q.
    gaps: [T + 1] ||Q_bar_t - target||_inf, t = 0..T (record, and a target given).
    q_bar_rounds: [R, S, A] Q_bar after each round (record).
    drift: [R] max_k ||Q_k - Q_bar||_inf just before each sync (record).
    spread: [R] max_k ||Q_k - Q_bar||_inf just after each sync; 0 means every agent holds Q_bar (record).
    """

    q_bar: jax.Array
    q_agents: jax.Array
    gaps: jax.Array | None
    q_bar_rounds: jax.Array | None
    drift: jax.Array | None
    spread: jax.Array | None


class AgentPrivate(NamedTuple):
    """What never leaves agent k: its kernel on the support lists, its neighbour sets, its key."""

    probs: jax.Array  # [S, A, m]
    neighbours: jax.Array  # [S, n]
    key: jax.Array


class CommonProblem(NamedTuple):
    """What every agent knows alike (not averaged, just replicated)."""

    next_states: jax.Array  # [S, A, m]
    reward: jax.Array  # [S, A]
    gamma: jax.Array


def _distance_to_mean(q: jax.Array) -> jax.Array:
    """max over agents of ||Q_k - Q_bar||_inf (a collective over the agent axis)."""
    return jax.lax.pmax(jnp.abs(q - federated_mean(q)).max(), agent_axis.agent_axes())


def make_fedrq(config: FedRQConfig) -> Callable[..., FedRQResult]:
    """Returns run(key, problem, omega, target=None) -> FedRQResult; pure, jit/vmap it freely.

    key: PRNG key (used by the sampled variant); problem: `TabularArrays`; omega: scalar (may be
    traced; 0 gives QAvg); target: [S, A] or None.
    """
    E = int(config.sync_every)
    track_gap_default = config.record

    def local_step(common: CommonProblem, omega, target, track_gap, carry, _):
        next_states, reward, gamma = common
        state, t = carry
        q = state.shared
        probs, neighbours, key = state.private
        v = q.max(-1)
        if config.sampled:
            key, draw_key = jax.random.split(key)
            logits = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), -jnp.inf)
            j = jax.random.categorical(draw_key, logits, axis=-1)  # [S, A]
            s_next = jnp.take_along_axis(next_states, j[..., None], axis=-1)
            target_q = robust_backup(v, s_next, jnp.ones_like(s_next, q.dtype), neighbours, reward, gamma, omega)
        else:
            target_q = robust_backup(v, next_states, probs, neighbours, reward, gamma, omega)
        lam = config.step_size(t.astype(q.dtype), gamma, E)
        q = (1.0 - lam) * q + lam * target_q
        state = state.replace(shared=q, private=state.private._replace(key=key))
        gap = jnp.abs(federated_mean(q) - target).max() if track_gap else None
        return (state, t + 1), gap

    def agent_run(private: AgentPrivate, common: CommonProblem, omega, target, track_gap):
        q0 = jnp.zeros_like(common.reward)
        state = FederatedState(shared=q0, private=private)
        step = functools.partial(local_step, common, omega, target, track_gap)

        def before_sync(carry, gaps):
            return (gaps, _distance_to_mean(carry[0].shared)) if config.record else None

        def round_(carry, _):
            (state, t), summary = federated.federated_round(step, carry, length=E, summarize=before_sync)
            out = None
            if config.record:
                gaps, drift = summary
                out = (gaps, state.shared, drift, _distance_to_mean(state.shared))
            return (state, t), out

        (state, _), out = jax.lax.scan(round_, (state, jnp.zeros((), jnp.int32)), None, length=config.num_rounds)
        gap0 = jnp.abs(federated_mean(q0) - target).max() if track_gap else None
        return state.shared, gap0, out

    def run(key: jax.Array, problem: TabularArrays, omega, target: jax.Array | None = None) -> FedRQResult:
        K = problem.probs.shape[0]
        track_gap = track_gap_default and target is not None
        if target is None:
            target = jnp.zeros_like(problem.reward)
        omega = jnp.asarray(omega, problem.reward.dtype)
        keys = jax.random.split(key, K)
        mapped = for_each_agent(
            functools.partial(agent_run, track_gap=track_gap),
            num_agents=K,
            num_devices=config.num_devices,
            in_axes=(0, None, None, None),
        )
        private = AgentPrivate(problem.probs, problem.neighbours, keys)
        common = CommonProblem(problem.next_states, problem.reward, problem.gamma)
        q_agents, gap0, out = mapped(private, common, omega, target)
        if not config.record:
            return FedRQResult(q_agents[0], q_agents, None, None, None, None)
        gaps, q_rounds, drift, spread = jax.tree.map(lambda x: x[0], out)  # identical on every agent
        gaps = jnp.concatenate([gap0[:1], gaps.reshape(-1)]) if track_gap else None
        return FedRQResult(q_agents[0], q_agents, gaps, q_rounds, drift, spread)

    return run


@functools.lru_cache(maxsize=64)
def _jitted(config: FedRQConfig):
    return jax.jit(make_fedrq(config))


@functools.lru_cache(maxsize=64)
def _jitted_value_iteration():
    return jax.jit(robust_value_iteration)


def _check_run_inputs(mdp: TabularMDP, omega: float, num_devices: int | None) -> None:
    if not isinstance(mdp, TabularMDP):
        raise TypeError(f"expected a TabularMDP, got {type(mdp).__name__}")
    if not 0.0 <= float(omega) <= 1.0:
        raise ValueError(f"omega must be in [0, 1], got {omega}")
    if float(omega) > 0 and not mdp.check_assumption1:
        # FedRQ's analysis (and T_bar = mean_k T_k) needs Assumption 1: check it even if skipped.
        require_assumption1(mdp.P, mdp.names)
    agent_axis.check_num_devices(mdp.num_agents, num_devices)


def fedrq(
    mdp: TabularMDP,
    omega: float,
    num_rounds: int,
    sync_every: int = 100,
    *,
    key: jax.Array | None = None,
    sampled: bool = False,
    step_size: Callable = theorem_step_size,
    num_devices: int | None = None,
    target: jax.Array | str | None = "optimal",
) -> FedRQResult:
    """Run FedRQ on `mdp` (inputs are validated in numpy before anything compiles).

    target: "optimal" (default) measures gaps against the fixed point of T_bar for this omega (Q_R*;
    for omega = 0 the optimal Q of P_bar); an array measures against it; None records no gaps.
    Compiled runs are cached per static config.
    """
    _check_run_inputs(mdp, omega, num_devices)
    config = FedRQConfig(num_rounds, sync_every, sampled, step_size, num_devices)
    problem = to_arrays(mdp)
    if isinstance(target, str):
        if target != "optimal":
            raise ValueError(f"target must be 'optimal', an array or None, got {target!r}")
        target = _jitted_value_iteration()(problem, jnp.asarray(omega, problem.reward.dtype))
    key = jax.random.key(0) if key is None else key
    return _jitted(config)(key, problem, omega, target)


def qavg(mdp: TabularMDP, num_rounds: int, sync_every: int = 100, **kwargs) -> FedRQResult:
    """QAvg: FedRQ with omega = 0 (converges to the optimal Q of P_bar). Needs no Assumption 1."""
    return fedrq(mdp, 0.0, num_rounds, sync_every, **kwargs)
