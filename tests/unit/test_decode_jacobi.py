"""Jacobi decoders (PJ, PGJ, HGJ) against greedy decoding, token for token, plus DDGviz."""

import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.decode import LeftToRightScorer, jacobi
from tests.support import assert_same_as_greedy, decode_all, random_tiny_model

EOS, MAX_LEN = 1, 12
JACOBI = [('jacobi_pj', {}), ('jacobi_pgj', {'block_size': 2}), ('jacobi_pgj', {'block_size': 3}),
          ('jacobi_pgj', {'block_size': 5}), ('jacobi_hgj', {'block_size': 3})]


class WrappedScorer:
  """A left-to-right scorer whose step_logits is `step(inner, enc, cache, tokens, start)`."""

  def __init__(self, inner, step):
    self.inner, self.step = inner, step

  def __getattr__(self, name):
    return getattr(self.inner, name)

  def step_logits(self, enc, cache, tokens, start):
    return self.step(self.inner, enc, cache, tokens, start)


class Wrapped:
  """A method whose left-to-right scorer view is the inner method's, with step_logits replaced."""
  name = 'wrapped'

  def __init__(self, inner, step):
    self.build, self.step = inner.views()[LeftToRightScorer], step
    self.tokens_per_step, self.max_target_len = inner.tokens_per_step, inner.max_target_len  # the Method contract

  def views(self):
    return {LeftToRightScorer: lambda params: WrappedScorer(self.build(params), self.step)}


def eos_at_source_length(inner, enc, cache, tokens, start):
  """Force EOS at position (number of source tokens + 1): varied lengths, EOS anywhere in a block."""
  logits, cache = inner.step_logits(enc, cache, tokens, start)  # [B, T, V]
  target_len = jnp.sum(enc['src_valid'], axis=1) + 1  # [B]
  predicted = start + 1 + jnp.arange(tokens.shape[1])  # [T]: positions the T queries predict
  bonus = jnp.where(predicted[None] == target_len[:, None], 100.0, 0.0)  # [B, T]
  return logits.at[:, :, EOS].add(bonus), cache


def ignore_previous(inner, enc, cache, tokens, start):
  """Next token depends on the position (and source) only: every input token is replaced by PAD."""
  return eos_at_source_length(inner, enc, cache, jnp.zeros_like(tokens), start)


@pytest.fixture(scope='module')
def model(corpus):
  method, params = random_tiny_model(corpus, vocab_size=8)
  rng = np.random.default_rng(0)
  src = rng.integers(3, 8, (16, 12))
  for row in range(16):  # source lengths 1..14: target lengths 2..12, the longest rows hit MAX_LEN
    src[row, 1 + row * 11 // 15:] = 0
  return method, params, jnp.asarray(src, jnp.int32)


@pytest.fixture(scope='module')
def plain(model):
  return decode_all(*model, MAX_LEN, JACOBI)


@pytest.fixture(scope='module')
def eos_forced(model):
  method, params, src = model
  return decode_all(Wrapped(method, eos_at_source_length), params, src, MAX_LEN, JACOBI)


def test_equals_greedy_random_model(plain):
  assert_same_as_greedy(plain, JACOBI)


def test_eos_inside_block_ends_where_greedy_ends(model, eos_forced):
  assert_same_as_greedy(eos_forced, JACOBI)
  expected = np.minimum(np.asarray(jnp.sum(model[2] > 0, axis=1)) + 1, MAX_LEN)
  greedy = eos_forced['greedy']
  np.testing.assert_array_equal(np.asarray(greedy.aux['steps']), expected)  # EOS at every offset of a block
  tokens = np.asarray(greedy.tokens)
  assert all(tokens[b, n - 1] == EOS and not tokens[b, n:].any() for b, n in enumerate(expected) if n < MAX_LEN)


def test_position_only_model_converges_in_two_iterations_per_block(model):
  method, params, src = model
  outs = decode_all(Wrapped(method, ignore_previous), params, src, MAX_LEN, JACOBI)
  assert_same_as_greedy(outs, JACOBI)
  steps = np.asarray(outs['greedy'].aux['steps'])
  for name, options in JACOBI:
    blocks = -(-steps // options.get('block_size', MAX_LEN))
    assert (np.asarray(outs[name, options.get('block_size')].aux['iterations']) <= 2 * blocks).all(), (name, options)


def test_hgj_stops_where_pgj_stops(eos_forced):
  """Without an oracle length, HGJ stops at the same iteration as PGJ (EOS final = block converged up to it)."""
  pgj, hgj = eos_forced['jacobi_pgj', 3], eos_forced['jacobi_hgj', 3]
  np.testing.assert_array_equal(hgj.aux['iterations'], pgj.aux['iterations'])


def test_decoders_registered_with_options():
  assert decode.parse_options('jacobi_pgj', {'block_size': '5'}).kwargs() == {'block_size': 5, 'max_len': 0}
  assert decode.parse_options('jacobi_pj', {}).kwargs() == {'max_len': 0}
  assert jacobi.algorithm_options('pj', 3)['block_size'] == 0
