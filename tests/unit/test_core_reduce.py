"""nat_jax.core.reduce against numpy (the independent truth): argmax and max with ties, NaN and -inf, and
log-softmax read at the argmax and at given tokens."""
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.core.reduce import argmax, max_and_argmax, scored_argmax


def cases(rng):
  ties = rng.integers(0, 4, (5, 7, 9)).astype(np.float32)  # many equal maxima per row
  nan = rng.standard_normal((5, 7, 9)).astype(np.float32)
  nan[1, 2, 3] = nan[1, 2, 6] = nan[4, 0, 0] = np.nan
  neg = rng.standard_normal((5, 7, 9)).astype(np.float32)
  neg[2] = -np.inf  # rows that are all -inf
  return [ties, nan, neg, rng.integers(-3, 3, (5, 7, 9)).astype(np.int32)]


@pytest.mark.parametrize('axis', [0, 1, 2, -1])
def test_matches_numpy(axis):
  for x in cases(np.random.default_rng(axis + 7)):
    top, index = max_and_argmax(jnp.asarray(x), axis)
    np.testing.assert_array_equal(np.asarray(index), np.argmax(x, axis=axis))
    np.testing.assert_array_equal(np.asarray(top), np.max(x, axis=axis))
    assert index.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(argmax(jnp.asarray(x), axis)), np.argmax(x, axis=axis))


def test_bfloat16_and_vocabulary_rows():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((3, 4000)), jnp.bfloat16)  # bf16 rounding makes ties common
  np.testing.assert_array_equal(np.asarray(argmax(x)), np.asarray(jnp.argmax(x, axis=-1)))


def test_scored_argmax_is_log_softmax_read_at_the_argmax_and_at_given_tokens():
  rng = np.random.default_rng(3)
  logits = (4 * rng.standard_normal((4, 6, 50))).astype(np.float32)
  logits[0, 0, :] = -np.inf
  logits[0, 0, 7] = 2.0  # one finite entry: probability 1
  tokens = rng.integers(0, 50, (4, 6)).astype(np.int32)
  top, top_lp, picked = scored_argmax(jnp.asarray(logits), jnp.asarray(tokens))
  shifted = logits - logits.max(-1, keepdims=True)  # numpy log-softmax, float64 for the truth
  logp = shifted.astype(np.float64) - np.log(np.exp(shifted.astype(np.float64)).sum(-1, keepdims=True))
  np.testing.assert_array_equal(np.asarray(top), logits.argmax(-1))
  np.testing.assert_allclose(np.asarray(top_lp), logp.max(-1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(picked), np.take_along_axis(logp, tokens[..., None], -1)[..., 0],
                             rtol=1e-5, atol=1e-5)
  assert float(top_lp[0, 0]) == 0.0
  index, lp, none = scored_argmax(jnp.asarray(logits))
  assert none is None
  np.testing.assert_array_equal(np.asarray(index), np.asarray(top))
  np.testing.assert_array_equal(np.asarray(lp), np.asarray(top_lp))
