"""FedRDDPG / DDPGAvg(1) / DDPGAvg(2): critic targets and losses against float64 numpy on a tiny
batch, an actor step that raises Q, omega = 0 with one critic == DDPGAvg(1), federation invariants,
one trace per configuration, the command line, and learning on Pendulum-v1 with perturbed mass."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from fedjax_rl.cli import commands
from fedjax_rl.core import agent_axis, federated
from fedjax_rl.training import configs, program
from fedjax_rl.agents import base
from fedjax_rl.agents.ddpg import DDPGAgent, DDPGConfig
from fedjax_rl.agents.base import Transition
from references import numpy_mlp, users_codegen

BOX = spaces.Box(low=-2.0, high=2.0, shape=(1,), dtype=jnp.float32)
GAMMA, OMEGA, TAU = 0.9, 0.3, 0.01




def _critic_numpy(stacked, index, obs, action):
    params = jax.tree.map(lambda x: x[index], stacked)
    return numpy_mlp(params, np.concatenate([obs, action], axis=-1))[:, 0]


def _agent(num_critics, robust=True, omega=OMEGA):
    config = DDPGConfig(robust=robust, omega=omega if robust else 0.0, tau=TAU, gamma=GAMMA, hidden_sizes=(5,),
                        num_critics=num_critics, batch_size=3, buffer_size=3)
    return DDPGAgent(config, (3,), BOX, total_steps=100)


def _distinct_targets(agent, key):
    """Online and target networks with different weights, so the test sees which term uses which."""
    state = agent.init(key)
    other = agent.init(jax.random.fold_in(key, 1)).shared
    return state.replace(shared=state.shared.replace(critic_target=other.critic, actor_target=other.actor))


OBS = np.asarray(jax.random.normal(jax.random.key(3), (3, 3)), np.float64)
NEXT_OBS = np.asarray(jax.random.normal(jax.random.key(4), (3, 3)), np.float64)
ACTION = np.array([[0.5], [-0.25], [0.9]])
REWARD = np.array([1.0, -0.5, 0.25])
TERMINATED = np.array([False, True, False])  # ordinary, terminated, truncated (bootstraps)
BATCH = Transition(obs=jnp.asarray(OBS, jnp.float32), action=jnp.asarray(ACTION, jnp.float32),
                   reward=jnp.asarray(REWARD, jnp.float32), next_obs=jnp.asarray(NEXT_OBS, jnp.float32),
                   terminated=jnp.asarray(TERMINATED))


@pytest.mark.parametrize("num_critics", [1, 2])
@pytest.mark.parametrize("robust", [True, False])
def test_critic_target_and_losses_match_hand_computation(num_critics, robust):
    agent = _agent(num_critics, robust)
    state = _distinct_targets(agent, jax.random.key(1))
    shared = state.shared
    hp = agent.hparams()
    omega = OMEGA if robust else 0.0

    next_action = np.tanh(numpy_mlp(shared.actor_target, NEXT_OBS))  # pi(s'; phi')
    next_q = np.stack([_critic_numpy(shared.critic_target, i, NEXT_OBS, next_action) for i in range(num_critics)])
    v_next = next_q.min(axis=0)  # one critic: Q'; two: clipped double Q
    v_masked = np.where(TERMINATED, 0.0, v_next)
    degree = numpy_mlp(shared.degree, OBS)[:, 0] if robust else np.zeros(3)
    y = REWARD + GAMMA * (1 - omega) * v_masked + GAMMA * omega * degree
    q = np.stack([_critic_numpy(shared.critic, i, OBS, ACTION) for i in range(num_critics)])
    expected_critic = np.sum(np.mean((q - y) ** 2, axis=1))
    expected_actor = -np.mean(_critic_numpy(shared.critic, 0, OBS, np.tanh(numpy_mlp(shared.actor, OBS))))

    target, next_value = agent.critic_target(shared, BATCH, hp)
    np.testing.assert_allclose(next_value, v_next, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(target, y, rtol=1e-5, atol=1e-6)
    assert float(agent.critic_loss(shared.critic, BATCH, target)) == pytest.approx(expected_critic, rel=1e-5)
    assert float(agent.actor_loss(shared.actor, shared.critic, BATCH.obs)) == pytest.approx(expected_actor, rel=1e-5)
    expected_degree = 0.0  # the *Avg baselines have no expectile network: their degree loss reads 0
    if robust:
        diff = v_masked - degree
        expected_degree = np.mean(np.where(diff >= 0, TAU, 1 - TAU) * diff**2)
        assert float(agent.robust.loss(shared.degree, BATCH, next_value, hp)) == pytest.approx(expected_degree, rel=1e-5)
    # The losses one gradient step reports (the critic's and D's before their update).
    _, (critic_loss, _, degree_loss) = jax.jit(lambda s: agent.update(s, BATCH, hp))(state)
    assert float(critic_loss) == pytest.approx(expected_critic, rel=1e-5)
    assert float(degree_loss) == pytest.approx(expected_degree, rel=1e-5, abs=0.0)


def test_truncation_bootstraps_and_termination_does_not():
    agent = _agent(1, robust=False)
    shared = _distinct_targets(agent, jax.random.key(1)).shared
    hp = agent.hparams()
    all_truncated = BATCH.replace(terminated=jnp.zeros(3, bool))
    target_t, v = agent.critic_target(shared, all_truncated, hp)
    target_d, _ = agent.critic_target(shared, BATCH.replace(terminated=jnp.ones(3, bool)), hp)
    np.testing.assert_allclose(target_t, REWARD + GAMMA * np.asarray(v), rtol=1e-6)
    np.testing.assert_allclose(target_d, REWARD, rtol=1e-6)


def test_one_actor_step_increases_q_of_the_policy():
    agent = _agent(1)
    state = agent.init(jax.random.key(5))
    shared, private = state.shared, state.private

    def q_of_policy(actor):
        return jnp.mean(agent.critics(shared.critic, BATCH.obs, agent.actor(actor, BATCH.obs))[0])

    grads = jax.grad(agent.actor_loss)(shared.actor, shared.critic, BATCH.obs)
    actor, _ = base.apply_updates(agent.optimizer, shared.actor, grads, private.actor_opt, 1e-3)
    before, after = float(q_of_policy(shared.actor)), float(q_of_policy(actor))
    assert after > before, (before, after)


def test_omega_zero_with_one_critic_is_ddpgavg1_exactly():
    robust, plain = _agent(1, True, omega=0.0), _agent(1, False)
    key = jax.random.key(7)
    state_r, state_p = robust.init(key), plain.init(key)
    chex.assert_trees_all_equal(state_r.shared.actor, state_p.shared.actor)
    chex.assert_trees_all_equal(state_r.shared.critic, state_p.shared.critic)
    hp_r = robust.hparams()
    assert float(hp_r.omega) == 0.0 and "omega" not in plain.hparams().names()
    new_r, losses_r = jax.jit(robust.update, compiler_options=users_codegen())(state_r, BATCH, hp_r)
    new_p, losses_p = jax.jit(plain.update, compiler_options=users_codegen())(state_p, BATCH, plain.hparams())
    for name in ("critic", "critic_target", "actor", "actor_target"):
        chex.assert_trees_all_equal(getattr(new_r.shared, name), getattr(new_p.shared, name))
    assert float(losses_r[0]) == float(losses_p[0]) and float(losses_r[1]) == float(losses_p[1])


def test_bad_settings_and_action_spaces_raise_before_compiling():
    with pytest.raises(ValueError, match=r"the actor-critics \(DDPG, TD3, SAC\) need continuous \(Box\) actions; CartPole-v1 has Discrete"):
        configs.train_config("fedrddpg", "CartPole-v1")
    with pytest.raises(ValueError, match=r"DQN needs discrete actions; Pendulum-v1 has Box"):
        configs.train_config("fedrdqn", "Pendulum-v1", physics=("m",))
    with pytest.raises(ValueError, match=r"omega must be 0 for DDPGAvg"):
        configs.train_config("ddpgavg2", "Pendulum-v1", agent_overrides=dict(omega=0.2))
    with pytest.raises(ValueError, match=r"num_critics must be >= 1, got 0"):
        configs.train_config("fedrddpg", "Pendulum-v1", agent_overrides=dict(num_critics=0))
    with pytest.raises(ValueError, match=r"unknown DDPG settings \['epsilon'\]"):
        configs.train_config("fedrddpg", "Pendulum-v1", agent_overrides=dict(epsilon=0.1))


def test_registry_defaults_name_the_paper_and_rl_zoo():
    pendulum = configs.train_config("fedrddpg", "Pendulum-v1")
    assert (pendulum.agent.batch_size, pendulum.agent.buffer_size) == (64, 100_000)  # paper
    assert (pendulum.num_agents, pendulum.sync_every, pendulum.max_rate) == (5, 100, 0.5)  # paper
    assert pendulum.agent.num_critics == 1 and configs.train_config("ddpgavg2", "Pendulum-v1").agent.num_critics == 2
    assert pendulum.steps_per_agent == 20_000 and pendulum.agent.gamma == 0.98  # RL-Zoo3 Pendulum-v1
    assert pendulum.physics == ("m",)
    for setting in DDPGConfig.SETTINGS:
        if setting.name != "robust":
            assert setting.source or setting.name in ("omega",), setting.name


# -- compiled runs -----------------------------------------------------------------------------------

TINY_AGENT = dict(hidden_sizes=(16, 16), learning_starts=15, batch_size=8, buffer_size=60)


def tiny_config(algo="fedrddpg", **fields):
    base_fields = dict(physics=("m",), num_agents=3, sync_every=10, steps_per_agent=40, eval_every_rounds=2,
                       eval_episodes=1, sweep_points=2)
    agent = dict(TINY_AGENT, **({"omega": 0.2} if algo == "fedrddpg" else {}))
    return configs.train_config(algo, "Pendulum-v1", agent_overrides=agent, **{**base_fields, **fields})


def test_one_trace_per_configuration_and_sync_invariants():
    trainer = program.make_trainer(tiny_config("ddpgavg2"))
    chex.clear_trace_counter()  # another test's trainer.train, traced earlier in this worker, counts too
    traced = chex.assert_max_traces(trainer.train, n=1)
    run = jax.jit(jax.vmap(traced, in_axes=(0, None)))
    state, metrics = run(program.seed_keys(0, 2), trainer.hparams)
    run(program.seed_keys(1, 2), trainer.hparams)  # new keys, same program: no retrace
    assert np.all(np.isfinite(metrics["curve"]["critic_loss"]))
    assert np.all(metrics["curve"]["actor_loss"] != 0)  # trained past learning_starts
    chex.assert_shape(state.agents.learner.shared.critic["params"]["Dense_0"]["kernel"], (2, 3, 2, 4, 16))

    # Every block ends with a sync: identical shared leaves on every agent; private leaves differ.
    seed0 = jax.tree.map(lambda x: x[0], state)
    for leaf in jax.tree.leaves(seed0.agents.learner.shared):
        for k in range(1, 3):
            np.testing.assert_array_equal(leaf[k], leaf[0])
    private = seed0.agents.learner.private
    for opt in (private.critic_opt, private.actor_opt):
        mu = jax.tree.leaves(opt)[1]  # Adam's first moment of the first layer
        assert not np.allclose(mu[0], mu[1])
    assert not np.allclose(private.buffer.experience.obs[0], private.buffer.experience.obs[1])
    # A local round without the average lets every shared leaf drift apart.
    drifted = jax.jit(trainer.local_round)(seed0, trainer.hparams, 4)
    for leaf in jax.tree.leaves(drifted.agents.learner.shared):
        assert not np.allclose(leaf[0], leaf[1])
    # The sync itself: shared leaves become the mean over agents, private leaves are untouched.
    synced = jax.jit(agent_axis.for_each_agent(federated.federated_average, 3))(drifted.agents.learner)
    chex.assert_trees_all_equal(synced.private, drifted.agents.learner.private)
    chex.assert_trees_all_close(
        synced.shared, jax.tree.map(lambda x: jnp.broadcast_to(x.mean(0), x.shape), drifted.agents.learner.shared),
        rtol=1e-6, atol=1e-7)
    # Actions in the buffer are the normalised ones, inside [-1, 1].
    assert np.all(np.abs(private.buffer.experience.action) <= 1.0)


def test_cli_train_compare_plot(tmp_path, capsys):
    out = tmp_path / "fedrddpg"
    argv = ["train", "--algo", "fedrddpg", "--env", "Pendulum-v1", "--param", "m", "--steps", "400", "--seeds", "2",
            "--agents", "2", "--eval-every", "2", "--eval-episodes", "1", "--sweep-points", "2", "--omega", "0.2",
            "--set", "hidden_sizes=8", "--set", "learning_starts=50", "--set", "buffer_size=400", "--no-progress",
            "--out", str(out)]
    assert commands.main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["algo"] == "fedrddpg" and config["agent"]["omega"] == 0.2 and config["agent"]["num_critics"] == 1
    metrics = json.loads((out / "metrics.json").read_text())
    # The run used DDPG's CPU matrix-product library and says so; its identity leaves it out.
    assert metrics["cpu_dots"] == "eigen" and "cpu_dots" not in config
    assert np.asarray(metrics["curve"]["nominal_return"]).shape == (2, 2)
    capsys.readouterr()
    assert commands.main(["compare", str(out)]) == 0
    assert "FedRDDPG (ω=0.2)" in capsys.readouterr().out
    assert commands.main(["plot", str(out), "--out", str(tmp_path / "fig")]) == 0
    assert (tmp_path / "fig_curve.png").exists()


# -- learning ----------------------------------------------------------------------------------------

LEARN_STEPS = 4000
LEARN_SEEDS = 4


def learn_config(algo):
    """Pendulum-v1, mass m perturbed (p = 0.5), K = 5, E = 100; 64x64 networks and warm-up 500
    (RL-Zoo3's Pendulum settings otherwise: gamma 0.98, noise 0.1, lr 1e-3; paper batch 64)."""
    return configs.train_config(
        algo, "Pendulum-v1", physics=("m",), steps_per_agent=LEARN_STEPS, eval_every_rounds=10, eval_episodes=5,
        sweep_points=2,
        agent_overrides=dict(hidden_sizes=(64, 64), learning_starts=500, buffer_size=LEARN_STEPS,
                             **({"omega": 0.1} if algo == "fedrddpg" else {})),
    )


def learn_returns(algo):
    """Per-seed (nominal return at the end, local-environment average), seeds vmapped in one program."""
    config = learn_config(algo)  # compiled as `loop.run` compiles it (its matrix-product library)
    _, metrics = jax.jit(jax.vmap(program.make_train(config)), compiler_options=config.compiler_options)(
        program.seed_keys(0, LEARN_SEEDS))
    return np.asarray(metrics["curve"]["nominal_return"][:, -1]), np.asarray(metrics["final"]["local_average"])


@pytest.mark.learning
@pytest.mark.parametrize("algo", ["fedrddpg", "ddpgavg2"])
def test_learns_pendulum_with_perturbed_mass(algo):
    """A uniformly random policy returns -1199 on Pendulum-v1 (registry, 1000 episodes). After 4000
    steps per agent, the median over 4 vmapped seeds of the global policy's nominal return and of
    its average over the agents' own environments must reach -600 (half of random's cost).

    With the agents' revision 2 (SB3's warm-up and first gradient step, 2026-11-26), measured on a
    2-core Intel Xeon (AVX-512), identical under the default ISA and under AVX2, with the algorithm's
    own CPU matrix-product library (as the test runs):
      fedrddpg  nominal -176.4 -105.2 -269.0 -165.1 (median -170.8)
                local   -138.9 -141.8 -410.4 -228.5 (median -185.2; margin 415 to -600)
      ddpgavg2  nominal -177.1 -131.6 -254.7 -165.2 (median -171.2)
                local   -143.9 -164.3 -478.5 -202.0 (median -183.2; margin 417 to -600)
    As the suite compiles it (tests/conftest.py's code generation), the same Xeon, 2026-11-29,
    identical under the default ISA and under AVX2:
      fedrddpg  nominal -178.4 -104.5 -281.9 -172.1 (median -175.3)
                local   -140.3 -130.7 -457.5 -258.5 (median -199.4; margin 401 to -600)
      ddpgavg2  nominal -177.1 -137.5 -136.3 -163.5 (median -150.5)
                local   -149.7 -182.4 -381.5 -200.0 (median -191.2; margin 409 to -600)
    Revision 1 (before):
    Measured on an AMD EPYC (AVX-512), per seed 0..3, identical under the default ISA and under
    XLA_FLAGS=--xla_cpu_max_isa=AVX2, with DDPG's CPU matrix-product library, Eigen (2026-11-26):
      fedrddpg  nominal -175.1 -126.3 -135.9 -328.6 (median -155.5)
                local   -132.6 -172.0 -439.9 -611.8 (median -306.0; margin 294 to -600)
      ddpgavg2  nominal -177.3 -213.1 -136.2 -411.8 (median -195.2)
                local   -212.2 -164.4 -569.7 -822.2 (median -391.0; margin 209 to -600)
    With YNNPACK's (cpu_dots="ynnpack", XLA's default; the numbers below all are), default and AVX2:
      fedrddpg  nominal -175.4 -127.1 -135.6 -174.0 (median -154.8)
                local   -132.8 -164.9 -413.5 -388.6 (median -276.7; margin 323 to -600)
      ddpgavg2  nominal -174.2 -135.2 -136.0 -414.3 (median -155.1)
                local   -132.3 -151.4 -472.7 -669.3 (median -312.0; margin 288 to -600)
    and under XLA_FLAGS=--xla_cpu_max_isa=SSE4_2 (no FMA: the arithmetic really differs):
      fedrddpg  nominal -176.7 -128.5 -136.2 -359.0 (median -156.5)
                local   -135.4 -166.7 -344.5 -591.3 (median -255.6; margin 344 to -600)
      ddpgavg2  nominal -259.9 -206.2 -135.9 -391.9 (median -233.1)
                local   -225.8 -151.2 -392.7 -639.3 (median -309.3; margin 291 to -600)
    On an AMD EPYC without AVX-512 (so the default is AVX2), default and AVX2 identical:
      fedrddpg  nominal -173.6 -127.6 -135.7 -338.2 (median -154.6)
                local   -131.8 -181.6 -267.8 -643.8 (median -224.7)
      ddpgavg2  nominal -175.6 -208.5 -137.2 -388.8 (median -192.1)
                local   -204.1 -162.1 -463.3 -645.3 (median -333.7; margin 266 to -600)
    and SSE4_2: fedrddpg local median -229.7, ddpgavg2 local median -280.2.
    Earlier evaluations of the same runs at 1000-3000 steps are still near random (about -1600 to
    -450), so 4000 steps is the budget with a margin. Cost: 90-165 s per algorithm including
    compilation on the shared, loaded 2-core machine (load average 7).
    """
    nominal, local = learn_returns(algo)
    print(f"{algo}: nominal {np.round(nominal, 1)}, local average {np.round(local, 1)}")
    assert np.median(nominal) >= -600.0 > agents_random_return()
    assert np.median(local) >= -600.0


def agents_random_return():
    from fedjax_rl import envs

    return envs.get("Pendulum-v1").random_return
