"""What every physics stepped on the host does at the `jax.pure_callback` boundary: MuJoCo's C engine
(`mujoco_engines.CEngine`) and the gymnasium bridge (`gymnasium_bridge.GymnasiumEnv`) alike.

* **One call per batch.** Under `vmap` (agents, seeds, grid points, evaluation episodes) the callback
  (`vmap_method="expand_dims"`) receives each input with its own leading batch axes, some of size 1
  where that input is shared. `batch_shape` is their broadcast, and `rows` flattens an input to one
  row per simulation, C-ordered and writable (a shared input arrives broadcast, with zero strides).
* **float64 across a float32 program.** A state the host keeps in float64 crosses into the program
  as its bits, two uint32 words per float (`float_words` on the host, `words_of` and `floats_of`
  in the program), so a float32 program carries the host's float64 trajectory exactly.
* **Nominal values stay nominal.** A physical parameter reaches the host as the program's float32;
  an entry equal to the float32 rounding of its nominal float64 value is the nominal value
  (`nominal_where_rounded`), so an unperturbed parameter keeps the reference model exactly.

numpy only on the host side: a JAX operation inside the callback would wait for the device that is
running the program that called it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def batch_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The call's batch: the broadcast of every input's leading (vmapped) shape."""
    return tuple(np.broadcast_shapes(*shapes))


def rows(x, lead: tuple[int, ...], tail: tuple[int, ...] = ()) -> np.ndarray:
    """`x` as one C-ordered writable row per simulation, shaped (prod(lead),) + tail: broadcast over
    the batch `lead` first."""
    x = np.broadcast_to(np.asarray(x), lead + tuple(tail))
    return np.array(x.reshape((math.prod(lead), *tail)), order="C")


def float_words(x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """Host floats [rows, n] (float64, or float32) as their uint32 words, shaped lead + (words per
    float x n,)."""
    return np.ascontiguousarray(x).view(np.uint32).reshape(lead + (-1,))


def word_floats(words: np.ndarray, lead: tuple[int, ...], dtype=np.float64) -> np.ndarray:
    """`float_words` read back: the words (k per row, broadcast over the batch `lead`) as `dtype`
    floats [rows, k / words per float], a writable copy."""
    return rows(words, lead, np.shape(words)[-1:]).view(dtype)


def words_of(x: jax.Array) -> jax.Array:
    """In the program: a float array's bits as uint32 words, flat: [size * itemsize / 4] (a scalar:
    [itemsize / 4]). A float64 entry's two words come out side by side, as `floats_of` reads them."""
    return jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(-1)


def floats_of(words: jax.Array, dtype) -> jax.Array:
    """In the program: `words_of` read back as a vector of `dtype`."""
    if jnp.dtype(dtype).itemsize == 8:
        words = words.reshape(-1, 2)
    return jax.lax.bitcast_convert_type(words, dtype)


def rounded(nominal: np.ndarray, dtype) -> np.ndarray:
    """The nominal values as the program holds them (rounded to `dtype`)."""
    return np.asarray(nominal).astype(dtype)


def nominal_where_rounded(values: np.ndarray, nominal: np.ndarray, dtype) -> np.ndarray:
    """`values` (float64 of the program's `dtype` floats) with every entry equal to its nominal value's
    rounding to `dtype` replaced by the nominal value itself."""
    return np.where(values == rounded(nominal, dtype), nominal, values)
