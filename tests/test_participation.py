"""Partial participation (a random subset of agents enters each average; every agent receives the
new model) and communication accounting."""

import dataclasses
import functools
import statistics
import json
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl.core import agent_axis, aggregation, attacks, federated
from fedjax_rl.training import configs, loop, program, records, run_directory
from fedjax_rl.core.federated import FederatedState


def _per_agent_values(num_agents=5):
    keys = jax.random.split(jax.random.key(0), num_agents)
    return {"w": jax.vmap(lambda k: jax.random.normal(k, (3, 2)))(keys), "b": jnp.arange(num_agents, dtype=jnp.float32)}


def test_global_model_is_the_mean_of_exactly_the_participating_agents():
    shared = _per_agent_values()
    mask = jnp.array([0.0, 1.0, 0.0, 1.0, 1.0])
    state = FederatedState(shared=shared, private={"opt": jnp.arange(5.0)})
    averaged = agent_axis.for_each_agent(federated.federated_average, 5)(state, mask)
    for name, leaf in shared.items():
        expected = np.asarray(leaf)[[1, 3, 4]].astype(np.float64).mean(axis=0)
        for k in range(5):  # every agent, participant or not, receives the new global model
            np.testing.assert_allclose(averaged.shared[name][k], expected, rtol=1e-6)
    np.testing.assert_array_equal(averaged.private["opt"], state.private["opt"])


def test_full_participation_weights_equal_the_plain_mean_bit_for_bit():
    shared = _per_agent_values()
    state = FederatedState(shared=shared, private=None)
    plain = agent_axis.for_each_agent(federated.federated_average, 5)(state)
    weighted = agent_axis.for_each_agent(federated.federated_average, 5)(state, jnp.ones(5))
    chex.assert_trees_all_equal(plain, weighted)


@pytest.mark.parametrize("participation,expected", [(1.0, 5), (0.6, 3), (0.5, 3), (0.2, 1), (0.01, 1)])
def test_number_of_participants_is_ceil_of_participation_times_k(participation, expected):
    assert aggregation.num_participants(5, participation) == expected == max(1, math.ceil(round(participation * 5, 9)))
    masks = jax.vmap(lambda k: federated.sample_participants(k, 5, participation))(jax.random.split(jax.random.key(1), 200))
    np.testing.assert_array_equal(masks.sum(axis=1), expected)
    if expected < 5:  # every agent gets drawn sometimes, none always
        assert 0 < masks.mean(axis=0).min() and masks.mean(axis=0).max() < 1


AGENT = dict(hidden_sizes=(8,), learning_starts=5, train_freq=1, gradient_steps=1, target_update_interval=5,
             batch_size=4, buffer_size=40, omega=0.2)


def _config(**fields):
    return configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=AGENT, **{
        **dict(physics=("length",), num_agents=4, sync_every=10, steps_per_agent=40, eval_every_rounds=2,
               eval_episodes=1, sweep_points=2), **fields})


def test_a_partial_round_averages_the_recorded_participants_and_communication_is_counted(tmp_path):
    trainer = program.make_trainer(_config(participation=0.5, eval_every_rounds=1, steps_per_agent=20))
    state = jax.jit(trainer.init)(jax.random.key(4))
    hp = trainer.hparams
    # Round 1 (steps 11-20, after learning starts): the local steps alone, then the whole round.
    after_round_0, metrics_0 = jax.jit(trainer.run_block)(state, hp, 0)
    local = jax.jit(trainer.local_round)(after_round_0, hp, 1)
    synced, metrics_1 = jax.jit(trainer.run_block)(after_round_0, hp, 1)
    mask = np.asarray(metrics_1["participants"])[0]  # [K] of the block's only round
    assert mask.sum() == 2
    for got, before in zip(jax.tree.leaves(synced.agents.learner.shared), jax.tree.leaves(local.agents.learner.shared)):
        expected = np.asarray(before, np.float64)[mask == 1].mean(axis=0)
        for k in range(4):
            np.testing.assert_allclose(got[k], expected, rtol=1e-5, atol=1e-6)
    # Private state is the local steps' own.
    chex.assert_trees_all_equal(synced.agents.learner.private, local.agents.learner.private)

    # The host loop records every round's subset, and counts the traffic from the shared tree.
    out = tmp_path / "run"
    result = loop.run(trainer.config, num_seeds=2, out_dir=str(out), progress=False)
    participants = result["curve"]["participants"]  # [seeds, blocks, rounds per block, K]
    chex.assert_shape(participants, (2, 2, 1, 4))
    np.testing.assert_array_equal(participants.sum(axis=-1), 2)
    assert not np.array_equal(participants[0], participants[1])  # seeds draw their own subsets
    shared_one_agent = jax.tree.map(lambda x: x[0], state.agents.learner.shared)
    params = sum(x.size for x in jax.tree.leaves(shared_one_agent))
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shared_one_agent))
    comm = json.loads((out / "metrics.json").read_text())["communication"]
    assert comm == result["communication"]
    assert comm["shared_params"] == params and comm["model_bytes"] == 4 * params  # float32
    assert comm["bytes_up_per_round"] == 2 * nbytes and comm["bytes_down_per_round"] == 4 * nbytes
    assert comm["rounds"] == 2 and comm["bytes_total"] == 2 * 6 * nbytes
    # q, q_target and the expectile network: 3 MLPs 4 -> 8 -> (2, 2, 1)
    assert params == 2 * (4 * 8 + 8 + 8 * 2 + 2) + (4 * 8 + 8 + 8 * 1 + 1)


@pytest.mark.parametrize("value", [0.0, 1.5, -0.2])
def test_bad_participation_raises_before_compiling(value):
    with pytest.raises(ValueError, match=rf"participation must be in \(0, 1\], got {value}"):
        _config(participation=value).validate()


# -- fault injection: one agent's upload is NaN or 1e6 -------------------------------------------------

FAULT_AGENT = dict(AGENT, learning_starts=10)  # the first round (steps 1-5) does not train


@functools.lru_cache(maxsize=None)
def _fault_round(aggregation):
    """One round (E = 5, K = 5, no training) from a state in which every agent holds agent 0's
    model except the faulty ones: `run(faulty_agents, value) -> (state after, metrics, model)`."""
    config = configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=FAULT_AGENT, physics=("length",),
                                  num_agents=5, sync_every=5, steps_per_agent=5, eval_every_rounds=1,
                                  eval_episodes=1, sweep_points=2, aggregation=aggregation)
    trainer = program.make_trainer(config)
    state = jax.jit(trainer.init)(jax.random.key(0))
    model = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], x.shape), state.agents.learner.shared)
    run_block = jax.jit(trainer.run_block)

    def run(faulty_agents, value):
        shared = jax.tree.map(lambda x: x.at[jnp.asarray(faulty_agents)].set(value), model)
        learner = state.agents.learner.replace(shared=shared)
        after, metrics = run_block(state.replace(agents=state.agents.replace(learner=learner)), trainer.hparams, 0)
        return after, jax.device_get(metrics), model

    return trainer, run


@pytest.mark.parametrize("value", [np.nan, 1e6])
@pytest.mark.parametrize("aggregation", ["mean", "median", "trimmed_mean", "krum"])
def test_a_faulty_upload_stops_the_mean_and_is_absorbed_by_the_robust_rules(aggregation, value):
    trainer, run = _fault_round(aggregation)
    after, metrics, model = run([1], value)
    received = after.agents.learner.shared
    if aggregation != "mean":
        # The global model is the honest agents' (all equal, so also their mean): bit for bit for
        # the median and Krum (it takes one honest upload whole), up to rounding for the trimmed
        # mean (trim 0.25 of 5: it averages 3 of them).
        if aggregation in ("median", "krum"):
            chex.assert_trees_all_equal(received, model)
        else:
            chex.assert_trees_all_close(received, model, rtol=1e-6, atol=0)
        np.testing.assert_array_equal(metrics["nonfinite_uploads"], [0, 1, 0, 0, 0] if np.isnan(value) else 0)
        loop.check_finite(metrics, trainer, seed=0, block=0)  # the run goes on
    elif np.isnan(value):
        with pytest.raises(loop.NonFiniteError, match=r"non-finite shared parameters .* agent 1, at "
                                                             r"environment step 5 \(block 0\)"):
            loop.check_finite(metrics, trainer, seed=0, block=0)
    else:  # finite but wrong: the faulty agent drags every coordinate (4 model + 1e6) / 5
        for got, honest in zip(jax.tree.leaves(received), jax.tree.leaves(model)):
            np.testing.assert_allclose(got, (4 * np.asarray(honest, np.float64) + value) / 5, rtol=1e-5)
        assert "nonfinite_uploads" not in metrics


def test_a_faulty_majority_stops_the_median_naming_the_first_faulty_agent():
    trainer, run = _fault_round("median")
    _, metrics, _ = run([1, 3, 4], np.nan)
    np.testing.assert_array_equal(metrics["nonfinite_uploads"], [0, 1, 0, 1, 1])
    with pytest.raises(loop.NonFiniteError, match=r"non-finite shared parameters .* agent 1, at environment"):
        loop.check_finite(metrics, trainer, seed=0, block=0)


def test_a_record_without_the_rule_reads_as_the_mean(tmp_path):
    """A run directory written before the rule was a setting holds the mean's run: its config.json
    names no rule (nor trim, nor a schema number), and it reads as finished for the mean, not for
    another rule. Trim changes nothing but the trimmed mean, so it is part of no other rule's run."""
    recorded = {name: records.recorded_config(_config(**fields), num_seeds=2, seed=0)[0]
                for name, fields in [("mean", {}), ("median", dict(aggregation="median")),
                                     ("trimmed_mean", dict(aggregation="trimmed_mean", trim=0.3))]}
    assert (recorded["mean"]["aggregation"], recorded["mean"]["schema"]) == ("mean", records.RUN_SCHEMA)
    assert (recorded["trimmed_mean"]["aggregation"], recorded["trimmed_mean"]["trim"]) == ("trimmed_mean", 0.3)
    canonical = records.as_recorded
    assert canonical({**recorded["median"], "trim": 0.4}) == canonical(recorded["median"])
    assert canonical({**recorded["trimmed_mean"], "trim": 0.4}) != canonical(recorded["trimmed_mean"])
    older = {k: v for k, v in recorded["mean"].items() if k not in ("aggregation", "trim", "schema")}
    for name in ("config.json", loop.FINISHED):
        (tmp_path / name).write_text(json.dumps(older))
    assert run_directory.RunDirectory(str(tmp_path), recorded["mean"]).progress(2)["state"] == "finished"
    assert run_directory.RunDirectory(str(tmp_path), recorded["median"]).progress(2)["state"] == "other settings"


# -- attacks as a setting: `attackers` agents replace their upload (fedjax_rl.core.attacks) ----------------


@functools.lru_cache(maxsize=None)
def _attack_round(aggregation, attack, attackers, attack_scale=10.0):
    """One round (E = 5, K = 5, no training) from a state in which every agent holds agent 0's model,
    under `attackers` attackers: (state after, the model, the attackers' mask)."""
    config = configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=FAULT_AGENT, physics=("length",),
                                  num_agents=5, sync_every=5, steps_per_agent=5, eval_every_rounds=1,
                                  eval_episodes=1, sweep_points=2, aggregation=aggregation, attackers=attackers,
                                  attack=attack, attack_scale=attack_scale)
    trainer = program.make_trainer(config)
    state = jax.jit(trainer.init)(jax.random.key(0))
    model = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], x.shape), state.agents.learner.shared)
    state = state.replace(agents=state.agents.replace(learner=state.agents.learner.replace(shared=model)))
    after, _ = jax.jit(trainer.run_block)(state, trainer.hparams, 0)
    mask = np.asarray(attacks.attacker_mask(state.server_key, 5, attackers))
    return after, model, mask


def test_no_attackers_is_the_run_without_the_setting_bit_for_bit():
    """An attack named with 0 attackers (the default count) enters nothing of the program."""
    without, _, _ = _attack_round("mean", "sign_flip", 0)
    named, _, mask = _attack_round("mean", "noise", 0, attack_scale=3.0)
    chex.assert_trees_all_equal(without, named)
    assert not mask.any()


@functools.lru_cache(maxsize=None)
def _attacked_agent_round(aggregation, attack):
    """As `_attack_round` with one attacker, the round alone (`program.agent_round` over the agents, as
    `run_block` maps it, without the block's evaluation): (shared after, the model, the mask)."""
    config = configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=FAULT_AGENT, physics=("length",),
                                  num_agents=5, sync_every=5, steps_per_agent=5, eval_every_rounds=1,
                                  eval_episodes=1, sweep_points=2, aggregation=aggregation, attackers=1, attack=attack)
    trainer = program.make_trainer(config)
    state = jax.jit(trainer.init)(jax.random.key(0))
    model = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], x.shape), state.agents.learner.shared)
    agents = state.agents.replace(learner=state.agents.learner.replace(shared=model))
    mask = attacks.attacker_mask(state.server_key, 5, 1)
    mapped = agent_axis.for_each_agent(functools.partial(program.agent_round, trainer.setup), 5,
                                      in_axes=(0, None, None, None, 0, None))
    after, _ = jax.jit(mapped)(agents, jnp.int32(0), trainer.hparams, None, mask, attacks.round_key(state.server_key, 0))
    return after.learner.shared, model, np.asarray(mask)


def test_a_stale_attacker_uploads_its_own_initial_model_every_round():
    """`stale`: the attacker's upload is the shared leaves it started with (kept in its carry), so the
    mean of four agents at m and one stale upload is (4 m + its initial model) / 5."""
    config = configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=FAULT_AGENT, physics=("length",),
                                  num_agents=5, sync_every=5, steps_per_agent=5, eval_every_rounds=1,
                                  eval_episodes=1, sweep_points=2, attackers=1, attack="stale")
    trainer = program.make_trainer(config)
    state = jax.jit(trainer.init)(jax.random.key(0))
    frozen = state.agents.frozen
    model = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], x.shape), state.agents.learner.shared)
    agents = state.agents.replace(learner=state.agents.learner.replace(shared=model))
    mask = attacks.attacker_mask(state.server_key, 5, 1)
    [attacker] = np.flatnonzero(np.asarray(mask))
    mapped = agent_axis.for_each_agent(functools.partial(program.agent_round, trainer.setup), 5,
                                      in_axes=(0, None, None, None, 0, None))
    after, _ = jax.jit(mapped)(agents, jnp.int32(0), trainer.hparams, None, mask, attacks.round_key(state.server_key, 0))
    for got, honest, stale in zip(jax.tree.leaves(after.learner.shared), jax.tree.leaves(model), jax.tree.leaves(frozen)):
        expected = (4 * np.asarray(honest[0], np.float64) + np.asarray(stale[attacker], np.float64)) / 5
        np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-7)
    assert any(not np.array_equal(np.asarray(s[attacker]), np.asarray(h[0]))
               for s, h in zip(jax.tree.leaves(frozen), jax.tree.leaves(model)))  # its own, not the others' m
    # Every other run's carry holds nothing more (its checkpoint's leaves are what they were).
    assert _attack_round("mean", "sign_flip", 0)[0].agents.frozen is None


@pytest.mark.parametrize("aggregation, attack, expected", [
    ("mean", "sign_flip", 3 / 5),  # (4 m - m) / 5
    ("mean", "scale", 14 / 5),  # (4 m + 10 m) / 5
    ("median", "noise", 1.0),  # the honest majority's m, bit for bit
    ("krum", "scale", 1.0),  # one honest upload whole
], ids=["mean-sign-flip", "mean-scale", "median-noise", "krum-scale"])
def test_one_attacker_moves_the_mean_by_hand_and_not_the_robust_rules(aggregation, attack, expected):
    """Five agents hold one model m and do not train in the round; one, drawn from the run's keys,
    uploads -m, 10 m or m plus noise. The mean moves to the hand-computed multiple of m; the median
    and Krum give every agent m exactly. The sign flip runs the whole block program (`run_block`,
    its attackers drawn from the state's server key), the others the round alone."""
    if attack == "sign_flip":
        after, model, mask = _attack_round(aggregation, attack, 1)
        received = after.agents.learner.shared
    else:
        received, model, mask = _attacked_agent_round(aggregation, attack)
    assert mask.sum() == 1
    if expected == 1.0:
        chex.assert_trees_all_equal(received, model)
    else:
        for got, honest in zip(jax.tree.leaves(received), jax.tree.leaves(model)):
            np.testing.assert_allclose(got, expected * np.asarray(honest, np.float64), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("attack", ["ipm", "alie"])
def test_an_omniscient_attacker_builds_its_upload_from_the_honest_models_by_hand(attack):
    """Agent k of five holds (k + 1) m and does not train in the round. The attacker uploads what the four
    honest models make, coordinate by coordinate: `ipm` -10 times their mean, `alie` their mean minus z
    times their standard deviation (ddof 0), z = 0.2533 for K = 5 and f = 1, where Phi(z) = 3/5
    (Baruch et al.). The mean of the five uploads is worked in float64 from the multiples alone."""
    config = configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=FAULT_AGENT, physics=("length",),
                                  num_agents=5, sync_every=5, steps_per_agent=5, eval_every_rounds=1,
                                  eval_episodes=1, sweep_points=2, attackers=1, attack=attack)
    trainer = program.make_trainer(config)
    state = jax.jit(trainer.init)(jax.random.key(0))
    multiples = np.arange(1.0, 6.0)
    model = jax.tree.map(lambda x: x[:1] * multiples.reshape((5,) + (1,) * (x.ndim - 1)).astype(x.dtype),
                         state.agents.learner.shared)
    agents = state.agents.replace(learner=state.agents.learner.replace(shared=model))
    mask = attacks.attacker_mask(state.server_key, 5, 1)
    mapped = agent_axis.for_each_agent(functools.partial(program.agent_round, trainer.setup), 5,
                                      in_axes=(0, None, None, None, 0, None))
    after, _ = jax.jit(mapped)(agents, jnp.int32(0), trainer.hparams, None, mask, attacks.round_key(state.server_key, 0))
    honest = multiples[~np.asarray(mask)]
    z = float(attacks.alie_z(5, 1))
    assert statistics.NormalDist().cdf(z) == pytest.approx(3 / 5) and float(attacks.alie_z(10, 1)) == 0.0
    for got, m in zip(jax.tree.leaves(after.learner.shared), jax.tree.leaves(model)):
        m = np.asarray(m[0], np.float64)
        upload = (-10.0 * honest.mean() * m if attack == "ipm"
                  else honest.mean() * m - z * honest.std() * np.abs(m))
        expected = (honest.sum() * m + upload) / 5
        np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), rtol=1e-5, atol=1e-6)  # every agent


def test_the_attackers_are_drawn_per_seed_and_refused_beyond_all_but_one_agent():
    keys = jax.random.split(jax.random.key(3), 20)
    drawn = {tuple(np.flatnonzero(np.asarray(attacks.attacker_mask(k, 10, 3)))) for k in keys}
    assert len(drawn) > 10 and all(len(d) == 3 for d in drawn)
    with pytest.raises(ValueError, match=r"attackers must be in \[0, 4\] with num_agents=5 .*got 5"):
        configs.train_config("fedrdqn", "CartPole-v1", num_agents=5, attackers=5)
    with pytest.raises(ValueError, match=r"attack must be one of \['sign_flip', 'scale', 'noise', 'stale', 'alie', 'ipm'\]"):
        configs.train_config("fedrdqn", "CartPole-v1", num_agents=5, attackers=1, attack="lie")


def test_attackers_as_a_fraction_of_the_agents_become_the_count_the_run_records():
    """`--attackers 0.2` with K = 10 is the run of 2 attackers: the same config, recorded as the count."""
    from fedjax_rl.training import records

    def config(**overrides):
        return configs.train_config("fedrdqn", "CartPole-v1", num_agents=10, **overrides)

    assert config(attackers=0.2) == config(attackers=2) and config(attackers=0.2).attackers == 2
    assert config(attackers=0.29).attackers == 2 and config(attackers=0.3).attackers == 3  # rounded down, exactly
    assert config(attackers=0.9).attackers == 9 and config(attackers=3.0).attackers == 3
    assert records.config_to_dict(config(attackers=0.2))["attackers"] == 2
    assert configs.train_config("fedrdqn", "CartPole-v1", num_agents=100, attackers=0.29).attackers == 29
    [setting] = [s for s in configs.TRAIN_SETTINGS if s.name == "attackers"]
    assert (setting.parse("2"), setting.parse("0.25"), setting.parse("0")) == (2, 0.25, 0)
    with pytest.raises(ValueError, match=r"attackers expects a count of agents \(an integer >= 0\) or a fraction "
                                         r"of them in \(0, 1\), got '2.5'"):
        setting.parse("2.5")
    with pytest.raises(ValueError, match=r"attackers=0.05 of num_agents=10 is no agent .* must be in \[0.1, 1\)"):
        config(attackers=0.05)
    with pytest.raises(ValueError, match=r"attackers must be a count of agents .*got 1.5"):
        config(attackers=1.5)
    with pytest.raises(ValueError, match=r"attackers must be in \[0, 9\] with num_agents=10"):
        config(attackers=10.0)
    with pytest.raises(ValueError, match=r"attackers in a run's config is a count .*got 0.2; a fraction"):
        dataclasses.replace(config(), attackers=0.2).validate()
