"""FA-DAT fuzzy n-gram alignment: expected n-gram statistics of a DAG and the fuzzy alignment loss.

A path is drawn from vertex 0 by the transitions E (it only moves forward and the last vertex has
no way out, so all its mass ends at the last vertex G - 1) and a token is drawn independently at
each visited vertex. With passing probabilities p (p_0 = 1, p_j = sum_{i<j} p_i E_ij; the chance
that a path visits j):

  E[length]        = sum_v p_v,
  E[#n-grams]      = || p^T E^(n-1) ||_1                    (expected number of n-vertex windows),
  E[C_g] for g = (g_1..g_n) = || ((p (.) G_1) E (.) G_2) ... E (.) G_n ||_1,   G_k(v) = P(g_k | v).

For the reference n-gram starting at position m, G_k(v) = P(y_{m+k-1} | v) = exp(log_emit[b, v, m+k-1]),
so all M n-grams are propagated at once as rows of a [B, M, L] matrix.

Shapes: B batch, L padded graph size, M padded target length. Entries outside the valid region
(transitions outside 0 <= i < j < G, emissions with v >= G or m >= T) are ignored.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from nat_jax.core.graph import clean_log, emission_mask, transition_mask


def transition_probs(log_trans: jax.Array, graph_lengths: jax.Array) -> jax.Array:
  """E f32[B, L, L]: exp(log_trans) on 0 <= i < j < G, exactly 0 elsewhere."""
  mask = transition_mask(graph_lengths, log_trans.shape[-1])  # [B, L, L]
  return jnp.where(mask, jnp.exp(clean_log(log_trans, mask)), 0.0)


def passing_probs(trans: jax.Array, graph_lengths: jax.Array) -> jax.Array:
  """p f32[B, L]: probability that a path from vertex 0 visits v; solves (I - E^T) p = e_0.

  E is strictly upper triangular, so I - E^T is unit lower triangular: one triangular solve.
  """
  batch, size, _ = trans.shape
  system = jnp.eye(size, dtype=trans.dtype) - jnp.swapaxes(trans, 1, 2)  # [B, L, L]
  start = jnp.zeros((batch, size, 1), trans.dtype).at[:, 0].set(1.0)  # [B, L, 1]
  p = jax.scipy.linalg.solve_triangular(system, start, lower=True, unit_diagonal=True)[..., 0]  # [B, L]
  return jnp.where(jnp.arange(size)[None, :] < graph_lengths[:, None], p, 0.0)


def _shift_left(x: jax.Array, k: int) -> jax.Array:
  """x[:, m + k] at position m along axis 1, zero-filled past the end (x [B, M, ...])."""
  if k == 0:
    return x
  pad = [(0, 0), (0, k)] + [(0, 0)] * (x.ndim - 2)
  return jnp.pad(x[:, k:], pad)


def distinct_reference_ngrams(targets: jax.Array, target_lengths: jax.Array, n: int):
  """For every start m: (first bool[B, M], count i32[B, M]).

  first: the n-gram y_m..y_{m+n-1} lies inside the target and no earlier start has the same n-gram;
  count: C_g(y), how often that n-gram occurs in the reference.
  """
  tlen = targets.shape[1]
  windows = jnp.stack([_shift_left(targets, k) for k in range(n)], axis=-1)  # [B, M, n]
  valid = jnp.arange(tlen)[None, :] + n <= target_lengths[:, None]  # [B, M]
  same = jnp.all(windows[:, :, None, :] == windows[:, None, :, :], axis=-1)  # [B, M, M]
  same = same & valid[:, :, None] & valid[:, None, :]
  earlier = jnp.tril(jnp.ones((tlen, tlen), bool), k=-1)  # [M, M]: m' < m
  first = valid & ~jnp.any(same & earlier[None], axis=-1)  # [B, M]
  return first, jnp.sum(same, axis=-1)


def expected_ngram_stats(log_trans: jax.Array, log_emit: jax.Array, targets: jax.Array,
                         target_lengths: jax.Array, graph_lengths: jax.Array, n: int) -> dict[str, jax.Array]:
  """Contract: dict of f32[B] `clipped_matches`, `expected_ngrams`, `expected_length`.

  clipped_matches = sum over distinct reference n-grams g of min(E[C_g(y')], C_g(y)).
  log_trans f32[B, L, L], log_emit f32[B, L, M] (log P(targets[b, m] | v)), targets i32[B, M],
  lengths i32[B], n a Python int >= 1.
  """
  _, size, tlen = log_emit.shape
  trans = transition_probs(log_trans, graph_lengths)  # [B, L, L]
  p = passing_probs(trans, graph_lengths)  # [B, L]
  emask = emission_mask(target_lengths, graph_lengths, size, tlen)  # [B, L, M]
  emit = jnp.swapaxes(jnp.where(emask, jnp.exp(clean_log(log_emit, emask)), 0.0), 1, 2)  # [B, M, L]

  walk = p  # [B, L]: expected number of (k+1)-vertex windows ending at v
  match = p[:, None, :] * emit  # [B, M, L]: expected matches of g_1..g_{k+1} ending at v, per start m
  for k in range(1, n):
    walk = jnp.einsum('bi,bij->bj', walk, trans)
    match = jnp.einsum('bmi,bij->bmj', match, trans) * _shift_left(emit, k)
  expected_counts = jnp.sum(match, axis=-1)  # [B, M]: E[C_g] of the n-gram starting at m

  first, ref_counts = distinct_reference_ngrams(targets, target_lengths, n)
  clipped = jnp.where(first, jnp.minimum(expected_counts, ref_counts.astype(jnp.float32)), 0.0)  # [B, M]
  return {'clipped_matches': jnp.sum(clipped, axis=-1),
          'expected_ngrams': jnp.sum(walk, axis=-1),
          'expected_length': jnp.sum(p, axis=-1)}


def _safe_ratio(num: jax.Array, den: jax.Array) -> jax.Array:
  """num / den where den > 0, else 0 (NaN-free in value and gradient)."""
  ok = den > 0
  return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def fuzzy_alignment_loss(log_trans: jax.Array, log_emit: jax.Array, targets: jax.Array, target_lengths: jax.Array,
                         graph_lengths: jax.Array, n: int = 2) -> jax.Array:
  """f32[B]: -BP * clipped_matches / expected_ngrams, BP = min(1, exp(1 - T / E[length])).

  Rows with no expected n-grams (e.g. empty graph) or zero expected length score 0.
  """
  stats = expected_ngram_stats(log_trans, log_emit, targets, target_lengths, graph_lengths, n)
  exp_len = stats['expected_length']  # [B]
  length_ratio = _safe_ratio(target_lengths.astype(jnp.float32), exp_len)  # [B]
  brevity = jnp.where(exp_len > 0, jnp.minimum(1.0, jnp.exp(1.0 - length_ratio)), 0.0)  # [B]
  return -brevity * _safe_ratio(stats['clipped_matches'], stats['expected_ngrams'])
