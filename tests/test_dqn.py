"""FedRDQN / DQNAvg: losses on a hand-checked batch, federation invariants, determinism, sharding,
checkpoint/resume. Learning tests: tests/test_learning.py."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl.training import checkpoint, configs, loop, program, records
from fedjax_rl.agents.dqn import DQNAgent, DQNConfig, Transition
from references import numpy_mlp

TINY_AGENT = dict(
    hidden_sizes=(16, 16), learning_starts=15, train_freq=1, gradient_steps=1, target_update_interval=5,
    batch_size=8, buffer_size=50,
)


def tiny_config(algo="fedrdqn", **overrides):
    fields = dict(physics=("length",), num_agents=4, sync_every=10, steps_per_agent=60, eval_every_rounds=3,
                  eval_episodes=2, sweep_points=3)
    fields.update(overrides)
    agent = dict(TINY_AGENT, omega=0.2 if algo == "fedrdqn" else 0.0)
    return configs.train_config(algo, "CartPole-v1", agent_overrides=agent, **fields)


KEYS = program.seed_keys(0, 2)


@pytest.fixture(scope="module")
def fedrdqn():
    trainer = program.make_trainer(tiny_config())
    traced = chex.assert_max_traces(trainer.train, n=1)
    run = jax.jit(jax.vmap(traced, in_axes=(0, None)))
    state, metrics = run(KEYS, trainer.hparams)
    return trainer, run, state, metrics


# -- losses on a tiny batch ----------------------------------------------------------------------




def test_agent_losses_match_hand_computation():
    config = DQNConfig(robust=True, omega=0.3, tau=0.01, gamma=0.9, hidden_sizes=(5,), batch_size=3, buffer_size=3)
    agent = DQNAgent(config, (4,), 2, total_steps=100)
    state = agent.init(jax.random.key(1))
    q_key, target_key = jax.random.split(jax.random.key(2))
    # Distinct online and target networks, so the test sees which one each term uses.
    shared = state.shared.replace(q_target=agent.q_net.init(target_key, jnp.zeros(4)))
    obs = jax.random.normal(jax.random.key(3), (3, 4))
    next_obs = jax.random.normal(jax.random.key(4), (3, 4))
    batch = Transition(
        obs=obs, action=jnp.array([0, 1, 1], jnp.int32), reward=jnp.array([1.0, -0.5, 0.25]), next_obs=next_obs,
        # ordinary, terminated, truncated (truncation is not termination: it bootstraps)
        terminated=jnp.array([False, True, False]),
    )
    hp = config.hparams()

    q = numpy_mlp(shared.q, np.asarray(obs, np.float64))
    v_next = numpy_mlp(shared.q_target, np.asarray(next_obs, np.float64)).max(axis=1)
    d = numpy_mlp(shared.degree, np.asarray(obs, np.float64))[:, 0]
    v_next_masked = np.where([False, True, False], 0.0, v_next)
    y = np.array([1.0, -0.5, 0.25]) + 0.9 * 0.7 * v_next_masked + 0.9 * 0.3 * d
    expected_td = np.mean((q[[0, 1, 2], [0, 1, 1]] - y) ** 2)
    diff = v_next_masked - d
    expected_degree = np.mean(np.where(diff >= 0, 0.01, 0.99) * diff**2)

    next_value = agent.next_value(shared, batch)
    chex.assert_trees_all_close(next_value, jnp.asarray(v_next, jnp.float32), rtol=1e-5)
    target = agent.robust.td_target(shared, batch, next_value, hp)
    np.testing.assert_allclose(target, y, rtol=1e-5, atol=1e-6)
    td = agent.td_loss(shared.q, target, batch)
    dl = agent.robust.loss(shared.degree, batch, next_value, hp)
    assert float(td) == pytest.approx(expected_td, rel=1e-5)
    assert float(dl) == pytest.approx(expected_degree, rel=1e-5)


# -- one compiled run ----------------------------------------------------------------------------


def test_metrics_shapes(fedrdqn):
    trainer, _, _, metrics = fedrdqn
    config = trainer.config
    chex.assert_shape(metrics["curve"]["nominal_return"], (2, config.num_evals))
    chex.assert_shape(metrics["final"]["local_returns"], (2, config.num_agents))
    chex.assert_shape(metrics["final"]["sweep_returns"], (2, 3))
    chex.assert_shape(metrics["final"]["rates"], (2, config.num_agents, 1))
    np.testing.assert_array_equal(metrics["curve"]["env_steps"][0], [30, 60])
    assert np.all(np.isfinite(metrics["curve"]["td_loss"]))


def test_same_seed_is_bit_identical_and_train_traces_once(fedrdqn):
    trainer, run, _, metrics = fedrdqn
    _, again = run(KEYS, trainer.hparams)
    chex.assert_trees_all_equal(again, metrics)
    run(program.seed_keys(7, 2), trainer.hparams)  # new keys, same program: no retrace


def test_vmapped_seeds_differ_in_everything(fedrdqn):
    trainer, _, state, metrics = fedrdqn
    rates = metrics["final"]["rates"]
    assert not np.allclose(rates[0], rates[1])  # perturbations
    init = jax.jit(jax.vmap(trainer.init))(KEYS)
    q0 = init.agents.learner.shared.q["params"]["Dense_0"]["kernel"]
    assert not np.allclose(q0[0], q0[1])  # network init
    assert not np.array_equal(np.asarray(jax.random.key_data(init.agents.key[0])),
                              np.asarray(jax.random.key_data(init.agents.key[1])))  # exploration/sampling keys
    buffers = state.agents.learner.private.buffer.experience.action
    assert not np.array_equal(buffers[0], buffers[1])  # different experience


def test_agents_environments_differ(fedrdqn):
    trainer, _, state, metrics = fedrdqn
    lengths = np.asarray(state.agents.env_params.length)  # [seeds, K]
    assert len(np.unique(lengths[0])) == trainer.config.num_agents
    np.testing.assert_allclose(lengths, 0.5 * (1 + metrics["final"]["rates"][..., 0]), rtol=1e-6)
    assert np.all(np.abs(metrics["final"]["rates"]) <= 0.5)
    np.testing.assert_array_equal(metrics["final"]["physics_values"][..., 0], lengths)
    # Derived physics follow the perturbed length.
    np.testing.assert_allclose(state.agents.env_params.polemass_length, lengths * 0.1, rtol=1e-6)


def test_in_memory_results_table_and_plots(fedrdqn, tmp_path):
    from fedjax_rl.analysis import plots

    trainer, _, _, metrics = fedrdqn
    run = plots.from_metrics(trainer.config, metrics)
    table = plots.results_table([run])
    avg = np.asarray(metrics["final"]["local_average"])
    assert "FedRDQN (ω=0.2)" in table and f"{avg.mean():.1f} ± {avg.std():.1f}" in table
    for path in plots.plot_results([run], str(tmp_path / "fig")):
        assert (tmp_path / path.split("/")[-1]).stat().st_size > 1000


def _shared_leaves(state):
    return jax.tree.leaves(state.agents.learner.shared)


def test_sync_makes_agents_identical_and_keeps_private_state_private(fedrdqn):
    trainer, _, _, _ = fedrdqn
    state = jax.jit(trainer.init)(jax.random.key(3))
    hp = trainer.hparams
    # Two local rounds without averaging (past learning_starts): shared parameters drift apart.
    local = jax.jit(trainer.local_round)
    drifted = local(local(state, hp, 0), hp, 1)
    for leaf in _shared_leaves(drifted):
        assert not np.allclose(leaf[0], leaf[1])
    # A block ends with a synchronisation: every agent holds identical shared parameters...
    synced, _ = jax.jit(trainer.run_block)(state, hp, 0)
    for leaf in _shared_leaves(synced):
        for k in range(1, trainer.config.num_agents):
            np.testing.assert_array_equal(leaf[k], leaf[0])
    # ... while optimiser states and replay buffers stay different.
    adam_mu = jax.tree.leaves(synced.agents.learner.private.q_opt)[1]
    assert not np.allclose(adam_mu[0], adam_mu[1])
    obs = synced.agents.learner.private.buffer.experience.obs
    assert not np.allclose(obs[0], obs[1])


def test_omega_zero_reproduces_dqnavg_exactly(fedrdqn):
    trainer, run, _, _ = fedrdqn
    state_r, metrics_r = run(KEYS, trainer.hparams.replace(omega=0.0))
    avg_trainer = program.make_trainer(tiny_config("dqnavg"))
    assert avg_trainer.config.agent.robust is False
    state_a, metrics_a = jax.jit(jax.vmap(avg_trainer.train))(KEYS)
    assert state_a.agents.learner.shared.degree is None  # DQNAvg carries no expectile network
    # The two are different XLA programs (one computes D(s) and multiplies it by omega = 0), whose
    # fusions may round a reduction differently in the last bit; agreement is to float32 rounding.
    close = dict(rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(state_r.agents.learner.shared.q, state_a.agents.learner.shared.q, **close)
    chex.assert_trees_all_close(state_r.agents.learner.shared.q_target, state_a.agents.learner.shared.q_target, **close)
    for name in ("nominal_return", "train_return", "td_loss"):
        np.testing.assert_allclose(metrics_r["curve"][name], metrics_a["curve"][name], **close)
    chex.assert_trees_all_close(metrics_r["final"], metrics_a["final"], **close)
    # Same initialisation and the same experience: the greedy actions taken are identical.
    np.testing.assert_array_equal(
        state_r.agents.learner.private.buffer.experience.action,
        state_a.agents.learner.private.buffer.experience.action,
    )


def _without_key_types(tree):
    return jax.tree.map(
        lambda leaf: jax.random.key_data(leaf) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf, tree)


def test_hyperparameter_sweep_is_a_vmap_that_reproduces_standalone_runs(fedrdqn):
    """A vmap over (omega, learning rate) gives, at every grid point, bit for bit the run of the
    standalone program at that point: final state (parameters, optimiser states, replay buffers,
    environments, keys), curves and final metrics.

    Measured on an AMD EPYC, default ISA and XLA_FLAGS=--xla_cpu_max_isa=AVX2: bit-identical.
    Not so if the hparam axis is added on top of the seed axis (hparams x seeds in one program):
    there the final parameters at (0.0, 5e-3) differ by up to 3e-8 (experience and metrics still
    identical). Probing one gradient step alone (the agent's `gradient_step` with and without an
    extra hparam vmap) gives identical losses and Adam updates but parameter gradients that differ
    in the last bits (up to 2.4e-7): the backward pass's contractions round differently.
    """
    trainer, run, _, _ = fedrdqn
    grid = [(0.2, 2.3e-3), (0.5, 1e-3), (0.0, 5e-3)]  # (omega, learning rate); the first is the default
    omegas, learning_rates = (jnp.array(values) for values in zip(*grid))
    hps = jax.vmap(lambda w, lr: trainer.hparams.replace(omega=w, learning_rate=lr))(omegas, learning_rates)
    # One seed swept over the grid, against the same seed in the fixture's (seed-vmapped) program.
    states, metrics = jax.jit(jax.vmap(trainer.train, in_axes=(None, 0)))(KEYS[0], hps)
    for i, (omega, learning_rate) in enumerate(grid):
        alone = jax.tree.map(lambda leaf: leaf[0], run(KEYS, trainer.hparams.replace(omega=omega, learning_rate=learning_rate)))
        swept = jax.tree.map(lambda leaf: leaf[i], (states, metrics))
        chex.assert_trees_all_equal(_without_key_types(swept), _without_key_types(alone))
    # The grid points are different runs.
    assert not np.allclose(metrics["curve"]["td_loss"][0], metrics["curve"]["td_loss"][1])
    assert not np.allclose(metrics["curve"]["td_loss"][0], metrics["curve"]["td_loss"][2])


def _jax_mlp(params, x):
    """Forward pass of a flax MLP (Dense_0 ... Dense_n, relu between), written out."""
    layers = params["params"]
    names = sorted(layers, key=lambda n: int(n.split("_")[1]))
    for i, name in enumerate(names):
        x = x @ layers[name]["kernel"] + layers[name]["bias"]
        if i < len(names) - 1:
            x = jax.nn.relu(x)
    return x


def test_local_minimum_and_average_equal_returns_recomputed_in_each_agents_env(fedrdqn):
    """Recompute every agent's return: the global policy (agent 0's Q network, greedy) in that
    agent's own physics, with the episode keys `finalize` documents (fold_in(eval_key,
    num_rounds + 1), first split, one key per episode), through `evaluate.episode_return`."""
    from fedjax_rl import envs
    from fedjax_rl.core import evaluate

    trainer, _, state, metrics = fedrdqn
    config = trainer.config
    env, nominal_params = envs.make(config.env_name, config.physics)
    max_steps = int(nominal_params.max_steps_in_episode)

    def returns(one_seed):
        q = jax.tree.map(lambda leaf: leaf[0], one_seed.agents.learner.shared.q)
        policy = lambda obs: jnp.argmax(_jax_mlp(q, obs))  # noqa: E731
        local_key, _ = jax.random.split(jax.random.fold_in(one_seed.eval_key, config.num_rounds + 1))
        episode_keys = jax.random.split(local_key, config.eval_episodes)

        def mean_return(params):
            return jnp.mean(jax.vmap(lambda k: evaluate.episode_return(env, params, policy, k, max_steps))(episode_keys))

        return jax.vmap(mean_return)(one_seed.agents.env_params), mean_return(nominal_params)

    per_agent, nominal = jax.jit(jax.vmap(returns))(state)
    final = metrics["final"]
    np.testing.assert_array_equal(final["local_returns"], per_agent)
    np.testing.assert_array_equal(final["local_average"], np.mean(np.asarray(per_agent), axis=1))
    np.testing.assert_array_equal(final["local_minimum"], np.min(np.asarray(per_agent), axis=1))
    # The numbers can tell the environments apart: agents' returns differ from one another, and
    # not every agent's return is the nominal environment's.
    assert np.all(final["local_minimum"] < final["local_average"])
    assert np.all(np.any(np.asarray(per_agent) != np.asarray(nominal)[:, None], axis=1))


def test_sync_rounds_happen_every_sync_every_steps(fedrdqn):
    """A block (eval_every_rounds rounds) equals, step for step, E local steps followed by the
    mean of the shared leaves over agents, repeated eval_every_rounds times; syncing only at
    the end of the block gives other parameters."""
    trainer, _, _, _ = fedrdqn
    config = trainer.config
    state = jax.jit(trainer.init)(jax.random.key(3))
    hp = trainer.hparams
    local = jax.jit(trainer.local_round)

    def average(s):
        shared = jax.tree.map(lambda leaf: jnp.broadcast_to(jnp.mean(leaf, axis=0), leaf.shape),
                              s.agents.learner.shared)
        return s.replace(agents=s.agents.replace(learner=s.agents.learner.replace(shared=shared)))

    by_hand, only_at_end = state, state
    for round_index in range(config.eval_every_rounds):
        by_hand = average(local(by_hand, hp, round_index))
        only_at_end = local(only_at_end, hp, round_index)
    only_at_end = average(only_at_end)
    block, metrics = jax.jit(trainer.run_block)(state, hp, 0)
    assert int(metrics["env_steps"]) == config.eval_every_rounds * config.sync_every
    chex.assert_trees_all_equal(block.agents.learner.private, by_hand.agents.learner.private)
    chex.assert_trees_all_equal(block.agents.learner.shared, by_hand.agents.learner.shared)
    difference = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), block.agents.learner.shared,
                              only_at_end.agents.learner.shared)
    assert max(jax.tree.leaves(difference)) > 1e-4


def test_sharded_agents_match_vmap(fedrdqn):
    _, _, state, metrics = fedrdqn
    sharded = program.make_trainer(tiny_config(num_devices=2))
    state_s, metrics_s = jax.jit(jax.vmap(sharded.train))(KEYS)
    chex.assert_trees_all_close(metrics_s, metrics, rtol=1e-6, atol=1e-6)
    chex.assert_trees_all_close(state_s.agents.learner.shared, state.agents.learner.shared, rtol=1e-6, atol=1e-6)


def test_checkpoint_from_another_version_is_kept_and_the_run_starts_afresh(fedrdqn, tmp_path):
    """Same configuration, but a checkpoint whose state layout differs (an older fedjax_rl): the
    run warns, keeps the file aside, and trains from block 0 to the same numbers."""
    trainer, _, _, metrics = fedrdqn
    out = tmp_path / "run"
    out.mkdir()
    config_dict, _ = records.recorded_config(trainer.config, num_seeds=2, seed=0)  # what run() records
    (out / "config.json").write_text(json.dumps(config_dict))
    checkpoint.save(str(out / "checkpoint.npz"), {"old": np.zeros(3)}, blocks_done=1, curve="[]")
    with pytest.warns(UserWarning, match="another version of fedjax_rl"):
        result = loop.run(trainer.config, num_seeds=2, out_dir=str(out), progress=False)
    assert (out / "checkpoint.incompatible.1.npz").exists()
    np.testing.assert_array_equal(result["curve"]["env_steps"], metrics["curve"]["env_steps"])
    np.testing.assert_allclose(result["curve"]["nominal_return"], metrics["curve"]["nominal_return"], rtol=1e-5, atol=1e-6)
    # The new checkpoint fits the state.
    checkpoint.load(str(out / "checkpoint.npz"), jax.jit(jax.vmap(trainer.init))(program.seed_keys(0, 2)))


@pytest.mark.parametrize(
    "agent,fields,match",
    [
        (dict(omega=1.0), {}, r"omega must be in \[0, 1\)"),
        (dict(omega=-0.1), {}, r"omega must be in \[0, 1\)"),
        (dict(tau=0.5), {}, r"tau must be in \(0, 0.5\)"),
        (dict(tau=0.0), {}, r"tau must be in \(0, 0.5\)"),
        (dict(batch_size=64, buffer_size=32), {}, r"batch_size \(64\) must be <= buffer_size \(32\)"),
        ({}, dict(max_rate=1.0), r"p must be in \[0, 1\)"),
        ({}, dict(num_agents=0), r"num_agents \(K\) must be >= 1"),
        ({}, dict(sync_every=0), r"sync_every \(E\) must be >= 1"),
        ({}, dict(physics=("pole",)), r"unknown physical parameter 'pole' for CartPole-v1; allowed: .*length"),
        ({}, dict(env_name="Pong-v0"), r"unknown environment 'Pong-v0'; allowed: CartPole-v1"),
        ({}, dict(steps_per_agent=55), r"steps_per_agent \(55\) must be a positive multiple"),
        ({}, dict(num_devices=3), r"multiple of num_devices=3"),
    ],
)
def test_bad_settings_raise_before_compiling(agent, fields, match):
    base = tiny_config()
    config = base.__class__(**{**base.__dict__, "agent": base.agent.__class__(**{**base.agent.__dict__, **agent}), **fields})
    with pytest.raises(ValueError, match=match):
        program.make_trainer(config)  # validation is the first thing make_trainer does
