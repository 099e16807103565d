"""The DA-Transformer graph primitives shared by the model, the losses and the decoders.

A graph of L decoder positions is a DAG: a path starts at vertex 0, ends at the last vertex
G - 1 (G = graph_lengths[b]) and is strictly increasing. Entries outside the valid region are
replaced by the finite NEG_INF before any arithmetic (`clean_log`); a score below IMPOSSIBLE went
through a masked entry and means "no path". The likelihood (forward algorithm) and its gradient
live in nat_jax.losses.dag; Viterbi is here because decoding and training alignment both use it.
`map_vertex_chunks` computes a per-vertex function a slice of vertices at a time, so that tensors
with a large last axis (vocabulary log-probabilities, per-head transition scores) never exist for
the whole graph at once, in the forward or the backward pass.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from nat_jax.core.masks import NEG_INF
from nat_jax.core.reduce import argmax

IMPOSSIBLE = 0.5 * NEG_INF  # a path score below this used a masked entry: no such path


def transition_mask(graph_lengths: jax.Array, size: int) -> jax.Array:
  """bool[B, L, L]: True where 0 <= i < j < graph_lengths[b]."""
  v = jnp.arange(size)  # [L]
  upper = v[:, None] < v[None, :]  # [L, L]
  return upper[None] & (v < graph_lengths[:, None])[:, None, :]  # [B, L, L]


def emission_mask(target_lengths: jax.Array, graph_lengths: jax.Array, size: int, tlen: int) -> jax.Array:
  """bool[B, L, M]: True where v < graph_lengths[b] and m < target_lengths[b]."""
  in_graph = jnp.arange(size)[None, :] < graph_lengths[:, None]  # [B, L]
  in_target = jnp.arange(tlen)[None, :] < target_lengths[:, None]  # [B, M]
  return in_graph[:, :, None] & in_target[:, None, :]  # [B, L, M]


def clean_log(x: jax.Array, mask: jax.Array) -> jax.Array:
  """fp32 copy of log-values x with masked-out entries set to NEG_INF and valid ones clamped to >= NEG_INF."""
  return jnp.maximum(jnp.where(mask, x.astype(jnp.float32), NEG_INF), NEG_INF)


def vertex_chunk_count(size: int, per_vertex: int, budget: int) -> int:
  """How many equal slices to cut L = size vertices into: the fewest n (a divisor of size) with
  (size / n) * per_vertex <= budget elements per slice; size if no divisor fits; 1 if budget <= 0."""
  if budget <= 0:
    return 1
  for n in range(1, size + 1):
    if size % n == 0 and (size // n) * per_vertex <= budget:
      return n
  return size


def map_vertex_chunks(fn, num_chunks: int, *xs):
  """fn(*xs) computed num_chunks vertices-slices at a time; equals fn(*xs) if fn treats vertices independently.

  xs: arrays [B, L, ...] (L divisible by num_chunks); fn maps slices [B, L / n, ...] to a pytree of
  arrays [B, L / n, ...], concatenated back to [B, L, ...]. The slices run as the steps of one
  `lax.map`, each under `jax.checkpoint`: the backward pass keeps only each slice's inputs and
  recomputes fn's intermediates slice by slice, so fn's largest intermediate exists for one slice
  at a time. Arrays fn closes over are shared by all slices (their gradients are summed).
  num_chunks = 1: fn(*xs) itself, unchanged.
  """
  if num_chunks == 1:
    return fn(*xs)

  def split(x):  # [B, L, ...] -> [n, B, L / n, ...]
    return jnp.swapaxes(x.reshape(x.shape[0], num_chunks, x.shape[1] // num_chunks, *x.shape[2:]), 0, 1)

  def merge(y):  # [n, B, L / n, ...] -> [B, L, ...]
    return jnp.swapaxes(y, 0, 1).reshape(y.shape[1], y.shape[0] * y.shape[2], *y.shape[3:])

  out = jax.lax.map(jax.checkpoint(lambda args: fn(*args), prevent_cse=False), tuple(split(x) for x in xs))
  return jax.tree_util.tree_map(merge, out)


def path_exists(target_lengths: jax.Array, graph_lengths: jax.Array) -> jax.Array:
  """bool[B]: a strictly increasing path 0 -> G-1 with exactly T vertices exists (T = 1 needs G = 1)."""
  t, g = target_lengths, graph_lengths
  return ((t == 1) & (g == 1)) | ((t >= 2) & (t <= g))


def first_vertex(emit_first: jax.Array) -> jax.Array:
  """alpha_1 [B, L]: the first target token sits at vertex 0."""
  return jnp.where(jnp.arange(emit_first.shape[-1]) == 0, emit_first, NEG_INF)


def viterbi_step(delta: jax.Array, trans: jax.Array, emit_k: jax.Array) -> jax.Array:
  """One more path vertex: delta f32[B, L] (best score of a path ending at v), trans f32[B, L, L]
  (masked entries very negative), emit_k f32[B, L] -> f32[B, L]: max_v delta(v) + trans(v, u) + emit_k(u)."""
  return jnp.max(delta[:, :, None] + trans, axis=1) + emit_k


def viterbi_forward(trans: jax.Array, emit: jax.Array) -> jax.Array:
  """Max-product forward pass over masked log inputs.

  trans f32[B, L, L] (NEG_INF where masked), emit f32[K, B, L] time-major per-step vertex scores.
  Returns delta f32[K, B, L], the best score of a (k+1)-vertex path from vertex 0 ending at v.
  Only maxima are taken here (an argmax over [B, L, L] per step is several times slower on CPU);
  `viterbi_backtrace` recovers the predecessors along the one path it follows.
  """
  def step(delta, emit_k):  # delta [B, L], emit_k [B, L]
    new = viterbi_step(delta, trans, emit_k)  # [B, L]
    return new, new

  first = first_vertex(emit[0])  # [B, L]
  _, delta = jax.lax.scan(step, first, emit[1:])
  return jnp.concatenate([first[None], delta])


def viterbi_backtrace(delta: jax.Array, trans: jax.Array, last_vertex: jax.Array, lengths: jax.Array) -> jax.Array:
  """i32[B, K]: vertices of the best path ending at last_vertex[b] after lengths[b] vertices, -1 past it.

  delta f32[K, B, L] from `viterbi_forward` over trans f32[B, L, L]; the predecessor of vertex j at
  position k is argmax_i delta[k-1, i] + trans[i, j] (first maximum on ties). Rows with
  lengths[b] = 0 are all -1.
  """
  batch, size, _ = trans.shape

  def step(cur, inputs):  # cur i32[B]: vertex at position k + 1
    k, delta_prev = inputs  # [], [B, L] (= delta[k - 1])
    cur = jnp.where(k == lengths - 1, last_vertex, cur)  # [B]
    out = jnp.where(k < lengths, cur, -1)  # [B]
    into_cur = jnp.take_along_axis(trans, jnp.broadcast_to(cur[:, None, None], (batch, size, 1)), axis=2)[..., 0]
    return argmax(delta_prev + into_cur, axis=1), out  # into_cur [B, L]: trans[b, :, cur]

  steps = jnp.arange(delta.shape[0])
  delta_prev = jnp.concatenate([delta[:1], delta[:-1]])  # [K, B, L]; row 0 unused
  _, path = jax.lax.scan(step, jnp.zeros_like(lengths), (steps, delta_prev), reverse=True)  # [K, B]
  return path.T
