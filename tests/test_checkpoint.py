"""Checkpoints store leaves by pytree path: exact round trips, loud failures on any structural change."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from fedjax_rl.training import checkpoint


@struct.dataclass
class Nets:
    q: dict
    q_target: dict


def _tree():
    return {
        "nets": Nets(q={"w": jnp.arange(6.0).reshape(2, 3)}, q_target={"w": -jnp.arange(6.0).reshape(2, 3)}),
        "key": jax.random.split(jax.random.key(3), 2),  # typed keys, as TrainState carries them
        "count": jnp.int32(7),
        "mask": jnp.array([True, False]),
    }


def test_round_trip_is_exact_with_typed_keys_and_extras(tmp_path):
    path = str(tmp_path / "c.npz")
    tree = _tree()
    checkpoint.save(path, tree, blocks_done=4, curve='[{"a": 1}]')
    like = jax.tree.map(jnp.zeros_like, tree)
    restored, extra = checkpoint.load(path, like)
    chex.assert_trees_all_equal_structs(restored, tree)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(tree)):
        if jnp.issubdtype(b.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert int(extra["blocks_done"]) == 4 and str(extra["curve"]) == '[{"a": 1}]'
    # Restored keys are keys, and draw the same numbers.
    np.testing.assert_array_equal(jax.random.uniform(restored["key"][1]), jax.random.uniform(tree["key"][1]))


def test_leaves_are_matched_by_path_not_position(tmp_path):
    """Two same-shaped leaves whose order in the tree changes (a field reordering between versions)
    come back under their own names; a positional format would have swapped them silently."""

    @struct.dataclass
    class Reordered:
        q_target: dict
        q: dict

    path = str(tmp_path / "c.npz")
    tree = _tree()
    checkpoint.save(path, tree["nets"])
    like = Reordered(q_target={"w": jnp.zeros((2, 3))}, q={"w": jnp.zeros((2, 3))})
    assert jax.tree.leaves(like)[0] is like.q_target["w"]  # the first leaf position now holds q_target
    restored, _ = checkpoint.load(path, like)
    np.testing.assert_array_equal(restored.q["w"], tree["nets"].q["w"])
    np.testing.assert_array_equal(restored.q_target["w"], tree["nets"].q_target["w"])


@pytest.mark.parametrize(
    "change,match",
    [
        # A renamed leaf of the same shape: same leaf count and shapes, different paths.
        (lambda t: {**t, "nets": {"online": t["nets"].q, "target": t["nets"].q_target}}, r"leaves missing from the file"),
        (lambda t: {k: v for k, v in t.items() if k != "mask"}, r"unexpected in the file \[\"\['mask'\]\"\]"),
        (lambda t: {**t, "extra_leaf": jnp.zeros(2)}, r"leaves missing from the file \[\"\['extra_leaf'\]\"\]"),
        (lambda t: {**t, "count": jnp.zeros(3, jnp.int32)}, r"leaf \['count'\] is int32\[\] in the file, int32\[3\]"),
        (lambda t: {**t, "count": jnp.float32(0)}, r"leaf \['count'\] is int32\[\] in the file, float32\[\]"),
    ],
)
def test_any_structural_difference_fails_loudly(tmp_path, change, match):
    path = str(tmp_path / "c.npz")
    tree = _tree()
    checkpoint.save(path, tree)
    with pytest.raises(checkpoint.CheckpointMismatch, match=match):
        checkpoint.load(path, change(tree))


def test_positional_files_from_older_versions_are_rejected(tmp_path):
    path = str(tmp_path / "old.npz")
    np.savez(path, leaf_0=np.zeros(3), extra_blocks_done=np.asarray(1))
    with pytest.raises(checkpoint.CheckpointMismatch, match="leaves missing from the file"):
        checkpoint.load(path, {"a": jnp.zeros(3)})


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda data: b"", r"empty file"),
        (_truncated, r"BadZipFile|not an \.npz archive"),  # the zip directory sits at the end of the file
        (lambda data: b"\x93NUMPY garbage" * 50, r"not an \.npz archive \(700 bytes\)"),  # was "pickled data"
        (lambda data: data[:400] + bytes(b ^ 0xFF for b in data[400:416]) + data[416:], r"BadZipFile: Bad CRC-32"),
    ],
    ids=["empty", "truncated", "garbage", "corrupted member"],
)
def test_a_damaged_file_is_named_instead_of_a_zip_or_pickle_error(tmp_path, damage, reason):
    path = tmp_path / "checkpoint.npz"
    tree = _tree()
    checkpoint.save(str(path), tree, blocks_done=3)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(checkpoint.DamagedFile, match=rf"{path} is damaged \(({reason})") as info:
        checkpoint.load(str(path), tree)
    assert info.value.path == str(path)
    if reason != r"BadZipFile: Bad CRC-32":  # the extras alone are read from an intact member
        with pytest.raises(checkpoint.DamagedFile, match=rf"{path} is damaged \(({reason})"):
            checkpoint.read_extras(str(path), ("blocks_done",))
    assert not isinstance(info.value, checkpoint.CheckpointMismatch)


def test_writes_are_atomic_an_interrupted_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text('{"old": 1}')
    with pytest.raises(KeyboardInterrupt):
        with checkpoint.atomic_write(str(path)) as f:
            f.write('{"new": ')
            raise KeyboardInterrupt  # Ctrl-C in the middle of the write
    assert path.read_text() == '{"old": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]  # no temporary file left
    with checkpoint.atomic_write(str(path)) as f:
        f.write('{"new": 2}')
    assert checkpoint.read_json(str(path)) == {"new": 2}
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # not mkstemp's private 0600
    path.write_text('{"new": ')
    with pytest.raises(checkpoint.DamagedFile, match=r"metrics.json is damaged \(JSONDecodeError: "):
        checkpoint.read_json(str(path))


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
