"""Checkpoints of a (seed-batched) `TrainState`: every leaf saved to one .npz, restored into the
structure of a freshly initialised state. Typed PRNG keys are stored as their raw key data.

Writes go to a temporary file that is renamed into place, so a run killed mid-write keeps its
previous checkpoint.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class CheckpointMismatch(ValueError):
    """The file's leaves do not fit the state (another configuration or library version)."""


def _is_key(leaf) -> bool:
    return isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def save(path: str, tree: Any, **extra: Any) -> None:
    leaves = jax.tree.leaves(tree)
    arrays = {f"leaf_{i}": np.asarray(jax.random.key_data(x) if _is_key(x) else x) for i, x in enumerate(leaves)}
    arrays.update({f"extra_{k}": np.asarray(v) for k, v in extra.items()})
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load(path: str, like: Any) -> tuple[Any, dict]:
    """Restore a tree saved by `save` into the structure (and key types) of `like`."""
    with np.load(path) as data:
        leaves, treedef = jax.tree.flatten(like)
        if sum(k.startswith("leaf_") for k in data.files) != len(leaves):
            raise CheckpointMismatch(f"checkpoint {path} does not match this state (leaf count differs)")
        restored = []
        for i, ref in enumerate(leaves):
            value = data[f"leaf_{i}"]
            if _is_key(ref):
                restored.append(jax.random.wrap_key_data(jnp.asarray(value), impl=jax.random.key_impl(ref)))
            else:
                if value.shape != np.shape(ref):
                    raise CheckpointMismatch(f"checkpoint {path} does not match this state (shape differs)")
                restored.append(jnp.asarray(value, dtype=ref.dtype))
        extra = {k[len("extra_"):]: data[k] for k in data.files if k.startswith("extra_")}
    return jax.tree.unflatten(treedef, restored), extra
