"""CMLM and Mask-Predict: masking, the re-masking schedule, length candidates, the decoder against a
plain-numpy second implementation, the loss, and overfitting to exact reproduction."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from nat_jax.data.tokenizer import Tokenizer
from nat_jax.decode import build_decoder
from nat_jax.decode.mask_predict import NEVER_FILLED, length_candidates, mask_predict_decode, remask_counts
from nat_jax.methods import get_method
from nat_jax.methods.cmlm import random_mask, text_slots
from tests.support import tiny_config, tiny_pairs

EOS, MASK = Tokenizer.eos_id, Tokenizer.mask_id


def test_random_mask_counts_and_positions():
  rows, width = 4000, 7
  available = np.array([0, 1, 3, 6])
  maskable = jnp.asarray(np.arange(width)[None, :] < np.repeat(available, rows // 4)[:, None])
  masked = np.asarray(random_mask(jax.random.PRNGKey(0), maskable))
  assert not (masked & ~np.asarray(maskable)).any()
  counts = masked.sum(1).reshape(4, -1)
  assert (counts[0] == 0).all() and (counts[1] == 1).all()
  for i, n in ((2, 3), (3, 6)):  # m uniform in 1..n, every position equally likely
    hist = np.bincount(counts[i], minlength=n + 1)[1:] / counts.shape[1]
    assert hist.min() > 0.6 / n and hist.max() < 1.4 / n, hist
    per_position = masked.reshape(4, -1, width)[i].mean(0)[:n]
    assert np.ptp(per_position) < 0.1, per_position


def test_text_slots_exclude_eos_and_padding():
  target = jnp.array([[7, 8, EOS, 0], [EOS, 0, 0, 0]])
  np.testing.assert_array_equal(text_slots(target), [[1, 1, 0, 0], [0, 0, 0, 0]])


def test_remask_schedule():
  # docs/methods/cmlm.md's schedule
  assert [int(remask_counts(jnp.int32(10), t, 10)) for t in range(1, 10)] == list(range(9, 0, -1))
  for n in range(0, 30):
    for iterations in (2, 4, 10):
      for t in range(1, iterations):
        assert int(remask_counts(jnp.int32(n), t, iterations)) == max(1, n * (iterations - t) // iterations)


def test_length_candidates_ban_short_lengths_and_clamp():
  logp = jnp.log(jnp.array([[0.3, 0.3, 0.05, 0.1, 0.25], [0.01, 0.01, 0.01, 0.07, 0.9]]))
  lengths, clamped = length_candidates(logp, 2, 3)
  np.testing.assert_array_equal(lengths, [[3, 3], [3, 3]])  # 4 (best of row 0) clamped to 3; 0, 1 banned
  np.testing.assert_array_equal(clamped, [[True, False], [True, False]])


@dataclasses.dataclass(frozen=True)
class TableView:
  """A MaskPredictor whose logits depend on the slot, the source row and the input tokens, so re-predictions
  change with the context (like a real CMLM) but are computable by hand."""
  slot_logits: jax.Array   # f32[B, W, V]
  context: jax.Array       # f32[V, V]: the input token at the previous slot shifts the logits
  length_logp: jax.Array   # f32[B, C]
  bound: int

  def encode(self, src):
    return {'slot_logits': self.slot_logits, 'length_logp': self.length_logp}

  def length_log_probs(self, enc):
    return enc['length_logp']

  def fill_logits(self, enc, tokens):
    prev = jnp.pad(tokens, ((0, 0), (1, 0)))[:, :-1]  # [B, W]
    return enc['slot_logits'][:, :tokens.shape[1]] + self.context[prev]

  def max_decode_len(self, src_len):
    return self.bound


def numpy_mask_predict(slot_logits, context, length_logp, iterations, beam, bound):
  """Mask-Predict as docs/methods/cmlm.md states it, one sentence and one candidate at a time."""
  def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))

  def predict(tokens):
    prev = np.concatenate([[0], tokens[:-1]])
    logp = log_softmax(slot_logits[:len(tokens)] + context[prev])
    logp_allowed = logp.copy()
    logp_allowed[:, list(NEVER_FILLED) + [EOS]] = -np.inf  # a text slot never holds EOS (the length is given)
    tok = logp_allowed.argmax(-1)
    return tok, logp[np.arange(len(tokens)), tok]

  scores = length_logp.copy()
  scores[:2] = -np.inf
  best = None
  for length in [c for c in np.argsort(-scores, kind='stable') if c >= 2][:beam]:  # at most the lengths >= 2
    length = min(int(length), bound)
    n = length - 1
    tokens = np.zeros(bound, np.int64)
    tokens[:n], tokens[n] = MASK, EOS
    tok, lp = predict(tokens)
    tokens[:n], probs = tok[:n], lp[:n].copy()
    for t in range(1, iterations):
      k = max(1, n * (iterations - t) // iterations)
      remask = np.argsort(probs, kind='stable')[:k]
      inputs = tokens.copy()
      inputs[remask] = MASK
      tok, lp = predict(inputs)
      tokens[remask], probs[remask] = tok[remask], lp[remask]
    mean = probs.sum() / max(n, 1)
    if best is None or mean > best[1]:
      best = (tokens.copy(), mean, length)
  return best


@pytest.mark.parametrize('iterations,beam,classes', [(1, 1, 12), (1, 3, 12), (4, 3, 12), (10, 2, 12), (4, 5, 5)])
def test_mask_predict_equals_numpy_reference(iterations, beam, classes):
  """Also with EOS the likeliest token of some text slots (vocabulary 11, random logits) and with more
  length candidates asked for (5) than the length head has lengths >= 2 (3)."""
  b, width, vocab = 5, 9, 11
  keys = jax.random.split(jax.random.PRNGKey(iterations * 10 + beam), 3)
  view = TableView(3 * jax.random.normal(keys[0], (b, width, vocab)), 2 * jax.random.normal(keys[1], (vocab, vocab)),
                   jax.nn.log_softmax(2 * jax.random.normal(keys[2], (b, classes))), bound=width)
  out = mask_predict_decode(view, jnp.ones((b, 4), jnp.int32), iterations=iterations, length_beam=beam)
  for row in range(b):
    tokens, mean, length = numpy_mask_predict(*(np.asarray(x[row]) for x in (view.slot_logits,)),
                                              np.asarray(view.context), np.asarray(view.length_logp[row]),
                                              iterations, beam, width)
    np.testing.assert_array_equal(out.tokens[row], tokens)
    np.testing.assert_allclose(out.scores[row], mean, rtol=1e-5, atol=1e-5)
    assert int(out.aux['length'][row]) == length


def test_mask_predict_one_iteration_is_per_position_argmax():
  b, width, vocab = 3, 6, 9
  slot_logits = 3 * jax.random.normal(jax.random.PRNGKey(1), (b, width, vocab))
  length_logp = jnp.log(jax.nn.one_hot(jnp.array([6, 4, 2]), 8) + 1e-6)
  view = TableView(slot_logits, jnp.zeros((vocab, vocab)), length_logp, bound=width)
  out = mask_predict_decode(view, jnp.ones((b, 3), jnp.int32), iterations=1, length_beam=1)
  allowed = np.asarray(slot_logits).copy()
  allowed[..., list(NEVER_FILLED) + [EOS]] = -np.inf
  argmax = allowed.argmax(-1)
  for row, n in enumerate([5, 3, 1]):
    np.testing.assert_array_equal(out.tokens[row, :n], argmax[row, :n])
    assert out.tokens[row, n] == EOS and not out.tokens[row, n + 1:].any()


def test_cmlm_loss_counts_masked_tokens_and_weights_the_length_term(corpus):
  config = tiny_config(corpus, **{'model.method': 'cmlm', 'model.dropout': 0.0})
  method = get_method(config, 40)
  src = jnp.array([[5, 6, 7, EOS], [8, 9, EOS, 0]])
  tgt = jnp.array([[10, 11, 12, 13, EOS], [14, EOS, 0, 0, 0]])
  params = nn.meta.unbox(method.init_params(jax.random.PRNGKey(0), {'source': src, 'target': tgt}))
  sums = method.loss(params, {'source': src, 'target': tgt}, jax.random.PRNGKey(3))
  assert 2 <= float(sums['tokens']) <= 5 and float(sums['sentences']) == 2
  config.cmlm.length_loss_weight = 0.0
  plain = get_method(config, 40).loss(params, {'source': src, 'target': tgt}, jax.random.PRNGKey(3))
  np.testing.assert_allclose(sums['loss'] - plain['loss'],
                             0.1 * sums['tokens'] / 2 * sums['length_nll'], rtol=1e-5)


def test_tiny_cmlm_overfits_to_exact_reproduction(corpus):
  config = tiny_config(corpus, **{'model.method': 'cmlm', 'model.dropout': 0.0, 'label_smoothing': 0.0,
                                  'cmlm.length_loss_weight': 1.0})
  method = get_method(config, 24)
  batch = tiny_pairs([(3, 4), (5, 3), (4, 6), (6, 5)], 24, 7)
  params = nn.meta.unbox(method.init_params(jax.random.PRNGKey(0), batch))
  tx = optax.adam(3e-3)

  @jax.jit
  def step(params, opt, rng):
    grads = jax.grad(lambda p: method.loss(p, batch, rng)['loss'] / 10)(params)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt

  opt = tx.init(params)
  for i in range(600):
    params, opt = step(params, opt, jax.random.PRNGKey(i))
  decode_fn, _ = build_decoder(method, 'mask_predict', {'iterations': '4', 'length_beam': '3'})
  out = decode_fn(params, batch['source'])
  np.testing.assert_array_equal(np.asarray(out.tokens)[:, :7], batch['target'])
