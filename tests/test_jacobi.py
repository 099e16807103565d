"""Jacobi decoders (PJ, PGJ, HGJ) against greedy decoding, token for token, plus DDGviz."""
import os

import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.viz import ddg, pictures
from nat_jax import decode
from nat_jax.decode import LeftToRightScorer, jacobi
from nat_jax.run.workdir import load_run
from nat_jax.run.translation import encode_sources
from tests.conftest import random_tiny_model, run_decoder

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


def decode_all(method, params, src, max_len=MAX_LEN, configs=JACOBI):
  """{'greedy': out, (name, block_size): out} for greedy and the Jacobi configurations."""
  outs = {'greedy': run_decoder(method, params, src, 'greedy', max_len=max_len)}
  for name, options in configs:
    outs[name, options.get('block_size')] = run_decoder(method, params, src, name, max_len=max_len, **options)
  return outs


def assert_same_as_greedy(outs, configs=JACOBI):
  greedy = outs['greedy']
  steps = np.asarray(greedy.aux['steps'])
  for name, options in configs:
    out = outs[name, options.get('block_size')]
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(greedy.tokens), err_msg=f'{name} {options}')
    np.testing.assert_array_equal(np.asarray(out.aux['steps']), steps)
    np.testing.assert_allclose(np.asarray(out.scores), np.asarray(greedy.scores), rtol=1e-4, atol=1e-4)
    iterations = np.asarray(out.aux['iterations'])
    assert (iterations >= 1).all()
    # Every algorithm finalises at least one token per iteration and stops once an EOS is final:
    # iterations <= greedy steps (docs/methods.md §5 allows greedy length + 1).
    assert (iterations <= steps).all(), (name, options, iterations, steps)
    assert (np.asarray(out.aux['passes']) >= iterations).all()


@pytest.fixture(scope='module')
def plain(model):
  return decode_all(*model)


@pytest.fixture(scope='module')
def eos_forced(model):
  method, params, src = model
  return decode_all(Wrapped(method, eos_at_source_length), params, src)


def test_equals_greedy_random_model(plain):
  assert_same_as_greedy(plain)


def test_eos_inside_block_ends_where_greedy_ends(model, eos_forced):
  assert_same_as_greedy(eos_forced)
  expected = np.minimum(np.asarray(jnp.sum(model[2] > 0, axis=1)) + 1, MAX_LEN)
  greedy = eos_forced['greedy']
  np.testing.assert_array_equal(np.asarray(greedy.aux['steps']), expected)  # EOS at every offset of a block
  tokens = np.asarray(greedy.tokens)
  assert all(tokens[b, n - 1] == EOS and not tokens[b, n:].any() for b, n in enumerate(expected) if n < MAX_LEN)


def test_position_only_model_converges_in_two_iterations_per_block(model):
  method, params, src = model
  outs = decode_all(Wrapped(method, ignore_previous), params, src)
  assert_same_as_greedy(outs)
  steps = np.asarray(outs['greedy'].aux['steps'])
  for name, options in JACOBI:
    blocks = -(-steps // options.get('block_size', MAX_LEN))
    assert (np.asarray(outs[name, options.get('block_size')].aux['iterations']) <= 2 * blocks).all(), (name, options)


def test_hgj_stops_where_pgj_stops(eos_forced):
  """Without an oracle length, HGJ stops at the same iteration as PGJ (EOS final = block converged up to it)."""
  pgj, hgj = eos_forced['jacobi_pgj', 3], eos_forced['jacobi_hgj', 3]
  np.testing.assert_array_equal(hgj.aux['iterations'], pgj.aux['iterations'])


def test_equals_greedy_trained_model(trained_run):
  run = load_run(trained_run)
  texts = ['In the beginning God created the heavens and the earth.', 'And Paul said', 'Amen.',
           'Now when they heard this, they were cut to the heart.', 'He went up.', 'Peace be with you all.']
  src = jnp.asarray(np.asarray([s + [0] * (24 - len(s)) for s in encode_sources(texts, run.tokenizer, 24)]),
                    jnp.int32)
  configs = [('jacobi_pj', {}), ('jacobi_pgj', {'block_size': 3}), ('jacobi_hgj', {'block_size': 3})]
  assert_same_as_greedy(decode_all(run.method, run.params, src, 20, configs), configs)


def test_ddgviz_grid(trained_run, tmp_path):
  run = load_run(trained_run)
  grid = ddg.trace_sentence(run, 'And Paul said', 'pgj', 3, 10)
  iters, n = grid.states.shape
  assert len(grid.pieces) == iters and all(len(row) == n for row in grid.pieces) and grid.probs.shape == (iters, n)
  assert (grid.states[-1] == 2).all() and ((grid.probs > 0) & (grid.probs <= 1)).all()
  png, page = pictures.output_paths(str(tmp_path / 'ddg'))
  ddg.write_png(grid, png, 'test')
  with open(page, 'w') as f:
    f.write(ddg.render_html(grid, 'test'))
  assert os.path.getsize(png) > 0
  text = open(page).read()
  assert text.count('<td class=') == iters * n and 'http' not in text


def test_decoders_registered_with_options():
  assert decode.parse_options('jacobi_pgj', {'block_size': '5'}) == {'block_size': 5, 'max_len': 0}
  assert decode.parse_options('jacobi_pj', {}) == {'max_len': 0}
  assert jacobi.algorithm_options('pj', 3)['block_size'] == 0
