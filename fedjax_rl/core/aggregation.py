"""The server's aggregation rules: how the participating agents' shared leaves become the global model.
A rule is a plain function `rule(tree, weight) -> tree` of one agent's leaves, run inside
`agent_axis.for_each_agent`, registered by name as an `Aggregator` (`--aggregation NAME`; a user's
too: `AGGREGATORS.register`, or a plugin in the entry-point group `fedjax_rl.aggregators`):

  * `federated_mean` (the default, FedAvg): a `lax.pmean`; with participation weights the weighted
    mean sum_k w_k x_k / sum_k w_k;
  * `federated_median`: the coordinate-wise median over the participating agents;
  * `federated_trimmed_mean`: per coordinate, the participating agents' values with the
    floor(trim x participants) smallest and as many largest dropped, averaged;
  * `federated_krum`: Krum and multi-Krum (Blanchard et al., 2017), whole uploads chosen by their
    squared distances to their nearest neighbours (`krum_byzantine`, `krum_keep`).

The robust rules gather every agent's leaves (`agent_axis.gather`) and sort each coordinate (a
sorting network of elementwise minima and maxima up to 32 agents, XLA's sort beyond); a NaN upload
counts as +inf, so a minority of faulty agents (NaN, 1e6) cannot move the median outside the honest
agents' values, nor the trimmed mean when at most floor(trim x participants) agents are faulty.
Under partial participation they read `weight` as a 0/1 mask and use the participating agents only.
Their cost: every agent sorts K copies of the shared leaves (O(K^2) memory under vmap), against one
all-reduce for the mean (benchmarks/kernels/aggregation.py). The rules and their settings (`AGGREGATION`,
`TRIM`, `KRUM_BYZANTINE`, `KRUM_KEEP`) are declared here once; `federated.Server` applies them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp

from fedjax_rl import plugins
from fedjax_rl.core import agent_axis
from fedjax_rl.core.settings import Setting, at_least, interval

Rule = Callable[[Any, "jax.Array | None"], Any]  # (one agent's shared leaves, its weight) -> aggregate


def num_participants(num_agents: int, participation: float) -> int:
    """ceil(participation x K) agents enter each average."""
    return max(1, math.ceil(participation * num_agents - 1e-9))


def federated_mean(tree: Any, weight: jax.Array | None = None) -> Any:
    """Mean of every leaf over all K agents, broadcast back to every agent (the server step).

    With `weight` (this agent's scalar weight, e.g. 1.0 if it takes part in this round, else 0.0),
    the weighted mean sum_k w_k x_k / sum_k w_k: partial participation, where every agent still
    receives the result. `weight=None` is the plain `pmean`."""
    axes = agent_axis.agent_axes()
    if weight is None:
        return jax.lax.pmean(tree, axis_name=axes)
    total = jax.lax.psum(weight, axis_name=axes)
    return jax.tree.map(lambda x: jax.lax.psum(weight * x, axis_name=axes) / total, tree)


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
    3 s at K = 32; benchmarks/kernels/aggregation.py --part sort), so beyond 32 agents XLA's sort is used."""
    if values.shape[0] > _NETWORK_MAX_AGENTS:
        return list(jnp.sort(values, axis=0))
    rows = list(values)
    for i, j in sorting_network(len(rows)):
        rows[i], rows[j] = jnp.minimum(rows[i], rows[j]), jnp.maximum(rows[i], rows[j])
    return rows


def _check_floating(x: jax.Array) -> None:
    """A robust rule sorts or measures distances between uploads, which an integer leaf (a step count)
    does not have in any useful sense: share only floating-point leaves with a robust rule."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"robust aggregation needs floating-point shared leaves, got {x.dtype}")


def _sorted_over_agents(x: jax.Array, weight: jax.Array | None) -> tuple[list[jax.Array], jax.Array | int]:
    """The participating agents' values of `x`, sorted per coordinate (`_sort_over_agents`), and
    how many agents take part (an int when all do). A NaN upload is +inf (the largest value), and so
    are the places of the agents not taking part, which sort after every participant."""
    _check_floating(x)
    values = agent_axis.gather(x)
    count = values.shape[0]
    unused = jnp.isnan(values)
    if weight is not None:
        takes_part = agent_axis.gather(weight) > 0
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
    num_agents = agent_axis.num_agents()
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


def federated_krum(tree: Any, weight: jax.Array | None = None, *, byzantine: int, keep: int) -> Any:
    """Krum (Blanchard et al., 2017; multi-Krum with `keep` > 1) over the participating agents, broadcast
    back to every agent. Each participant's score is the sum of the squared distances, over every shared
    leaf at once, from its upload to its n - f - 2 nearest other uploads (n participants, f =
    `byzantine`, at least 1, as Flower's Krum); Krum takes the upload of least score whole, multi-Krum
    the mean of the `keep` of least score (ties: the lower agent index first). An upload with a NaN or
    an infinity is never chosen (its distances are infinite). Where fewer than `keep` finite uploads
    take part, what is chosen is not finite and the run's non-finite check stops it."""
    leaves, treedef = jax.tree.flatten(tree)
    for x in leaves:
        _check_floating(x)
    K = agent_axis.num_agents()
    rows = [agent_axis.gather(x).reshape(K, -1) for x in leaves]  # [K, size] per leaf
    usable = functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(r), axis=1) for r in rows])
    count = K
    if weight is not None:
        takes_part = agent_axis.gather(weight) > 0
        usable, count = usable & takes_part, jnp.sum(takes_part)
    distance = sum(jnp.sum(jnp.square(r[:, None, :] - r[None, :, :]), axis=-1) for r in rows)  # [K, K]
    pairs = usable[:, None] & usable[None, :] & ~jnp.eye(K, dtype=bool)
    nearest = jnp.sort(jnp.where(pairs, distance, jnp.inf), axis=1)
    closest = jnp.maximum(1, count - byzantine - 2)
    score = jnp.sum(jnp.where(jnp.arange(K)[None, :] < closest, nearest, 0.0), axis=1)
    chosen = jnp.argsort(jnp.where(usable, score, jnp.inf), stable=True)[:keep]
    out = [jnp.mean(r[chosen], axis=0) if keep > 1 else r[chosen[0]] for r in rows]
    return jax.tree.unflatten(treedef, [o.reshape(x.shape).astype(x.dtype) for o, x in zip(out, leaves)])


@dataclasses.dataclass(frozen=True)
class Aggregator:
    """A server rule by name (`--aggregation NAME`). rule_for: the `federated.Server` -> its `Rule` (a rule that
    reads a server setting, as the trimmed mean reads `trim`, takes it from there). robust: built to
    absorb a minority of faulty agents' uploads (the mean is not): such a rule's runs check uploads
    for non-finite values before aggregating (`training/program.py`). A user's rule registers with
    `AGGREGATORS.register`, or from an installed package through the entry-point group
    `fedjax_rl.aggregators` (`fedjax_rl.plugins`)."""

    name: str
    rule_for: Callable[[Any], Rule]  # the `federated.Server` -> its rule
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
