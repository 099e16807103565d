"""IBDecoder / SA / IMDecoder: the contract functions against brute-force definitions, the
worked examples of docs/methods/ibdecoder.md, (1, 1) = AT, cached decoding = teacher forcing, multiword beam search
against brute force, and Jacobi decoding = greedy on the IBDecoder family and on HRT's Skip-AT view."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from nat_jax.decode import build_decoder
from nat_jax.decode.beam import BeamState
from nat_jax.decode.multiword_beam import multiword_search
from nat_jax.methods import get_method
from nat_jax.methods.autoregressive import autoregressive_inputs
from nat_jax.methods.ibdecoder import (
  block_causal_mask,
  deinterleave,
  ib_positions,
  ibdecoder_inputs,
  interleave,
  reading_order,
  reorder,
  restore,
)
from tests.support import hrt_setup, random_tiny_model, tiny_config, tiny_pairs

EOS = 1
LAYOUTS = [(2, 1), (1, 2), (2, 2), (4, 1)]


def rows_of(lengths, width):
  """i32[B, width]: row b = 10, 11, ..., EOS, 0... with lengths[b] text tokens."""
  out = np.zeros((len(lengths), width), np.int32)
  for b, n in enumerate(lengths):
    out[b, :n], out[b, n] = np.arange(10, 10 + n), EOS
  return out


def brute_interleave(y):
  out, i, j = [], 0, len(y) - 1
  while i <= j:
    out.append(y[i])
    i += 1
    if i <= j:
      out.append(y[j])
      j -= 1
  return out


def test_interleave_and_deinterleave_against_their_definitions():
  lengths = list(range(51))
  rows = rows_of(lengths, 52)
  inter = np.asarray(interleave(jnp.asarray(rows)))
  back = np.asarray(deinterleave(jnp.asarray(inter)))
  np.testing.assert_array_equal(back, rows)  # round trip, lengths 0..50 in one padded batch
  for b, n in enumerate(lengths):
    y = rows[b, :n].tolist()
    assert inter[b, :n].tolist() == brute_interleave(y)
    assert inter[b, n] == EOS and not inter[b, n + 1:].any()  # EOS and padding in place
    out = inter[b, :n].tolist()
    assert out[0::2] + out[1::2][::-1] == y  # the contract's deinterleave formula
  # docs/methods/ibdecoder.md: A B C D E -> A E B D C, EOS
  assert np.asarray(interleave(jnp.array([[3, 4, 5, 6, 7, EOS, 0]]))).tolist() == [[3, 7, 4, 6, 5, EOS, 0]]


def test_positions_and_block_causal_mask_against_their_definitions():
  for length in (1, 2, 7, 12):
    want = [(-1) ** (t - 1) * math.ceil(t / 2) for t in range(1, length + 1)]
    assert np.asarray(ib_positions(length)).tolist() == want
  for z in (1, 2, 3, 4):
    for length in (1, 5, 9):
      want = [[math.ceil(i / z) >= math.ceil(j / z) for j in range(1, length + 1)] for i in range(1, length + 1)]
      np.testing.assert_array_equal(np.asarray(block_causal_mask(length, z)), np.array(want))
  np.testing.assert_array_equal(np.asarray(block_causal_mask(6, 1)), np.tril(np.ones((6, 6), bool)))


@pytest.mark.parametrize('h', [1, 2, 4, 6])
def test_reorder_is_a_permutation_restored_by_restore(h):
  for n in range(31):
    order = reading_order(n, h)
    assert sorted(order) == list(range(n))
  rows = rows_of(range(31), 33)
  np.testing.assert_array_equal(np.asarray(restore(reorder(jnp.asarray(rows), h), h)), rows)
  if h == 2:
    np.testing.assert_array_equal(np.asarray(reorder(jnp.asarray(rows), 2)), np.asarray(interleave(jnp.asarray(rows))))


def test_imdecoder_order_follows_the_documented_segment_rule():
  # n = 5: segments y1 y2 y3 | y4 y5, each from both ends; the streams take turns.
  assert reading_order(5, 4) == [0, 2, 3, 4, 1]
  # n = 8: segments y1..y4 | y5..y8: (y1, y4, y5, y8) (y2, y3, y6, y7)
  assert reading_order(8, 4) == [0, 3, 4, 7, 1, 2, 5, 6]
  assert reading_order(7, 1) == list(range(7))


@pytest.mark.parametrize('h,c,steps', [
    (2, 1, [('y1', 'y5'), ('y2', 'y4'), ('y3', 'EOS')]),
    (2, 2, [('y1', 'y5', 'y2', 'y4'), ('y3', 'EOS', '-', '-')]),
    (1, 2, [('y1', 'y2'), ('y3', 'y4'), ('y5', 'EOS')]),
    (4, 1, [('y1', 'y3', 'y4', 'y5'), ('y2', 'EOS', '-', '-')])])
def test_worked_examples_of_design(h, c, steps):
  """docs/methods/ibdecoder.md's y1..y5 decoded in steps of z = h * c; inputs shifted by z start slots."""
  z = h * c
  names = {10 + i: f'y{i + 1}' for i in range(5)} | {EOS: 'EOS', 0: '-', 2: 'BOS'}
  view = ibdecoder_inputs(jnp.asarray(rows_of([5], 8)), h, c)
  targets = [names[int(t)] for t in np.asarray(view.targets[0])]
  got = [tuple(targets[i:i + z]) for i in range(0, z * len(steps), z)]
  assert got == steps
  inputs = [names[int(t)] for t in np.asarray(view.tokens[0])]
  assert inputs[:z] == ['BOS'] * z and inputs[z:] == targets[:8 - z]
  assert np.asarray(view.groups[0]).tolist() == [i // z for i in range(8)]


def ib_model(corpus, h, c, vocab=12, seed=3, scale=4.0):
  config = tiny_config(corpus, **{'model.method': 'ibdecoder', 'model.dropout': 0.0, 'ibdecoder.h': h,
                                  'ibdecoder.c': c})
  method = get_method(config, vocab)
  dummy = {'source': jnp.ones((1, 5), jnp.int32), 'target': jnp.ones((1, 5), jnp.int32)}
  params = nn.meta.unbox(method.init_params(jax.random.PRNGKey(seed), dummy))
  params['embed']['embedding'] = params['embed']['embedding'] * scale  # peaked, varied distributions
  return method, params


def test_h1_c1_is_the_autoregressive_method(corpus):
  at, params = random_tiny_model(corpus, vocab_size=30)
  ib = get_method(tiny_config(corpus, **{'model.method': 'ibdecoder', 'model.dropout': 0.0, 'ibdecoder.h': 1,
                                         'ibdecoder.c': 1}), 30)
  batch = tiny_pairs([(4, 6), (7, 3), (2, 8)], 30, 10)
  rng = jax.random.PRNGKey(0)
  want, got = at.loss(params, batch, rng, deterministic=True), ib.loss(params, batch, rng, deterministic=True)
  for key in ('loss', 'nll', 'correct', 'tokens'):
    np.testing.assert_allclose(float(got[key]), float(want[key]), rtol=1e-6, err_msg=key)
  src = batch['source']
  logits = [m.model.apply({'params': params}, src, v.tokens, v.positions, v.self_mask(), directions=v.directions)
            for m, v in ((at, autoregressive_inputs(batch['target'])), (ib, ib.inputs(batch['target'])))]
  np.testing.assert_array_equal(np.asarray(logits[1]), np.asarray(logits[0]))  # teacher-forced logits
  for name in ('greedy', 'jacobi_hgj'):
    a = build_decoder(at, name, {})[0](params, src)
    b = build_decoder(ib, name, {})[0](params, src)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_allclose(np.asarray(a.scores), np.asarray(b.scores), rtol=1e-5)


@pytest.mark.parametrize('h,c', LAYOUTS)
def test_cached_step_decoding_equals_teacher_forcing(corpus, h, c):
  method, params = ib_model(corpus, h, c, vocab=30)
  batch = tiny_pairs([(4, 6), (7, 3), (2, 7)], 30, 8)
  view = method.inputs(batch['target'])
  want = method.model.apply({'params': params}, batch['source'], view.tokens, view.positions, view.self_mask(),
                            directions=view.directions)  # [B, T, V]
  scorer = method.scorer(params)
  enc = scorer.encode(batch['source'])
  cache, z, got = scorer.init_cache(enc, 8), h * c, []
  for start in range(0, 8, z):
    logits, cache = scorer.step_logits(enc, cache, view.tokens[:, start:start + z], start)
    got.append(logits)
  np.testing.assert_allclose(np.asarray(jnp.concatenate(got, axis=1)), np.asarray(want), atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize('h,c', LAYOUTS)
def test_jacobi_equals_greedy_on_the_ibdecoder_family(corpus, h, c):
  method, params = ib_model(corpus, h, c)
  src = tiny_pairs([(3, 1), (6, 1), (1, 1), (8, 1)], 12, 10)['source']
  greedy = build_decoder(method, 'greedy', {'max_len': '16'})[0](params, src)
  for name, options in (('jacobi_pj', {}), ('jacobi_pgj', {'block_size': '2'}), ('jacobi_hgj', {'block_size': '3'})):
    out = build_decoder(method, name, {**options, 'max_len': '16'})[0](params, src)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(greedy.tokens), err_msg=name)
    np.testing.assert_allclose(np.asarray(out.scores), np.asarray(greedy.scores), rtol=1e-5, atol=1e-5)
    assert (np.asarray(out.aux['iterations']) <= -(-np.asarray(greedy.aux['steps']) // (h * c))).all()


def test_jacobi_equals_greedy_on_hrt_skip_at(corpus):
  _, method, params = hrt_setup(corpus, k=2, vocab=12)
  src = tiny_pairs([(3, 1), (6, 1), (1, 1), (8, 1)], 12, 10)['source']
  greedy = build_decoder(method, 'greedy', {})[0](params, src)
  for name in ('jacobi_pj', 'jacobi_pgj', 'jacobi_hgj'):
    out = build_decoder(method, name, {})[0](params, src)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(greedy.tokens), err_msg=name)
    assert (np.asarray(out.aux['iterations']) <= np.asarray(greedy.aux['steps'])).all()


@pytest.mark.parametrize('h,c', [(2, 1), (2, 2)])
def test_multiword_beam_of_one_is_greedy_on_a_model(corpus, h, c):
  method, params = ib_model(corpus, h, c)
  src = tiny_pairs([(3, 1), (6, 1), (1, 1), (8, 1)], 12, 10)['source']
  greedy = build_decoder(method, 'greedy', {})[0](params, src)
  beam = build_decoder(method, 'multiword_beam', {'beam_size': '1', 'ban_first_eos': 'false'})[0](params, src)
  np.testing.assert_array_equal(np.asarray(beam.tokens), np.asarray(greedy.tokens))


def test_first_step_top_b_equals_enumeration_of_slot_pairs(corpus):
  """z = 2, vocabulary 8: after one step the B alive hypotheses are the B best of all 8 x 8 slot
  pairs (EOS banned), with their summed log-probabilities."""
  method, params = ib_model(corpus, 2, 1, vocab=8, scale=2.0)
  src = tiny_pairs([(3, 1), (5, 1)], 8, 6)['source']
  scorer = method.scorer(params)
  enc = scorer.encode(src)
  logits, _ = scorer.step_logits(enc, scorer.init_cache(enc, 2), jnp.full((2, 2), 2, jnp.int32), 0)
  logp = np.asarray(jax.nn.log_softmax(logits), np.float64)  # [B, 2, V]
  beam_size = 5
  state = jax.jit(lambda p, x: multiword_search(method.scorer(p), method.scorer(p).encode(x), 2, beam_size, 0.6, 1))(
      params, src)
  assert isinstance(state, BeamState)
  for row in range(2):
    pairs = sorted(((logp[row, 0, a] + logp[row, 1, b], (a, b)) for a in range(8) for b in range(8)
                    if EOS not in (a, b)), reverse=True)[:beam_size]
    got = [tuple(np.asarray(state.seqs[row, i, 2:4]).tolist()) for i in range(beam_size)]
    assert got == [p for _, p in pairs]
    np.testing.assert_allclose(np.asarray(state.alive_logp[row]), [s for s, _ in pairs], rtol=1e-5, atol=1e-5)


def test_bad_layouts_are_configuration_errors(corpus):
  for h, c, message in ((3, 1, 'h must be 1 or even'), (2, 0, r'ibdecoder.c=0: must be an integer >= 1'),
                        (0, 1, r'ibdecoder.h=0: must be an integer >= 1')):
    with pytest.raises(ValueError, match=message):
      get_method(tiny_config(corpus, **{'model.method': 'ibdecoder', 'ibdecoder.h': h, 'ibdecoder.c': c}), 30)
