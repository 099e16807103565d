"""HRT decoding: Skip-AT writes every k-th token left to right, one Skip-CMLM pass fills the rest.

(1) Skip-AT from <B_k> until EOS, at most ceil(bound / k) steps: greedy for b_at = 1 (or, with
`jacobi_block` = n > 0, Jacobi decoding in blocks of n steps, HGJ: the same tokens as greedy in fewer
decoder passes, nat_jax.decode.jacobi), else beam search with b_at beams and GNMT length penalty
alpha, keeping its b_nat best hypotheses z_1..z_m (through the first EOS). (2) For each, one Skip-CMLM pass
over ([M]^(k-1) z_1 ... [M]^(k-1) z_m)
fills every [M] with its argmax; the z tokens never change. (3) Score S = sum of the Skip-AT
log-probabilities + sum of the filled tokens' log-probabilities (unnormalized); the best S wins.
(4) The output is cut at its first EOS (a filled token may end the sentence inside the last chunk).
A hypothesis that reached the step bound without EOS is filled and returned as it is.
`chunk=1` decodes the same model plainly left to right (C_d = 1: AT format from BOS, no fill).
One jitted call per batch; the encoder runs once and both phases share it.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from nat_jax.core.reduce import argmax
from nat_jax.core.tokens import ceil_div, skip_frame, through_first_eos
from nat_jax.decode.beam import LENGTH_PENALTY, add_beam_dim, beam_search, best_hypotheses
from nat_jax.decode.greedy import greedy_search
from nat_jax.decode.jacobi import finish, jacobi_search
from nat_jax.decode.mask_predict import predict
from nat_jax.decode.options import MAX_BLOCK, Bounded, Rule, hypotheses, option, weight
from nat_jax.decode.registry import register_decoder
from nat_jax.errors import ConfigError
from nat_jax.views import DecodeOutput, HybridScorer


def fill_chunks(view: HybridScorer, enc, skips: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """Step (2): one Skip-CMLM pass over the frame of skips i32[R, m] (`enc` with R rows) -> (tokens
  i32[R, k m]: the Skip-AT tokens in place, every [MASK] filled with its argmax; f32[R]: the summed
  log-probabilities of the filled tokens)."""
  inputs, fill = skip_frame(skips, k)
  tok, tok_logp = predict(view, enc, inputs)  # [R, km]
  return jnp.where(fill, tok, inputs), jnp.sum(jnp.where(fill, tok_logp, 0.0), axis=1)


def check_hrt_options(method, options: 'HrtOptions'):
  """The registry's check: chunk is 0, 1 or the model's k; b_nat <= b_at; Jacobi only with b_at = 1."""
  k = method.chunk  # only HRT methods offer its view (check_decoder asks method_view first)
  if options.chunk not in (0, 1, k):
    raise ConfigError(f'--decoder.chunk={options.chunk}: this HRT model was trained with chunk k={k}; use 0 or '
                      f'{k} (hybrid decoding) or 1 (left to right).')
  if options.b_nat > options.b_at:
    raise ConfigError(f'hrt needs b_nat <= b_at, got b_at={options.b_at}, b_nat={options.b_nat}.')
  if options.jacobi_block and options.b_at != 1:
    raise ConfigError(f'hrt: jacobi_block={options.jacobi_block} replaces greedy Skip-AT and needs b_at = 1 '
                      f'(got b_at={options.b_at}).')


@dataclasses.dataclass(frozen=True)
class HrtOptions(Bounded):
  b_at: int = hypotheses(1, 'Skip-AT beams (1: greedy)')
  b_nat: int = hypotheses(1, 'Skip-AT hypotheses filled and scored (at most b_at)')
  alpha: float = weight(LENGTH_PENALTY, 'GNMT length penalty of the Skip-AT beam search')
  chunk: int = option(0, "0: the model's k; 1: decode the same model plainly left to right (C_d = 1)",
                      Rule(1, zero="the model's chunk size"))
  jacobi_block: int = option(0, 'n > 0: the Skip-AT phase by Jacobi decoding in blocks of n steps (same output as '
                                'greedy Skip-AT); 0: greedy steps',
                             Rule(1, MAX_BLOCK, zero='off', words=f'0 (off) or a block of 1 to {MAX_BLOCK} steps'))


@register_decoder('hrt', HybridScorer, HrtOptions, check=check_hrt_options,
                  about='HRT: Skip-AT writes every k-th token left to right (greedy, or beam search), one Skip-CMLM '
                        'pass per kept hypothesis fills the tokens between; the best unnormalised score wins.')
def hrt_decode(view: HybridScorer, src: jax.Array, b_at: int = 1, b_nat: int = 1, alpha: float = LENGTH_PENALTY,
               chunk: int = 0, jacobi_block: int = 0, max_len: int = 0) -> DecodeOutput:
  """chunk: 0 = the model's k, 1 = left to right; jacobi_block: 0 = greedy Skip-AT, n > 0 = Jacobi
  (HGJ) in blocks of n steps (b_at = 1 only); max_len: output tokens (0 = the model's bound).
  Returns tokens i32[B, k m] (0 after EOS), S, and aux: steps (Skip-AT steps incl. EOS), length,
  iterations (Skip-AT decoder passes: greedy's steps, or Jacobi's iterations; beam: its loop steps)."""
  k = chunk or view.chunk
  if not 1 <= b_nat <= b_at:
    raise ConfigError(f'hrt needs 1 <= b_nat <= b_at, got b_at={b_at}, b_nat={b_nat}.')
  if jacobi_block < 0 or (jacobi_block and b_at != 1):
    raise ConfigError(f'hrt: jacobi_block={jacobi_block} needs jacobi_block >= 0, and b_at = 1 when it is set '
                     f'(Jacobi decoding replaces greedy Skip-AT, not beam search; got b_at={b_at}).')
  scorer = view.skip_scorer(k)
  steps = ceil_div(max_len, k) if max_len > 0 else scorer.max_decode_len(src.shape[1])
  b = src.shape[0]
  enc = scorer.encode(src)
  if jacobi_block:
    final = finish(scorer, jacobi_search(scorer, enc, b, steps, jacobi_block), steps)
    skips, logp, passes = final.tokens[:, None], final.scores[:, None], final.aux['iterations']  # [B, 1, m], [B, 1]
  elif b_at == 1:
    final = greedy_search(scorer, enc, b, steps)
    skips, logp, passes = final.tokens[:, None, 1:], final.logp[:, None], final.lengths  # [B, 1, m], [B, 1]
  else:
    search = beam_search(scorer, enc, b, b_at, alpha, steps, shrink=b_nat == 1)
    skips, _, logp = best_hypotheses(search, alpha, b_nat)
    passes = jnp.full((b,), search.step, jnp.int32)
  n, m = skips.shape[1], skips.shape[2]
  flat = skips.reshape(b * n, m)
  if k == 1:
    out, score = flat, logp.reshape(-1)
  else:
    out, fill_logp = fill_chunks(view, add_beam_dim(enc, n), flat, k)
    score = logp.reshape(-1) + fill_logp
  best = argmax(score.reshape(b, n), axis=1)  # [B]
  rows = jnp.arange(b) * n + best
  _, skip_len = through_first_eos(flat[rows])
  valid, length = through_first_eos(out[rows])
  return DecodeOutput(jnp.where(valid, out[rows], 0), score[rows],
                      {'steps': skip_len, 'length': length, 'iterations': passes})
