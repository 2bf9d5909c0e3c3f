"""The federated core: named agent axis, pmean averaging, vmap and shard_map agree."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl import federated


def _client_step(state: federated.FederatedState, scale):
    # A local update that makes agents diverge (depends on the agent index), then an average.
    i = federated.agent_index().astype(jnp.float32)
    shared = jax.tree.map(lambda x: x * scale + i, state.shared)
    private = state.private + i
    state = state.replace(shared=shared, private=private)
    return federated.federated_average(state)


def _state(num_agents):
    shared = {"w": jnp.arange(num_agents * 3.0).reshape(num_agents, 3), "b": jnp.ones(num_agents)}
    return federated.FederatedState(shared=shared, private=jnp.zeros(num_agents))


def test_average_touches_shared_only_and_equals_mean():
    state = _state(4)
    out = federated.for_each_agent(_client_step, 4, in_axes=(0, None))(state, 2.0)
    w = np.arange(12.0).reshape(4, 3) * 2 + np.arange(4)[:, None]
    for k in range(4):
        np.testing.assert_allclose(out.shared["w"][k], w.mean(0), rtol=1e-6)
    np.testing.assert_array_equal(out.private, np.arange(4.0))  # private leaves stay per agent


@pytest.mark.parametrize("num_agents,num_devices", [(4, 4), (8, 4), (8, 2), (6, 3)])
def test_shard_map_matches_vmap(num_agents, num_devices):
    assert jax.device_count() >= 4, "tests/conftest.py sets 4 fake CPU devices"
    state = _state(num_agents)
    expected = jax.jit(federated.for_each_agent(_client_step, num_agents, in_axes=(0, None)))(state, 1.5)
    sharded = jax.jit(federated.for_each_agent(_client_step, num_agents, num_devices, in_axes=(0, None)))(state, 1.5)
    chex.assert_trees_all_close(sharded, expected, rtol=0, atol=0)


def test_shard_map_under_seed_vmap():
    states = jax.tree.map(lambda x: jnp.stack([x, x + 1.0]), _state(8))
    fn = lambda s: federated.for_each_agent(_client_step, 8, 4, in_axes=(0, None))(s, 1.5)  # noqa: E731
    ref = lambda s: federated.for_each_agent(_client_step, 8, in_axes=(0, None))(s, 1.5)  # noqa: E731
    chex.assert_trees_all_close(jax.jit(jax.vmap(fn))(states), jax.vmap(ref)(states), rtol=0, atol=0)


def test_agent_index_is_global_under_sharding():
    idx = jax.jit(federated.for_each_agent(lambda x: federated.agent_index() + 0 * x, 8, 4))(jnp.zeros(8, jnp.int32))
    np.testing.assert_array_equal(idx, np.arange(8))


def test_sync_schedule():
    steps = jnp.arange(1, 301)
    assert [int(s) for s in steps[federated.is_sync_step(steps, 100)]] == [100, 200, 300]
    state = _state(2)

    def client(state, step):
        state = state.replace(shared=jax.tree.map(lambda x: x + federated.agent_index(), state.shared))
        return federated.maybe_federated_average(state, step, 3)

    run = federated.for_each_agent(client, 2, in_axes=(0, None))
    not_synced = run(state, jnp.int32(2))
    synced = run(state, jnp.int32(3))
    assert not np.allclose(not_synced.shared["b"][0], not_synced.shared["b"][1])
    np.testing.assert_array_equal(synced.shared["b"][0], synced.shared["b"][1])


def test_bad_device_counts_raise_before_tracing():
    with pytest.raises(ValueError, match="multiple of num_devices"):
        federated.for_each_agent(_client_step, 5, 2)
    with pytest.raises(ValueError, match="num_devices must be >= 1"):
        federated.for_each_agent(_client_step, 5, 0)
    with pytest.raises(ValueError, match="devices are visible"):
        federated.for_each_agent(_client_step, 64, 64)


def test_device_count_bounds():
    """One device is a valid mesh; zero is not. In a run of several processes the agent axis must
    span every process's devices (checked here with a faked process count)."""
    federated.check_num_devices(5, 1)
    federated.check_num_devices(4, None)
    with pytest.raises(ValueError, match="num_devices must be >= 1"):
        federated.check_num_devices(4, 0)


def test_several_processes_need_every_device(monkeypatch):
    monkeypatch.setattr(federated.jax, "process_count", lambda: 2)
    monkeypatch.setattr(federated.jax, "device_count", lambda: 4)
    federated.check_num_devices(8, 4)
    for num_devices in (None, 2):
        with pytest.raises(ValueError, match="2 processes: set num_devices to 4"):
            federated.check_num_devices(8, num_devices)


def test_federated_mean_outside_agent_axis_is_an_error():
    with pytest.raises(RuntimeError, match="for_each_agent"):
        federated.federated_mean(jnp.ones(3))
