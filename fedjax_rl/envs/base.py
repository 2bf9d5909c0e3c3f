"""What every perturbable environment provides on top of the gymnax `Environment` interface.

Physics lives in a frozen `EnvParams` pytree (gymnax). A *physical parameter* is addressed by name:
any float field of the params dataclass, plus env-specific aliases (LunarLander's "wind" for
`wind_power`). `set_physics` is the one place a parameter changes, and it recomputes derived fields
(CartPole's `total_mass` and `polemass_length`), so they never go stale.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


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

    def derive(self, params):
        """Recompute derived fields from the primary ones (identity by default)."""
        return params
