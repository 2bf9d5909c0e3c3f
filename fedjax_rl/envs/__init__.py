"""Perturbable environments and their registry. `make(name) -> (env, nominal_params)`."""

from fedjax_rl.envs.registry import (
    EnvSpec,
    check_engine,
    check_physics_param,
    equivalence_margin,
    get_spec,
    list_envs,
    make,
    physics_names,
    random_policy_returns,
    random_return,
    register,
    return_range,
)

__all__ = [
    "EnvSpec",
    "check_engine",
    "check_physics_param",
    "equivalence_margin",
    "get_spec",
    "list_envs",
    "make",
    "physics_names",
    "random_policy_returns",
    "random_return",
    "register",
    "return_range",
]
