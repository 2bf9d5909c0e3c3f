"""The federation: the named agent axis, averaging of shared leaves, sync schedule, sharding.

Every per-agent quantity carries a leading agent axis of size K. Client code (an agent's local
step) is written for one agent and is mapped over that axis by `for_each_agent`, which names the
axis `AGENT_AXIS`. The server's only operation, the federated average, is `federated_mean`: a
`lax.pmean` over the agent axis, applied to the *shared* part of the state only.

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

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, PartitionSpec

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


def agent_index() -> jax.Array:
    """This agent's global index in [0, K), valid under vmap and under shard_map."""
    axes = agent_axes()
    if len(axes) == 1:
        return jax.lax.axis_index(AGENT_AXIS)
    local = jax.lax.axis_size(AGENT_AXIS)
    return jax.lax.axis_index(DEVICE_AXIS) * local + jax.lax.axis_index(AGENT_AXIS)


def federated_average(state: FederatedState, weight: jax.Array | None = None) -> FederatedState:
    """Average the shared leaves over agents (weighted by `weight`, see `federated_mean`); private
    leaves are left untouched."""
    return state.replace(shared=federated_mean(state.shared, weight))


def average_shared(tree: Any, weight: jax.Array | None = None) -> Any:
    """`federated_average` applied to every `FederatedState` inside `tree` (a client's carry may
    hold its learner next to environment state, counters, keys); everything else is untouched."""
    is_state = lambda x: isinstance(x, FederatedState)  # noqa: E731
    return jax.tree.map(lambda x: federated_average(x, weight) if is_state(x) else x, tree, is_leaf=is_state)


def num_participants(num_agents: int, participation: float) -> int:
    """ceil(participation x K) agents enter each average."""
    return max(1, math.ceil(participation * num_agents - 1e-9))


def sample_participants(key: jax.Array, num_agents: int, participation: float) -> jax.Array:
    """The server's draw for one round: a [K] 0/1 float mask with exactly
    `num_participants(K, participation)` ones, uniformly among the K agents."""
    chosen = jax.random.permutation(key, num_agents)[: num_participants(num_agents, participation)]
    return jnp.zeros(num_agents, jnp.float32).at[chosen].set(1.0)


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
) -> tuple[Any, Any]:
    """One federated round of one client: `lax.scan(local_step, carry, xs, length)` (the E local
    steps), then the server's average of the shared leaves (`average_shared`). Returns
    `(carry, summarize(carry_before_average, per_step_outputs))` (the outputs themselves when
    `summarize` is None). `weight`: this client's weight in the average (partial participation).
    Used by the deep trainer (`train.py`) and tabular FedRQ alike."""
    carry, outputs = jax.lax.scan(local_step, carry, xs, length=length)
    summary = outputs if summarize is None else summarize(carry, outputs)
    return average_shared(carry, weight), summary


def is_sync_step(step: jax.Array, sync_every: int) -> jax.Array:
    """True after every `sync_every`-th local step (steps are counted from 1)."""
    return (step % sync_every) == 0


def maybe_federated_average(state: FederatedState, step: jax.Array, sync_every: int) -> FederatedState:
    """Average when `step` is a sync step. Both branches are traced; `pmean` runs every call.

    Prefer structuring loops as `scan(local_step, length=E)` then `federated_average` (what
    `train.py` does): this helper is for loops whose sync points are not at scan boundaries.
    """
    averaged = federated_average(state)
    sync = is_sync_step(step, sync_every)
    return jax.tree.map(lambda a, b: jnp.where(sync, a, b), averaged, state)


def agent_mesh(num_devices: int) -> Mesh:
    devices = jax.devices()
    if num_devices > len(devices):
        raise ValueError(
            f"num_devices={num_devices} but only {len(devices)} devices are visible "
            f"(on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count={num_devices})"
        )
    return Mesh(np.array(devices[:num_devices]), (DEVICE_AXIS,))


def check_num_devices(num_agents: int, num_devices: int | None) -> None:
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
