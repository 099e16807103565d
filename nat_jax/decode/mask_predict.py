"""Mask-Predict (Ghazvininejad et al. 2019): iterative parallel refinement over [MASK] inputs.

For each sentence the `length_beam` (l) most probable lengths N (incl. EOS, each >= 2; l is capped at
the number of such lengths the length head has) are decoded side by side, folded into the batch
([B, l] -> [B*l]). A candidate's N - 1 text slots start as [MASK] and slot N - 1 holds EOS; a text
slot is never filled with EOS (the length is given), so the output is text, EOS, then 0.
Iteration 0 predicts every text slot (argmax); iteration t = 1 .. I-1 re-masks the
n = max(1, floor((N - 1)(I - t) / I)) text tokens of lowest probability and re-predicts only those
(the other tokens keep their tokens and probabilities). The sentence's output is the candidate with
the best mean log-probability of its text tokens. One jitted call per batch: a lax.fori_loop over
iterations.

A predicted length above the decode bound is clamped to it (aux 'length_clamped' = 1 for a
sentence whose chosen candidate was).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from nat_jax.core.reduce import argmax
from nat_jax.core.tokens import BOS_ID, EOS_ID, MASK_ID, PAD_ID
from nat_jax.decode.beam import add_beam_dim
from nat_jax.decode.lengths import resolve_max_len
from nat_jax.decode.options import Bounded, Rule, hypotheses, option
from nat_jax.decode.registry import register_decoder
from nat_jax.errors import ConfigError
from nat_jax.views import DecodeOutput, MaskPredictor

MIN_LENGTH = 2  # a candidate has at least one text token before its EOS


def remask_counts(text_lengths: jax.Array, t, iterations: int) -> jax.Array:
  """i32[...]: tokens re-masked at iteration t (1 .. I-1): max(1, floor(n (I - t) / I)) for n text tokens."""
  return jnp.maximum(1, (text_lengths * (iterations - t)) // iterations).astype(jnp.int32)


def length_candidates(length_logp: jax.Array, beam: int, bound: int) -> tuple[jax.Array, jax.Array]:
  """The `beam` most probable lengths >= 2 (length_logp f32[B, C]) -> (lengths i32[B, l] clamped to
  `bound`, clamped bool[B, l])."""
  classes = jnp.arange(length_logp.shape[1])
  _, lengths = jax.lax.top_k(jnp.where(classes >= MIN_LENGTH, length_logp, -jnp.inf), beam)  # [B, l]
  return jnp.minimum(lengths, bound).astype(jnp.int32), lengths > bound


NEVER_FILLED = (PAD_ID, BOS_ID, MASK_ID)  # no target is ever one of these
NOT_TEXT = NEVER_FILLED + (EOS_ID,)  # what a text slot of a candidate of known length never holds


def predict(view: MaskPredictor, enc, tokens: jax.Array,
            banned: tuple[int, ...] = NEVER_FILLED) -> tuple[jax.Array, jax.Array]:
  """The most probable token at every slot, `banned` tokens excluded, and its log-probability
  under the model (not renormalized): (i32[B, W], f32[B, W])."""
  logp = jax.nn.log_softmax(view.fill_logits(enc, tokens).astype(jnp.float32), axis=-1)  # [B, W, V]
  # The token's log-probability is read back from logp, not taken as max_and_argmax's maximum: that
  # form (same values) makes XLA:CPU 0.10.2 emit a fused kernel that segfaults inside the re-drafting
  # loop (tests/unit/test_decode_redraft.py::test_redrafting_is_exact, CMLM drafter, block 4).
  tok = argmax(logp.at[..., banned].set(-jnp.inf))
  return tok, jnp.take_along_axis(logp, tok[..., None], axis=-1)[..., 0]


@dataclasses.dataclass(frozen=True)
class MaskPredictOptions(Bounded):
  iterations: int = option(10, 'refinement passes (the first predicts every token)',
                           Rule(1, 1000, words='1 to 1000 iterations'))
  length_beam: int = hypotheses(5, 'length candidates decoded side by side', 'length candidates')


@register_decoder('mask_predict', MaskPredictor, MaskPredictOptions,
                  about='CMLM Mask-Predict: the most probable target lengths are decoded side by side; every '
                        'iteration re-masks the least confident tokens and predicts them again; the candidate with '
                        'the best mean log-probability wins. A predicted length above the bound is clamped.')
def mask_predict_decode(view: MaskPredictor, src: jax.Array, iterations: int = 10, length_beam: int = 5,
                        max_len: int = 0) -> DecodeOutput:
  """Returns tokens i32[B, W] (text, EOS, then 0), the chosen candidate's mean text log-probability,
  and aux: length (tokens incl. EOS), length_clamped, iterations."""
  if iterations < 1 or length_beam < 1:
    raise ConfigError(f'mask_predict needs iterations >= 1 and length_beam >= 1, got {iterations} and {length_beam}.')
  return mask_predict_search(view, view.encode(src), mask_predict_width(view, src, max_len), iterations,
                             length_beam)


def mask_predict_width(view: MaskPredictor, src: jax.Array, max_len: int = 0) -> int:
  """Static slots W of a candidate (incl. EOS) for sources i32[B, S]."""
  return max(resolve_max_len(view, src, max_len), MIN_LENGTH)


def mask_predict_search(view: MaskPredictor, enc, width: int, iterations: int, length_beam: int) -> DecodeOutput:
  """mask_predict_decode from an encoder state, candidates of `width` slots."""
  length_logp = view.length_log_probs(enc)  # [B, C]
  b, l = length_logp.shape[0], min(length_beam, length_logp.shape[1] - MIN_LENGTH)
  lengths, clamped = length_candidates(length_logp, l, width)  # [B, l]
  enc = add_beam_dim(enc, l)  # [B*l, ...]
  text = lengths.reshape(-1) - 1  # [B*l] text tokens per candidate
  slots = jnp.arange(width)[None, :]  # [1, W]
  is_text = slots < text[:, None]  # [B*l, W]
  frame = jnp.where(slots == text[:, None], EOS_ID, 0)  # EOS at slot N - 1, 0 past it
  tok, logp = predict(view, enc, jnp.where(is_text, MASK_ID, frame), NOT_TEXT)
  tokens = jnp.where(is_text, tok, frame)  # [B*l, W]
  probs = jnp.where(is_text, logp, jnp.inf)  # non-text slots are never re-masked

  def refine(t, carry):
    tokens, probs = carry
    rank = jnp.argsort(jnp.argsort(probs, axis=1), axis=1)  # 0 = least probable
    remask = is_text & (rank < remask_counts(text, t, iterations)[:, None])
    tok, logp = predict(view, enc, jnp.where(remask, MASK_ID, tokens), NOT_TEXT)
    return jnp.where(remask, tok, tokens), jnp.where(remask, logp, probs)

  tokens, probs = jax.lax.fori_loop(1, iterations, refine, (tokens, probs))
  mean_logp = (jnp.sum(jnp.where(is_text, probs, 0.0), axis=1) / jnp.maximum(text, 1)).reshape(b, l)  # [B, l]
  best = argmax(mean_logp, axis=1)  # [B]
  pick = lambda x: jnp.take_along_axis(x, best[:, None], axis=1)[:, 0]
  out = jnp.take_along_axis(tokens.reshape(b, l, width), best[:, None, None], axis=1)[:, 0]  # [B, W]
  return DecodeOutput(out, pick(mean_logp), {'length': pick(lengths), 'length_clamped': pick(clamped).astype(jnp.int32),
                                             'iterations': jnp.full((b,), iterations, jnp.int32)})
