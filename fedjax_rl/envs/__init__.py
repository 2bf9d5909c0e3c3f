"""Perturbable environments and their registry. `make(name) -> (env, nominal_params)`; `register`,
`get` and `names` as for algorithms and aggregation rules (`fedjax_rl.plugins.Registry`)."""

from fedjax_rl.envs.registry import (
    REGISTRY,
    EnvSpec,
    built_in,
    check_engine,
    check_physics_param,
    get,
    known,
    load_plugins,
    make,
    names,
    physics_names,
    random_policy_returns,
    random_return,
    register,
    return_range,
)

__all__ = [
    "REGISTRY",
    "EnvSpec",
    "HostState",
    "built_in",
    "check_engine",
    "check_physics_param",
    "get",
    "gymnasium_spec",
    "known",
    "load_plugins",
    "make",
    "names",
    "physics_names",
    "random_policy_returns",
    "random_return",
    "register",
    "return_range",
]


def __getattr__(name):
    # The gymnasium bridge (flax, gymnax) loads when first asked for, not with the registry.
    if name in ("HostState", "gymnasium_spec"):
        from fedjax_rl.envs import gymnasium_bridge

        return getattr(gymnasium_bridge, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
