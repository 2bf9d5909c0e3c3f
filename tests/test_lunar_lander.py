"""LunarLander-v3 in JAX against gymnasium's Box2D LunarLander-v3.

The expensive comparison runs once per session in a fixture: gymnasium's episodes (400 per setting,
heuristic and random actions, four physical settings), replayed on the port with common random
numbers, beside episodes from the port's own resets and the robustness sweep's grid, all in one
compiled program. gymnasium's side of those episodes is stored (tests/data/lunar_lander_gymnasium.npz,
written by `python tests/test_lunar_lander.py`): plain Python Box2D takes over a minute for them, and
`test_the_stored_episodes_are_gymnasiums` replays some of them live on the installed gymnasium."""

from __future__ import annotations

import copy
import os
import time
from importlib.metadata import version

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.envs.box2d import lunar_lander as gym_ll

from fedjax_rl.envs import lunar_lander as ll
from fedjax_rl.envs import lunar_lander_physics as physics
from fedjax_rl.envs.lunar_lander import EnvParams, LunarLander, heuristic_action

# The fixtures are expensive and session-scoped; `make test` runs pytest with `--dist loadfile`,
# so this whole module runs on one worker (xdist's loadgroup marks are ignored under pytest 9.2).

SETTINGS = {
    "no wind": ({}, EnvParams()),
    "wind 15": ({"enable_wind": True}, LunarLander.wind_params(15.0)),
    "gravity -5": ({"gravity": -5.0}, EnvParams(gravity=-5.0)),
    "gravity -11.9": ({"gravity": -11.9}, EnvParams(gravity=-11.9)),
}
HEURISTIC_TOLERANCE = 0.15  # relative, the issue's target
RANDOM_TOLERANCE = 0.10  # relative; measured within 4% (paired, 400 episodes)
OUTCOME_AGREEMENT = 0.85  # paired heuristic episodes that both land or both fail; measured 0.91-0.99


# --- helpers -------------------------------------------------------------------------------
PAIRED_EPISODES = 400  # per setting; the first 100 are reported too (the issue's count)
REPORTED_EPISODES = 100
OWN_RESET_EPISODES = 100
MAX_STEPS = 1000
GYM_DATA = os.path.join(os.path.dirname(__file__), "data", "lunar_lander_gymnasium.npz")
LIVE_SEEDS = (0, 1, 2, 3, 396, 397, 398, 399)  # per setting, replayed on gymnasium by the suite
START_FIELDS = ("obs", "pos", "angle", "vel", "angvel", "terrain_y", "wind_idx", "torque_idx", "prev_shaping")
RESULT_FIELDS = ("returns", "lengths", "landed", "final_legs")


def random_actions(seed):
    """The random policy's actions in gymnasium's episode from `reset(seed)`."""
    return np.random.default_rng(10**6 + seed).integers(0, 4, MAX_STEPS)


def gym_paired_episodes(kwargs, seeds):
    """gymnasium's episodes, heuristic and random-action, from `reset(seed)` for each seed, and what
    replays them on the port with common random numbers: the start state (bodies, terrain, wind
    phases, shaping) and the state of `np_random` after the reset, from which gymnasium draws the
    engine noise (two uniforms per step, whatever the action; `engine_noise`). The random actions are
    `random_actions(seed)`. Flat arrays, one row per seed: `start_*`, `rng_state` (PCG64's state and
    increment, 128-bit each, as four uint64 words) and `{heuristic,random}_{returns,lengths,landed,final_legs}`."""
    env = gym.make("LunarLander-v3", **kwargs)
    out = {k: [] for k in ("start", "rng_state", "heuristic", "random")}
    for seed in seeds:
        for policy in ("heuristic", "random"):
            obs, _ = env.reset(seed=seed)
            u = env.unwrapped
            if policy == "heuristic":
                bodies = [u.lander] + u.legs
                out["start"].append((
                    obs,
                    np.array([list(b.worldCenter) for b in bodies], np.float32),
                    np.array([b.angle for b in bodies], np.float32),
                    np.array([list(b.linearVelocity) for b in bodies], np.float32),
                    np.array([b.angularVelocity for b in bodies], np.float32),
                    np.array([poly[0][1] for poly in u.sky_polys] + [u.sky_polys[-1][1][1]], np.float32),
                    np.int32(getattr(u, "wind_idx", 0)),
                    np.int32(getattr(u, "torque_idx", 0)),
                    np.float32(u.prev_shaping),
                ))
                state = u.np_random.bit_generator.state["state"]
                out["rng_state"].append([w for v in (state["state"], state["inc"]) for w in (v >> 64, v & (2**64 - 1))])
            actions = random_actions(seed)
            total, steps = 0.0, 0
            while True:
                action = gym_ll.heuristic(env, obs) if policy == "heuristic" else int(actions[steps])
                obs, reward, terminated, truncated, _ = env.step(action)
                total += reward
                steps += 1
                if terminated or truncated:
                    break
            out[policy].append((total, steps, terminated and reward == 100, obs[6] + obs[7]))
    env.close()
    flat = {f"start_{k}": np.stack(v) for k, v in zip(START_FIELDS, zip(*out["start"]))}
    flat["rng_state"] = np.array(out["rng_state"], np.uint64)
    for policy in ("heuristic", "random"):
        flat.update({f"{policy}_{k}": np.array(v) for k, v in zip(RESULT_FIELDS, zip(*out[policy]))})
    return flat


def engine_noise(rng_state):
    """gymnasium's engine-noise stream after a reset, (MAX_STEPS, 2) uniforms in [-1, 1] as float32,
    from `rng_state` (see `gym_paired_episodes`): PCG64 gives a vector of uniforms as the same
    sequence as one call per value."""
    words = [int(w) for w in rng_state]
    stream = np.random.Generator(np.random.PCG64())
    stream.bit_generator.state = {"bit_generator": "PCG64", "has_uint32": 0, "uinteger": 0,
                                  "state": {"state": (words[0] << 64) | words[1], "inc": (words[2] << 64) | words[3]}}
    return stream.uniform(-1.0, 1.0, 2 * MAX_STEPS).astype(np.float32).reshape(MAX_STEPS, 2)


def _slug(setting):
    return setting.replace(" ", "_")


def stored_gym_episodes():
    """{setting: `gym_paired_episodes`' arrays for seeds 0..PAIRED_EPISODES-1}, as stored."""
    with np.load(GYM_DATA) as data:
        assert int(data["paired_episodes"]) == PAIRED_EPISODES and int(data["max_steps"]) == MAX_STEPS
        return {name: {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith(_slug(name) + "/")}
                for name in SETTINGS}


def write_stored_gym_episodes():
    arrays = {"paired_episodes": np.int64(PAIRED_EPISODES), "max_steps": np.int64(MAX_STEPS),
              "gymnasium": np.str_(version("gymnasium")), "box2d": np.str_(version("box2d"))}
    for name, (kwargs, _) in SETTINGS.items():
        arrays.update({f"{_slug(name)}/{k}": v for k, v in gym_paired_episodes(kwargs, range(PAIRED_EPISODES)).items()})
    np.savez_compressed(GYM_DATA, **arrays)


def replay_starts(template, start):
    """The port's states at gymnasium's starts (after its reset step), one row per episode of the
    stored `start_*` arrays; `template` is any unbatched state of the port."""
    n = len(start["obs"])
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), template)
    return jnp.asarray(start["obs"]), states.replace(**{k: jnp.asarray(start[k]) for k in START_FIELDS[1:]})


def own_resets(env, params, key):
    """An episode from the port's own `reset`, with engine noise and random actions drawn as
    gymnasium draws them (uniforms in [-1, 1], two per step; actions uniform over the four)."""
    key_reset, key_noise, key_action = jax.random.split(key, 3)
    obs, state = env.reset(key_reset, params)
    noise = jax.random.uniform(key_noise, (MAX_STEPS, 2), minval=-1.0, maxval=1.0)
    return obs, state, noise, jax.random.randint(key_action, (MAX_STEPS,), 0, 4)


def run_episode(env_step, obs, state, chunk_inputs, chunk=50):
    """One episode, scanned in chunks of `chunk` steps until it ends (or MAX_STEPS): the
    undiscounted return, length, whether it landed (ended at rest, +100), whether it ended, and
    the number of leg flags set in its last observation. `env_step(obs, state, x)` returns
    (obs, state, reward, terminated, truncated); `chunk_inputs(i)` the per-step inputs x of chunk i."""

    def step(carry, x):
        obs, state, ret, done, length, landed, legs = carry
        obs, state, reward, terminated, truncated = env_step(obs, state, x)
        live = ~done
        ret = ret + jnp.where(live, reward, 0.0)
        length = length + live
        landed = landed | (live & terminated & (reward == 100.0))
        legs = jnp.where(live, obs[6] + obs[7], legs)
        done = done | terminated | truncated | (length >= MAX_STEPS)
        return (obs, state, ret, done, length, landed, legs), None

    def chunk_body(loop):
        i, carry = loop
        carry, _ = jax.lax.scan(step, carry, chunk_inputs(i))
        return i + 1, carry

    def more(loop):
        i, carry = loop
        return (i * chunk < MAX_STEPS) & ~carry[3]

    init = (obs, state, jnp.zeros(()), jnp.zeros((), bool), jnp.zeros((), jnp.int32), jnp.zeros((), bool), jnp.zeros(()))
    _, (_, _, ret, done, length, landed, legs) = jax.lax.while_loop(more, chunk_body, (0, init))
    return ret, length, landed, done, legs


REPLAY_ARGS = ("params", "obs", "state", "noise", "actions")


def make_replays(env, chunk=50):
    """A jitted function: episodes on the port from given starts with given engine noise (and,
    unless `heuristic`, given actions), vmapped over all arguments; see `run_episode`."""

    def one(params, obs, state, noise, actions, heuristic):  # REPLAY_ARGS, heuristic
        def env_step(obs, state, x):
            noise_t, action_t = x
            action = jnp.where(heuristic, heuristic_action(obs), action_t)
            obs, state, reward, terminated, _ = env.step_with_noise(noise_t, state, action, params)
            return obs, state, reward, terminated, jnp.zeros((), bool)

        def chunk_inputs(i):
            return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk), (noise, actions))

        return run_episode(env_step, obs, state, chunk_inputs, chunk)

    return jax.jit(jax.vmap(one))


SWEEP_C = np.linspace(0.1, 1.9, 19)
SWEEP_SIZE = 2 * len(SWEEP_C)


def sweep_grid_params(env):
    """The robustness sweep's grid, c in 0.1..1.9, for gravity (-1..-19) and enabled wind
    (1.5..28.5); gymnasium itself refuses gravities beyond -12."""
    c = jnp.asarray(SWEEP_C, jnp.float32)
    gravity = jax.vmap(lambda v: env.set_physics(env.default_params, "gravity", v))(-10.0 * c)
    wind = jax.vmap(lambda v: env.set_physics(LunarLander.wind_params(), "wind", v))(15.0 * c)
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), gravity, wind)


def stack_params(params_list, repeat):
    return jax.tree.map(lambda *x: jnp.repeat(jnp.stack([jnp.asarray(v) for v in x]), repeat, 0), *params_list)


def concat(*trees):
    return jax.tree.map(lambda *x: jnp.concatenate(x), *trees)


def mean_and_se(x):
    return x.mean(), x.std() / np.sqrt(len(x))


# --- the gymnasium comparison ----------------------------------------------------------------
@pytest.fixture(scope="session")
def comparison():
    """Both environments in four physical settings.

    Paired episodes (common random numbers): every gymnasium episode is replayed on the port from
    the same start (terrain, initial push, wind phases) with the same engine-noise stream and, for
    the random policy, the same actions. The physics are the only difference, so the paired mean
    difference has a standard error of about 4-5 return points at 400 episodes, against about 17
    for two independent 100-episode means (the heuristic's returns are bimodal: +-100 for landing
    or crashing). Also: episodes from the port's own resets, whose mean must be statistically
    consistent with gymnasium's, and the robustness sweep's grid. One compiled program runs them
    all, called twice with the same shapes: the heuristic's episodes, then the random policy's,
    which end within a few hundred steps and need not wait for the longest heuristic one."""
    env = LunarLander()
    names = list(SETTINGS)
    gym_runs = stored_gym_episodes()
    start = {k: np.concatenate([gym_runs[name][f"start_{k}"] for name in names]) for k in START_FIELDS}
    template = env.reset(jax.random.PRNGKey(0), env.default_params)[1]
    paired_obs, paired_states = replay_starts(template, start)
    paired = {
        "params": concat(*[stack_params([SETTINGS[name][1]], PAIRED_EPISODES) for name in names]),
        "obs": paired_obs,
        "state": paired_states,
        "noise": jnp.asarray(np.stack([engine_noise(r) for name in names for r in gym_runs[name]["rng_state"]])),
        "actions": jnp.asarray(np.stack([random_actions(seed) for _ in names for seed in range(PAIRED_EPISODES)])),
    }
    # The port's own resets (OWN_RESET_EPISODES per setting) and the sweep grid, after the paired ones.
    own_params = concat(stack_params([SETTINGS[n][1] for n in names], OWN_RESET_EPISODES), sweep_grid_params(env))
    n_own = len(names) * OWN_RESET_EPISODES + SWEEP_SIZE
    own = dict(zip(("obs", "state", "noise", "actions"), jax.jit(jax.vmap(lambda p, k: own_resets(env, p, k)))(
        own_params, jax.random.split(jax.random.PRNGKey(0), n_own))))
    batch = concat({"params": paired["params"], **{k: paired[k] for k in own}}, {"params": own_params, **own})
    n_paired = len(names) * PAIRED_EPISODES

    replays = make_replays(env)
    start_time = time.time()
    ret, length, landed, final_legs, own_ret = [], [], [], [], []
    for heuristic in (True, False):
        out = [np.asarray(x) for x in replays(*(batch[k] for k in REPLAY_ARGS), jnp.full(n_paired + n_own, heuristic))]
        assert out[3].all()
        ret.append(out[0][:n_paired])
        length.append(out[1][:n_paired])
        landed.append(out[2][:n_paired])
        final_legs.append(out[4][:n_paired])
        own_ret.append(out[0][n_paired:])
    port_seconds = time.time() - start_time
    # (policy, setting, episode) -> (setting, policy, episode)
    shape = (2, len(names), PAIRED_EPISODES)
    ret, length, landed, final_legs = (
        np.stack(x).reshape(shape).swapaxes(0, 1) for x in (ret, length, landed, final_legs)
    )
    sweep_result = {"returns": own_ret[0][-SWEEP_SIZE:], "random_returns": own_ret[1][-SWEEP_SIZE:]}
    own_ret = np.stack([r[:-SWEEP_SIZE].reshape(len(names), OWN_RESET_EPISODES) for r in own_ret], 1)

    result = {"sweep": sweep_result}
    print(f"\nthe port (compile + run): {port_seconds:.1f} s")
    print(
        f"{'setting':>14} {'policy':>9} | {f'port ({PAIRED_EPISODES})':>10} {f'gym ({PAIRED_EPISODES})':>10} {'paired diff':>14} {'rel':>6} | "
        f"{'first 100: rel':>14} | outcome agree | landed port/gym | length port/gym | legs at rest port/gym"
    )
    for i, name in enumerate(names):
        for j, policy in enumerate(["heuristic", "random"]):
            g = {k: gym_runs[name][f"{policy}_{k}"] for k in RESULT_FIELDS}
            diff = ret[i, j] - g["returns"]
            r = {
                "port": ret[i, j],
                "gym": g["returns"],
                "diff": mean_and_se(diff),
                "rel": diff.mean() / abs(g["returns"].mean()),
                "rel_first_100": diff[:REPORTED_EPISODES].mean() / abs(g["returns"][:REPORTED_EPISODES].mean()),
                "outcome_agreement": (landed[i, j] == g["landed"]).mean(),
            }
            both = landed[i, j] & g["landed"]
            # Leg flags still set when the lander comes to rest (0-2), over episodes both land.
            r["final_legs"] = (final_legs[i, j][both].mean(), g["final_legs"][both].mean()) if both.any() else None
            result[name, policy] = r
            print(
                f"{name:>14} {policy:>9} | {ret[i, j].mean():10.1f} {g['returns'].mean():10.1f} "
                f"{r['diff'][0]:7.1f} +- {r['diff'][1]:4.1f} {r['rel']:+6.1%} | {r['rel_first_100']:+14.1%} | "
                f"{r['outcome_agreement']:13.2f} | {landed[i, j].mean():6.2f} / {g['landed'].mean():4.2f}   | "
                f"{length[i, j].mean():5.0f} / {g['lengths'].mean():4.0f}   | "
                + ("-" if r["final_legs"] is None else f"{r['final_legs'][0]:.2f} / {r['final_legs'][1]:.2f}")
            )
            own_returns = own_ret[i, j]
            g100 = g["returns"][:OWN_RESET_EPISODES]
            se = np.hypot(own_returns.std(), g100.std()) / np.sqrt(OWN_RESET_EPISODES)
            z = (own_returns.mean() - g100.mean()) / se
            result[name, policy, "own resets"] = {"port": own_returns, "gym": g100, "z": z}
            print(
                f"{name:>14} {'own reset':>9} | {own_returns.mean():10.1f} {g100.mean():10.1f}  independent "
                f"100-episode means, difference {own_returns.mean() - g100.mean():+.1f} = {z:+.2f} standard errors"
            )
    return result


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_heuristic_return_matches_gymnasium(comparison, setting):
    r = comparison[setting, "heuristic"]
    assert np.isfinite(r["port"]).all()
    assert abs(r["rel"]) <= HEURISTIC_TOLERANCE, (setting, r["port"].mean(), r["gym"].mean(), r["diff"])
    # The issue's count, 100 episodes (paired; its standard error is about twice the 400's).
    assert abs(r["rel_first_100"]) <= HEURISTIC_TOLERANCE, (setting, r["rel_first_100"])
    # Same start, same noise: mostly the same ending (landing or not).
    assert r["outcome_agreement"] >= OUTCOME_AGREEMENT, (setting, r["outcome_agreement"])


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_leg_flags_at_rest_match_gymnasium(comparison, setting):
    """gymnasium's leg flags are Box2D contact events, not touching tests: a leg that slides from
    one terrain chunk onto the next reads 0 while it stands on the ground (EndContact of the old
    edge after BeginContact of the new). Over the episodes both environments land, the number of
    flags still set at rest agrees (gymnasium: about 1.5 of 2 without wind; a port that reports
    touching would read 2.0)."""
    port, gym_ = comparison[setting, "heuristic"]["final_legs"]
    assert abs(port - gym_) <= 0.15, (setting, port, gym_)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_random_return_matches_gymnasium(comparison, setting):
    r = comparison[setting, "random"]
    assert abs(r["rel"]) <= RANDOM_TOLERANCE, (setting, r["port"].mean(), r["gym"].mean(), r["diff"])


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_own_resets_are_consistent_with_gymnasium(comparison, setting):
    """The port's own reset sampler (terrain, push, wind phases): its heuristic mean return over
    100 episodes is within 3 standard errors of gymnasium's over 100 others. (The random policy's
    are printed, not asserted: at gravity -11.9 the paired replays show the port's random returns
    2.6 standard errors below gymnasium's, a real difference of the physics, which the independent
    means' comparison then counts again.)"""
    z = comparison[setting, "heuristic", "own resets"]["z"]
    assert abs(z) < 3.0, z


def test_the_stored_episodes_are_gymnasiums():
    """The comparison reads gymnasium's side from tests/data/lunar_lander_gymnasium.npz. The installed
    gymnasium plays some of its episodes again here and must give the same starts, random-stream
    states and outcomes, exactly; and the engine noise read from a stored state is the stream that
    gymnasium's steps draw."""
    stored = stored_gym_episodes()
    with np.load(GYM_DATA) as data:
        written_by = f"gymnasium {data['gymnasium']}, Box2D {data['box2d']}"
    for name, (kwargs, _) in SETTINGS.items():
        for field, values in gym_paired_episodes(kwargs, LIVE_SEEDS).items():
            np.testing.assert_array_equal(
                values, stored[name][field][list(LIVE_SEEDS)],
                err_msg=f"{name}, {field}: the stored episodes ({written_by}) are not the installed "
                        f"gymnasium's {version('gymnasium')}; rewrite them with `python tests/test_lunar_lander.py`")
    env = gym.make("LunarLander-v3", enable_wind=True)
    env.reset(seed=LIVE_SEEDS[-1])
    stream = copy.deepcopy(env.unwrapped.np_random)
    drawn = np.array([stream.uniform(-1.0, 1.0) for _ in range(2 * MAX_STEPS)], np.float32).reshape(MAX_STEPS, 2)
    np.testing.assert_array_equal(engine_noise(stored["wind 15"]["rng_state"][LIVE_SEEDS[-1]]), drawn)


def ks_statistic(a, b):
    grid = np.sort(np.concatenate([a, b]))
    cdf = lambda x: np.searchsorted(np.sort(x), grid, side="right") / len(x)
    return np.abs(cdf(a) - cdf(b)).max()


def test_reset_distribution_matches_gymnasium():
    """Initial push (the first observation's velocities, angle and spin) and terrain heights:
    two-sample Kolmogorov-Smirnov against gymnasium's resets."""
    n = 1000
    env = gym.make("LunarLander-v3")
    gym_obs, gym_terrain = [], []
    for seed in range(n):
        obs, _ = env.reset(seed=10_000 + seed)
        gym_obs.append(obs)
        gym_terrain.append([poly[0][1] for poly in env.unwrapped.sky_polys] + [env.unwrapped.sky_polys[-1][1][1]])
    port = LunarLander()
    obs, state = jax.jit(jax.vmap(port.reset, in_axes=(0, None)))(jax.random.split(jax.random.PRNGKey(5), n), port.default_params)
    gym_obs, gym_terrain = np.array(gym_obs), np.array(gym_terrain)
    obs, terrain = np.asarray(obs), np.asarray(state.terrain_y)
    critical = 1.95 * np.sqrt(2.0 / n)  # KS at the 0.1% level
    for column in (0, 1, 2, 3, 4, 5):
        assert ks_statistic(obs[:, column], gym_obs[:, column]) < critical, column
    for chunk in (0, 1, 2, 3, 7, 8, 9, 10):  # 4-6 lie on the pad
        assert ks_statistic(terrain[:, chunk], gym_terrain[:, chunk]) < critical, chunk
    np.testing.assert_allclose(terrain[:, 4:7], ll.HELIPAD_Y * 0.99, rtol=1e-5)  # the flat pad


# --- reward and controller parity --------------------------------------------------------------
def test_reward_function_matches_gymnasium_on_its_own_states():
    """Drive gymnasium, read its observations and termination causes, recompute every reward."""
    env = gym.make("LunarLander-v3")
    rng = np.random.default_rng(1)
    rows = []
    for episode in range(6):
        obs, _ = env.reset(seed=episode)
        prev = float(ll.shaping(jnp.asarray(obs)))
        while True:
            action = gym_ll.heuristic(env, obs) if episode % 2 else int(rng.integers(4))
            obs, reward, terminated, truncated, _ = env.step(action)
            u = env.unwrapped
            crashed = u.game_over or abs(obs[0]) >= 1.0
            rows.append((obs, prev, float(action == 2), float(action in (1, 3)), crashed, not u.lander.awake, reward))
            prev = float(ll.shaping(jnp.asarray(obs)))
            if terminated or truncated:
                break
    obs, prev, m, s, crashed, at_rest, expected = (np.array(c) for c in zip(*rows))
    reward, _ = jax.jit(jax.vmap(ll.reward_fn))(obs, prev, m, s, crashed, at_rest)
    chex.assert_shape(reward, expected.shape)
    assert crashed.any() and at_rest.any()  # both terminal rewards were exercised
    np.testing.assert_allclose(np.asarray(reward), expected, atol=2e-3)


def test_heuristic_port_matches_gymnasium_controller():
    env = gym.make("LunarLander-v3")
    obs = np.random.default_rng(0).uniform(-1.5, 1.5, (2000, 8)).astype(np.float32)
    obs[:, 6:] = np.random.default_rng(1).integers(0, 2, (2000, 2))
    expected = np.array([gym_ll.heuristic(env, o) for o in obs])
    got = np.asarray(jax.jit(jax.vmap(heuristic_action))(jnp.asarray(obs)))
    np.testing.assert_array_equal(got, expected)


# --- physics parameters ----------------------------------------------------------------------
def rollout(env, params, key, steps=150):
    """Observations and rewards of one fixed-seed heuristic rollout (with auto-reset)."""

    def step(carry, key):
        obs, state = carry
        obs, state, reward, terminated, truncated, _ = env.step(key, state, heuristic_action(obs), params)
        return (obs, state), (obs, reward)

    obs, state = env.reset(key, params)
    _, (obs, reward) = jax.lax.scan(step, (obs, state), jax.random.split(key, steps))
    return obs, reward


@pytest.fixture(scope="session")
def perturbed_rollouts():
    """One vmapped program: the same key under several physics."""
    env = LunarLander()
    base = env.default_params
    identity = base
    for name in env.physics_names(base):
        identity = env.set_physics(identity, name, env.get_physics(identity, name) * 1.0)
    windy = LunarLander.wind_params(15.0)
    cases = {
        "default": base,
        "nominal via set_physics": identity,
        "gravity -5": env.set_physics(base, "gravity", -5.0),
        "wind 15": windy,
        "wind 25": env.set_physics(windy, "wind", 25.0),
    }
    params = stack_params(list(cases.values()), 1)
    keys = jnp.tile(jax.random.PRNGKey(3)[None], (len(cases), 1))
    obs, reward = jax.jit(jax.vmap(rollout, in_axes=(None, 0, 0)), static_argnums=0)(env, params, keys)
    chex.assert_shape(obs, (len(cases), 150, 8))
    return {name: (np.asarray(obs[i]), np.asarray(reward[i])) for i, name in enumerate(cases)}


def test_nominal_parameters_reproduce_the_unperturbed_environment(perturbed_rollouts):
    base_obs, base_reward = perturbed_rollouts["default"]
    obs, reward = perturbed_rollouts["nominal via set_physics"]
    np.testing.assert_array_equal(obs, base_obs)
    np.testing.assert_array_equal(reward, base_reward)
    # The wind row's nominal physics is gymnasium's enable_wind=True with wind_power 15.
    assert LunarLander(enable_wind=True).default_params == LunarLander.wind_params(15.0)


def test_gravity_and_wind_change_trajectories(perturbed_rollouts):
    base, _ = perturbed_rollouts["default"]
    # Same key, same terrain and push: the first observations differ only through the physics.
    for name in ("gravity -5", "wind 15", "wind 25"):
        assert np.abs(perturbed_rollouts[name][0][:20] - base[:20]).max() > 1e-2, name
    assert np.abs(perturbed_rollouts["wind 25"][0][:20] - perturbed_rollouts["wind 15"][0][:20]).max() > 1e-2
    # Lower gravity falls more slowly in the first steps.
    assert perturbed_rollouts["gravity -5"][0][10, 3] > base[10, 3]
    chex.assert_tree_all_finite(perturbed_rollouts)


def test_set_physics_names_and_errors():
    env = LunarLander()
    params = env.default_params
    names = env.physics_names(params)
    assert {"gravity", "wind", "wind_power", "turbulence_power", "lander_density"} <= set(names)
    assert "enable_wind" not in names and "max_steps_in_episode" not in names
    assert env.set_physics(params, "gravity", -3.0).gravity == -3.0
    assert env.set_physics(params, "wind", 7.0).wind_power == 7.0
    assert env.get_physics(params, "wind") == 15.0
    with pytest.raises(ValueError, match="unknown physical parameter 'mass'"):
        env.set_physics(params, "mass", 1.0)


def test_sweep_grid_runs_without_nans(comparison):
    """Heuristic episodes on the sweep grid (vmapped over params in the comparison program)."""
    sweep = comparison["sweep"]
    chex.assert_shape(sweep["returns"], (SWEEP_SIZE,))
    chex.assert_tree_all_finite(sweep["random_returns"])
    chex.assert_tree_all_finite(sweep["returns"])
    # The vmapped members really differ, and physics matter: the lowest gravity lands.
    assert len(set(sweep["returns"].tolist())) == SWEEP_SIZE
    print("\nsweep gravity returns", np.round(sweep["returns"][: len(SWEEP_C)], 1))
    print("sweep wind returns", np.round(sweep["returns"][len(SWEEP_C) :], 1))


def test_spaces_and_reset_observation():
    env = LunarLander()
    params = env.default_params
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    chex.assert_shape(obs, (8,))
    assert env.observation_space(params).contains(obs)
    assert env.action_space(params).n == env.num_actions == 4
    assert env.name == "LunarLander-v3"
    # gymnasium's reset observation: top centre, legs off the ground, y about 1.4.
    assert abs(float(obs[0])) < 0.05 and 1.35 < float(obs[1]) < 1.45 and float(obs[6] + obs[7]) == 0.0


def test_observation_reads_the_landers_own_body_as_gymnasium_does():
    """gymnasium's observation (`LunarLander.step`), in float64 numpy, of a state whose three bodies
    all differ: the lander's origin, velocity, angle and spin, never a leg's, and each leg's own
    contact flag (the reset state has every body at rest, so it cannot tell the bodies apart)."""
    env = LunarLander()
    _, state = env.reset(jax.random.PRNGKey(0), env.default_params)
    pos = np.array([[9.0, 7.0], [8.0, 6.0], [11.0, 5.0]])
    angle, spin = np.array([0.3, -0.4, 0.7]), np.array([0.6, -1.2, 2.4])
    vel = np.array([[1.5, -2.5], [0.25, 0.75], [-3.0, 2.0]])
    state = state.replace(pos=jnp.asarray(pos, jnp.float32), angle=jnp.asarray(angle, jnp.float32),
                          vel=jnp.asarray(vel, jnp.float32), angvel=jnp.asarray(spin, jnp.float32),
                          leg_contact=jnp.asarray([False, True]))
    c, s = np.cos(angle[0]), np.sin(angle[0])
    local = np.asarray(physics.LANDER_LOCAL_CENTER, np.float64)
    origin = pos[0] - np.array([c * local[0] - s * local[1], s * local[0] + c * local[1]])  # lander.position
    expected = [(origin[0] - ll.W / 2) / (ll.W / 2), (origin[1] - (ll.HELIPAD_Y + ll.LEG_DOWN / ll.SCALE)) / (ll.H / 2),
                vel[0, 0] * (ll.W / 2) / ll.FPS, vel[0, 1] * (ll.H / 2) / ll.FPS, angle[0], 20.0 * spin[0] / ll.FPS,
                0.0, 1.0]
    np.testing.assert_allclose(np.asarray(ll.observation(state)), expected, rtol=1e-6, atol=1e-6)


def test_reset_draws_the_wind_phases_with_gymnasiums_bounds(monkeypatch):
    """gymnasium's reset draws wind_idx and torque_idx with `np_random.integers(-9999, 9999)` (the
    high end excluded, as in `jax.random.randint`). One value more or less at either end changes
    the distribution by 1 in 19,998, which no affordable sample can see, so the bounds are checked
    where they are asked for."""
    asked = []
    draw = jax.random.randint

    def recording(key, shape, minval, maxval, *args, **kwargs):
        asked.append((minval, maxval))
        return draw(key, shape, minval, maxval, *args, **kwargs)

    monkeypatch.setattr(jax.random, "randint", recording)
    env = LunarLander(enable_wind=True)
    jax.eval_shape(env.reset_env, jax.random.key(0), env.default_params)
    assert asked == [(-9999, 9999), (-9999, 9999)]


def test_legs_hang_like_gymnasiums_after_reset():
    env = LunarLander()
    _, state = env.reset(jax.random.PRNGKey(0), env.default_params)
    joint = np.asarray(state.angle[1:] - state.angle[0] - physics.REF_ANGLE)
    np.testing.assert_allclose(joint, [0.542, -0.542], atol=0.01)  # gymnasium: +-0.542 (+-0.002)
    # The legs' centres sit on their joints.
    _, _, legs = physics._kinematics(state.pos[0], state.angle[0], state.angle[1:])
    np.testing.assert_allclose(np.asarray(legs), np.asarray(state.pos[1:]), atol=1e-5)


@pytest.mark.parametrize("wind", [False, True])
def test_reset_step_matches_gymnasiums_for_the_same_push(wind):
    """gymnasium's reset ends with a step under its random push (and, with wind, the first gust and
    turn of turbulence). Replaying its random stream gives the push and the wind's start indices
    (the terrain's 12 heights are drawn first); the port's reset step from them must reach
    gymnasium's post-reset observation (measured: 1e-6 in position and velocity, 1e-4 rad in angle,
    1.5e-5 in spin) and its leg angles (2.7e-3 rad)."""
    env = LunarLander(enable_wind=wind)
    params = env.default_params
    _, some = env.reset_env(jax.random.key(0), params)
    pos, angle = ll.initial_bodies()
    created = some.replace(pos=pos, angle=angle, vel=jnp.zeros((3, 2)), angvel=jnp.zeros(3),
                           limit_impulse=jnp.zeros(2), motor_impulse=jnp.zeros(2), limit_state=jnp.zeros(2, jnp.int32))
    gym_env = gym.make("LunarLander-v3", enable_wind=wind)
    forces, indices, gym_obs, gym_legs = [], [], [], []
    for seed in range(8):
        obs, _ = gym_env.reset(seed=seed)
        rng = np.random.default_rng(seed)  # gymnasium's np_random for this seed
        rng.uniform(0, ll.H / 2, size=ll.CHUNKS + 1)
        forces.append(rng.uniform(-physics.INITIAL_RANDOM, physics.INITIAL_RANDOM, size=2))
        indices.append([rng.integers(-9999, 9999), rng.integers(-9999, 9999)] if wind else [0, 0])
        gym_obs.append(obs)
        gym_legs.append([leg.angle for leg in gym_env.unwrapped.legs])
    gym_env.close()

    def reset_step(force, wind_idx, torque_idx):
        start = created.replace(wind_idx=wind_idx, torque_idx=torque_idx)
        return env._step(jnp.zeros(2), start, 0, params, force, first=True)[:2]

    indices = jnp.asarray(np.array(indices), jnp.int32)
    after, obs = jax.jit(jax.vmap(reset_step))(jnp.asarray(np.array(forces), jnp.float32), indices[:, 0], indices[:, 1])
    np.testing.assert_allclose(obs[:, :4], np.array(gym_obs)[:, :4], rtol=0, atol=1e-5)
    np.testing.assert_allclose(obs[:, 4], np.array(gym_obs)[:, 4], rtol=0, atol=3e-4)
    np.testing.assert_allclose(obs[:, 5], np.array(gym_obs)[:, 5], rtol=0, atol=5e-5)
    np.testing.assert_allclose(after.angle[:, 1:], np.array(gym_legs), rtol=0, atol=6e-3)


def test_reset_starts_a_live_episode_with_random_wind_phases():
    env = LunarLander(enable_wind=True)
    params = env.default_params
    _, states = jax.jit(jax.vmap(lambda k: env.reset(k, params)))(jax.random.split(jax.random.key(1), 64))
    assert not np.any(states.game_over) and np.all(states.awake) and not np.any(states.leg_contact)
    for idx in (states.wind_idx, states.torque_idx):  # gymnasium: integers(-9999, 9999)
        assert -9999 <= int(idx.min()) < 0 < int(idx.max()) < 9999


def test_landing_deceleration_matches_box2d():
    """Drop both landers flat onto the helipad at 0.5 m/s: same vertical velocity, step by step."""
    genv = gym.make("LunarLander-v3")
    genv.reset(seed=0)
    u = genv.unwrapped
    target = np.array([10.0, 0.99 * ll.HELIPAD_Y + 0.62])
    rel = [(np.array(leg.position) - np.array(u.lander.position), leg.angle - u.lander.angle) for leg in u.legs]
    u.lander.position, u.lander.angle = tuple(target), 0.0
    u.lander.linearVelocity, u.lander.angularVelocity = (0.0, -0.5), 0.0
    for leg, (r, a) in zip(u.legs, rel):
        leg.position, leg.angle = tuple(target + r), a
        leg.linearVelocity, leg.angularVelocity = (0.0, -0.5), 0.0
    gym_vy, gym_end = [], None
    for _ in range(100):
        _, reward, terminated, _, _ = genv.step(0)
        gym_vy.append(u.lander.linearVelocity[1])
        if terminated:
            gym_end = reward
            break

    env = LunarLander()
    params = env.default_params
    _, state = env.reset(jax.random.PRNGKey(0), params)
    pos = [target + physics._LANDER_CENTER] + [target + r for r, _ in rel]
    state = state.replace(
        terrain_y=state.terrain_y.at[3:8].set(0.99 * ll.HELIPAD_Y),
        pos=jnp.asarray(np.array(pos), jnp.float32),
        angle=jnp.asarray([0.0] + [a for _, a in rel], jnp.float32),
        vel=jnp.tile(jnp.array([0.0, -0.5]), (3, 1)),
        angvel=jnp.zeros(3),
    )
    vy, end = [], None
    for i in range(200):
        # gymnax's jitted step (shared with other tests); at termination `state` is the reset one.
        _, state, reward, terminated, _, info = env.step(jax.random.PRNGKey(i), state, 0, params)
        vy.append(float(state.vel[0, 1]))
        if terminated:
            end = float(reward)
            break
    print("gymnasium vy", np.round(gym_vy, 3), "\nours vy", np.round(vy, 3))
    assert gym_end == 100 and end == 100  # both come to rest on their legs
    n = 14  # fall, touch down, and the legs' motors absorb the impact
    np.testing.assert_allclose(vy[:n], gym_vy[:n], atol=0.15)
    # Time to come to rest (Box2D sleep): measured 89 steps here against 82 in gymnasium.
    assert abs(len(vy) - len(gym_vy)) <= 12, (len(vy), len(gym_vy))


def test_time_limit_truncates_at_1000_steps():
    env = LunarLander()
    params = env.default_params.replace(max_steps_in_episode=5)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    for i in range(5):
        obs, state, reward, terminated, truncated, info = env.step(jax.random.PRNGKey(i), state, 0, params)
    assert bool(truncated) and not bool(terminated)
    assert int(state.time) == 0  # auto-reset
    assert EnvParams().max_steps_in_episode == 1000


if __name__ == "__main__":
    write_stored_gym_episodes()
