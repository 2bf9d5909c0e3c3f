"""The federation: what agents share, who takes part in a round, the server, and a round itself.

Every per-agent quantity carries a leading agent axis of size K (`fedjax_rl.core.agent_axis`). The
server's operation is an aggregation rule over that axis (`fedjax_rl.core.aggregation`), applied to
the *shared* part of the state only; every agent receives its result.

The server is a seam (as FedJAX's server update is): `Server` holds who takes part in a round
(`participation`: ceil(participation x K) agents drawn from the server's key stream) and the rule
that aggregates their shared leaves (`aggregation`), both declared once as settings.

What is shared is explicit: algorithms keep their state as `FederatedState(shared=..., private=...)`.
`shared` holds what crosses the agent axis (Q tables, network parameters, target networks,
expectile networks); `private` holds everything else (optimizer states, replay buffers, environment
states and parameters, keys). `federated_average` touches `shared` only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from fedjax_rl.core.aggregation import (
    AGGREGATORS, KRUM_BYZANTINE, KRUM_KEEP, TRIM, Rule, check_aggregation, federated_mean, num_participants)


@struct.dataclass
class FederatedState:
    """A per-agent state split into what the server averages and what never leaves the agent."""

    shared: Any
    private: Any


def federated_average(state: FederatedState, weight: jax.Array | None = None,
                      rule: Rule = federated_mean) -> FederatedState:
    """Aggregate the shared leaves over agents with `rule` (the mean by default, weighted by
    `weight`, see `federated_mean`); private leaves are left untouched."""
    return state.replace(shared=rule(state.shared, weight))


def average_shared(tree: Any, weight: jax.Array | None = None, rule: Rule = federated_mean) -> Any:
    """`federated_average` applied to every `FederatedState` inside `tree` (a client's carry may
    hold its learner next to environment state, counters, keys); everything else is untouched."""
    is_state = lambda x: isinstance(x, FederatedState)  # noqa: E731
    return jax.tree.map(lambda x: federated_average(x, weight, rule) if is_state(x) else x, tree,
                        is_leaf=is_state)


def sample_participants(key: jax.Array, num_agents: int, participation: float) -> jax.Array:
    """The server's draw for one round: a [K] 0/1 float mask with exactly
    `num_participants(K, participation)` ones, uniformly among the K agents."""
    chosen = jax.random.permutation(key, num_agents)[: num_participants(num_agents, participation)]
    return jnp.zeros(num_agents, jnp.float32).at[chosen].set(1.0)


# -- the server: who takes part in a round and how their shared leaves are aggregated -------------

@dataclasses.dataclass(frozen=True)
class Server:
    """The server's side of a round (static, hashable): which agents' shared leaves enter it
    (`weights`) and the rule that aggregates them (`aggregate`, run inside `for_each_agent`)."""

    num_agents: int
    participation: float = 1.0
    aggregation: str = "mean"
    trim: float = TRIM.default
    krum_byzantine: int = KRUM_BYZANTINE.default
    krum_keep: int = KRUM_KEEP.default

    def __post_init__(self):
        check_aggregation(self.aggregation, self.trim, self.num_agents, self.participation, self.krum_byzantine,
                          self.krum_keep)

    @property
    def partial(self) -> bool:
        # Static: full participation keeps the plain pmean, bit for bit.
        return self.participation < 1.0

    @property
    def robust(self) -> bool:
        """Whether the rule is built to absorb a faulty agent's upload (not the mean)."""
        return AGGREGATORS.get(self.aggregation).robust

    @property
    def rule(self) -> Rule:
        return AGGREGATORS.get(self.aggregation).rule_for(self)

    def weights(self, server_key: jax.Array, round_index: jax.Array) -> jax.Array | None:
        """The [K] 0/1 participation mask of round `round_index`, drawn from the server's key
        stream; None with full participation."""
        if not self.partial:
            return None
        return sample_participants(jax.random.fold_in(server_key, round_index), self.num_agents, self.participation)

    def aggregate(self, tree: Any, weight: jax.Array | None = None) -> Any:
        """`average_shared` with this server's rule: every `FederatedState` in one agent's `tree`."""
        return average_shared(tree, weight, self.rule)


def communication(shared: Any, num_agents: int, participation: float, num_rounds: int) -> dict:
    """Bytes that cross the network in a run, from one agent's shared tree (arrays or shapes):
    every round, each participating agent uploads its shared leaves and every agent downloads the
    new global model."""
    leaves = jax.tree.leaves(shared)
    params = int(sum(math.prod(x.shape) for x in leaves))
    model_bytes = int(sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in leaves))
    up = num_participants(num_agents, participation) * model_bytes
    down = num_agents * model_bytes
    return {
        "shared_params": params,
        "model_bytes": model_bytes,
        "participants_per_round": num_participants(num_agents, participation),
        "bytes_up_per_round": up,
        "bytes_down_per_round": down,
        "rounds": num_rounds,
        "bytes_total": num_rounds * (up + down),
    }


def federated_round(
    local_step: Callable[[Any, Any], tuple[Any, Any]],
    carry: Any,
    xs: Any = None,
    length: int | None = None,
    summarize: Callable[[Any, Any], Any] | None = None,
    weight: jax.Array | None = None,
    rule: Rule = federated_mean,
) -> tuple[Any, Any]:
    """One federated round of one client: `lax.scan(local_step, carry, xs, length)` (the E local
    steps), then the server's aggregation of the shared leaves (`average_shared` with `rule`, the
    mean by default). Returns `(carry, summarize(carry_before_aggregation, per_step_outputs))` (the
    outputs themselves when `summarize` is None). `weight`: this client's weight in the aggregate
    (partial participation). Used by the deep trainer (`training/program.py`) and tabular FedRQ alike."""
    carry, outputs = jax.lax.scan(local_step, carry, xs, length=length)
    summary = outputs if summarize is None else summarize(carry, outputs)
    return average_shared(carry, weight, rule), summary


def is_sync_step(step: jax.Array, sync_every: int) -> jax.Array:
    """True after every `sync_every`-th local step (steps are counted from 1)."""
    return (step % sync_every) == 0


def maybe_federated_average(state: FederatedState, step: jax.Array, sync_every: int) -> FederatedState:
    """Average when `step` is a sync step. Both branches are traced; `pmean` runs every call.

    Prefer structuring loops as `scan(local_step, length=E)` then `federated_average` (what
    `training/program.py` does): this helper is for loops whose sync points are not at scan boundaries.
    """
    averaged = federated_average(state)
    sync = is_sync_step(step, sync_every)
    return jax.tree.map(lambda a, b: jnp.where(sync, a, b), averaged, state)


