"""gymnasium's v4 MuJoCo locomotion tasks with perturbable model physics, on three physics engines.

Hopper-v4, Walker2d-v4, HalfCheetah-v4 and Ant-v4 as gymnasium 1.3.0 defines them
(`gymnasium/envs/mujoco/{hopper,walker2d,half_cheetah,ant}_v4.py`), on gymnasium's own XML files
(`hopper.xml`, `walker2d.xml`, `half_cheetah.xml`, `ant.xml`), read from the installed gymnasium
package at runtime:

- frame skip 4 (Hopper, Walker2d) or 5 (HalfCheetah, Ant); dt = timestep * frame_skip.
- observation: qpos without the x position (Ant: without x and y) and qvel, clipped to +-10 for
  Hopper and Walker2d; Ant-v4's default 27-dim observation (no contact forces).
- reward: forward velocity (x after - x before) / dt, + healthy reward 1 (Hopper, Walker2d, Ant; it
  is paid on every step, the terminating one included, because `terminate_when_unhealthy=True`),
  - control cost w * sum(action^2) on the *unclipped* action (w = 1e-3, 1e-3, 0.1, 0.5). MuJoCo
  clamps the control to the actuators' ctrlrange itself. Ant's x velocity is that of the torso
  body's frame (`get_body_com("torso")`), read from MuJoCo's data after `mj_step`, i.e. computed at
  the start of the last sub-step; the state carries it (`com_xy`) so it is reproduced exactly.
- termination (health), gymnasium's ranges and strictness: Hopper 0.7 < z, -0.2 < angle < 0.2 and
  `|qpos[2:], qvel| < 100`; Walker2d 0.8 < z < 2, -1 < angle < 1; Ant finite state and
  0.2 <= z <= 1; HalfCheetah never terminates. Truncation at `max_steps_in_episode` = 1000 (the
  TimeLimit of gymnasium's registration), reported separately (gymnax 1.x step API, auto-reset,
  `info["final_observation"]` is the observation before the reset).
- reset: qpos0 + U(-s, s) and qvel U(-s, s) (Hopper, Walker2d, s = 5e-3) or s N(0, 1) (HalfCheetah,
  Ant, s = 0.1).

One task definition serves every engine (`envs/mujoco_engines.py`): reset, observation, reward,
termination and the perturbation API live here; the engine only advances the simulation by
`frame_skip` sub-steps. `engine="c"` (the default) is MuJoCo's C engine called from inside the
program, gymnasium's physics exactly; "mjx" is MuJoCo-MJX in JAX; "warp" is MuJoCo Warp on NVIDIA
GPUs. The state carries what MuJoCo's data carries from step to step (qpos, qvel, the solver's warm
start, the torso frame's position), plus the engine's own (`exact`: the C engine's float64 bits).

Physics lives in the params pytree: `params.model_fields` maps model field names ("body_mass",
"dof_damping", "opt.gravity", ...) to the values that replace the model's, per simulation. Under
`vmap` over agents' params only the fields that differ are batched (brax's domain-randomisation
pattern). Nominal params carry `body_mass`.

Names accepted by `get_physics`/`set_physics` (`physics_names` lists them all):

- a *part*: the paper's body parts (table below) and every body by its XML name (unnamed bodies are
  "body<i>"); the value is the part's mass (for a multi-body part, the sum; setting it scales each
  body's mass by the same factor; a body whose XML name a part takes over, such as Ant's
  front_left_leg, stays addressable alone as "body<i>"). Only `body_mass` changes: inertia does not scale with the mass,
  so scaling a part by c is exactly what a gymnasium user gets with
  `env.unwrapped.model.body_mass[i] *= c` (and MuJoCo's derived constants, e.g.
  `body_subtreemass`, `dof_invweight0`, stay nominal as they do there). Scale `body_inertia`
  yourself for a density change.
- any float mjx.Model field ("body_inertia", "geom_friction", "dof_damping", "actuator_gear",
  ...) and "opt.<field>" ("opt.gravity", "opt.timestep", ...); the value is the whole array.

Paper parts (two per task are perturbed by default, see the registry)::

    | task | part | bodies |
    | Hopper | torso, thigh, leg, foot | the body of that name |
    | Walker2d | torso; right_thigh/leg/foot; left_thigh/leg/foot | torso; thigh, leg, foot; thigh_left, leg_left, foot_left |
    | HalfCheetah | torso; back_/front_ thigh, shin, foot | torso; bthigh, bshin, bfoot; fthigh, fshin, ffoot |
    | Ant | front_left_leg, front_right_leg, back_left_leg, back_right_leg | the whole chain: hip segment, upper leg (aux_i), lower leg (unnamed) |

Ant's legs are whole chains because the XML body named after each leg is only the hip segment
welded to the torso (no joint): scaling it alone would be a 0.04 kg change of the torso's mass.
The XML calls its legs front_left_leg, front_right_leg, back_leg and right_back_leg; "back_left_leg"
is `back_leg` (the partner of `right_back_leg`) and "back_right_leg" is `right_back_leg`.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
from functools import cached_property
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from fedjax_rl.envs import mujoco_engines
from fedjax_rl.envs.base import EnvIdentity, PerturbablePhysics
from fedjax_rl.envs.mujoco_engines import DEFAULT_ENGINE, mjx

GYMNASIUM_VERSION = "1.3.0"  # the version whose *_v4.py these classes reproduce


def gymnasium_xml_path(xml_file: str) -> str:
    """Path of one of gymnasium's MuJoCo XML files inside the installed gymnasium package."""
    return str(importlib.resources.files("gymnasium") / "envs" / "mujoco" / "assets" / xml_file)


def load_model(xml_file: str) -> mujoco.MjModel:
    """One of gymnasium's XML files compiled, the model exactly as `MjModel.from_xml_path` compiles it,
    without the deprecation warning MuJoCo prints for HalfCheetah's compiler attribute
    `settotalmass="14"` on every load (it reached every MuJoCo run and `reproduce table2 --status`).
    As the warning advises: compiled without the attribute, then scaled to that total mass by
    `mj_setTotalmass` and its constants recomputed by `mj_setConst`. The compiler also derives two
    statistics from the masses, `stat.meanmass` and `stat.meaninertia` (the solver's scale), which
    `mj_setConst` leaves alone: they are computed here as MuJoCo's compiler computes them. Every
    field of the result is bit-identical to the deprecated way's (tests/test_mujoco_envs.py)."""
    path = gymnasium_xml_path(xml_file)
    spec = mujoco.MjSpec.from_file(path)  # parsing does not warn; compiling the attribute does
    total = spec.compiler.settotalmass
    if total <= 0:  # MuJoCo's "not set" (-1): the file compiles without a warning
        return mujoco.MjModel.from_xml_path(path)
    spec.compiler.settotalmass = -1
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_setTotalmass(model, total)
    mujoco.mj_setConst(model, data)
    # The compiler's statistics (MuJoCo's engine_setconst.c), summed in its order: the mean body mass
    # and the mean diagonal of the joint-space inertia at qpos0 (where new data starts).
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    meanmass = 0.0
    for mass in model.body_mass[1:]:
        meanmass += float(mass)
    if hasattr(data, "M"):  # MuJoCo 4: rows of the sparse inertia, the diagonal last in each
        diagonal = data.M[model.M_rowadr + model.M_rownnz - 1]
    else:
        diagonal = data.qM[model.dof_Madr]
    meaninertia = 0.0
    for value in diagonal:
        meaninertia += float(value)
    model.stat.meanmass, model.stat.meaninertia = meanmass / (model.nbody - 1), meaninertia / model.nv
    return model


@struct.dataclass
class MuJoCoParams(environment.EnvParams):
    """A task's physics: the model fields that replace the model's, per simulation, and the time limit."""

    #: model field name ("opt.<name>" for an Option field) -> value replacing the model's.
    model_fields: dict[str, jax.Array] = struct.field(default_factory=dict)
    max_steps_in_episode: int = 1000


@struct.dataclass
class MuJoCoState(environment.EnvState):
    """What MuJoCo's data carries from step to step, plus the engine's own exact state."""

    qpos: jax.Array
    qvel: jax.Array
    #: MuJoCo's solver warm start (mj_step saves qacc for the next step); part of the exact state.
    qacc_warmstart: jax.Array
    #: xy of the torso body's frame as MuJoCo's data holds it (Ant's forward reward reads it).
    com_xy: jax.Array
    #: the engine's own state: the C engine's float64 bits of the above (`CExact`); () for MJX.
    exact: Any = ()


class MuJoCoLocomotion(EnvIdentity, PerturbablePhysics, environment.Environment[MuJoCoState, MuJoCoParams]):
    """Base of the four tasks. Subclasses set the class attributes, `healthy` and `x_velocity`."""

    xml_file: ClassVar[str]
    frame_skip: ClassVar[int]
    reset_noise_scale: ClassVar[float]
    reset_qvel_normal: ClassVar[bool]  # qvel noise N(0, s^2) (True) or U(-s, s) (False)
    obs_skip_qpos: ClassVar[int]  # leading qpos entries left out of the observation
    obs_clip_qvel: ClassVar[float | None]
    ctrl_cost_weight: ClassVar[float]
    #: paper part name -> XML body names (body names themselves are parts too)
    parts: ClassVar[dict[str, tuple[str, ...]]] = {}
    healthy_reward: ClassVar[float] = 1.0
    #: MJX line-search cap per task, where tests/test_mujoco_envs.py shows it changes no state
    #: (None: MuJoCo's default, 50). Under vmap every one of those iterations runs in every solver
    #: iteration of every sub-step, converged or not.
    mjx_ls_iterations: ClassVar[int | None] = None

    def __init__(self, engine: str = DEFAULT_ENGINE, mjx_ls_iterations: int | None = None):
        """`mjx_ls_iterations` overrides the task's MJX line-search cap (MuJoCo's default: 50)."""
        self.mj_model = load_model(self.xml_file)
        if mjx_ls_iterations is None:
            mjx_ls_iterations = self.mjx_ls_iterations
        self.engine = mujoco_engines.make_engine(engine, self.mj_model, self.frame_skip, mjx_ls_iterations)
        self._nominal_models: dict[Any, mjx.Model] = {}

    def identity(self) -> tuple:
        # Instances of one class and engine hold the same model (EnvIdentity: jit caches are shared).
        return (self.engine.identity,)

    # ---------------------------------------------------------------------------------------------
    # The model

    def mjx_model(self) -> mjx.Model:
        """The nominal model as an mjx.Model in the current default float dtype (float64 under
        enable_x64): every engine reads nominal field values from it."""
        dtype = jnp.zeros(()).dtype
        if dtype not in self._nominal_models:
            with jax.ensure_compile_time_eval():
                self._nominal_models[dtype] = mjx.put_model(self.mj_model)
        return self._nominal_models[dtype]

    def physics_model(self, params: MuJoCoParams) -> mjx.Model:
        """The MJX engine's model with `params.model_fields` in place."""
        return self._mjx_engine().physics_model(params.model_fields)

    def batched_physics_model(self, params: MuJoCoParams) -> tuple[mjx.Model, mjx.Model]:
        """The MJX engine's `(model, in_axes)` for params with a leading agent axis."""
        return self._mjx_engine().batched_physics_model(params.model_fields)

    def _mjx_engine(self) -> mujoco_engines.MJXEngine:
        if not isinstance(self.engine, mujoco_engines.MJXEngine):
            raise ValueError(f"{self.name} runs on engine {self.engine.name!r}, which has no mjx.Model")
        return self.engine

    # ---------------------------------------------------------------------------------------------
    # Physical parameters by name

    @cached_property
    def body_names(self) -> tuple[str, ...]:
        """Name of every body but the world; unnamed bodies are "body<i>"."""
        m = self.mj_model
        return tuple(m.body(i).name or f"body{i}" for i in range(1, m.nbody))

    @cached_property
    def _part_bodies(self) -> dict[str, tuple[int, ...]]:
        ids = {name: i + 1 for i, name in enumerate(self.body_names)}
        parts = {name: (i,) for name, i in ids.items()}
        for part, bodies in self.parts.items():
            if part in parts and parts[part] != tuple(ids[b] for b in bodies):
                # A part named like a body it extends (Ant's front_left_leg is the whole leg): the
                # body alone stays addressable as "body<i>".
                parts[f"body{ids[part]}"] = parts[part]
            parts[part] = tuple(ids[b] for b in bodies)
        return parts

    @cached_property
    def model_field_names(self) -> tuple[str, ...]:
        """Float model fields (non-empty) and float Option fields as "opt.<name>"."""
        model = self.mjx_model()

        def floats(obj, prefix):
            return [
                prefix + f.name
                for f in dataclasses.fields(obj)
                if not f.name.startswith("_")
                and isinstance(getattr(obj, f.name), jax.Array | np.ndarray)
                and jnp.issubdtype(getattr(obj, f.name).dtype, jnp.floating)
                and getattr(obj, f.name).size > 0
            ]

        return tuple(floats(model, "") + floats(model.opt, "opt."))

    def physics_names(self, params=None) -> tuple[str, ...]:
        return tuple(self._part_bodies) + self.model_field_names

    def _resolve(self, name: str):
        if name in self._part_bodies:
            return "mass", self._part_bodies[name]
        if name in self.model_field_names:
            if isinstance(self.engine, mujoco_engines.CEngine) and not self.engine.expandable(name):
                raise ValueError(f"model field {name!r} of {self.name} cannot differ between simulations "
                                 f"in MuJoCo's C engine (mujoco.batch cannot expand it); use engine 'mjx'")
            return "field", name
        raise ValueError(
            f"unknown physical parameter {name!r} for {self.name}; allowed: parts (their mass) "
            f"{', '.join(self._part_bodies)}; or a float model field "
            f"{', '.join(self.model_field_names)}"
        )

    def _nominal_field(self, name: str) -> jax.Array:
        model = self.mjx_model()
        return getattr(model.opt, name[4:]) if name.startswith("opt.") else getattr(model, name)

    def _field_value(self, params: MuJoCoParams, name: str) -> jax.Array:
        if name in params.model_fields:
            return params.model_fields[name]
        return self._nominal_field(name)

    def get_physics(self, params: MuJoCoParams, name: str):
        kind, what = self._resolve(name)
        if kind == "field":
            return self._field_value(params, what)
        masses = self._field_value(params, "body_mass")
        return masses[what[0]] if len(what) == 1 else masses[jnp.array(what)].sum()

    def set_physics(self, params: MuJoCoParams, name: str, value):
        kind, what = self._resolve(name)
        if kind == "field":
            nominal = self._nominal_field(what)
            new = jnp.broadcast_to(jnp.asarray(value, nominal.dtype), nominal.shape)
            return params.replace(model_fields={**params.model_fields, what: new})
        masses = self._field_value(params, "body_mass")
        value = jnp.asarray(value, masses.dtype)
        if len(what) == 1:
            masses = masses.at[what[0]].set(value)
        else:  # every body of the part by the same factor, so that the part's mass is `value`
            ids = jnp.array(what)
            masses = masses.at[ids].multiply(value / masses[ids].sum())
        return params.replace(model_fields={**params.model_fields, "body_mass": masses})

    # ---------------------------------------------------------------------------------------------
    # gymnax interface

    @property
    def default_params(self) -> MuJoCoParams:
        return MuJoCoParams(model_fields={"body_mass": self.mjx_model().body_mass})

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def num_actions(self) -> int:
        return self.mj_model.nu

    def action_space(self, params: MuJoCoParams | None = None) -> spaces.Box:
        low, high = self.mj_model.actuator_ctrlrange.T
        low, high = jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32)
        return spaces.Box(low, high, (self.mj_model.nu,), jnp.float32)

    def observation_space(self, params: MuJoCoParams | None = None) -> spaces.Box:
        size = self.mj_model.nq - self.obs_skip_qpos + self.mj_model.nv
        return spaces.Box(-jnp.inf, jnp.inf, (size,), jnp.float32)

    def observation(self, qpos: jax.Array, qvel: jax.Array) -> jax.Array:
        if self.obs_clip_qvel is not None:
            qvel = jnp.clip(qvel, -self.obs_clip_qvel, self.obs_clip_qvel)
        return jnp.concatenate([qpos[self.obs_skip_qpos :], qvel])

    def state_from(self, qpos, qvel, qacc_warmstart=None, com_xy=None) -> MuJoCoState:
        """The state of MuJoCo data with these fields; by default what gymnasium's `reset` makes
        (`mj_resetData`, then `set_state(qpos, qvel)`: no warm start, and `mj_forward`'s frame
        position of the torso, which for Ant's free joint is qpos[:2])."""
        qacc_warmstart = jnp.zeros_like(qvel) if qacc_warmstart is None else qacc_warmstart
        return MuJoCoState(
            time=jnp.zeros((), jnp.int32),  # an array, as after a step: one trace for both
            qpos=qpos,
            qvel=qvel,
            qacc_warmstart=qacc_warmstart,
            com_xy=qpos[:2] if com_xy is None else com_xy,
            exact=self.engine.initial_exact(),
        )

    def reset_env(self, key: jax.Array, params: MuJoCoParams) -> tuple[jax.Array, MuJoCoState]:
        qpos_key, qvel_key = jax.random.split(key)
        model = self.mjx_model()
        s = self.reset_noise_scale
        dtype = model.qpos0.dtype
        qpos = model.qpos0 + jax.random.uniform(qpos_key, (self.mj_model.nq,), dtype, -s, s)
        if self.reset_qvel_normal:
            qvel = s * jax.random.normal(qvel_key, (self.mj_model.nv,), dtype)
        else:
            qvel = jax.random.uniform(qvel_key, (self.mj_model.nv,), dtype, -s, s)
        return self.observation(qpos, qvel), self.state_from(qpos, qvel)

    def step_env(self, key, state: MuJoCoState, action, params: MuJoCoParams):
        stepped = self.engine.step(params.model_fields, state.qpos, state.qvel, state.qacc_warmstart,
                                   state.exact, action)
        dt = self.mj_model.opt.timestep * self.frame_skip
        if "opt.timestep" in params.model_fields:
            dt = params.model_fields["opt.timestep"] * self.frame_skip
        x_velocity = self.x_velocity(state, stepped, dt)
        reward = x_velocity + self.healthy_reward - self.ctrl_cost(jnp.asarray(action, stepped.qpos.dtype))
        terminated = ~self.healthy(stepped.qpos, stepped.qvel)
        new_state = MuJoCoState(
            time=state.time + 1,
            qpos=stepped.qpos,
            qvel=stepped.qvel,
            qacc_warmstart=stepped.qacc_warmstart,
            com_xy=stepped.torso_xy,
            exact=stepped.exact,
        )
        obs = self.observation(stepped.qpos, stepped.qvel)
        return jax.lax.stop_gradient(obs), jax.lax.stop_gradient(new_state), reward, terminated, {}

    def ctrl_cost(self, action):
        """On the unclipped action, as gymnasium's v4 tasks (MuJoCo clamps the control itself)."""
        return self.ctrl_cost_weight * jnp.sum(jnp.square(action))

    def x_velocity(self, state: MuJoCoState, stepped, dt):
        """Forward velocity of the step: x of the root joint after minus before, over dt."""
        return (stepped.qpos[0] - state.qpos[0]) / dt

    def healthy(self, qpos, qvel) -> jax.Array:
        """gymnasium's `is_healthy` at this state (its ranges and strictness); terminated = not healthy."""
        return jnp.bool_(True)


class Hopper(MuJoCoLocomotion):
    """gymnasium's Hopper-v4."""

    env_id = "Hopper-v4"
    xml_file = "hopper.xml"
    mjx_ls_iterations = 4  # the same states as 50 over 1024 float32 states (tests, benchmarks)
    frame_skip = 4
    reset_noise_scale = 5e-3
    reset_qvel_normal = False
    obs_skip_qpos = 1
    obs_clip_qvel = 10.0
    ctrl_cost_weight = 1e-3

    def healthy(self, qpos, qvel):
        z, angle = qpos[1], qpos[2]
        rest = jnp.concatenate([qpos[2:], qvel])
        return jnp.all((-100.0 < rest) & (rest < 100.0)) & (0.7 < z) & (-0.2 < angle) & (angle < 0.2)


class Walker2d(MuJoCoLocomotion):
    """gymnasium's Walker2d-v4."""

    env_id = "Walker2d-v4"
    xml_file = "walker2d.xml"
    frame_skip = 4
    reset_noise_scale = 5e-3
    reset_qvel_normal = False
    obs_skip_qpos = 1
    obs_clip_qvel = 10.0
    ctrl_cost_weight = 1e-3
    parts = {
        "right_thigh": ("thigh",),
        "right_leg": ("leg",),
        "right_foot": ("foot",),
        "left_thigh": ("thigh_left",),
        "left_leg": ("leg_left",),
        "left_foot": ("foot_left",),
    }

    def healthy(self, qpos, qvel):
        z, angle = qpos[1], qpos[2]
        return (0.8 < z) & (z < 2.0) & (-1.0 < angle) & (angle < 1.0)


class HalfCheetah(MuJoCoLocomotion):
    """gymnasium's HalfCheetah-v4 (never terminates)."""

    env_id = "HalfCheetah-v4"
    xml_file = "half_cheetah.xml"
    frame_skip = 5
    reset_noise_scale = 0.1
    reset_qvel_normal = True
    obs_skip_qpos = 1
    obs_clip_qvel = None
    ctrl_cost_weight = 0.1
    parts = {
        "back_thigh": ("bthigh",),
        "back_shin": ("bshin",),
        "back_foot": ("bfoot",),
        "front_thigh": ("fthigh",),
        "front_shin": ("fshin",),
        "front_foot": ("ffoot",),
    }

    healthy_reward = 0.0  # HalfCheetah never terminates and pays no healthy reward


class Ant(MuJoCoLocomotion):
    """gymnasium's Ant-v4 with its default 27-dim observation (no contact forces); a leg is its chain of three
    bodies."""

    env_id = "Ant-v4"
    xml_file = "ant.xml"
    mjx_ls_iterations = 4  # the same states as 50 over 1024 float32 states (tests, benchmarks)
    frame_skip = 5
    reset_noise_scale = 0.1
    reset_qvel_normal = True
    obs_skip_qpos = 2
    obs_clip_qvel = None
    ctrl_cost_weight = 0.5
    parts = {
        "front_left_leg": ("front_left_leg", "aux_1", "body4"),
        "front_right_leg": ("front_right_leg", "aux_2", "body7"),
        "back_left_leg": ("back_leg", "aux_3", "body10"),
        "back_right_leg": ("right_back_leg", "aux_4", "body13"),
    }

    def x_velocity(self, state, stepped, dt):
        # gymnasium's Ant reads the torso frame's position (`get_body_com`), not the root joint's.
        return (stepped.torso_xy[0] - state.com_xy[0]) / dt

    def healthy(self, qpos, qvel):
        z = qpos[2]
        return jnp.all(jnp.isfinite(qpos)) & jnp.all(jnp.isfinite(qvel)) & (0.2 <= z) & (z <= 1.0)


TASKS = {cls.env_id: cls for cls in (Hopper, Walker2d, HalfCheetah, Ant)}
