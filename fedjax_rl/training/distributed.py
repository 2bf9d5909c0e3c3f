"""Several processes, one federation: JAX's own multi-controller runtime (`jax.distributed`).

Every process runs the same program (the same `loop.run` call). After `initialize`,
`jax.devices()` lists every process's devices, so `agent_axis.agent_mesh(num_devices)` is a global
mesh, the agent axis spans processes, and the federated average stays a `pmean` over it: XLA carries
it over the network (gloo on CPU, NCCL on GPU). Host-side, `to_host` gathers a (possibly
process-spanning) result onto every process, `is_writer` says which one writes files, and
`put_like` turns host values (a restored checkpoint) back into global arrays laid out like a
reference state.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import warnings
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from fedjax_rl.training import checkpoint


# Addresses a coordinator may listen on without a warning: this host, private networks (RFC 1918,
# IPv6 unique local, link-local: `ipaddress`'s is_private and is_loopback), and the shared address
# space of carrier-grade NAT and VPN overlays (RFC 6598), which the internet does not route.
SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")


def _host(address: str) -> str:
    """The host of "HOST:PORT", "[IPv6]:PORT" or a bare host."""
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def _trusted(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_private or ip in SHARED_ADDRESS_SPACE


def coordinator_risk(address: str | None) -> str | None:
    """What to warn about a coordinator at `address` ("HOST:PORT") that is neither a loopback nor a
    private address (a host name is resolved; one that does not resolve is left to JAX to report),
    else None."""
    if not address:
        return None
    host = _host(address.strip())
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:  # a host name
        try:
            addresses = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in socket.getaddrinfo(host, None)}
        except (OSError, ValueError):
            return None
    exposed = sorted(str(ip) for ip in addresses if not _trusted(ip))
    if not exposed:
        return None
    where = host if exposed == [host] else f"{host} ({', '.join(exposed)})"
    return (f"the coordinator {address} is at a public address, {where}: jax.distributed's coordinator "
            f"authenticates nobody, so any process that reaches that port can join this run as one of its "
            f"processes, and the parameters of its agents enter the federated average. Keep the coordinator on a "
            f"trusted network: a private interface, a firewall that admits only the run's hosts, or an SSH tunnel "
            f"(docs/federation.md, \"Several processes, several machines\"). --aggregation median or trimmed_mean "
            f"keeps a minority of agents (e.g. one process's, if it holds fewer than half of them) from moving the "
            f"average at will; the mean does not")


def _split(address: str) -> tuple[str, int] | None:
    """(host, port) of "HOST:PORT" or "[IPv6]:PORT"; None without a port (JAX reports that itself)."""
    has_port = "]:" in address if address.startswith("[") else address.count(":") == 1
    try:
        return (_host(address), int(address.rsplit(":", 1)[1])) if has_port else None
    except ValueError:
        return None


def _bindable(family: int, ip: str) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((ip, 0))
        return True
    except OSError:
        return False


def coordinator_bind_address(address: str | None, process_id: int | None) -> str | None:
    """Where process 0's coordinator is to listen, where the address it is named by says so: an IP
    address of this machine (a loopback or private interface's: there alone), or `localhost` (its
    loopback). None, JAX's default of every interface: for the other processes (they start no
    coordinator), where JAX_COORDINATOR_BIND_ADDRESS chooses, for an address this machine lacks (a
    public one behind NAT), and for any other host name, which may name loopback here (Debian's
    hostname line, 127.0.1.1) and the machine's network address on the other hosts."""
    if not address or process_id != 0 or os.environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
        return None
    split = _split(address.strip())
    if split is None:
        return None
    host, port = split
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
        candidates = [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, host)]
    except ValueError:  # a host name
        if host.lower() != "localhost" and not host.lower().endswith(".localhost"):
            return None
        candidates = [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
    for family, ip_text in candidates:
        if _bindable(family, ip_text):
            return f"[{ip_text}]:{port}" if family == socket.AF_INET6 else f"{ip_text}:{port}"
    return None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
    """Join (or start, on process 0) the run's process group.

    Arguments left as None are found by `jax.distributed.initialize` itself: the coordinator from
    JAX_COORDINATOR_ADDRESS, or all three from a cluster it detects (SLURM, Open MPI, Kubernetes,
    Cloud TPU). CPU collectives use gloo, which must be chosen before
    the backend starts. A coordinator at a public address is warned about before connecting
    (`coordinator_risk`): it lets any process join. Process 0's coordinator listens on the IP address
    it is named by, or on loopback for localhost (`coordinator_bind_address`), not on every interface,
    JAX's default, which is said in a warning where it stays."""
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {num_processes}")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id}")
    address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    risk = coordinator_risk(address)
    if risk:
        warnings.warn(risk, UserWarning, stacklevel=2)
    bind = coordinator_bind_address(address, process_id)
    if address and process_id == 0 and bind is None and not os.environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
        warnings.warn(f"the coordinator {address} listens on every interface of this machine (it is not named by "
                      f"one of this machine's IP addresses, nor localhost); JAX_COORDINATOR_BIND_ADDRESS=IP:PORT "
                      f"narrows it", UserWarning, stacklevel=2)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, **({"coordinator_bind_address": bind} if bind else {}))


def initialized() -> bool:
    """Whether this process has joined a `jax.distributed` run."""
    return jax.distributed.is_initialized()


def initialize_from_argv(argv: list[str]) -> None:
    """`initialize` from a `train` command line's multi-process flags (none given: nothing happens)."""
    if not argv or argv[0] != "train":
        return
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--coordinator")
    p.add_argument("--num-processes", type=int)
    p.add_argument("--process-id", type=int)
    p.add_argument("--distributed", action="store_true")
    args, _ = p.parse_known_args(argv[1:])
    given = (args.coordinator, args.num_processes, args.process_id)
    if args.distributed or any(v is not None for v in given):
        try:
            initialize(*given)
        except ValueError as err:
            raise SystemExit(f"fedjax-rl: error: {err}") from None


def layout() -> dict:
    """The process layout a run was written on (a resumed run must match it)."""
    return {"num_processes": jax.process_count(), "local_devices": jax.local_device_count(),
            "platform": jax.default_backend()}


def is_writer() -> bool:
    """Only process 0 writes files (every process holds the same gathered values)."""
    return jax.process_index() == 0


@functools.lru_cache(maxsize=None)
def _replicate(mesh):
    # One compiled gather per (mesh, tree structure): process_allgather would compile one per leaf.
    return jax.jit(lambda leaves: leaves, out_shardings=NamedSharding(mesh, PartitionSpec()))


def to_host(tree: Any) -> Any:
    """Every leaf as a numpy array holding its full global value, on every process (a collective when
    leaves span processes: every process must call it). Typed PRNG keys become their raw key data
    (what `checkpoint.save` stores anyway)."""
    tree = jax.tree.map(checkpoint.stored_data, tree)
    leaves, treedef = jax.tree.flatten(tree)
    spanning = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array) and not x.is_fully_addressable]
    if spanning:
        meshes = {leaves[i].sharding.mesh for i in spanning if isinstance(leaves[i].sharding, NamedSharding)}
        if len(meshes) == 1 and len(spanning) == sum(isinstance(leaves[i].sharding, NamedSharding) for i in spanning):
            gathered = _replicate(meshes.pop())([leaves[i] for i in spanning])
        else:
            from jax.experimental import multihost_utils

            gathered = [multihost_utils.process_allgather(leaves[i], tiled=True) for i in spanning]
        for i, x in zip(spanning, gathered):
            leaves[i] = x.addressable_data(0) if isinstance(x, jax.Array) else x
    return jax.tree.unflatten(treedef, [np.asarray(x) for x in leaves])


def put_like(host_tree: Any, like: Any) -> Any:
    """Global arrays holding `host_tree`'s values (the same on every process), with the shardings
    and key types of `like` (a freshly initialised state)."""
    if jax.process_count() == 1:
        return host_tree

    def put(value, ref):
        if not isinstance(ref, jax.Array):
            return value
        data = np.asarray(checkpoint.stored_data(value))
        sharding = ref.sharding
        if checkpoint.is_key(ref):
            ref_data = jax.random.key_data(ref)
            array = jax.make_array_from_callback(data.shape, ref_data.sharding, lambda index: data[index])
            return jax.random.wrap_key_data(array, impl=jax.random.key_impl(ref))
        return jax.make_array_from_callback(data.shape, sharding, lambda index: data[index])

    return jax.tree.map(put, host_tree, like)
