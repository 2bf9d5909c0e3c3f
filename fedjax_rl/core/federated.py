"""The federation: the named agent axis, aggregation of shared leaves, participation, sync
schedule, sharding.

Every per-agent quantity carries a leading agent axis of size K. Client code (an agent's local
step) is written for one agent and is mapped over that axis by `for_each_agent`, which names the
axis `AGENT_AXIS`. The server's operation is an aggregation rule over that axis, applied to the
*shared* part of the state only; every agent receives its result.

The server is a seam (as FedJAX's server update is): `Server` holds who takes part in a round
(`participation`: ceil(participation x K) agents drawn from the server's key stream) and the rule
that aggregates their shared leaves (`aggregation`), both declared once as settings (`AGGREGATION`,
`TRIM`). A rule is a plain function `rule(tree, weight) -> tree` of one agent's leaves, run inside
`for_each_agent`, registered by name as an `Aggregator` (a user's too: `AGGREGATORS.register`, or a
plugin in the entry-point group `fedjax_rl.aggregators`):

  * `federated_mean` (the default, FedAvg): a `lax.pmean`; with participation weights the weighted
    mean sum_k w_k x_k / sum_k w_k;
  * `federated_median`: the coordinate-wise median over the participating agents;
  * `federated_trimmed_mean`: per coordinate, the participating agents' values with the
    floor(trim x participants) smallest and as many largest dropped, averaged;
  * `federated_krum`: Krum and multi-Krum (Blanchard et al., 2017), whole uploads chosen by their
    squared distances to their nearest neighbours (`krum_byzantine`, `krum_keep`).

The two robust rules gather every agent's leaves (`lax.all_gather` over the agent axis, then over
the device axis when sharded) and sort each coordinate (a sorting network of elementwise minima and
maxima up to 32 agents, XLA's sort beyond); a NaN upload counts as +inf, so a minority of faulty
agents (NaN, 1e6) cannot move the median outside the honest agents' values, nor the trimmed mean
when at most floor(trim x participants) agents are faulty. Under partial participation they read
`weight` as a 0/1 mask and use the participating agents only. Their cost: every agent sorts K copies
of the shared leaves (O(K^2) memory under vmap), against one all-reduce for the mean
(benchmarks/aggregation.py).

What is shared is explicit: algorithms keep their state as `FederatedState(shared=..., private=...)`.
`shared` holds what crosses the agent axis (Q tables, network parameters, target networks,
expectile networks); `private` holds everything else (optimizer states, replay buffers, environment
states and parameters, keys). `federated_average` touches `shared` only.

The same client code runs in two ways, chosen by `for_each_agent(..., num_devices=...)`:

  * one device: `jax.vmap(fn, axis_name=AGENT_AXIS)`;
  * several devices: `jax.shard_map` over a 1-D mesh whose axis is `DEVICE_AXIS`, each device
    holding K / num_devices agents that it maps with the same named vmap. The average is then a
    `pmean` over both axis names, which is the mean over all K agents because shards are equal.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, PartitionSpec

from fedjax_rl import plugins
from fedjax_rl.core.settings import Setting, at_least, interval

AGENT_AXIS = "agents"
DEVICE_AXIS = "agent_shards"


@struct.dataclass
class FederatedState:
    """A per-agent state split into what the server averages and what never leaves the agent."""

    shared: Any
    private: Any


def _bound(axis_name: str) -> bool:
    # Whether `axis_name` is bound at trace time: lets the same client code average over the
    # device axis too when it runs under `shard_map`, without threading axis names through configs.
    try:
        jax.lax.axis_size(axis_name)
    except NameError:
        return False
    return True


def agent_axes() -> tuple[str, ...]:
    """The axis names the current trace maps agents over (device axis first, when sharded)."""
    if not _bound(AGENT_AXIS):
        raise RuntimeError(
            f"federated_mean must run inside for_each_agent (no '{AGENT_AXIS}' axis is bound)"
        )
    return (DEVICE_AXIS, AGENT_AXIS) if _bound(DEVICE_AXIS) else (AGENT_AXIS,)


def federated_mean(tree: Any, weight: jax.Array | None = None) -> Any:
    """Mean of every leaf over all K agents, broadcast back to every agent (the server step).

    With `weight` (this agent's scalar weight, e.g. 1.0 if it takes part in this round, else 0.0),
    the weighted mean sum_k w_k x_k / sum_k w_k: partial participation, where every agent still
    receives the result. `weight=None` is the plain `pmean`."""
    axes = agent_axes()
    if weight is None:
        return jax.lax.pmean(tree, axis_name=axes)
    total = jax.lax.psum(weight, axis_name=axes)
    return jax.tree.map(lambda x: jax.lax.psum(weight * x, axis_name=axes) / total, tree)


def _gather(x: jax.Array) -> jax.Array:
    """Every agent's `x`, [K, ...] in global agent order (`agent_index`), on every agent."""
    gathered = jax.lax.all_gather(x, AGENT_AXIS)  # this device's agents
    if len(agent_axes()) == 2:
        gathered = jax.lax.all_gather(gathered, DEVICE_AXIS)  # [devices, agents per device, ...]
        gathered = gathered.reshape((-1,) + x.shape)
    return gathered


_NETWORK_MAX_AGENTS = 32  # up to here a sorting network; beyond, its size outgrows XLA's sort


@functools.lru_cache(maxsize=None)
def sorting_network(n: int) -> tuple[tuple[int, int], ...]:
    """Compare-exchange pairs (i, j), i < j, that sort any n values: Batcher's odd-even merge sort
    for the next power of two, less the pairs that touch a place >= n (which would hold +inf and
    never move)."""
    size = 1 << max(0, (n - 1).bit_length())
    pairs = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple((i, j) for i, j in pairs if j < n)


def _sort_over_agents(values: jax.Array) -> list[jax.Array]:
    """The rows of `values` (one per agent) sorted coordinate by coordinate, as a list: position p
    holds every coordinate's p-th smallest value. Why a network: XLA's CPU sort runs a comparison
    sort per coordinate, while the network's elementwise minima and maxima fuse and vectorise. On
    FedRDQN's shared leaves (202,501 parameters) it runs a rule 80x faster than `jnp.sort` at K = 5,
    8x at K = 20 and 3x at K = 32, but its O(K log^2 K) comparators compile slower (about 30 s against
    3 s at K = 32; benchmarks/aggregation.py --part sort), so beyond 32 agents XLA's sort is used."""
    if values.shape[0] > _NETWORK_MAX_AGENTS:
        return list(jnp.sort(values, axis=0))
    rows = list(values)
    for i, j in sorting_network(len(rows)):
        rows[i], rows[j] = jnp.minimum(rows[i], rows[j]), jnp.maximum(rows[i], rows[j])
    return rows


def _sorted_over_agents(x: jax.Array, weight: jax.Array | None) -> tuple[list[jax.Array], jax.Array | int]:
    """The participating agents' values of `x`, sorted per coordinate (`_sort_over_agents`), and
    how many agents take part (an int when all do). A NaN upload is +inf (the largest value), and so
    are the places of the agents not taking part, which sort after every participant."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"robust aggregation needs floating-point shared leaves, got {x.dtype}")
    values = _gather(x)
    count = values.shape[0]
    unused = jnp.isnan(values)
    if weight is not None:
        takes_part = _gather(weight) > 0
        unused = unused | ~takes_part.reshape((-1,) + (1,) * x.ndim)
        count = jnp.sum(takes_part)
    return _sort_over_agents(jnp.where(unused, jnp.inf, values)), count


def _at(rows: list[jax.Array], position) -> jax.Array:
    """rows[position] for a static or a traced position (selects, not a gather: elementwise)."""
    if isinstance(position, int):
        return rows[position]
    out = rows[0]
    for p in range(1, len(rows)):
        out = jnp.where(position == p, rows[p], out)
    return out


def federated_median(tree: Any, weight: jax.Array | None = None) -> Any:
    """Coordinate-wise median over the participating agents (`weight` > 0; all agents when
    `weight` is None), broadcast back to every agent: the middle value, or the mean of the two
    middle values for an even count (numpy's median). A NaN upload counts as +inf."""

    def median(x):
        rows, count = _sorted_over_agents(x, weight)
        low, high = (count - 1) // 2, count // 2
        a, b = _at(rows, low), _at(rows, high)
        return jnp.where(low == high, a, (a + b) / 2)

    return jax.tree.map(median, tree)


def trimmed_count(trim: float, count: int) -> int:
    """How many of `count` participating agents the trimmed mean drops at each end."""
    return math.floor(trim * count + 1e-9)


def federated_trimmed_mean(tree: Any, weight: jax.Array | None = None, *, trim: float) -> Any:
    """Coordinate-wise trimmed mean over the participating agents, broadcast back to every agent:
    per coordinate, drop the `trimmed_count(trim, m)` smallest and as many largest of the m
    participating agents' values, and average the rest. A NaN upload counts as +inf."""
    num_agents = _num_agents()
    # The count of participants is traced under partial participation: look its trim up in a
    # table made with Python's float arithmetic, so it matches `check_aggregation` exactly.
    dropped = jnp.asarray([trimmed_count(trim, m) for m in range(num_agents + 1)], jnp.int32)

    def trimmed_mean(x):
        rows, count = _sorted_over_agents(x, weight)
        drop = dropped[count]
        # Summed row by row (elementwise adds): XLA's CPU reduction over a leading axis is slow.
        total = jnp.zeros_like(x)
        for p, row in enumerate(rows):
            total = total + jnp.where((p >= drop) & (p < count - drop), row, 0.0)
        return total / (count - 2 * drop).astype(x.dtype)

    return jax.tree.map(trimmed_mean, tree)


def federated_krum(tree: Any, weight: jax.Array | None = None, *, byzantine: int, keep: int = 1) -> Any:
    """Krum (Blanchard et al., 2017; multi-Krum with `keep` > 1) over the participating agents, broadcast
    back to every agent. Each participant's score is the sum of the squared distances, over every shared
    leaf at once, from its upload to its n - f - 2 nearest other uploads (n participants, f =
    `byzantine`, at least 1, as Flower's Krum); Krum takes the upload of least score whole, multi-Krum
    the mean of the `keep` of least score (ties: the lower agent index first). An upload with a NaN or
    an infinity is never chosen (its distances are infinite). Where fewer than `keep` finite uploads
    take part, what is chosen is not finite and the run's non-finite check stops it."""
    leaves, treedef = jax.tree.flatten(tree)
    for x in leaves:
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"robust aggregation needs floating-point shared leaves, got {x.dtype}")
    rows = [_gather(x).reshape(_num_agents(), -1) for x in leaves]  # [K, size] per leaf
    K = rows[0].shape[0]
    usable = functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(r), axis=1) for r in rows])
    count = K
    if weight is not None:
        takes_part = _gather(weight) > 0
        usable, count = usable & takes_part, jnp.sum(takes_part)
    distance = sum(jnp.sum(jnp.square(r[:, None, :] - r[None, :, :]), axis=-1) for r in rows)  # [K, K]
    pairs = usable[:, None] & usable[None, :] & ~jnp.eye(K, dtype=bool)
    nearest = jnp.sort(jnp.where(pairs, distance, jnp.inf), axis=1)
    closest = jnp.maximum(1, count - byzantine - 2)
    score = jnp.sum(jnp.where(jnp.arange(K)[None, :] < closest, nearest, 0.0), axis=1)
    chosen = jnp.argsort(jnp.where(usable, score, jnp.inf), stable=True)[:keep]
    out = [jnp.mean(r[chosen], axis=0) if keep > 1 else r[chosen[0]] for r in rows]
    return jax.tree.unflatten(treedef, [o.reshape(x.shape).astype(x.dtype) for o, x in zip(out, leaves)])


def _num_agents() -> int:
    axes = agent_axes()
    return math.prod(jax.lax.axis_size(name) for name in axes)


def agent_index() -> jax.Array:
    """This agent's global index in [0, K), valid under vmap and under shard_map."""
    axes = agent_axes()
    if len(axes) == 1:
        return jax.lax.axis_index(AGENT_AXIS)
    local = jax.lax.axis_size(AGENT_AXIS)
    return jax.lax.axis_index(DEVICE_AXIS) * local + jax.lax.axis_index(AGENT_AXIS)


Rule = Callable[[Any, "jax.Array | None"], Any]  # (one agent's shared leaves, its weight) -> aggregate


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


def num_participants(num_agents: int, participation: float) -> int:
    """ceil(participation x K) agents enter each average."""
    return max(1, math.ceil(participation * num_agents - 1e-9))


def sample_participants(key: jax.Array, num_agents: int, participation: float) -> jax.Array:
    """The server's draw for one round: a [K] 0/1 float mask with exactly
    `num_participants(K, participation)` ones, uniformly among the K agents."""
    chosen = jax.random.permutation(key, num_agents)[: num_participants(num_agents, participation)]
    return jnp.zeros(num_agents, jnp.float32).at[chosen].set(1.0)


# -- the server: who takes part in a round and how their shared leaves are aggregated -------------

@dataclasses.dataclass(frozen=True)
class Aggregator:
    """A server rule by name (`--aggregation NAME`). rule_for: the `Server` -> its `Rule` (a rule that
    reads a server setting, as the trimmed mean reads `trim`, takes it from there). robust: built to
    absorb a minority of faulty agents' uploads (the mean is not): such a rule's runs check uploads
    for non-finite values before aggregating (`training/program.py`). A user's rule registers with
    `AGGREGATORS.register`, or from an installed package through the entry-point group
    `fedjax_rl.aggregators` (`fedjax_rl.plugins`)."""

    name: str
    rule_for: Callable[["Server"], Rule]
    robust: bool = False


AGGREGATORS = plugins.Registry("aggregation rule", plugins.AGGREGATOR_GROUP, Aggregator, "aggregation")
for _aggregator in (
    Aggregator("mean", lambda server: federated_mean),
    Aggregator("median", lambda server: federated_median, robust=True),
    Aggregator("trimmed_mean", lambda server: functools.partial(federated_trimmed_mean, trim=server.trim), robust=True),
    Aggregator("krum", lambda server: functools.partial(federated_krum, byzantine=server.krum_byzantine,
                                                        keep=server.krum_keep), robust=True),
):
    AGGREGATORS.register(_aggregator, plugins.BUILT_IN)

AGGREGATION = Setting(
    "aggregation", "mean",
    lambda name: None if AGGREGATORS.known(name) else f"must be one of {list(AGGREGATORS.names())}", kind=str,
    help="the server's rule over the participating agents' shared leaves: mean (FedAvg, a pmean), or, robust "
         "to a minority of faulty agents, the coordinate-wise median or trimmed_mean, or krum", source="(FedAvg)")
TRIM = Setting("trim", 0.25, interval(0, 0.5, high_open=True), kind=float,
               help="trimmed_mean only: the fraction of participating agents dropped at each end of every "
                    "coordinate, floor(trim x participants)")
KRUM_BYZANTINE = Setting("krum_byzantine", 1, at_least(0), kind=int,
                         help="krum only: f, the faulty agents Krum is built to withstand; a score sums the "
                              "distances to the n - f - 2 nearest uploads of n participants, n >= 2f + 3")
KRUM_KEEP = Setting("krum_keep", 1, at_least(1), kind=int,
                    help="krum only: how many uploads of least score are averaged (1: Krum; more: multi-Krum), "
                         "at most n - f")


def check_aggregation(aggregation: str, trim: float, num_agents: int, participation: float,
                      krum_byzantine: int = KRUM_BYZANTINE.default, krum_keep: int = KRUM_KEEP.default) -> None:
    """Raise a ValueError, before anything compiles, for a rule that cannot do what it says."""
    AGGREGATION.validate(aggregation)
    TRIM.validate(trim)
    participants = num_participants(num_agents, participation)
    if aggregation == "krum":
        _check_krum(krum_byzantine, krum_keep, participants)
    if aggregation != "trimmed_mean" or trimmed_count(trim, participants) > 0:
        return
    if participants < 3:
        raise ValueError(f"aggregation 'trimmed_mean' needs at least 3 participating agents (it drops one at each "
                         f"end at least), got {participants}; use 'median' or 'mean'")
    smallest = math.ceil(1e4 / participants) / 1e4  # rounded up, so that it drops one agent
    raise ValueError(f"trim must be in [{smallest:g}, 0.5) for aggregation 'trimmed_mean' with "
                     f"{participants} participating agents (it drops floor(trim x {participants}) at each end: "
                     f"none at trim={trim:g}), got {trim:g}")


def _check_krum(byzantine: int, keep: int, participants: int) -> None:
    KRUM_BYZANTINE.validate(byzantine)
    KRUM_KEEP.validate(keep)
    most = (participants - 3) // 2  # Krum withstands f faulty agents of n only where n >= 2f + 3
    if most < 0:
        raise ValueError(f"aggregation 'krum' needs at least 3 participating agents, got {participants}; use "
                         "'median' or 'mean'")
    if byzantine > most:
        raise ValueError(f"krum_byzantine must be in [0, {most}] for aggregation 'krum' with {participants} "
                         f"participating agents (n >= 2 krum_byzantine + 3), got {byzantine}")
    if keep > participants - byzantine:
        raise ValueError(f"krum_keep must be in [1, {participants - byzantine}] for aggregation 'krum' with "
                         f"{participants} participating agents and krum_byzantine={byzantine} (at most n - f), "
                         f"got {keep}")


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


def agent_mesh(num_devices: int) -> Mesh:
    """A 1-D mesh over the first `num_devices` devices, axis `DEVICE_AXIS`; a ValueError if fewer are visible."""
    devices = jax.devices()
    if num_devices > len(devices):
        raise ValueError(
            f"num_devices={num_devices} but only {len(devices)} devices are visible "
            f"(on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count={num_devices})"
        )
    return Mesh(np.array(devices[:num_devices]), (DEVICE_AXIS,))


def check_num_devices(num_agents: int, num_devices: int | None) -> None:
    """Refuse a device count the agents cannot be split over (ValueError naming the settings), and, in a
    multi-process run, any count but every device."""
    if jax.process_count() > 1 and num_devices != jax.device_count():
        # A mesh on some processes' devices only would leave the others with nothing to run.
        raise ValueError(
            f"num_devices={num_devices} but this run has {jax.process_count()} processes: set num_devices to "
            f"{jax.device_count()} (every process's devices), so that the agent axis spans all of them"
        )
    if num_devices is None:
        return
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    if num_agents % num_devices:
        raise ValueError(
            f"num_agents={num_agents} must be a multiple of num_devices={num_devices} "
            "so that every device holds the same number of agents"
        )


def for_each_agent(
    fn: Callable[..., Any],
    num_agents: int,
    num_devices: int | None = None,
    in_axes: Any = 0,
) -> Callable[..., Any]:
    """Map a single-agent function over the leading agent axis of its arguments.

    `in_axes` follows `jax.vmap` (0 for per-agent arguments, None for arguments every agent shares).
    With `num_devices` set, agents are sharded over that many devices; results are identical.
    Outputs always carry the agent axis first.
    """
    check_num_devices(num_agents, num_devices)
    mapped = jax.vmap(fn, in_axes=in_axes, axis_name=AGENT_AXIS)
    if num_devices is None:
        return mapped

    mesh = agent_mesh(num_devices)

    def sharded(*args):
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        in_specs = tuple(
            jax.tree.map(lambda a: PartitionSpec(DEVICE_AXIS) if a == 0 else PartitionSpec(), ax)
            if ax is not None
            else PartitionSpec()
            for ax in axes
        )
        return jax.shard_map(
            mapped,
            mesh=mesh,
            in_specs=in_specs,
            out_specs=PartitionSpec(DEVICE_AXIS),
            # The vmapped agent axis is invisible to shard_map's varying-axis types, which would
            # reject a pmean over (device, agent) axes; the collective itself is well defined.
            check_vma=False,
        )(*args)

    return sharded
