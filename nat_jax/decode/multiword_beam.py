"""Multi-word beam search (IBDecoder / SA / IMDecoder; docs/methods/ibdecoder.md): z tokens per step, in the
shared fixed-shape loop (nat_jax.decode.loop).

Runs on any LeftToRightScorer (z = tokens_per_step; with z = 1 it is a beam search that keeps the
top B tokens of each hypothesis). One step, beam size B:
  1. every alive hypothesis feeds its z slots of the step and gets z distributions; EOS is banned
     in the first step;
  2. top B tokens per slot; the candidate tuples are built slot by slot: the outer sum of the
     partial sums (B) and slot j's top B (B x B), pruned back to the B best, then slot j + 1;
     (`ban_first_eos`=false lifts the ban: then B = 1 is exactly `greedy`)
     a partial tuple that already holds an EOS takes no further tokens (one continuation, PAD,
     log-probability 0), so a tuple's score counts its tokens through the first EOS;
  3. over all K x B tuples of a sentence, the top 2B by log-probability: those without EOS give the
     B alive hypotheses, those with an EOS (a hypothesis finishes on an EOS in any slot) among the
     top B join the finished list (so B = 1 is greedy's per-slot argmax, EOS ban aside);
  4. finished scores are logp / ((5 + t) / 6)^alpha, t = tokens generated incl. EOS.
The search stops at the length bound or once no alive hypothesis can beat a row's best finished
one (as `beam`); the best finished hypothesis wins (alive ones if none finished), read out through
the scorer (IBDecoder: de-interleaved).

De-duplication (`dedup`, off by default; our rule, the paper's is unpublished): after read-out, a
token equal to the token before it is dropped (runs collapse to one), which removes the doubled
word where IBDecoder's two directions meet. Repeats of longer n-grams are kept.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from nat_jax.core.masks import NEG_INF
from nat_jax.core.tokens import EOS_ID, clean_path_tokens, through_first_eos
from nat_jax.decode.beam import LENGTH_PENALTY, BeamState, best_hypotheses, next_state, search
from nat_jax.decode.lengths import decode_steps
from nat_jax.decode.options import Bounded, hypotheses, option, weight
from nat_jax.decode.registry import register_decoder
from nat_jax.views import DecodeOutput, LeftToRightScorer


def step_candidates(alive_logp: jax.Array, logp: jax.Array, beam_size: int) -> tuple[jax.Array, jax.Array]:
  """The best z-token tuples of every hypothesis (at most `beam_size` of them).

  alive_logp f32[B, K], logp f32[B, K, z, V] -> (summed log-probs f32[B, K, C], tokens i32[B, K, C, z]),
  best first, C = min(beam_size, V^z); tokens after a tuple's first EOS are 0 and add nothing.
  """
  b, k, z, vocab = logp.shape
  per_slot = min(beam_size, vocab)
  top_lp, top_tok = jax.lax.top_k(logp, per_slot)  # [B, K, z, P]: top tokens per slot
  part_lp = alive_logp[:, :, None] + top_lp[:, :, 0]  # [B, K, C]
  part_tok = top_tok[:, :, 0, :, None].astype(jnp.int32)  # [B, K, C, 1]
  ended = part_tok[..., 0] == EOS_ID  # [B, K, C]
  first_only = jnp.where(jnp.arange(per_slot) == 0, 0.0, NEG_INF)  # [P]: an ended tuple's one continuation
  for j in range(1, z):
    count = part_lp.shape[2]
    ext_lp = jnp.where(ended[..., None], first_only, top_lp[:, :, None, j])  # [B, K, C, P]
    ext_tok = jnp.where(ended[..., None], 0, top_tok[:, :, None, j])  # [B, K, C, P]
    part_lp, idx = jax.lax.top_k((part_lp[..., None] + ext_lp).reshape(b, k, count * per_slot),
                                 min(beam_size, count * per_slot))  # [B, K, C']
    parent = idx // per_slot
    tok = jnp.take_along_axis(ext_tok.reshape(b, k, count * per_slot), idx, axis=2).astype(jnp.int32)  # [B, K, C']
    part_tok = jnp.concatenate([jnp.take_along_axis(part_tok, parent[..., None], axis=2), tok[..., None]], axis=3)
    ended = jnp.take_along_axis(ended, parent, axis=2) | (tok == EOS_ID)
  return part_lp, part_tok


def multiword_step(scorer: LeftToRightScorer, enc, state: BeamState, alpha: float, ban_first_eos: bool) -> BeamState:
  """Extend every alive hypothesis by one step of z tokens; keep the K best alive and the K best finished."""
  b, k, _ = state.seqs.shape
  z = scorer.tokens_per_step
  start = state.step * z
  inputs = jax.lax.dynamic_slice_in_dim(state.seqs, start, z, axis=2).reshape(b * k, z)  # [B*K, z]
  logits, cache = scorer.step_logits(enc, state.cache, inputs, start)
  vocab = logits.shape[-1]
  logp = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(b, k, z, vocab)  # [B, K, z, V]
  if ban_first_eos:
    logp = jnp.where((state.step == 0) & (jnp.arange(vocab) == EOS_ID), NEG_INF, logp)
  cand_lp, cand_tok = step_candidates(state.alive_logp, logp, k)  # [B, K, W], [B, K, W, z]
  width = cand_lp.shape[2]
  n_top = min(2 * k, k * width)
  top_logp, top_idx = jax.lax.top_k(cand_lp.reshape(b, k * width), n_top)  # [B, n]
  top_beam = top_idx // width
  top_tok = jnp.take_along_axis(cand_tok.reshape(b, k * width, z), top_idx[:, :, None], axis=1)  # [B, n, z]
  top_seqs = jnp.take_along_axis(state.seqs, top_beam[:, :, None], axis=1)  # [B, n, z+T]
  top_seqs = jax.lax.dynamic_update_slice_in_dim(top_seqs, top_tok, start + z, axis=2)
  is_eos = jnp.any(top_tok == EOS_ID, axis=2)  # [B, n]
  _, in_step = through_first_eos(top_tok.reshape(-1, z))  # tokens of the step through its EOS
  length = start + in_step.reshape(b, n_top).astype(jnp.float32)
  return next_state(state, top_logp, top_seqs, top_beam, is_eos, length, cache, alpha)


def multiword_search(scorer: LeftToRightScorer, enc, batch: int, beam_size: int, alpha: float,
                     num_steps: int, ban_first_eos: bool = True) -> BeamState:
  """At most `num_steps` steps of z tokens from an encoder state (`scorer.encode`'s, batch `batch`)."""
  return search(scorer, enc, batch, beam_size, alpha, num_steps,
                lambda e, s: multiword_step(scorer, e, s, alpha, ban_first_eos))


@dataclasses.dataclass(frozen=True)
class MultiwordBeamOptions(Bounded):
  beam_size: int = hypotheses(4, 'hypotheses kept per sentence (and tokens tried per slot)')
  alpha: float = weight(LENGTH_PENALTY, 'GNMT length penalty: log p / ((5 + tokens) / 6)^alpha')
  dedup: bool = option(False, 'drop a token equal to the one before it after de-interleaving (where the two '
                              'directions meet)')
  ban_first_eos: bool = option(True, 'forbid EOS in the first step')


@register_decoder('multiword_beam', LeftToRightScorer, MultiwordBeamOptions,
                  about='Beam search over steps of z tokens (the IBDecoder family): the best tokens of each slot are '
                        'combined slot by slot and pruned, an EOS in any slot finishes a hypothesis. With beam 1 and '
                        'no EOS ban it is `greedy`.')
def multiword_beam(scorer: LeftToRightScorer, src: jax.Array, beam_size: int = 4, alpha: float = LENGTH_PENALTY,
                   dedup: bool = False, ban_first_eos: bool = True, max_len: int = 0) -> DecodeOutput:
  """Beam search over steps of z tokens; the best hypothesis by logp / lp(length), read out by the scorer.

  Returns tokens i32[B, T] (EOS after the text, 0 after it; T + 1 wide with `dedup`), its score,
  aux 'steps' (tokens incl. EOS of the returned hypothesis before de-duplication) and 'loop_steps'.
  """
  z = scorer.tokens_per_step
  num_steps = decode_steps(scorer, src, max_len)
  final = multiword_search(scorer, scorer.encode(src), src.shape[0], beam_size, alpha, num_steps, ban_first_eos)
  seqs, scores, _ = best_hypotheses(final, alpha, 1, start_slots=z)
  tokens = scorer.read_out(seqs[:, 0])  # [B, T]
  _, length = through_first_eos(tokens)
  if dedup:
    tokens, _ = clean_path_tokens(tokens, length, True, tokens.shape[1] + 1)
  return DecodeOutput(tokens, scores[:, 0],
                      {'steps': length, 'loop_steps': jnp.full((src.shape[0],), final.step, jnp.int32)})
