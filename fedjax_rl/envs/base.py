"""The environment contract: what the compiled loop (`fedjax_rl.training.program`) needs from an environment,
and the shared pieces every perturbable environment uses (physics by name, identity, scale checks).

An environment is a gymnax 1.x `Environment` (its physics in a frozen params pytree, its shapes on the
object) with perturbable physics::

    env.default_params                                   # the nominal physics: a frozen pytree
    params.max_steps_in_episode                          # the time limit (a concrete int in the defaults)
    env.observation_space(params).shape                  # static
    env.action_space(params)                             # gymnax spaces.Discrete or spaces.Box
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
        # gymnax 1.x: the episode resets itself when it ends (terminated | truncated), and `obs` is
        # then the new episode's first observation; info["final_observation"] is the observation
        # the step reached, before any reset: the loop stores it as s'. `terminated` (the pole fell)
        # stops bootstrapping; `truncated` (the time limit) does not.
    env.physics_names(params)                            # the names `--param` accepts
    env.get_physics(params, name)                        # a physical parameter's value
    env.set_physics(params, name, value)                 # the one place it changes; derived fields follow
    env.scale_physics(params, name, scale)               # set to scale x its value; concrete scale > 0

`perturb.agent_env_params` and the robustness sweep go through these four methods only, and
the loop vmaps `reset`/`step` over a batch of params (one per agent), so a parameter may be any
pytree leaf the step reads, not only a field of a gymnax dataclass.

Identity: gymnax jits `step`/`reset` with `self` static, so equal environments share compiled
programs. `EnvIdentity` makes instances of one class with the same configuration (`identity()`)
equal and hash alike, so building a fresh env (through the registry) does not recompile.

`PerturbableEnv` states the contract as a Protocol; `PerturbablePhysics` implements the physics
methods for params dataclasses whose float fields are the parameters. An environment of your own is
used by registering it: `envs.register(envs.EnvSpec(name=..., factory=..., perturbed=(...), ...))`
(docs/environments.md, "Your own environment").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np


class PerturbableEnv(Protocol):
    """The exact interface `fedjax_rl.training.program` drives (see the module docstring)."""

    name: str
    default_params: Any

    def reset(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]: ...

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any
             ) -> tuple[jax.Array, Any, jax.Array, jax.Array, jax.Array, dict]: ...

    def observation_space(self, params: Any) -> Any: ...

    def action_space(self, params: Any) -> Any: ...

    def physics_names(self, params: Any) -> tuple[str, ...]: ...

    def get_physics(self, params: Any, name: str) -> jax.Array: ...

    def set_physics(self, params: Any, name: str, value) -> Any: ...

    def scale_physics(self, params: Any, name: str, scale) -> Any: ...


def check_scales(scales) -> None:
    """ValueError unless every concrete scale c in m' = c m is > 0 (traced scales pass unchecked)."""
    if isinstance(scales, jax.core.Tracer):
        return
    values = np.asarray(scales, dtype=float)
    if not np.all(values > 0):
        raise ValueError(f"physics scale must be > 0, got {values.tolist()}")


class EnvIdentity:
    """Instances of one class with equal `identity()` compare equal and hash alike (see the module
    docstring). The default identity is empty: valid for classes that carry no configuration of
    their own, all physics living in the params pytree."""

    def identity(self) -> tuple:
        return ()

    def __eq__(self, other):
        return type(self) is type(other) and self.identity() == other.identity()

    def __hash__(self):
        return hash((type(self), self.identity()))


class PerturbablePhysics:
    """Mixin for gymnax environments. Subclasses may set `aliases` and override `derive`."""

    #: name -> params field, for names that are not field names themselves.
    aliases: dict[str, str] = {}
    #: fields that are computed from others and so may not be set directly.
    derived_fields: tuple[str, ...] = ()

    def physics_names(self, params) -> tuple[str, ...]:
        fields = [
            f.name
            for f in dataclasses.fields(params)
            if isinstance(getattr(params, f.name), float | jax.Array)
            and jnp.issubdtype(jnp.asarray(getattr(params, f.name)).dtype, jnp.floating)
            and f.name not in self.derived_fields
        ]
        return tuple(sorted(set(fields) | set(self.aliases)))

    def _field(self, params, name: str) -> str:
        field = self.aliases.get(name, name)
        if name not in self.physics_names(params):
            raise ValueError(
                f"unknown physical parameter {name!r} for {self.name}; "
                f"allowed: {', '.join(self.physics_names(params))}"
            )
        return field

    def get_physics(self, params, name: str):
        return getattr(params, self._field(params, name))

    def set_physics(self, params, name: str, value):
        params = params.replace(**{self._field(params, name): value})
        return self.derive(params)

    def scale_physics(self, params, name: str, scale):
        """`name` set to `scale` times its value in `params`; a concrete scale must be > 0."""
        check_scales(scale)
        return self.set_physics(params, name, scale * self.get_physics(params, name))

    def derive(self, params):
        """Recompute derived fields from the primary ones (identity by default)."""
        return params


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """One registered environment.

    - factory: builds the env from the names of the parameters that will be perturbed (LunarLander
      needs its wind-enabled variant when "wind" is among them; the classic-control envs ignore it)
      and the physics engine, one of `engines`.
    - perturbed: the physical parameters the paper perturbs, in the paper's order.
    - max_steps: episode step limit (truncation), equal to the nominal params' `max_steps_in_episode`.
    - random_return: mean undiscounted episode return of a uniformly random policy at the nominal
      params of the default variant, `make(name)` (1000 episodes, key 0).
    - variant_random_returns: ((perturbed, return), ...) for the variants `make(name, perturbed)`
      builds that are not the default one (LunarLander without wind); see `random_return`.
    - return_range: (low, high) that every episode's undiscounted return lies in, at any physical
      parameters, where the task's rewards bound it (None where they do not: LunarLander's crash and
      landing bonuses and the MuJoCo tasks' velocity terms are unbounded in practice). The comparisons
      intersect their intervals with what it allows (`stats.difference`'s `value_range`).
    - solved_return: gymnasium's `reward_threshold` for the task (the return at which it counts as
      solved), None where gymnasium registers none (Walker2d-v4, Pendulum-v1). It sets the task's
      equivalence margin (`fedjax_rl.analysis.judge.equivalence_margin`).
    """

    name: str
    factory: Callable[[tuple[str, ...]], Any]
    perturbed: tuple[str, ...]
    max_steps: int
    random_return: float
    notes: str = ""
    variant_random_returns: tuple[tuple[tuple[str, ...], float], ...] = ()
    return_range: tuple[float, float] | None = None
    solved_return: float | None = None
    #: the physics engines the task runs on, its default first ("jax": the env is written in JAX).
    engines: tuple[str, ...] = ("jax",)
    #: engine -> None, or raise a ValueError saying why this machine cannot run it (MuJoCo Warp
    #: without an NVIDIA GPU).
    check_engine: Callable[[str], None] | None = None
