"""Environment registry: names -> perturbable environments, their paper parameters, and references.

`make(name)` returns `(env, nominal_params)`. Each `EnvSpec` records the physical parameters the
paper perturbs, the episode step limit, and the mean return of a uniformly random policy at the
nominal parameters: a reference number for "did learning do anything", measured with
`random_policy_returns(env, params, jax.random.key(0), 1000)` (1000 episodes; the standard error of
the mean is given next to each number).

Unknown environment names and unknown physical parameter names raise a `ValueError` that names the
allowed values; `check_physics_param` lets a command line check a name before compiling anything.

The specs live on a `plugins.Registry`, as algorithms and aggregation rules do, with the same calls
(`register`, `get`, `names`) and the same rule for a taken name. Besides the specs below, the
registry's two namespaces (`plugins.Namespace`, resolved when asked for): `brax:<name>` is any of Brax's own environments (`fedjax_rl/envs/brax_envs.py`); `gym:<id>` any of
gymnasium's registered environments, stepped on the host (`fedjax_rl/envs/gymnasium_bridge.py`, which
also makes a spec of one's own `gymnasium.Env`: `gymnasium_spec`); `register(EnvSpec(...))`
adds an environment of your own (any gymnax environment meeting the contract in
`fedjax_rl/envs/base.py`) without editing this file; and an installed package adds one through the
entry-point group `fedjax_rl.environments`, loaded when its name is asked for (`--env NAME`).
"""

from __future__ import annotations

import math

import re

import jax
import jax.numpy as jnp

from fedjax_rl import plugins
from fedjax_rl.envs.base import EnvSpec  # noqa: F401 (defined beside the contract; registered here)


def _cartpole(_names, _engine):
    from fedjax_rl.envs.classic_control import CartPole

    return CartPole()


def _acrobot(_names, _engine):
    from fedjax_rl.envs.classic_control import Acrobot

    return Acrobot()


def _mountain_car(_names, _engine):
    from fedjax_rl.envs.classic_control import MountainCar

    return MountainCar()


def _pendulum(_names, _engine):
    from fedjax_rl.envs.classic_control import Pendulum

    return Pendulum()


def _lunar_lander(names, _engine):
    # Imported lazily: the module is developed separately and may be absent.
    from fedjax_rl.envs.lunar_lander import LunarLander

    return LunarLander(enable_wind="wind" in names)


def _locomotion(env_id):
    def factory(_names, engine):
        # Imported lazily: loading MuJoCo and gymnasium's XML is only needed for these tasks.
        from fedjax_rl.envs.locomotion import TASKS

        return TASKS[env_id](engine)

    return factory


# The MuJoCo tasks' random returns are gymnasium's (MuJoCo C, the reference physics), measured with
# gymnasium 1.3.0: episodes with reset seeds 0..N-1, `action_space.seed(0)`, time limit 1000. MJX
# on this CPU is too slow for 1000 x 1000-step episodes; Hopper's and Walker2d's MJX dynamics follow
# C to ~1e-12, and Ant's episode statistics are compared in tests/test_mujoco_envs.py.
_MUJOCO_NOTES = (
    "gymnasium 1.3.0's v4 task; parts are body masses (docs/environments.md, MuJoCo locomotion), any float "
    "model field is a parameter too. Engines: c (MuJoCo's C engine, the default), mjx, warp."
)
_MUJOCO_ENGINES = ("c", "mjx", "warp")  # mujoco_engines.ENGINES, the default first; not imported here
# so that listing the registry does not load MuJoCo


def _check_mujoco_engine(engine: str) -> None:
    from fedjax_rl.envs.mujoco_engines import check_engine as check_mujoco_engine

    check_mujoco_engine(engine)


_BUILT_IN = (
    EnvSpec(
        name="CartPole-v1",
        factory=_cartpole,
        perturbed=("length", "masscart"),
        max_steps=500,
        random_return=22.502,  # +- 0.372 (s.e.); gymnasium: about 22
        return_range=(0.0, 500.0),  # +1 per step, at most max_steps steps
        notes="`length` is half the pole length (gymnasium's convention).",
        solved_return=475.0,
    ),
    EnvSpec(
        name="Acrobot-v1",
        factory=_acrobot,
        perturbed=("gravity", "length"),
        max_steps=500,
        random_return=-498.726,  # +- 0.398 (s.e.); a few episodes reach the goal
        return_range=(-500.0, 0.0),  # -1 per step until the goal, at most max_steps steps
        notes="`length` is link 1 (gymnasium's LINK_LENGTH_1); centres of mass follow.",
        solved_return=-100.0,
    ),
    EnvSpec(
        name="MountainCar-v0",
        factory=_mountain_car,
        perturbed=("gravity", "force"),
        max_steps=200,
        random_return=-200.0,  # a random policy never reaches the goal in 200 steps
        return_range=(-200.0, 0.0),  # -1 per step until the goal, at most max_steps steps
        solved_return=-110.0,
    ),
    EnvSpec(
        name="Pendulum-v1",
        factory=_pendulum,
        perturbed=("m", "l"),
        max_steps=200,
        random_return=-1199.359,  # +- 8.763 (s.e.); gymnasium: about -1200
        # The cost per step is theta^2 + 0.1 thetadot^2 + 0.001 u^2 with theta in [-pi, pi],
        # |thetadot| <= max_speed 8 and |u| <= max_torque 2: at most 16.2736 for 200 steps.
        return_range=(-200 * (math.pi**2 + 0.1 * 8.0**2 + 0.001 * 2.0**2), 0.0),
        notes="continuous torque in [-2, 2]; `m` is the mass, `l` the length.",
    ),
    EnvSpec(
        name="LunarLander-v3",
        factory=_lunar_lander,
        perturbed=("gravity", "wind"),
        max_steps=1000,
        # Wind-enabled variant (the default here): -277.833 +- 4.784 (s.e.). Without wind
        # (`make(name, ("gravity",))`): -186.210 +- 3.492. gymnasium's Box2D env, 400 episodes
        # (tests/test_lunar_lander.py): -262.7 with wind 15, -180.0 without.
        random_return=-277.833,
        variant_random_returns=((("gravity",), -186.210),),
        notes='"wind" selects the wind-enabled variant (gymnasium `enable_wind=True`).',
        solved_return=200.0,
    ),
    EnvSpec(
        name="Hopper-v4",
        factory=_locomotion("Hopper-v4"),
        perturbed=("torso", "thigh"),
        max_steps=1000,
        random_return=18.628,  # +- 0.575 (s.e.), 1000 episodes (mean length 22.7), gymnasium
        notes=_MUJOCO_NOTES,
        engines=_MUJOCO_ENGINES,
        check_engine=_check_mujoco_engine,
        solved_return=3800.0,
    ),
    EnvSpec(
        name="Walker2d-v4",
        factory=_locomotion("Walker2d-v4"),
        perturbed=("left_leg", "left_foot"),
        max_steps=1000,
        random_return=2.759,  # +- 0.196 (s.e.), 1000 episodes (mean length 21.6), gymnasium
        notes=_MUJOCO_NOTES,
        engines=_MUJOCO_ENGINES,
        check_engine=_check_mujoco_engine,
    ),
    EnvSpec(
        name="HalfCheetah-v4",
        factory=_locomotion("HalfCheetah-v4"),
        perturbed=("front_foot", "front_shin"),
        max_steps=1000,
        random_return=-282.487,  # +- 7.263 (s.e.), 100 episodes (all 1000 steps), gymnasium
        notes=_MUJOCO_NOTES,
        engines=_MUJOCO_ENGINES,
        check_engine=_check_mujoco_engine,
        solved_return=4800.0,
    ),
    EnvSpec(
        name="Ant-v4",
        factory=_locomotion("Ant-v4"),
        perturbed=("back_left_leg", "front_right_leg"),
        max_steps=1000,
        random_return=-51.351,  # +- 2.844 (s.e.), 1000 episodes (mean length 154.2), gymnasium
        notes=_MUJOCO_NOTES + " A leg is its whole chain of three bodies.",
        engines=_MUJOCO_ENGINES,
        check_engine=_check_mujoco_engine,
        solved_return=6000.0,
    ),
)


# gymnasium's ids: a letter, then letters, digits, "_", "-" or "." ("CartPole-v1", "Slide-v0").
ENV_NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


def check_spec(spec: EnvSpec, origin: str) -> None:
    """A ValueError naming `origin` for a spec that cannot serve: no perturbed parameter or engine."""
    if not spec.perturbed or not spec.engines:
        raise ValueError(f"{origin}: environment {spec.name!r}: an EnvSpec needs at least one perturbed parameter "
                         "and one engine")


def _brax_spec(name: str) -> EnvSpec:
    """The `EnvSpec` of `brax:<name>`, any of Brax's own environments."""
    from fedjax_rl.envs import brax_envs

    task = name[len(brax_envs.PREFIX):]
    if task not in brax_envs.brax_names():
        raise ValueError(f"unknown Brax environment {task!r} in {name!r}; allowed: "
                         f"{', '.join(brax_envs.PREFIX + n for n in brax_envs.brax_names())}")
    env = brax_envs.BraxEnv(task)
    return EnvSpec(
        name=name,
        factory=lambda _names, engine: brax_envs.BraxEnv(task, engine),
        perturbed=env.link_names[:1],  # the trunk (torso): not a paper task, so no paper parameter
        max_steps=brax_envs.MAX_STEPS,
        random_return=float("nan"),  # not measured
        notes="Brax's own environment; parameters: any body's mass by name, and gravity. "
              "Engines: Brax's pipelines.",
        engines=brax_envs.BACKENDS,
    )


def _gymnasium_spec(name: str) -> EnvSpec:
    from fedjax_rl.envs import gymnasium_bridge

    return gymnasium_bridge.spec_for_id(name)


# The specs live on a `plugins.Registry`: `register(spec)` adds an environment of your own (`--env`,
# `configs.train_config`, `make`; `spec.factory(perturbed, engine)` returns an env meeting the contract
# in `fedjax_rl/envs/base.py`), `get(name)` finds one, `names()` lists them (Brax's and gymnasium's,
# resolved by their prefixes, are not listed). The prefixes are written out rather than imported from
# brax_envs and gymnasium_bridge, so that listing loads neither Brax nor gymnasium.
REGISTRY = plugins.Registry(
    "environment", plugins.ENVIRONMENT_GROUP, EnvSpec, "env_name", check_spec, pattern=ENV_NAME_PATTERN,
    rule="a gymnasium-style id (a letter, then letters, digits, _, - or .; brax: is Brax's, gym: gymnasium's)",
    namespaces=(plugins.Namespace("brax:", "<name>", "Brax's", _brax_spec),
                plugins.Namespace("gym:", "<id>", "gymnasium's", _gymnasium_spec)))
register, get, names, known = REGISTRY.register, REGISTRY.get, REGISTRY.names, REGISTRY.known
built_in, load_plugins = REGISTRY.built_in, REGISTRY.load_plugins
for _spec in _BUILT_IN:
    REGISTRY.register(_spec, plugins.BUILT_IN)


def random_return(name: str, perturbed: tuple[str, ...] | None = None) -> float:
    """The random-policy return of the variant `make(name, perturbed)` builds (the paper's rows:
    LunarLander's gravity row runs without wind, its wind row with)."""
    spec = get(name)
    return dict(spec.variant_random_returns).get(tuple(perturbed or spec.perturbed), spec.random_return)


def return_range(name: str) -> tuple[float, float] | None:
    """(low, high) that every episode return of `name` lies in, or None where its rewards do not bound
    it (`EnvSpec.return_range`)."""
    return get(name).return_range


def make(name: str, perturbed: tuple[str, ...] | None = None, engine: str | None = None):
    """`(env, nominal_params)` for a registered environment.

    `perturbed` names the physical parameters that will be perturbed (default: the paper's,
    `get(name).perturbed`); they are checked here, and choose the variant where that matters
    (LunarLander with "wind" is the wind-enabled one). `engine` is one of the task's physics
    engines (`get(name).engines`, default the first): "c", "mjx" or "warp" for the MuJoCo tasks.
    """
    spec = get(name)
    perturbed = spec.perturbed if perturbed is None else tuple(perturbed)
    env = spec.factory(perturbed, check_engine(name, engine))
    params = env.default_params
    for param in perturbed:
        _check(env, params, name, param)
    return env, params


def check_engine(env_name: str, engine: str | None) -> str:
    """`engine`, or the task's default when None; a ValueError naming the task's engines, or why
    this machine cannot run it (MuJoCo Warp without an NVIDIA GPU). Compiles nothing."""
    spec = get(env_name)
    if engine is None:
        return spec.engines[0]
    if engine not in spec.engines:
        raise ValueError(f"engine for {env_name} must be one of {', '.join(spec.engines)}, got {engine!r}")
    if spec.check_engine is not None:
        spec.check_engine(engine)
    return engine


def physics_names(env_name: str, engine: str | None = None) -> tuple[str, ...]:
    """Every physical parameter name `env_name` accepts (in its most general variant)."""
    spec = get(env_name)
    env = spec.factory(spec.perturbed, check_engine(env_name, engine))
    return env.physics_names(env.default_params)


def check_physics_param(env_name: str, param: str, engine: str | None = None) -> None:
    """Raise a ValueError naming the allowed values unless `param` is a physical parameter of
    `env_name` (and `env_name` is registered). Cheap: builds the env, compiles nothing."""
    spec = get(env_name)
    env = spec.factory(spec.perturbed, check_engine(env_name, engine))
    _check(env, env.default_params, env_name, param)


def _check(env, params, env_name: str, param: str) -> None:
    allowed = env.physics_names(params)
    if param not in allowed:
        raise ValueError(
            f"unknown physical parameter {param!r} for {env_name}; allowed: {', '.join(allowed)}"
        )


def random_policy_returns(
    env, params, key: jax.Array, num_episodes: int, num_steps: int | None = None
) -> jax.Array:
    """Undiscounted returns [num_episodes] of the uniformly random policy, one episode each.

    Each episode runs from `reset` until its first termination or truncation; rewards after that
    are masked out. `num_steps` (static) bounds the episode, by default
    `params.max_steps_in_episode`, which must then be concrete (pass it when vmapping over params).
    """
    if num_steps is None:
        num_steps = int(params.max_steps_in_episode)

    def episode(key):
        key_reset, key_steps = jax.random.split(key)
        _, state = env.reset(key_reset, params)

        def step(carry, key):
            state, alive, ret = carry
            key_action, key_step = jax.random.split(key)
            action = env.action_space(params).sample(key_action)
            _, state, reward, terminated, truncated, _ = env.step(key_step, state, action, params)
            ret = ret + jnp.where(alive, reward, 0.0)
            alive = alive & ~(terminated | truncated)
            return (state, alive, ret), None

        init = (state, jnp.array(True), jnp.array(0.0))
        (_, _, ret), _ = jax.lax.scan(step, init, jax.random.split(key_steps, num_steps))
        return ret

    return jax.jit(jax.vmap(episode))(jax.random.split(key, num_episodes))
