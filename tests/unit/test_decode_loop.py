"""The shared left-to-right loop (nat_jax.decode.loop): a cache that grows in chunks and a batch that
shrinks to its live rows give every decoder the outputs of one loop over the full cache and the
whole batch, and of each sentence decoded alone."""
import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.decode import loop
from nat_jax.decode.drafted import drafted_decode
from nat_jax.decode.greedy import greedy_decode
from tests.support import MarkovScorer, run

EOS, BOS = 1, 2


@flax.struct.dataclass
class RowMarkov(MarkovScorer):
  """The Markov chain plus, per sentence (picked by its first source token), an EOS logit that
  climbs by 2 per slot after the sentence's own end slot: the rows of a batch end at different
  lengths, and rows whose end lies past the bound run to it."""
  ends: jax.Array = None  # i32[R]

  def encode(self, src):
    return {'rows': src[:, 0] % self.ends.shape[0]}

  def step_logits(self, enc, cache, tokens, start):
    logits, cache = MarkovScorer.step_logits(self, enc, cache, tokens, start)
    slots = start + jnp.arange(tokens.shape[1])  # [T]
    return logits.at[:, :, EOS].add(eos_boost(slots[None], self.ends[enc['rows']][:, None])), cache


def eos_boost(slots, end):
  return 2.0 * jnp.maximum(slots - end, 0).astype(jnp.float32)


def row_markov(seed: int, max_len: int, rows: int, vocab: int = 6) -> RowMarkov:
  rng = np.random.default_rng(seed)
  ends = rng.integers(1, 30, rows)
  ends[:3] = 10 ** 4  # three rows run to the bound: the batch shrinks to them
  table = rng.normal(size=(vocab, vocab, vocab)) * 2.0
  table[..., EOS] -= 4.0  # EOS comes from the boost, rarely before it
  return RowMarkov(jnp.asarray(table, jnp.float32), max_len, 1, jnp.asarray(ends, jnp.int32))


def row_reference(view: RowMarkov, row: int, max_len: int):
  """Plain-Python greedy of one sentence (output token t is predicted at slot t)."""
  table, end = np.asarray(view.table, np.float64), int(view.ends[row])
  older, prev, out, logp = BOS, BOS, [], 0.0
  for slot in range(max_len):
    logits = table[older, prev].copy()
    logits[EOS] += 2.0 * max(slot - end, 0)
    lp = logits - logits.max() - np.log(np.sum(np.exp(logits - logits.max())))
    token = int(np.argmax(lp))
    out.append(token)
    logp += float(lp[token])
    if token == EOS:
      break
    older, prev = prev, token
  return out, logp


def test_stage_sizes():
  assert loop.cache_sizes(256) == [32, 64, 128, 256]
  assert loop.cache_sizes(70) == [32, 64, 70]
  assert loop.cache_sizes(32) == [32] and loop.cache_sizes(5) == [5]
  assert loop.batch_sizes(64) == [64, 16, 4] and loop.batch_sizes(20) == [20, 5]
  assert loop.batch_sizes(15) == [15] and loop.batch_sizes(1) == [1]


def test_take_and_put_rows_round_trip():
  rows = 5
  tree = {'a': jnp.arange(10).reshape(5, 2), 'beam': jnp.arange(30).reshape(15, 2), 'step': jnp.int32(7)}
  index = jnp.array([3, 1])
  part = loop.take_rows(tree, index, rows)
  np.testing.assert_array_equal(part['a'], [[6, 7], [2, 3]])
  np.testing.assert_array_equal(part['beam'], np.arange(30).reshape(5, 3, 2)[[3, 1]].reshape(6, 2))
  changed = jax.tree_util.tree_map(lambda x: x + 100, part)
  back = loop.put_rows(tree, index, changed, rows)
  want_a = np.arange(10).reshape(5, 2)
  want_a[[3, 1]] += 100
  np.testing.assert_array_equal(back['a'], want_a)
  assert int(back['step']) == 107
  with pytest.raises(ValueError, match='no batch axis'):
    loop.take_rows({'x': jnp.zeros((7, 2))}, index, rows)


ROWS, MAX_LEN = 20, 70  # stages of 20 and 5 rows; caches of 32, 64 and 70 slots


def test_greedy_rows_equal_plain_python_per_sentence():
  """The growing cache (3 loops) and the shrinking batch against an independent reference."""
  view = row_markov(0, MAX_LEN, ROWS)
  out = run(view, 'greedy', jnp.arange(ROWS, dtype=jnp.int32)[:, None] * jnp.ones((1, 3), jnp.int32))
  lengths = []
  for row in range(ROWS):
    want, logp = row_reference(view, row, MAX_LEN)
    got = np.asarray(out.tokens[row]).tolist()
    assert got[:len(want)] == want and not any(got[len(want):]), (row, got, want)
    np.testing.assert_allclose(float(out.scores[row]), logp, rtol=1e-4, atol=1e-4)
    lengths.append(len(want))
  # The batch must really shrink and the cache grow: short rows beside a few that reach the bound.
  assert min(lengths) < 16 and max(lengths) == MAX_LEN and sum(n > 32 for n in lengths) <= ROWS // 4


DECODERS = [('greedy', {}), ('beam', {}),
            pytest.param('beam', {'beam_size': 2, 'alpha': 0.0}, marks=pytest.mark.slow),  # slow: CI time
            ('multiword_beam', {}),
            pytest.param('jacobi_pgj', {'block_size': 3}, marks=pytest.mark.slow),  # slow: CI time; the three
            pytest.param('jacobi_hgj', {'block_size': 5}, marks=pytest.mark.slow),  # Jacobi variants share the
            ('jacobi_pj', {})]                                                       # loop's iteration stage


@pytest.mark.parametrize('name,options', DECODERS)
def test_each_decoder_in_the_shared_loop_equals_the_plain_loop(name, options, monkeypatch):
  """Batched with a growing cache and shrinking batch == one loop over the full cache and batch
  (the loop before nat_jax.decode.loop) == every sentence alone."""
  view = row_markov(1, MAX_LEN, ROWS)
  src = jnp.arange(ROWS, dtype=jnp.int32)[:, None] * jnp.ones((1, 3), jnp.int32)
  got = run(view, name, src, **options)
  alone = [run(view, name, src[r:r + 1], **options) for r in range(ROWS)]
  monkeypatch.setattr(loop, 'FIRST_SLOTS', 10 ** 6)
  monkeypatch.setattr(loop, 'MIN_ROWS', 10 ** 6)
  plain = run(view, name, src, **options)
  np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(plain.tokens))
  np.testing.assert_allclose(np.asarray(got.scores), np.asarray(plain.scores), rtol=1e-5, atol=1e-5)
  for key in got.aux:
    if key != 'loop_steps':  # the batch's steps; per sentence below
      np.testing.assert_array_equal(np.asarray(got.aux[key]), np.asarray(plain.aux[key]), err_msg=key)
  for r in range(ROWS):
    np.testing.assert_array_equal(np.asarray(got.tokens[r]), np.asarray(alone[r].tokens[0]))


@pytest.mark.parametrize('block', [1, 4])
def test_drafted_in_the_shared_loop_is_exact(block):
  """Drafted decoding's rows advance by their own windows: batched == greedy, row by row."""
  view = row_markov(2, MAX_LEN, ROWS)
  src = jnp.arange(ROWS, dtype=jnp.int32)[:, None] * jnp.ones((1, 3), jnp.int32)
  want = jax.jit(functools.partial(greedy_decode, view))(src)
  # A draft that is right for a while, then wrong: the greedy output with every 7th token changed.
  draft = np.asarray(want.tokens).copy()
  draft[:, 6::7] = 3
  got = jax.jit(lambda s, d: drafted_decode(view, s, d, block=block))(src, jnp.asarray(draft))
  np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))
  assert (np.asarray(got.aux['iterations']) <= np.asarray(want.aux['steps'])).all()
