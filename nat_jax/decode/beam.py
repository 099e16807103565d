"""Beam search with GNMT length penalty: fixed-shape lax.while_loops (nat_jax.decode.loop).

Runs on a LeftToRightScorer that takes one token per step. Beams are flattened into the batch
([B, K] -> [B*K]) for the scorer, and the cache is gathered along the batch axis when beams are
reordered. A row stops once its best finished score cannot be beaten: with alpha >= 0, no alive
hypothesis can end above max(alive logp) / lp(T_max).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import flax
import jax
import jax.numpy as jnp

from nat_jax.core.masks import NEG_INF
from nat_jax.core.tokens import BOS_ID, EOS_ID, through_first_eos
from nat_jax.decode.lengths import resolve_max_len
from nat_jax.decode.loop import decode_loop
from nat_jax.decode.options import Bounded, hypotheses, weight
from nat_jax.decode.registry import register_decoder
from nat_jax.errors import ConfigError
from nat_jax.views import DecodeOutput, LeftToRightScorer, one_token_per_step_message, require_one_token_per_step


@flax.struct.dataclass
class BeamState:
  step: jax.Array        # i32[]: decoding steps taken (beam: tokens; multiword_beam: steps of z tokens)
  seqs: jax.Array        # i32[B, K, z+T]: alive hypotheses after z start slots (beam: z = 1, BOS)
  alive_logp: jax.Array  # f32[B, K]: their log-probabilities (NEG_INF = empty beam)
  fin_seqs: jax.Array    # i32[B, K, z+T]: the K best finished hypotheses
  fin_scores: jax.Array  # f32[B, K]: their length-normalized scores (NEG_INF = none yet)
  cache: Any             # the scorer's cache, batch [B*K]


LENGTH_PENALTY = 0.6  # GNMT's alpha: the default of every beam-style decoder (beam, multiword_beam, hrt)


def length_penalty(length, alpha: float):
  """GNMT's ((5 + |y|) / 6) ** alpha (|y|: tokens incl. EOS)."""
  return ((5.0 + length) / 6.0) ** alpha


def ends_among_first_k(state: 'BeamState', ended: jax.Array) -> jax.Array:
  """GNMT's rule of which ended candidates (bool[B, n], best first) finish: those among the first K."""
  return ended & (jnp.arange(ended.shape[1]) < state.alive_logp.shape[1])


# --- beam helpers -----------------------------------------------------------------------------
def gather_beams(tree, beam_idx: jax.Array):
  """Leaves [B*K, ...] gathered by beam_idx i32[B, K'] -> [B*K', ...]."""
  b, _ = beam_idx.shape

  def gather(x):
    k = x.shape[0] // b
    flat_idx = (jnp.arange(b)[:, None] * k + beam_idx).reshape(-1)  # [B*K']
    return jnp.take(x, flat_idx, axis=0)
  return jax.tree_util.tree_map(gather, tree)


def add_beam_dim(tree, k: int):
  """Leaves [B, ...] -> [B*K, ...], each row repeated K times."""
  return jax.tree_util.tree_map(lambda x: jnp.repeat(x, k, axis=0), tree)


# --- search -----------------------------------------------------------------------------------
def beam_step(scorer: LeftToRightScorer, enc, state: BeamState, alpha: float, penalty: Callable = length_penalty,
              ends: Callable = ends_among_first_k, forced_eos_step: int = -1) -> BeamState:
  """Extend every alive hypothesis by one token; keep the K best alive and the K best finished (penalty and
  ends: as next_state's). At step `forced_eos_step` (if >= 0) every hypothesis ends: EOS has log-probability
  0, the rest none."""
  b, k, _ = state.seqs.shape
  prev = jax.lax.dynamic_slice_in_dim(state.seqs, state.step, 1, axis=2).reshape(b * k, 1)  # [B*K, 1]
  logits, cache = scorer.step_logits(enc, state.cache, prev, state.step)
  vocab = logits.shape[-1]
  logp = jax.nn.log_softmax(logits[:, 0].astype(jnp.float32)).reshape(b, k, vocab)  # [B, K, V]
  if forced_eos_step >= 0:
    only_eos = jnp.where(jnp.arange(vocab) == EOS_ID, 0.0, NEG_INF)  # [V]
    logp = jnp.where(state.step == forced_eos_step, only_eos, logp)
  cand = (state.alive_logp[:, :, None] + logp).reshape(b, k * vocab)  # [B, K*V]
  top_logp, top_idx = jax.lax.top_k(cand, 2 * k)  # [B, 2K]
  top_beam, top_tok = top_idx // vocab, (top_idx % vocab).astype(jnp.int32)
  top_seqs = jnp.take_along_axis(state.seqs, top_beam[:, :, None], axis=1)  # [B, 2K, T+1]
  top_seqs = jax.lax.dynamic_update_slice_in_dim(top_seqs, top_tok[:, :, None], state.step + 1, axis=2)
  is_eos = top_tok == EOS_ID
  return next_state(state, top_logp, top_seqs, top_beam, is_eos, state.step + 1.0, cache, alpha, penalty, ends)


def next_state(state: BeamState, cand_logp, cand_seqs, cand_beam, is_eos, lengths, cache, alpha: float,
               penalty: Callable = length_penalty, ends: Callable = ends_among_first_k) -> BeamState:
  """The state after a step from its candidates, best first: cand_logp f32[B, n], cand_seqs i32[B, n, W],
  cand_beam i32[B, n] (parent hypothesis), is_eos bool[B, n] (the candidate ended), lengths f32 (tokens
  incl. EOS, [B, n] or scalar), cache [B*K] of the parents. The K best that did not end stay alive
  (cache reordered to their parents); those that ended and that `ends(state, ended bool[B, n])` keeps (GNMT:
  those among the first K, so a beam of 1 is greedy) join the K best finished, scored logp / penalty(length,
  alpha)."""
  k = state.alive_logp.shape[1]
  alive_logp, keep = jax.lax.top_k(jnp.where(is_eos, NEG_INF, cand_logp), k)  # [B, K]
  seqs = jnp.take_along_axis(cand_seqs, keep[:, :, None], axis=1)
  cache = gather_beams(cache, jnp.take_along_axis(cand_beam, keep, axis=1))
  ended = ends(state, is_eos & (cand_logp > NEG_INF / 2))  # not from an empty beam
  new_scores = jnp.where(ended, cand_logp / penalty(lengths, alpha), NEG_INF)
  all_scores = jnp.concatenate([state.fin_scores, new_scores], axis=1)  # [B, K + n]
  all_seqs = jnp.concatenate([state.fin_seqs, cand_seqs], axis=1)
  fin_scores, keep_f = jax.lax.top_k(all_scores, k)
  fin_seqs = jnp.take_along_axis(all_seqs, keep_f[:, :, None], axis=1)
  return BeamState(state.step + 1, seqs, alive_logp, fin_seqs, fin_scores, cache)


def open_rows(state: BeamState, max_lp) -> jax.Array:
  """bool[B]: rows whose best finished hypothesis an alive one could still beat (max_lp: the
  length penalty at the bound, the largest an alive hypothesis can reach)."""
  best_possible = jnp.max(state.alive_logp, axis=1) / max_lp  # [B]
  return jnp.max(state.fin_scores, axis=1) < best_possible


def search(scorer: LeftToRightScorer, enc, batch: int, beam_size: int, alpha: float, num_steps: int,
           step_fn: Callable[[Any, BeamState], BeamState], shrink: bool = True,
           open_fn: Optional[Callable[[BeamState], jax.Array]] = None) -> BeamState:
  """The loop every beam search here shares: K hypotheses per row after z start slots (BOS; z =
  scorer.tokens_per_step), at most `num_steps` steps of z tokens, stopping early once no alive
  hypothesis can beat a row's best finished one (or when open_fn(state) -> bool[B] says so). step_fn(enc,
  state) -> state extends them.
  shrink: closed rows may leave the batch (nat_jax.decode.loop); their best hypothesis is final, but
  the ones after it may differ from a search that steps them on, so callers that read more than the
  best keep it False."""
  b, k, z = batch, beam_size, scorer.tokens_per_step
  width = num_steps * z
  enc = add_beam_dim(enc, k)  # [B*K, ...]
  seqs = jnp.zeros((b, k, z + width), jnp.int32).at[:, :, :z].set(BOS_ID)  # [B, K, z+T]
  init = BeamState(step=jnp.int32(0), seqs=seqs,
                   alive_logp=jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1), jnp.float32), (b, 1)),
                   fin_seqs=jnp.zeros_like(seqs), fin_scores=jnp.full((b, k), NEG_INF, jnp.float32),
                   cache=scorer.init_cache(enc, width))
  max_lp = length_penalty(width, alpha)
  is_open = open_fn or (lambda s: open_rows(s, max_lp))

  def running(state: BeamState) -> jax.Array:
    return (state.step < num_steps) & jnp.any(is_open(state))

  return decode_loop(scorer, running, step_fn, enc, init, width, z, lambda s: (s.step + 1) * z, b,
                     live=is_open if shrink else None)


def beam_search(scorer: LeftToRightScorer, enc, batch: int, beam_size: int, alpha: float, t_max: int,
                shrink: bool = True) -> BeamState:
  """Beam search from an encoder state (`scorer.encode`'s, batch `batch`) for at most t_max tokens
  (shrink: as `search`'s)."""
  return search(scorer, enc, batch, beam_size, alpha, t_max, lambda e, s: beam_step(scorer, e, s, alpha), shrink)


def best_hypotheses(final: BeamState, alpha: float, count: int, start_slots: int = 1,
                    penalty: Callable = length_penalty) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The `count` (<= K) best hypotheses of a search: its finished ones by length-normalized score,
  then, if fewer finished, its alive ones by log-probability. Returns (tokens i32[B, count, T] 0
  after EOS, scores f32[B, count]: finished logp / lp(length), alive logp / lp(T); summed
  log-probabilities f32[B, count]). An alive hypothesis is a translation only when the search ran
  to the length bound (it hit the bound without EOS); when the search stopped early (every row's
  best finished one could no longer be beaten) alive ones are unfinished prefixes, and an entry
  that would take one gets score and log-probability NEG_INF. A row with no finished hypothesis
  keeps the search running to the bound, so entry 0 is always a translation. The sequences start
  with `start_slots` start tokens (one BOS here, z in multiword_beam)."""
  k, t_max = final.seqs.shape[1], final.seqs.shape[2] - start_slots
  finished = jnp.sum(final.fin_scores > NEG_INF / 2, axis=1, keepdims=True)  # [B, 1]; both lists sorted by top_k
  rank = jnp.arange(count)[None, :]  # [1, count]
  idx = jnp.where(rank < finished, rank, k + rank - finished)  # [B, count] into [finished | alive]
  take = lambda x: jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)
  seqs = take(jnp.concatenate([final.fin_seqs, final.seqs], axis=1))[:, :, start_slots:]  # [B, count, T]
  valid, length = through_first_eos(seqs.reshape(-1, t_max))
  seqs = jnp.where(valid, seqs.reshape(-1, t_max), 0).reshape(seqs.shape)
  is_fin = rank < finished  # [B, count]
  values = take(jnp.concatenate([final.fin_scores, final.alive_logp], axis=1))  # finished: normalized; alive: logp
  fin_lp = penalty(length.reshape(is_fin.shape).astype(jnp.float32), alpha)
  scores = jnp.where(is_fin, values, values / penalty(t_max, alpha))
  logp = jnp.where(is_fin, values * fin_lp, values)
  usable = is_fin | (final.step * start_slots >= t_max)  # [B, count]: finished, or alive at the bound
  return seqs, jnp.where(usable, scores, NEG_INF), jnp.where(usable, logp, NEG_INF)


def one_token_per_step(name: str):
  """The registry's check of a beam decoder `name`: a method whose left-to-right view writes several tokens
  per step (IBDecoder, SA) has none (it has multiword_beam)."""
  def check(method, options):
    z = method.tokens_per_step
    if z != 1:
      raise ConfigError(one_token_per_step_message(name, z))
  return check


@dataclasses.dataclass(frozen=True)
class BeamOptions(Bounded):
  beam_size: int = hypotheses(4, 'hypotheses kept per sentence')
  alpha: float = weight(LENGTH_PENALTY, 'length penalty: a finished score is log p / ((5 + length) / 6)^alpha; 0 '
                                        'compares raw log-probabilities')


def best_output(scorer: LeftToRightScorer, src: jax.Array, final: BeamState, alpha: float,
                penalty: Callable = length_penalty) -> DecodeOutput:
  """A beam search's output: the best finished hypothesis per row by logp / penalty(length, alpha) (length
  counts EOS); a row with none (every hypothesis hit the length bound) falls back to its best alive one."""
  seqs, scores, _ = best_hypotheses(final, alpha, 1, penalty=penalty)
  _, length = through_first_eos(seqs[:, 0])
  # steps: tokens of the returned hypothesis incl. EOS (as greedy's); loop_steps: iterations the batch ran.
  return DecodeOutput(scorer.read_out(seqs[:, 0]), scores[:, 0],
                      {'steps': length, 'loop_steps': jnp.full((src.shape[0],), final.step, jnp.int32)})


@register_decoder('beam', LeftToRightScorer, BeamOptions, check=one_token_per_step('beam'),
                  about='Beam search with the GNMT length penalty over a model that writes one token per step (the '
                        'IBDecoder family writes several: use `multiword_beam`). A sentence stops once no alive '
                        'hypothesis can beat its best finished one.')
def beam_decode(scorer: LeftToRightScorer, src: jax.Array, beam_size: int = 4, alpha: float = LENGTH_PENALTY,
                max_len: int = 0) -> DecodeOutput:
  """Beam search's best hypothesis per row (best_output)."""
  require_one_token_per_step(scorer, 'beam')
  final = beam_search(scorer, scorer.encode(src), src.shape[0], beam_size, alpha, resolve_max_len(scorer, src, max_len))
  return best_output(scorer, src, final, alpha)
