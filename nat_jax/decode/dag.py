"""Batched DA-Transformer decoders over a predicted graph (pure functions, no model).

Inputs: log_trans f32[B, L, L] (log E_ij, ignored outside 0 <= i < j < G), log_probs f32[B, L, V]
(log P(y | v), ignored for v >= G), graph_lengths i32[B]. Every decoder returns tokens i32[B, L]
(left-aligned, 0-padded) and lengths i32[B]; an empty graph (G = 0) gives an empty output.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from nat_jax.losses.dag import IMPOSSIBLE, clean_log, transition_mask, viterbi_backtrace, viterbi_forward


def _vertex_scores(log_probs: jax.Array, graph_lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(best token i32[B, L], its log-probability f32[B, L], NEG_INF for v >= G)."""
  in_graph = jnp.arange(log_probs.shape[1])[None, :] < graph_lengths[:, None]  # [B, L]
  best = clean_log(jnp.max(log_probs, axis=-1), in_graph)  # [B, L]
  return jnp.argmax(log_probs, axis=-1).astype(jnp.int32), best


def _path_tokens(path: jax.Array, tokens: jax.Array) -> jax.Array:
  """tokens[b, path[b, k]] where path >= 0, else 0 (path i32[B, K], tokens i32[B, L]) -> i32[B, K]."""
  picked = jnp.take_along_axis(tokens, jnp.maximum(path, 0), axis=1)  # [B, K]
  return jnp.where(path >= 0, picked, 0)


def _follow_argmax(log_trans: jax.Array, bonus: jax.Array, graph_lengths: jax.Array) -> jax.Array:
  """i32[B, L]: path from vertex 0 taking next = argmax_j (log E_ij + bonus_j) until vertex G - 1; -1 after.

  A lax.while_loop that stops as soon as every row reached its last vertex (bonus f32[B, L]).
  """
  batch, size, _ = log_trans.shape
  mask = transition_mask(graph_lengths, size)  # [B, L, L]
  scores = jnp.where(mask, clean_log(log_trans, mask) + bonus[:, None, :], -jnp.inf)  # [B, L, L]
  last = graph_lengths - 1  # [B]

  def cond(state):
    step, _, done, _ = state
    return (step < size) & ~jnp.all(done)

  def body(state):
    step, cur, done, path = state  # [], [B], bool[B], [B, L]
    path = path.at[:, step].set(jnp.where(done, -1, cur))
    done = done | (cur == last)
    row = jnp.take_along_axis(scores, cur[:, None, None], axis=1)[:, 0]  # [B, L]
    nxt = jnp.argmax(row, axis=-1).astype(jnp.int32)  # [B]
    return step + 1, jnp.where(done, cur, nxt), done, path

  init = (0, jnp.zeros((batch,), jnp.int32), graph_lengths < 1, jnp.full((batch, size), -1, jnp.int32))
  return jax.lax.while_loop(cond, body, init)[3]


def _decode_path(path: jax.Array, log_probs: jax.Array, graph_lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
  tokens, _ = _vertex_scores(log_probs, graph_lengths)
  return _path_tokens(path, tokens), jnp.sum(path >= 0, axis=1).astype(jnp.int32)


def dag_greedy_path(log_trans: jax.Array, log_probs: jax.Array, graph_lengths: jax.Array):
  """Follow the most probable transition from vertex 0 to G - 1; argmax token per visited vertex."""
  bonus = jnp.zeros(log_trans.shape[:2], jnp.float32)  # [B, L]
  return _decode_path(_follow_argmax(log_trans, bonus, graph_lengths), log_probs, graph_lengths)


def dag_lookahead_path(log_trans: jax.Array, log_probs: jax.Array, graph_lengths: jax.Array):
  """Like greedy, but next vertex = argmax_j log E_ij + max_y log P(y | j)."""
  _, bonus = _vertex_scores(log_probs, graph_lengths)  # [B, L]
  return _decode_path(_follow_argmax(log_trans, bonus, graph_lengths), log_probs, graph_lengths)


def joint_viterbi(log_trans: jax.Array, log_probs: jax.Array, graph_lengths: jax.Array,
                  beta: float) -> tuple[jax.Array, jax.Array]:
  """Contract: (tokens i32[B, L], length i32[B]).

  For every m, S_m = max over m-vertex paths 0 -> G-1 of sum log E + sum_v max_y log P(y | v)
  (a Viterbi pass over L steps); the output length is m* = argmax_m S_m / m**beta and the tokens
  are the argmax tokens along the best m*-vertex path.
  """
  _, size, _ = log_trans.shape
  tokens, best = _vertex_scores(log_probs, graph_lengths)  # [B, L] each
  trans = clean_log(log_trans, transition_mask(graph_lengths, size))  # [B, L, L]
  delta, back = viterbi_forward(trans, jnp.broadcast_to(best[None], (size,) + best.shape))  # [L, B, L] each
  last = jnp.clip(graph_lengths - 1, 0, size - 1)  # [B]
  final = jnp.take_along_axis(delta, last[None, :, None], axis=2)[..., 0]  # [L(m), B]: S_m
  num = jnp.arange(1, size + 1, dtype=jnp.float32)[:, None]  # [L, 1]
  normed = jnp.where(final > IMPOSSIBLE, final / num ** beta, -jnp.inf)  # [L, B]
  length = jnp.where(jnp.any(final > IMPOSSIBLE, axis=0), jnp.argmax(normed, axis=0) + 1, 0).astype(jnp.int32)
  path = viterbi_backtrace(back, last, length)  # [B, L]
  return _path_tokens(path, tokens), length


def remove_repeats(tokens: jax.Array, lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Collapse runs of equal consecutive tokens: (tokens i32[B, T] left-aligned 0-padded, lengths i32[B])."""
  batch, tlen = tokens.shape
  pos = jnp.arange(tlen)[None, :]  # [1, T]
  prev = jnp.pad(tokens[:, :-1], ((0, 0), (1, 0)))  # [B, T]
  keep = (pos < lengths[:, None]) & ((pos == 0) | (tokens != prev))  # [B, T]
  dest = jnp.where(keep, jnp.cumsum(keep, axis=1) - 1, tlen)  # [B, T]; tlen = dropped
  rows = jnp.broadcast_to(jnp.arange(batch)[:, None], (batch, tlen))
  out = jnp.zeros_like(tokens).at[rows, dest].set(tokens, mode='drop')
  return out, jnp.sum(keep, axis=1).astype(jnp.int32)
