"""Decoders against independent truths: naive full-recomputation greedy, brute-force enumeration."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.core.masks import attention_mask
from nat_jax.decode.beam import length_penalty
from nat_jax.methods.autoregressive import shift_right
from tests.support import random_tiny_model, run_decoder

EOS = 1


@pytest.fixture(scope='module')
def model(corpus):
  method, params = random_tiny_model(corpus, vocab_size=6)
  src = jnp.asarray(np.random.default_rng(0).integers(3, 6, (6, 5)), jnp.int32).at[2, 3:].set(0)
  return method, params, src


def sequence_logp(method, params, src_row, seq):
  """log P(seq | src) by teacher forcing through the full (uncached) model."""
  tgt = jnp.asarray([seq], jnp.int32)
  pos = jnp.arange(len(seq))[None]
  logits = method.model.apply({'params': params}, src_row[None], shift_right(tgt, 2), pos, attention_mask(pos))
  logp = jax.nn.log_softmax(logits[0])
  return float(sum(logp[i, t] for i, t in enumerate(seq)))


def naive_greedy(method, params, src_row, max_len):
  seq = []
  for _ in range(max_len):
    inputs = jnp.asarray([[2] + seq], jnp.int32)  # BOS + prefix, recomputed from scratch every step
    pos = jnp.arange(len(seq) + 1)[None]
    logits = method.model.apply({'params': params}, src_row[None], inputs, pos, attention_mask(pos))
    seq.append(int(jnp.argmax(logits[0, -1])))
    if seq[-1] == EOS:
      break
  return seq


def strip(row):
  """Tokens up to and including the first EOS."""
  row = list(np.asarray(row))
  return row[:row.index(EOS) + 1] if EOS in row else row




def test_greedy_equals_naive_recomputation(model):
  method, params, src = model
  out = run_decoder(method, params, src, 'greedy', max_len=8)
  for b in range(src.shape[0]):
    expected = naive_greedy(method, params, src[b], 8)
    assert list(np.asarray(out.tokens[b, :len(expected)])) == expected
    assert not np.asarray(out.tokens[b, len(expected):]).any()
    assert int(out.aux['steps'][b]) == len(expected)


def test_beam_size_one_equals_greedy(model):
  method, params, src = model
  greedy = run_decoder(method, params, src, 'greedy', max_len=8)
  for alpha in (0.0, 0.6):
    beam = run_decoder(method, params, src, 'beam', beam_size=1, alpha=alpha, max_len=8)
    np.testing.assert_array_equal(beam.tokens, greedy.tokens)


@pytest.mark.parametrize('alpha', [pytest.param(0.0, marks=pytest.mark.slow), pytest.param(0.6, marks=pytest.mark.slow),
                                   1.5])  # slow: CI time
def test_exhaustive_beam_finds_brute_force_best(model, alpha):
  """With a beam wide enough to hold every prefix, beam search = argmax over all finished sequences."""
  method, params, src = model
  t_max, vocab = 3, 6
  beam = run_decoder(method, params, src, 'beam', beam_size=vocab ** t_max, alpha=alpha, max_len=t_max)
  non_eos = [t for t in range(vocab) if t != EOS]
  candidates = [list(p) + [EOS] for n in range(t_max) for p in itertools.product(non_eos, repeat=n)]
  for b in range(src.shape[0]):
    scores = [sequence_logp(method, params, src[b], c) / length_penalty(len(c), alpha) for c in candidates]
    best = candidates[int(np.argmax(scores))]
    assert strip(beam.tokens[b]) == best, (b, strip(beam.tokens[b]), best)
    np.testing.assert_allclose(float(beam.scores[b]), max(scores), rtol=1e-4, atol=1e-4)


def test_decoder_options_are_validated():
  with pytest.raises(ValueError, match='no option'):
    decode.parse_options('beam', {'beam_width': '4'})
  with pytest.raises(ValueError, match='expected int'):
    decode.parse_options('beam', {'beam_size': 'four'})
  with pytest.raises(ValueError, match='Unknown decoder'):
    decode.parse_options('sampling', {})


def test_inference_pads_sources_at_most_7_tokens_past_the_longest():
  """translate_texts pads each batch to the next multiple of 8 (or max_len): a 30-token source gets
  width 32, so a DA-Transformer graph (lambda x width) is within 7 x lambda of lambda x the real length."""
  from types import SimpleNamespace

  from nat_jax.run.translation import source_lengths, translate_texts
  from nat_jax.views import DecodeOutput

  class WordTokenizer:
    eos_id = 1

    def encode(self, text):
      return [5] * len(text.split())

    def decode(self, ids):
      return str(int(np.sum(np.asarray(ids) > 0)))

  widths = []

  def decode_fn(params, src):
    widths.append((src.shape[1], int(np.max(np.sum(src > 0, axis=1)))))
    return DecodeOutput(jnp.asarray(src), jnp.zeros(src.shape[0]), {})

  run = SimpleNamespace(config=SimpleNamespace(max_len=60), tokenizer=WordTokenizer(), params=None, mesh=None)
  texts = [' '.join(['w'] * n) for n in (29, 3, 7, 8, 15, 16, 40, 59, 80)]
  out, _ = translate_texts(run, texts, decode_fn, rows=1)
  assert out == ['30', '4', '8', '9', '16', '17', '41', '60', '60']  # + EOS; 80 words truncated to max_len
  assert source_lengths(60) == [8, 16, 24, 32, 40, 48, 56, 60]
  assert all(0 <= width - longest < 8 for width, longest in widths) and (32, 30) in widths
