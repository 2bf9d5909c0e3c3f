"""Federated reinforcement learning in heterogeneous environments, compiled end to end with JAX.

The K agents of a federation are one named `vmap` axis, the federated average is a `lax.pmean` over
it, and a whole run is one XLA program. The packages, bottom first: `envs` (the tasks), `core` (settings,
robust losses, the federated axis, per-agent physics, evaluation), `agents` and `tabular` (the
algorithms), `training` (config, compiled program, host loop, run directory), `analysis` (statistics,
figures, renders), `reproduce` (the paper's tables) and `cli` (`fedjax-rl`).

The entry points are importable from here, each loaded on first use so that `import fedjax_rl`
imports no JAX: `train_config` (a run's config), `run` (train it, optionally into a run
directory), `make_train` (the whole run as one pure function of a key); a table is
`fedjax_rl.reproduce.harness.reproduce`.
"""

import importlib

_ENTRY_POINTS = {
    "train_config": "fedjax_rl.training.configs",
    "run": "fedjax_rl.training.loop",
    "make_train": "fedjax_rl.training.program",
}
__all__ = sorted(_ENTRY_POINTS)


def __getattr__(name: str):
    if name in _ENTRY_POINTS:
        return getattr(importlib.import_module(_ENTRY_POINTS[name]), name)
    raise AttributeError(f"module 'fedjax_rl' has no attribute {name!r}")
