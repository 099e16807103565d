"""Each row bounded by its own source width: a sentence decoded in a batch of wider sentences gets the
output it gets alone (decoders registered with row_bounds), so batches may mix widths.

Independent truths: the bound formula min(max_decode_len, 1.5 x the row's width rounded up to 8 + 10)
written out per row, and each sentence decoded alone in a batch of its own width.
"""
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.core.tokens import WIDTH_STEP, decode_length_bound, row_length_bounds
from nat_jax.data.batching import pad_rows
from tests.support import random_model


def test_row_bounds_follow_the_formula_row_by_row():
  rng = np.random.default_rng(0)
  for width in (8, 16, 40, 48):
    lengths = rng.integers(0, width + 1, 20)
    src = pad_rows([np.full(n, 7) for n in lengths], width)
    got = np.asarray(row_length_bounds(lambda s: decode_length_bound(60, s), src))
    own = [min(max(-(-int(n) // WIDTH_STEP), 1) * WIDTH_STEP, width) for n in lengths]
    assert list(got) == [min(60, int(1.5 * w) + 10) for w in own], (width, lengths)


SOURCES = [[9, 12, 1], [14] * 6 + [1], [20, 21, 22, 23] * 5 + [1], [30, 31] * 19 + [1]]  # widths 8, 8, 24, 40


def decode_alone_and_mixed(method, params, name):
  fn, options = decode.build_decoder(method, name, {})
  assert decode.cuts_rows(method, name, options)
  mixed = fn(params, pad_rows([np.asarray(s) for s in SOURCES], 40))
  alone = [fn(params, pad_rows([np.asarray(s)], -(-len(s) // WIDTH_STEP) * WIDTH_STEP)) for s in SOURCES]
  return mixed, alone


@pytest.mark.parametrize('method_name,decoders', [
    ('at', ['greedy', 'jacobi_pgj']),
    ('dat', ['dag_lookahead', 'dag_greedy', 'dag_beam']),
])
def test_a_row_in_a_wider_batch_decodes_as_alone(corpus, method_name, decoders):
  """A random model runs to its bound, so the static bound of the batch (1.5 x 40 + 10) would lengthen the
  short rows; cut at their own bound, every row equals its decode alone, bit for bit."""
  method, params = random_model(corpus, 60, **{'model.method': method_name})
  for name in decoders:
    mixed, alone = decode_alone_and_mixed(method, params, name)
    tokens = np.asarray(mixed.tokens)
    for r, out in enumerate(alone):
      row = np.asarray(out.tokens)[0]
      n = max(len(row), tokens.shape[1])
      np.testing.assert_array_equal(np.pad(tokens[r], (0, n - tokens.shape[1])), np.pad(row, (0, n - len(row))),
                                    err_msg=f'{name} row {r}')
      if 'steps' in mixed.aux:
        assert int(mixed.aux['steps'][r]) == int(out.aux['steps'][0]), (name, r)


def test_the_cut_is_what_makes_them_equal(corpus):
  """Without the per-row cut, the short rows of the mixed batch run past their own bound."""
  method, params = random_model(corpus, 60)
  raw = decode.DECODERS['greedy'].fn(method.views()[decode.LeftToRightScorer](params),
                                     pad_rows([np.asarray(s) for s in SOURCES], 40))
  lengths = np.count_nonzero(np.asarray(raw.tokens), axis=1)
  assert lengths[0] > decode_length_bound(method.max_target_len, 8)


def test_decoders_that_are_not_cut_keep_batches_of_one_width(corpus):
  method, _ = random_model(corpus, 60)
  for name, overrides in (('beam', {}), ('greedy', {'max_len': '12'})):
    assert not decode.cuts_rows(method, name, decode.parse_options(name, overrides))
  ib, _ = random_model(corpus, 60, **{'model.method': 'ibdecoder'})
  assert not decode.cuts_rows(ib, 'greedy', decode.parse_options('greedy', {}))


def test_mixed_batches_compile_fewer_widths():
  """Batches of mixed widths pad to geometric widths (from 16 on each at most 1.5x the one before):
  half the shapes of the multiples of 8 up to 128."""
  from nat_jax.run.translation import source_lengths
  assert source_lengths(128, geometric=True) == [8, 16, 24, 32, 48, 64, 96, 128]
  for max_len in (8, 40, 100, 256):
    widths = source_lengths(max_len, geometric=True)
    assert widths[-1] == max_len and set(widths) <= set(source_lengths(max_len))
    assert all(b <= 1.5 * a for a, b in zip(widths[1:], widths[2:])), widths  # from 16 on
