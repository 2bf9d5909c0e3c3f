"""Physics engines for the MuJoCo tasks: one task definition (`envs/locomotion.py`), three engines.

An engine advances a MuJoCo simulation by `frame_skip` sub-steps, `mj_step` after `mj_step`, from
the state the task carries. The task owns everything else (reset, observation, reward, termination,
which model fields are perturbed), so the three engines differ only in how they compute physics:

- `c`: MuJoCo's own C engine, the reference physics of gymnasium's v4 tasks, called from inside
  the compiled program through `jax.pure_callback`. Under `vmap` (agents, seeds, grid points,
  evaluation episodes) the callback receives the whole batch at once and steps it with
  `mujoco.batch.Batch` on the machine's cores, with per-simulation model fields. Bit-identical to a
  loop of `mj_step` at any thread count, so threads never change a number. It runs in float64
  whatever JAX's default dtype: the state it returns includes the float64 bits of qpos, qvel and
  the solver's warm start, so a float32 program carries MuJoCo's float64 trajectory exactly and
  only its observations and rewards are rounded. Not differentiable; the callback runs on the host.
- `mjx`: MuJoCo-MJX's pure-JAX pipeline: runs on any JAX device (TPU included) and is
  differentiable. Its line search scans all `ls_iterations` steps under `vmap` (a `lax.cond` becomes
  a select), so each task caps it where a test shows the cap changes no state
  (`MJX_LS_ITERATIONS`; tests/test_mujoco_envs.py).
- `warp`: MuJoCo Warp's GPU kernels through mjx (`impl="warp"`), for NVIDIA GPUs; an optional extra.

`check_engine` refuses an engine the machine cannot run before anything compiles.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import io
import math
import os
import threading
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fedjax_rl.envs import host_batch

# mjx prints "Failed to import warp" when its optional Warp (GPU) backend is absent; that line is
# noise unless the warp engine is asked for, and `check_engine` then says what is missing.
with contextlib.redirect_stdout(io.StringIO()):
    from mujoco import mjx

ENGINES = ("c", "mjx", "warp")
# Warp's contact buffers are shared by every world of a batch: room for this many worlds (runs x
# environments x episodes at the widest, the final evaluation: training.machine.check_warp_worlds) of this
# many contacts each (a robot's feet on the floor need a few).
WARP_MAX_WORLDS = 4096
WARP_CONTACTS_PER_WORLD = 16
# gymnasium's exact physics, and the fastest at federated batch sizes on every machine measured, a GPU
# machine included (docs/environments.md).
DEFAULT_ENGINE = "c"

ENGINE_HELP = {
    "c": "MuJoCo's C engine (gymnasium's physics exactly; float64; threads; not differentiable)",
    "mjx": "MuJoCo-MJX in JAX (any device, differentiable; its contact frames differ from C on Ant)",
    "warp": "MuJoCo Warp through mjx (NVIDIA GPUs only; pip install 'fedjax-rl[warp]')",
}


def check_engine(engine: str) -> None:
    """A ValueError naming the engines, or why this machine cannot run `engine`; compiles nothing."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine != "warp":
        return
    if importlib.util.find_spec("warp") is None:
        raise ValueError(
            "engine 'warp' needs the warp-lang package (pip install 'fedjax-rl[warp]') and an NVIDIA "
            "GPU; use engine 'c' (MuJoCo's C engine, the default) or 'mjx' instead"
        )
    if not any(d.platform == "gpu" for d in jax.devices()):
        raise ValueError(
            f"engine 'warp' runs MuJoCo Warp's CUDA kernels and needs an NVIDIA GPU, but JAX sees only "
            f"{sorted({d.platform for d in jax.devices()})}; use engine 'c' (MuJoCo's C engine, the "
            f"default and the fastest on a CPU) or 'mjx' instead"
        )


class Stepped(NamedTuple):
    """What an engine returns after `frame_skip` sub-steps (arrays in JAX's default float dtype)."""

    qpos: jax.Array
    qvel: jax.Array
    qacc_warmstart: jax.Array
    torso_xy: jax.Array  # xy of body 1's frame as MjData holds it after mj_step (a sub-step behind)
    exact: Any  # engine state beyond the above (the C engine's float64 bits; () otherwise)


def _torso_xy(xpos):
    return xpos[..., 1, :2]  # body 1 is the torso in all four XML files


# -------------------------------------------------------------------------------------------------
# MJX (JAX or Warp kernels)


class MJXEngine:
    """mjx.step in a `fori_loop`, on the model with the task's fields replaced. Under `vmap` over
    agents' params the model is batched only in the fields the params set (brax's domain
    randomisation pattern)."""

    def __init__(self, mj_model: mujoco.MjModel, frame_skip: int, impl: str = "jax",
                 ls_iterations: int | None = None):
        self.name = "mjx" if impl == "jax" else impl
        self.mj_model = copy.deepcopy(mj_model)
        if ls_iterations is not None:
            self.mj_model.opt.ls_iterations = ls_iterations
        self.frame_skip = frame_skip
        self.impl = impl
        self.identity = (self.name, self.mj_model.opt.ls_iterations)  # what makes two programs differ
        self._models: dict[Any, Any] = {}

    def model(self):
        """The nominal mjx.Model in the current default float dtype (float64 under enable_x64)."""
        dtype = jnp.zeros(()).dtype
        if dtype not in self._models:
            with jax.ensure_compile_time_eval():  # concrete arrays even when first asked inside a trace
                self._models[dtype] = mjx.put_model(self.mj_model, impl=self.impl)
        return self._models[dtype]

    def physics_model(self, model_fields: dict):
        """The nominal model with `model_fields` (field name, "opt.<name>" for options) in place."""
        model = self.model()
        fields = {k: v for k, v in model_fields.items() if not k.startswith("opt.")}
        options = {k[4:]: v for k, v in model_fields.items() if k.startswith("opt.")}
        if options:
            model = model.replace(opt=model.opt.replace(**options))
        return model.replace(**fields)

    def batched_physics_model(self, model_fields: dict):
        """`(model, in_axes)` for fields with a leading agent axis: batched only where a field is
        set (axis 0), shared elsewhere (None), as brax's DomainRandomizationVmapWrapper."""
        model = self.physics_model(model_fields)
        in_axes = jax.tree.map(lambda _: None, self.model())
        opt_batched = {k[4:]: 0 for k in model_fields if k.startswith("opt.")}
        if opt_batched:
            in_axes = in_axes.replace(opt=in_axes.opt.replace(**opt_batched))
        return model, in_axes.replace(**{k: 0 for k in model_fields if not k.startswith("opt.")})

    def initial_exact(self):
        return ()

    @functools.cached_property
    def _warp_data(self):
        """Warp's mjx.Data, made once from the MjModel (mjx refuses an mjx.Model) with contact room for
        `WARP_MAX_WORLDS` worlds: its contact arrays are shared by all the worlds of a batch, whose
        size a vmapped step cannot see."""
        with jax.ensure_compile_time_eval():
            return mjx.make_data(self.mj_model, impl="warp", naconmax=WARP_CONTACTS_PER_WORLD * WARP_MAX_WORLDS)

    def data_template(self, model):
        """mjx.Data to put a state into."""
        return self._warp_data if self.impl == "warp" else mjx.make_data(model, impl=self.impl)

    def step(self, model_fields: dict, qpos, qvel, qacc_warmstart, exact, ctrl) -> Stepped:
        del exact
        model = self.physics_model(model_fields)
        data = self.data_template(model).replace(
            qpos=qpos, qvel=qvel, qacc_warmstart=qacc_warmstart, ctrl=jnp.asarray(ctrl, qpos.dtype))
        data = jax.lax.fori_loop(0, self.frame_skip, lambda _, d: mjx.step(model, d), data)
        return Stepped(data.qpos, data.qvel, data.qacc_warmstart, _torso_xy(data.xpos), ())


# -------------------------------------------------------------------------------------------------
# MuJoCo C, called from the program


class CExact(NamedTuple):
    """The C engine's state beyond the default-dtype arrays: float64 bits of qpos, qvel and
    qacc_warmstart (uint32 pairs, so a float32 program can carry them), valid after a step. A
    fresh state (reset, or built from arrays) has valid False: the engine starts from its
    default-dtype arrays, which float64 holds exactly."""

    bits: jax.Array  # uint32 [2 (nq + 2 nv)]
    valid: jax.Array  # bool []


def _threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class CEngine:
    """MuJoCo's C `mj_step`, `frame_skip` times, for a whole vmapped batch in one host call.

    The batch of a call is the broadcast of every input's leading (vmapped) axes; each simulation
    gets its own values of the fields the params set (`mujoco.batch.Batch.expand`), written as they
    come, without `mj_setConst`, as a gymnasium user's `model.body_mass[i] *= c` is. An entry equal
    to the float32 rounding of its nominal float64 value is taken as the nominal value, so
    unperturbed bodies keep gymnasium's exact model in a float32 program.
    """

    name = "c"
    identity = "c"

    def __init__(self, mj_model: mujoco.MjModel, frame_skip: int):
        self.mj_model = mj_model
        self.frame_skip = frame_skip
        self.nq, self.nv = mj_model.nq, mj_model.nv
        self._batches: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    @staticmethod
    def expandable(field: str) -> bool:
        """Whether MuJoCo's batch can give `field` (an MjModel field, "opt.<name>" for options)
        per-simulation values."""
        from mujoco import batch

        return field in batch.MODEL_FIELDS

    def initial_exact(self) -> CExact:
        return CExact(jnp.zeros(2 * (self.nq + 2 * self.nv), jnp.uint32), jnp.bool_(False))

    def step(self, model_fields: dict, qpos, qvel, qacc_warmstart, exact: CExact, ctrl) -> Stepped:
        # Floats cross into the callback as their bits (uint32 words): the callback runs on a thread
        # of XLA's where `jax.enable_x64`, a thread-local setting, may be off, and JAX would then
        # hand it float64 inputs rounded to float32.
        dtype = qpos.dtype
        names = tuple(sorted(model_fields))
        values = [jnp.asarray(model_fields[n], dtype) for n in names]
        nq, nv = self.nq, self.nv
        words = dtype.itemsize // 4
        out = (jax.ShapeDtypeStruct((words * (nq + 2 * nv + 2),), jnp.uint32),
               jax.ShapeDtypeStruct(exact.bits.shape, jnp.uint32))
        packed, bits = jax.pure_callback(
            lambda *args: self._host_step(names, words, *args), out,
            exact.bits, exact.valid,
            *[host_batch.words_of(x) for x in (qpos, qvel, qacc_warmstart, jnp.asarray(ctrl, dtype), *values)],
            vmap_method="expand_dims",
        )
        flat = host_batch.floats_of(packed, dtype)
        return Stepped(flat[:nq], flat[nq : nq + nv], flat[nq + nv : nq + 2 * nv], flat[nq + 2 * nv :],
                       CExact(bits, jnp.ones_like(exact.valid)))

    # -- on the host ------------------------------------------------------------------------------

    def _batch(self, nsim: int, names: tuple[str, ...]):
        """A `mujoco.batch.Batch` of nsim simulations whose `names` fields are per simulation (one
        per batch size and field set, so no field keeps another call's values), and its lock."""
        from mujoco import batch

        key = (nsim, names)
        with self._lock:
            if key not in self._batches:
                sim = batch.Batch(self.mj_model, nsim, min(nsim, _threads()))
                sim.bind("xpos")  # an output is filled only by calls made after it is bound
                self._batches[key] = (threading.Lock(), sim, {n: sim.expand(n) for n in names})
            return self._batches[key]

    def _nominal(self, name: str) -> np.ndarray:
        return np.asarray(getattr(self.mj_model.opt, name[4:]) if name.startswith("opt.")
                          else getattr(self.mj_model, name))

    def _host_step(self, names, words, *arrays):
        # numpy from here on (`host_batch`)
        bits, valid, qpos, qvel, warm, ctrl, *values = (np.asarray(a) for a in arrays)
        nq, nv = self.nq, self.nv
        lead = host_batch.batch_shape(*[x.shape[:-1] for x in (bits, qpos, qvel, warm, ctrl, *values)], valid.shape)
        nsim = math.prod(lead)
        float_of = np.float64 if words == 2 else np.float32

        def rows(x):  # [nsim, -1]: the call's batch, flattened, as float64
            return host_batch.word_floats(x, lead, float_of).astype(np.float64)

        exact = host_batch.word_floats(bits, lead)
        fresh = ~host_batch.rows(valid[..., None], lead, (1,))  # [nsim, 1]: start from the default-dtype arrays
        lock, sim, expanded = self._batch(nsim, names)
        with lock:
            sim.qpos[:] = np.where(fresh, rows(qpos), exact[:, :nq])
            sim.qvel[:] = np.where(fresh, rows(qvel), exact[:, nq : nq + nv])
            sim.qacc_warmstart[:] = np.where(fresh, rows(warm), exact[:, nq + nv :])
            sim.ctrl[:] = rows(ctrl)
            sim.time[:] = 0.0
            for name, value in zip(names, values):
                nominal = self._nominal(name).reshape(-1)
                value = rows(value)
                expanded[name].reshape(nsim, -1)[:] = host_batch.nominal_where_rounded(value, nominal, float_of)
            sim.step(nstep=self.frame_skip)
            state = np.concatenate([sim.qpos, sim.qvel, sim.qacc_warmstart], axis=1)
            torso = np.array(_torso_xy(sim.xpos))  # a copy: the bound output is the batch's
        packed = np.concatenate([state, torso], axis=1).astype(float_of)
        return host_batch.float_words(packed, lead), host_batch.float_words(state, lead)


def make_engine(engine: str, mj_model: mujoco.MjModel, frame_skip: int, ls_iterations: int | None = None):
    """The physics engine named `engine` ("c", "mjx" or "warp") for `mj_model`, stepping `frame_skip`
    sub-steps per step."""
    check_engine(engine)
    if engine == "c":
        return CEngine(mj_model, frame_skip)
    if engine == "warp":
        # Warp's line search stops when it converges, so a cap saves nothing there; and on the
        # H200 it reached MJX's cap (its "linesearch iterations limit reached" warning).
        return MJXEngine(mj_model, frame_skip, impl="warp")
    return MJXEngine(mj_model, frame_skip, impl="jax", ls_iterations=ls_iterations)
