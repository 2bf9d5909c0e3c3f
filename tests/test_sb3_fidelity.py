"""The baselines as SB3 runs them: network initialisation, the warm-up, and when learning starts.

The paper's baselines ran on Stable-Baselines3 with RL-Zoo3's settings. These tests hold the four
places where a line-by-line reading found that a JAX port can drift from SB3 (2.x):
- `init=torch` draws every layer as PyTorch's `nn.Linear` does (SB3's off-policy networks keep that
  default): weights and biases uniform on [-1/sqrt(fan_in), 1/sqrt(fan_in)];
- the warm-up: the first `learning_starts` actions are random (SB3's `_sample_action` samples the
  action space while num_timesteps < learning_starts), and DDPG/TD3 add their action noise to those
  random actions and clip (SB3 noises whatever action it chose); SAC has no action noise;
- the first gradient step: after a rollout of `train_freq` steps, once num_timesteps >
  learning_starts (SB3's `learn` loop), so one environment step later than ">=" would;
- DQN's epsilon at step s is the schedule at the s - 1 steps already taken (SB3 updates its
  exploration rate after each step), and the warm-up is uniform whatever epsilon is.
The reference for the schedule is SB3's loop restated in a few lines of Python (`sb3_schedule`).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from fedjax_rl import agents
from fedjax_rl.training import configs, records
from fedjax_rl.agents import base

OBS_SIZE = 5
BOX = spaces.Box(-2.0, 2.0, (3,), jnp.float32)


def make_agent(algo, **overrides):
    entry = agents.get(algo)
    discrete = entry.family == "DQN"
    config = configs.agent_config(algo, "CartPole-v1" if discrete else "Pendulum-v1", **overrides)
    return entry.agent(config, (OBS_SIZE,), spaces.Discrete(2) if discrete else BOX, total_steps=1000)


def dense_layers(params):
    """(path, kernel [..., fan_in, out], bias [..., out]) of every Dense layer in a parameter tree."""
    found = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        keys = [getattr(k, "key", getattr(k, "name", None)) for k in path]
        if keys[-1] in ("kernel", "bias"):
            found.setdefault(tuple(keys[:-1]), {})[keys[-1]] = np.asarray(leaf, np.float64)
    return [(path, layer["kernel"], layer["bias"]) for path, layer in sorted(found.items())]


# -- initialisation -----------------------------------------------------------------------------------

@pytest.mark.parametrize("algo", ["fedrdqn", "fedrddpg", "fedrtd3", "fedrsac"])
def test_torch_init_draws_every_layer_as_pytorch_linear(algo):
    """Layer by layer: max |w| <= 1/sqrt(fan_in) and the variance of a uniform on [-b, b], b^2 / 3,
    for weights and biases, within 5 standard errors of a sample variance (a uniform's kurtosis is
    9/5, so var(s^2) = (9/5 - 1) sigma^4 / n). `init=flax` fails both: LeCun-normal weights of
    variance 1/fan_in (3x PyTorch's) and zero biases. 256-unit layers keep the errors small."""
    agent = make_agent(algo, init="torch", hidden_sizes=(256, 256))
    layers = dense_layers(agent.init(jax.random.key(3)).shared)
    assert len(layers) >= 3 * 2  # the base networks and the expectile network D, three layers each
    for path, kernel, bias in layers:
        fan_in = kernel.shape[-2]
        bound = 1 / math.sqrt(fan_in)
        for name, values in (("kernel", kernel), ("bias", bias)):
            values = values.reshape(-1)
            assert np.abs(values).max() <= bound * (1 + 1e-6), (path, name)
            uniform_var = bound ** 2 / 3
            standard_error = math.sqrt(0.8 / values.size) * uniform_var
            assert abs(values.var() - uniform_var) <= 5 * standard_error, (path, name, values.var(), uniform_var)

    flax_layers = dense_layers(make_agent(algo, init="flax", hidden_sizes=(256, 256)).init(jax.random.key(3)).shared)
    for path, kernel, bias in flax_layers:
        assert np.all(bias == 0), path
        assert kernel.reshape(-1).var() > 2 * (1 / kernel.shape[-2]) / 3, path  # LeCun: about 1/fan_in


def test_init_is_recorded_and_checked():
    config = configs.train_config("dqnavg", "CartPole-v1", agent_overrides=dict(init="torch"))
    assert config.agent.init == "torch"
    assert configs.agent_config("fedrdqn", "CartPole-v1").init == base.INIT.default
    with pytest.raises(ValueError, match=r"init must be one of \['flax', 'torch'\], got 'pytorch'"):
        configs.agent_config("fedrdqn", "CartPole-v1", init="pytorch").validate()


# -- the warm-up and the first gradient step ----------------------------------------------------------

def sb3_schedule(learning_starts, train_freq, total_steps):
    """SB3's off-policy loop for one environment, restated: `learn` collects rollouts of `train_freq`
    steps; `_sample_action` acts at random while num_timesteps < learning_starts; after a rollout it
    trains if num_timesteps > 0 and num_timesteps > learning_starts. Returns (random[step - 1] for
    steps 1..total, the steps after which a training phase runs)."""
    random_action, trains_after, num_timesteps = [], [], 0
    while num_timesteps < total_steps:
        for _ in range(train_freq):
            random_action.append(num_timesteps < learning_starts)
            num_timesteps += 1
        if num_timesteps > 0 and num_timesteps > learning_starts:
            trains_after.append(num_timesteps)
    return random_action[:total_steps], [s for s in trains_after if s <= total_steps]


@pytest.mark.parametrize("learning_starts,train_freq", [(0, 1), (10, 1), (10, 2), (10, 4), (1000, 256), (0, 4)])
def test_warmup_and_training_steps_follow_sb3(learning_starts, train_freq):
    config = configs.agent_config("fedrdqn", "CartPole-v1", learning_starts=learning_starts, train_freq=train_freq)
    total = max(40, learning_starts + 3 * train_freq)
    random_action, trains_after = sb3_schedule(learning_starts, train_freq, total)
    steps = jnp.arange(1, total + 1)
    np.testing.assert_array_equal(base.is_warmup(config, steps), random_action)

    def trained(step):
        _, metrics = base.train_on_schedule(config, lambda s, k: (s, (jnp.float32(0),)), jnp.float32(0),
                                            jax.random.key(0), step, ("loss",))
        return metrics["trained"]

    trained_steps = np.flatnonzero(np.asarray(jax.jit(jax.vmap(trained))(steps))) + 1
    np.testing.assert_array_equal(trained_steps, trains_after)
    assert base.first_training_step(config) == trains_after[0]


ACT_DRAWS = 20_000


def _actions(agent, step, seed=0):
    """`agent.act` at environment step `step` for ACT_DRAWS keys, from a fresh state."""
    shared = agent.init(jax.random.key(1)).shared
    obs = jnp.linspace(-1.0, 1.0, OBS_SIZE)
    keys = jax.random.split(jax.random.key(seed), ACT_DRAWS)
    return np.asarray(jax.jit(jax.vmap(lambda k: agent.act(shared, obs, k, step, agent.hparams())))(keys))


@pytest.mark.parametrize("algo", ["ddpgavg1", "td3avg"])
def test_ddpg_and_td3_warmup_adds_the_action_noise_and_clips(algo):
    """The warm-up action is clip(u + sigma n, -1, 1), u ~ U[-1, 1]^d: its mass on the bounds is
    integral_0^2 P(sigma n > t) dt / 2 per side, sigma / sqrt(2 pi) (+ a negligible tail) on both
    together (0.0399 at sigma 0.1); a uniform without noise puts none there. After the warm-up the
    actor acts (its actions cluster around pi(s), far from uniform)."""
    sigma, learning_starts = 0.1, 50
    agent = make_agent(algo, learning_starts=learning_starts, exploration_noise=sigma, hidden_sizes=(16,))
    warmup = _actions(agent, learning_starts)  # the last warm-up step
    on_bounds = np.mean(np.abs(warmup) == 1.0)
    expected = sigma / math.sqrt(2 * math.pi)
    assert abs(on_bounds - expected) <= 5 * math.sqrt(expected / (warmup.size)), (on_bounds, expected)
    assert np.all(np.abs(warmup) <= 1.0)
    assert abs(warmup.std() - math.sqrt(1 / 3 + sigma ** 2)) < 0.02  # uniform spread, not the actor's
    acting = _actions(agent, learning_starts + 1)
    assert acting.std(axis=0).max() < 2 * sigma  # the actor's action plus noise


def test_sac_warmup_is_uniform_without_noise():
    agent = make_agent("sacavg", learning_starts=50, hidden_sizes=(16,))
    warmup = _actions(agent, 50)
    assert np.all(np.abs(warmup) < 1.0)
    assert abs(warmup.std() - math.sqrt(1 / 3)) < 0.01


def test_dqn_warmup_is_uniform_and_epsilon_counts_the_steps_taken():
    """With epsilon 0 from the start, the warm-up still acts uniformly (half the actions of two are
    not the greedy one), and the first step after it is greedy. Epsilon at step s is the schedule at
    s - 1: 1.0 at step 1, the final value from step 1 + fraction * total on."""
    agent = make_agent("dqnavg", learning_starts=20, exploration_initial_eps=0.0, exploration_final_eps=0.0,
                       hidden_sizes=(16,))
    greedy = int(agent.greedy_action(agent.init(jax.random.key(1)).shared, jnp.linspace(-1.0, 1.0, OBS_SIZE)))
    warmup_non_greedy = np.mean(_actions(agent, 20) != greedy)
    assert abs(warmup_non_greedy - 0.5) <= 5 * math.sqrt(0.25 / ACT_DRAWS)
    assert np.all(_actions(agent, 21) == greedy)

    decaying = make_agent("dqnavg", exploration_initial_eps=1.0, exploration_final_eps=0.0, exploration_fraction=0.5)
    epsilon = jax.jit(decaying.epsilon)
    assert float(epsilon(1)) == 1.0
    assert float(epsilon(2)) == pytest.approx(1 - 1 / 500)
    assert float(epsilon(501)) == pytest.approx(0.0, abs=1e-6)
    assert float(epsilon(500)) == pytest.approx(1 / 500, abs=1e-6)


def test_every_run_records_init_and_older_records_read_as_flax(tmp_path):
    """config.json names `init` in every run; a run directory written before the setting existed
    (no `init` in its record) ran Flax's initialisation, so it still reads back as finished for
    `init=flax`, and as another configuration's run for `init=torch`."""
    import json

    from fedjax_rl.training import run_directory

    def recorded(init):
        config = configs.train_config("dqnavg", "CartPole-v1", agent_overrides=dict(init=init))
        return records.recorded_config(config, num_seeds=2, seed=0)[0]

    assert recorded("flax")["agent"]["init"] == "flax" and recorded("torch")["agent"]["init"] == "torch"
    older = recorded("flax")
    del older["agent"]["init"]
    for name in (run_directory.CONFIG, run_directory.FINISHED):
        (tmp_path / name).write_text(json.dumps(older))
    assert run_directory.RunDirectory(str(tmp_path), recorded("flax")).progress(2)["state"] == "finished"
    assert run_directory.RunDirectory(str(tmp_path), recorded("torch")).progress(2)["state"] == "other settings"
    assert records.config_differences(older, recorded("torch")) == ["agent.init: flax -> torch"]


def test_runs_record_the_agents_revision_and_older_runs_never_merge_with_newer(tmp_path):
    """SB3's warm-up and first gradient step changed how the agents act and learn without a setting
    changing, so every run records `agent_revision`. A run directory written before (no field) is
    revision 1: it reads back as another configuration's run, a seed piece of it refuses to merge with
    a newer piece before compiling, and the difference is named."""
    import json

    from fedjax_rl.reproduce import seed_pieces
    from fedjax_rl.training import run_directory

    config = configs.train_config("dqnavg", "CartPole-v1")
    now = records.recorded_config(config, num_seeds=2, seed=0)[0]
    assert now["agent_revision"] == base.REVISION == 2
    older = dict(now)
    del older["agent_revision"]
    for name in (run_directory.CONFIG, run_directory.FINISHED):
        (tmp_path / name).write_text(json.dumps(older))
    assert run_directory.RunDirectory(str(tmp_path), now).progress(2)["state"] == "other settings"
    assert run_directory.RunDirectory(str(tmp_path), {**now, "agent_revision": 1}).progress(2)["state"] == "finished"
    on_disk = seed_pieces.ProgramOnDisk.read(str(tmp_path), "dqnavg", 2, now)
    with pytest.raises(ValueError, match=r"dqnavg seed 2 would train with other settings than the finished "
                                         r"dqnavg seeds 0-1 .*\(agent_revision: 1 -> 2\)"):
        on_disk.check(seed_pieces.Piece("dqnavg", 2, 3))
