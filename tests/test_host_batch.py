"""The host-callback boundary both host-stepped physics share (`fedjax_rl.envs.host_batch`): a
float64 state through uint32 words and back bit for bit, a shared input broadcast to writable rows,
and the nominal rule for a float32 parameter. Exact numbers: nothing here is chaotic."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_rl.envs import host_batch


def test_a_float64_state_crosses_as_words_and_back_bit_for_bit():
    states = np.array([[np.pi, -1e-300, 1 / 3], [np.e, 1e300, -0.0]])  # [rows, n], not float32-representable
    words = host_batch.float_words(states, (2,))
    assert words.dtype == np.uint32 and words.shape == (2, 6)
    back = host_batch.word_floats(words, (2,))
    np.testing.assert_array_equal(back.view(np.uint64), states.view(np.uint64))
    # in the program: the same bits as a float32 program carries them
    np.testing.assert_array_equal(np.asarray(host_batch.words_of(jnp.asarray(words[0]))), words[0])
    x = jnp.asarray([1.5, -2.25, 3.0e-5], jnp.float32)
    np.testing.assert_array_equal(np.asarray(host_batch.floats_of(host_batch.words_of(x), jnp.float32)), np.asarray(x))


def test_a_float64_program_carries_its_floats_as_two_words_each_and_back():
    """Under 64-bit floats (the C engine's float64 programs) each float is two words, first-word-first
    as the host's `float_words` lays them out, and any shape, a scalar too, flattens to words."""
    with jax.enable_x64(True):
        x = jnp.asarray([[np.pi, -1e-300], [1 / 3, 1e300]], jnp.float64)
        words = host_batch.words_of(x)
        assert words.shape == (8,) and words.dtype == jnp.uint32
        np.testing.assert_array_equal(np.asarray(words), host_batch.float_words(np.asarray(x).reshape(1, 4), (1,))[0])
        back = host_batch.floats_of(words, jnp.float64)
        assert back.dtype == jnp.float64 and back.shape == (4,)
        np.testing.assert_array_equal(np.asarray(back).view(np.uint64), np.asarray(x).reshape(-1).view(np.uint64))
        assert host_batch.words_of(jnp.float64(np.e)).shape == (2,)
        assert host_batch.words_of(jnp.float32(np.e)).shape == (1,)


def test_a_shared_input_becomes_one_writable_row_per_simulation():
    """A state every row shares arrives broadcast ([1, 1, k], zero strides after broadcasting): each
    row gets its own copy, so writing one row's next state leaves the others alone."""
    shared = host_batch.float_words(np.array([[1.0, 2.0]]), (1, 1))  # [1, 1, 4] words
    lead = host_batch.batch_shape((1, 1), (3, 2))
    assert lead == (3, 2)
    states = host_batch.word_floats(shared, lead)
    assert states.shape == (6, 2) and states.flags.writeable and states.flags.c_contiguous
    states[0] = [9.0, 9.0]
    np.testing.assert_array_equal(states[1:], np.tile([1.0, 2.0], (5, 1)))
    np.testing.assert_array_equal(host_batch.rows(np.arange(2), lead), np.tile(np.arange(2), 3))


def test_a_parameter_at_its_float32_rounding_is_the_nominal_value():
    nominal = np.array([0.1, 0.5, 1.3])  # 0.1 and 1.3 are not float32 numbers; 0.5 is
    from_program = np.float32([0.1, 0.5, 1.4]).astype(np.float64)  # the first two unperturbed
    out = host_batch.nominal_where_rounded(from_program, nominal, np.float32)
    assert out[0] == 0.1 and out[1] == 0.5  # float64's nominal values exactly
    assert out[2] == np.float64(np.float32(1.4))  # a perturbed value is left as the program gave it
