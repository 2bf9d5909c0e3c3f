"""The agent axis: K agents as one named axis of the program. Client code (an agent's local step) is
written for one agent and mapped over the leading agent axis of its arguments by `for_each_agent`,
which names the axis `AGENT_AXIS`; collectives over it (`gather`, the aggregation rules'
`lax.pmean`) reach every agent.

The same client code runs in two ways, chosen by `for_each_agent(..., num_devices=...)`:

  * one device: `jax.vmap(fn, axis_name=AGENT_AXIS)`;
  * several devices: `jax.shard_map` over a 1-D mesh whose axis is `DEVICE_AXIS`, each device
    holding K / num_devices agents that it maps with the same named vmap. A collective is then over
    both axis names (`agent_axes`), which is over all K agents because shards are equal.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

AGENT_AXIS = "agents"
DEVICE_AXIS = "agent_shards"


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
            f"an agent-axis collective (federated_mean, gather) must run inside for_each_agent (no '{AGENT_AXIS}' axis is bound)"
        )
    return (DEVICE_AXIS, AGENT_AXIS) if _bound(DEVICE_AXIS) else (AGENT_AXIS,)


def gather(x: jax.Array) -> jax.Array:
    """Every agent's `x`, [K, ...] in global agent order (`agent_index`), on every agent."""
    gathered = jax.lax.all_gather(x, AGENT_AXIS)  # this device's agents
    if len(agent_axes()) == 2:
        gathered = jax.lax.all_gather(gathered, DEVICE_AXIS)  # [devices, agents per device, ...]
        gathered = gathered.reshape((-1,) + x.shape)
    return gathered


def num_agents() -> int:
    """K, the agents the current trace maps over (every device's, when sharded)."""
    axes = agent_axes()
    return math.prod(jax.lax.axis_size(name) for name in axes)


def agent_index() -> jax.Array:
    """This agent's global index in [0, K), valid under vmap and under shard_map."""
    axes = agent_axes()
    if len(axes) == 1:
        return jax.lax.axis_index(AGENT_AXIS)
    local = jax.lax.axis_size(AGENT_AXIS)
    return jax.lax.axis_index(DEVICE_AXIS) * local + jax.lax.axis_index(AGENT_AXIS)


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
