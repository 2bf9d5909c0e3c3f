"""Checkpoints of a (seed-batched) `TrainState`: every leaf saved to one .npz under its pytree path
(`.agents.learner.shared.q['params']['Dense_0']['kernel']`), restored into the structure of a
freshly initialised state. Typed PRNG keys are stored as their raw key data.

Leaves are matched by path, never by position: a file whose paths, shapes or dtypes differ from the
state's (another configuration, another library version, two same-shaped leaves that changed
places) raises `CheckpointMismatch` naming the first differing paths, instead of loading values
into the wrong leaves. Writes go to a temporary file that is renamed into place, so a run killed
mid-write keeps its previous checkpoint.

Why not orbax: a checkpoint here is one small host-side file written after every evaluation block
and restored only into the same program; a path-keyed .npz gives the same safety (leaves by path,
loud mismatches) without orbax's directory layout, async machinery and per-save overhead.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_LEAF = "leaf:"
_EXTRA = "extra:"


class CheckpointMismatch(ValueError):
    """The file's leaves do not fit the state (another configuration or library version)."""


def _is_key(leaf) -> bool:
    return isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _paths(tree: Any) -> tuple[list[str], list[Any], Any]:
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [jax.tree_util.keystr(path) for path, _ in path_leaves], [leaf for _, leaf in path_leaves], treedef


def save(path: str, tree: Any, **extra: Any) -> None:
    names, leaves, _ = _paths(tree)
    arrays = {_LEAF + name: np.asarray(jax.random.key_data(x) if _is_key(x) else x) for name, x in zip(names, leaves)}
    arrays.update({_EXTRA + k: np.asarray(v) for k, v in extra.items()})
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _mismatch(path: str, what: str) -> CheckpointMismatch:
    return CheckpointMismatch(f"checkpoint {path} does not match this state: {what}")


def load(path: str, like: Any) -> tuple[Any, dict]:
    """Restore a tree saved by `save` into the structure (and key types) of `like`."""
    names, leaves, treedef = _paths(like)
    with np.load(path) as data:
        stored = {k[len(_LEAF):] for k in data.files if k.startswith(_LEAF)}
        missing = [n for n in names if n not in stored]
        unexpected = sorted(stored - set(names))
        if missing or unexpected:
            raise _mismatch(path, f"leaves missing from the file {missing[:3]}, unexpected in the file {unexpected[:3]}")
        restored = []
        for name, ref in zip(names, leaves):
            value = data[_LEAF + name]
            if _is_key(ref):
                expected_shape, expected_dtype = jax.random.key_data(ref).shape, jax.random.key_data(ref).dtype
            else:
                expected_shape, expected_dtype = np.shape(ref), jnp.asarray(ref).dtype
            if value.shape != expected_shape or value.dtype != expected_dtype:
                raise _mismatch(
                    path, f"leaf {name} is {value.dtype}{list(value.shape)} in the file, "
                          f"{expected_dtype}{list(expected_shape)} in the state"
                )
            if _is_key(ref):
                restored.append(jax.random.wrap_key_data(jnp.asarray(value), impl=jax.random.key_impl(ref)))
            else:
                restored.append(jnp.asarray(value))
        extra = {k[len(_EXTRA):]: data[k] for k in data.files if k.startswith(_EXTRA)}
    return jax.tree.unflatten(treedef, restored), extra
