"""Checkpoints of a (seed-batched) `TrainState`: every leaf saved to one .npz under its pytree path
(`.agents.learner.shared.q['params']['Dense_0']['kernel']`), restored into the structure of a
freshly initialised state. Typed PRNG keys are stored as their raw key data.

Leaves are matched by path, never by position: a file whose paths, shapes or dtypes differ from the
state's (another configuration, another library version, two same-shaped leaves that changed
places) raises `CheckpointMismatch` naming the first differing paths, instead of loading values
into the wrong leaves. A file that cannot be read at all (empty, truncated, not an .npz) raises
`DamagedFile` naming it. Every write (`save`, `atomic_write`) goes to a temporary file in the same
directory that is renamed into place, so a run killed mid-write keeps its previous file whole.

Why not orbax: a checkpoint here is one small host-side file written after every evaluation block
and restored only into the same program; a path-keyed .npz gives the same safety (leaves by path,
loud mismatches) without orbax's directory layout, async machinery and per-save overhead.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zipfile
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_LEAF = "leaf:"
_EXTRA = "extra:"


class CheckpointMismatch(ValueError):
    """The file's leaves do not fit the state (another configuration or library version)."""


class DamagedFile(ValueError):
    """A file that cannot be read (empty, truncated, garbage); `path` names it."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path} is damaged ({reason})")
        self.path, self.reason = path, reason


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path: str):
    """The JSON file at `path`; `DamagedFile` naming it if it cannot be parsed (truncated, empty)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return json.loads(raw)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        reason = "empty file" if not raw.strip() else f"{type(error).__name__}: {error}"
        raise DamagedFile(path, reason) from None


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", **open_kwargs):
    """`open(path, mode)` whose file appears at `path` only once it is complete: written to a
    temporary file in the same directory (same filesystem, so the rename is atomic), then renamed
    over `path`. On any exception, KeyboardInterrupt included, `path` is untouched and the
    temporary file removed."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make every output private
        with os.fdopen(fd, mode, **open_kwargs) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def is_key(leaf) -> bool:
    """Whether `leaf` is an array of typed PRNG keys (stored as its key data)."""
    return isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def stored_data(leaf):
    """`leaf` as it is stored: a typed key array as its key data, anything else as it is."""
    return jax.random.key_data(leaf) if is_key(leaf) else leaf


def named_leaves(tree: Any) -> tuple[list[str], list[Any], Any]:
    """`tree`'s leaves, each leaf's name (its pytree path, `jax.tree_util.keystr`) and the treedef:
    the names under which a checkpoint or a federation message stores them."""
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [jax.tree_util.keystr(path) for path, _ in path_leaves], [leaf for _, leaf in path_leaves], treedef


def stored_arrays(tree: Any) -> dict[str, np.ndarray]:
    """Every leaf of `tree` as the numpy array that is stored (`stored_data`) under its name."""
    names, leaves, _ = named_leaves(tree)
    return {name: np.asarray(stored_data(x)) for name, x in zip(names, leaves)}


def save(path: str, tree: Any, **extra: Any) -> None:
    """Write `tree` to `path` (.npz), every leaf under its pytree path, plus the `extra` arrays; atomically."""
    arrays = {_LEAF + name: array for name, array in stored_arrays(tree).items()}
    arrays.update({_EXTRA + k: np.asarray(v) for k, v in extra.items()})
    with atomic_write(path, "wb") as f:
        np.savez(f, **arrays)


# What reading a damaged .npz raises: not a zip (np.load then tries pickle: ValueError), a truncated
# archive (BadZipFile, EOFError), a corrupted member (zlib.error, a CRC BadZipFile, ValueError).
_READ_ERRORS = (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, zlib.error)


@contextlib.contextmanager
def _open(path: str):
    """np.load(path) of an .npz written by `save`; `DamagedFile` if it is not one."""
    if not zipfile.is_zipfile(path):  # np.load would report garbage as "pickled (object) data"
        size = os.path.getsize(path)
        raise DamagedFile(path, "empty file" if size == 0 else f"not an .npz archive ({size} bytes)")
    try:
        with np.load(path, allow_pickle=False) as data:
            yield data
    except (CheckpointMismatch, DamagedFile):
        raise
    except _READ_ERRORS as error:
        raise DamagedFile(path, f"{type(error).__name__}: {error}") from None


def read_extras(path: str, names: tuple[str, ...]) -> dict:
    """The extras `names` that the file holds (no leaves are read); `DamagedFile` if unreadable."""
    with _open(path) as data:
        try:
            return {name: data[_EXTRA + name] for name in names if _EXTRA + name in data.files}
        except _READ_ERRORS as error:
            raise DamagedFile(path, f"{type(error).__name__}: {error}") from None


def _mismatch(path: str, what: str) -> CheckpointMismatch:
    return CheckpointMismatch(f"checkpoint {path} does not match this state: {what}")


def load(path: str, like: Any) -> tuple[Any, dict]:
    """Restore a tree saved by `save` into the structure (and key types) of `like`. Raises
    `CheckpointMismatch` if the leaves differ, `DamagedFile` if the file cannot be read."""
    names, leaves, treedef = named_leaves(like)
    with _open(path) as data:
        stored = {k[len(_LEAF):] for k in data.files if k.startswith(_LEAF)}
        missing = [n for n in names if n not in stored]
        unexpected = sorted(stored - set(names))
        if missing or unexpected:
            raise _mismatch(path, f"leaves missing from the file {missing[:3]}, unexpected in the file {unexpected[:3]}")
        restored = []
        for name, ref in zip(names, leaves):
            value = data[_LEAF + name]
            if is_key(ref):
                expected_shape, expected_dtype = jax.random.key_data(ref).shape, jax.random.key_data(ref).dtype
            else:
                expected_shape, expected_dtype = np.shape(ref), jnp.asarray(ref).dtype
            if value.shape != expected_shape or value.dtype != expected_dtype:
                raise _mismatch(
                    path, f"leaf {name} is {value.dtype}{list(value.shape)} in the file, "
                          f"{expected_dtype}{list(expected_shape)} in the state"
                )
            if is_key(ref):
                restored.append(jax.random.wrap_key_data(jnp.asarray(value), impl=jax.random.key_impl(ref)))
            else:
                restored.append(jnp.asarray(value))
        extra = {k[len(_EXTRA):]: data[k] for k in data.files if k.startswith(_EXTRA)}
    return jax.tree.unflatten(treedef, restored), extra
