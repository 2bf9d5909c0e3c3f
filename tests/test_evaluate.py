"""Evaluation episodes stop early (a while_loop) yet return what a fixed-length masked scan returns."""

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_rl import envs
from fedjax_rl.core import evaluate, perturb
from references import max_dot_batch_dims


def masked_scan_return(env, env_params, policy, key, max_steps):
    """The reference: exactly `max_steps` steps, rewards counted until the first termination or truncation."""
    reset_key, steps_key = jax.random.split(key)
    obs, env_state = env.reset(reset_key, env_params)

    def step(carry, step_key):
        obs, env_state, total, alive = carry
        obs, env_state, reward, terminated, truncated, _ = env.step(step_key, env_state, policy(obs), env_params)
        return (obs, env_state, total + jnp.where(alive, reward, 0.0), alive & ~(terminated | truncated)), None

    init = (obs, env_state, jnp.float32(0.0), jnp.bool_(True))
    return jax.lax.scan(step, init, jax.random.split(steps_key, max_steps))[0][2]


def test_early_stopping_episode_equals_the_masked_scan():
    env, params = envs.make("CartPole-v1", ("length",))

    def policy(obs):  # deterministic, keeps the pole up for a while, then fails: episodes of varied length
        return (obs[2] > 0.0).astype(jnp.int32)

    keys = jax.random.split(jax.random.key(3), 16)
    for max_steps in (500, 20):  # episodes end before the cap; every episode is cut by the cap
        ours = jax.jit(jax.vmap(lambda k: evaluate.episode_return(env, params, policy, k, max_steps)))(keys)
        ref = jax.jit(jax.vmap(lambda k: masked_scan_return(env, params, policy, k, max_steps)))(keys)
        chex.assert_trees_all_equal(ours, ref)
        if max_steps == 20:
            chex.assert_trees_all_equal(ours, jnp.full(16, 20.0))
        else:
            assert 20 < float(ours.min()) < float(ours.max()) < 500, ours  # really of varied lengths


def test_returns_over_params_is_one_vmap_with_common_episode_keys():
    """Entry [i, j] is episode j (key j, the same in every environment) in environment i, exactly as
    one environment's `episode_returns`; and the (environment, episode) pairs are one batch axis,
    not two: a vmap of vmaps put one more batch dimension into every dot of MJX's physics, which
    crashed XLA's CPU runtime (a YNNPACK transpose past its rank limit) in a robot's evaluation."""
    env, params = envs.make("CartPole-v1", ("length",))
    batched = perturb.scaled_env_params(env, params, ("length",), jnp.array([0.5, 1.0, 1.7]))
    weights = jnp.array([[0.3, -0.2], [1.0, 0.4], [2.0, -1.0], [0.5, 0.1]])

    def policy(obs):  # a dot of two batched operands (like MJX's rotations) shows evaluation's batch axes
        return jnp.argmax(obs @ (jnp.outer(obs, obs) @ weights))

    key = jax.random.key(5)
    fn = jax.jit(lambda p: evaluate.returns_over_params(env, p, policy, key, 3, 200))
    ours = fn(batched)
    chex.assert_shape(ours, (3, 3))
    for i in range(3):
        one = jax.tree.map(lambda x: x[i], batched)
        chex.assert_trees_all_equal(ours[i], jax.jit(lambda p: evaluate.episode_returns(env, p, policy, key, 3, 200))(one))
    assert len(set(np.asarray(ours).ravel().tolist())) > 3, ours  # physics and keys both matter
    # The means over episodes: per environment, and for one environment alone.
    means = jax.jit(lambda p: evaluate.mean_returns_over_params(env, p, policy, key, 3, 200))(batched)
    np.testing.assert_allclose(means, np.asarray(ours).mean(axis=1), rtol=1e-6)
    one = jax.tree.map(lambda x: x[2], batched)
    mean = jax.jit(lambda p: evaluate.mean_return(env, p, policy, key, 3, 200))(one)
    chex.assert_shape(mean, ())
    np.testing.assert_allclose(mean, np.asarray(ours)[2].mean(), rtol=1e-6)
    assert max_dot_batch_dims(jax.make_jaxpr(fn)(batched).jaxpr) == 1


def test_local_metrics_on_distinct_returns():
    """The Average and the Minimum over the local environments, on returns whose per-agent means
    are all distinct (the trained fixture of test_dqn.py has tied minima, so it cannot tell the
    minimum from the second smallest). The lowest single episode (agent 0's 1.0) is not in the
    agent with the lowest mean (agent 2), and the mean differs from the median."""
    from fedjax_rl.training import program

    episodes = np.array([[1.0, 30.0, 20.0],  # mean 17
                         [12.0, 16.0, 14.0],  # mean 14
                         [9.0, 11.0, 10.0],  # mean 10: the minimum
                         [40.0, 38.0, 42.0]], np.float32)  # mean 40
    seeds = np.stack([episodes, episodes[::-1] + 1.0])  # under a seed vmap, as finalize runs
    metrics = jax.jit(jax.vmap(program.local_metrics))(seeds)
    np.testing.assert_allclose(metrics["local_returns"], [[17, 14, 10, 40], [41, 11, 15, 18]], rtol=1e-6)
    np.testing.assert_allclose(metrics["local_average"], [20.25, 21.25], rtol=1e-6)
    np.testing.assert_allclose(metrics["local_minimum"], [10.0, 11.0], rtol=1e-6)
    np.testing.assert_array_equal(metrics["local_episode_returns"], seeds)


def test_a_blocks_record_divides_its_totals_by_hand():
    """`block_record` by hand: the block's training return is its finished episodes' mean return and each
    loss the mean over its gradient steps, also when the block finished one episode and trained one step
    (the floor of 1 only guards a block that did neither, which reports 0, not NaN)."""
    from types import SimpleNamespace

    from fedjax_rl.training import program

    setup = SimpleNamespace(config=SimpleNamespace(sync_every=10), agent=SimpleNamespace(loss_names=("td_loss",)))
    nominal, local = jnp.array([1.0, 3.0]), jnp.array([[1.0, 2.0], [5.0, 6.0]])
    record = program.block_record(setup, 4, nominal, local,
                                  dict(trained=1.0, episodes=1.0, episode_return_sum=7.0, td_loss=3.0))
    assert (record["env_steps"], float(record["nominal_return"])) == (40, 2.0)
    assert (float(record["train_return"]), float(record["td_loss"])) == (7.0, 3.0)
    assert (float(record["local_minimum"]), float(record["local_average"])) == (1.5, 3.5)
    record = program.block_record(setup, 8, nominal, local,
                                  dict(trained=4.0, episodes=3.0, episode_return_sum=9.0, td_loss=2.0))
    assert (float(record["train_return"]), float(record["td_loss"])) == (3.0, 0.5)
    empty = program.block_record(setup, 1, nominal, local,
                                 dict(trained=0.0, episodes=0.0, episode_return_sum=0.0, td_loss=0.0))
    assert (float(empty["train_return"]), float(empty["td_loss"])) == (0.0, 0.0)
