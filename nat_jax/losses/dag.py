"""DA-Transformer dynamic programs: path likelihood (forward algorithm) and Viterbi alignment.

A graph of L decoder positions is a DAG: a path starts at vertex 0, ends at the last vertex
G - 1 (G = graph_lengths[b]) and is strictly increasing. For a target y of length T,

  P(y | x) = sum over paths a_1 = 0 < a_2 < ... < a_T = G - 1 of
             prod_{m>1} E[a_{m-1}, a_m] * prod_m P(y_m | a_m),

computed by the forward recursion over target positions

  alpha_1(j) = [j = 0] * log P(y_1 | 0),
  alpha_m(j) = logsumexp_i(alpha_{m-1}(i) + log E_ij) + log P(y_m | j),
  log P(y | x) = alpha_T(G - 1).

Shapes: B batch, L padded graph size, M padded target length. Inputs outside the valid region
(transitions outside 0 <= i < j < G, emissions with v >= G or m >= T) are ignored whatever their
value: they are replaced by the finite NEG_INF before any arithmetic, so neither values nor
gradients can turn NaN. A score below NEG_INF / 2 went through a masked entry and means "no path".
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from nat_jax.core.graph import (
  IMPOSSIBLE,
  clean_log,
  emission_mask,
  first_vertex,
  path_exists,
  transition_mask,
  viterbi_backtrace,
  viterbi_forward,
)
from nat_jax.core.masks import NEG_INF


def masked_inputs(log_trans, log_emit, target_lengths, graph_lengths):
  """Masked fp32 inputs: trans [B, L, L], time-major emissions [M, B, L], live bool[M, B] (m < T)."""
  _, size, tlen = log_emit.shape
  trans = clean_log(log_trans, transition_mask(graph_lengths, size))  # [B, L, L]
  emit = clean_log(log_emit, emission_mask(target_lengths, graph_lengths, size, tlen))  # [B, L, M]
  live = jnp.arange(tlen)[:, None] < target_lengths[None, :]  # [M, B]
  return trans, jnp.transpose(emit, (2, 0, 1)), live


def _read_out(alpha: jax.Array, target_lengths: jax.Array, graph_lengths: jax.Array) -> jax.Array:
  """f32[B]: alpha_T(G - 1) where a path exists, -inf elsewhere (alpha [B, L])."""
  last = jnp.clip(graph_lengths - 1, 0, alpha.shape[-1] - 1)  # [B]
  score = jnp.take_along_axis(alpha, last[:, None], axis=1)[:, 0]  # [B]
  ok = path_exists(target_lengths, graph_lengths) & (score > IMPOSSIBLE)
  return jnp.where(ok, score, -jnp.inf)


def _logsumexp_rows(x: jax.Array) -> jax.Array:
  """logsumexp over axis 1 of finite x [B, L, L] -> [B, L]; the max is a constant for autodiff."""
  top = jax.lax.stop_gradient(jnp.max(x, axis=1))  # [B, L]
  return jnp.log(jnp.sum(jnp.exp(x - top[:, None, :]), axis=1)) + top


def dag_log_likelihood_logspace(log_trans: jax.Array, log_emit: jax.Array, target_lengths: jax.Array,
                                graph_lengths: jax.Array) -> jax.Array:
  """log P(y | x) f32[B] by the forward recursion in log space.

  Each step forms alpha_{m-1}(i) + log E_ij as [B, L, L]; the step is rematerialised in the
  backward pass, so the memory kept across the scan is alpha only ([M, B, L]), not M copies of
  [B, L, L]. log_trans f32[B, L, L], log_emit f32[B, L, M], lengths i32[B].
  """
  trans, emit, live = masked_inputs(log_trans, log_emit, target_lengths, graph_lengths)

  @jax.checkpoint
  def step(alpha, inputs):  # alpha [B, L]
    emit_m, live_m = inputs  # [B, L], bool[B]
    new = _logsumexp_rows(alpha[:, :, None] + trans) + emit_m  # [B, L]
    return jnp.where(live_m[:, None], new, alpha), None

  alpha, _ = jax.lax.scan(step, first_vertex(emit[0]), (emit[1:], live[1:]))
  return _read_out(alpha, target_lengths, graph_lengths)


def dag_log_likelihood_scaled(log_trans: jax.Array, log_emit: jax.Array, target_lengths: jax.Array,
                              graph_lengths: jax.Array) -> jax.Array:
  """log P(y | x) f32[B] by the forward recursion in scaled probabilities.

  With column shifts c_j = max_i log E_ij and S_ij = exp(log E_ij - c_j) (0 where masked), each step
  is one batched vector-matrix product:
    s = max_i alpha(i),  q = exp(alpha - s) @ S,  alpha'(j) = log q_j + s + c_j + log P(y_m | j).
  s and c cancel exactly, so they carry no gradient. q_j = 0 (unreachable, or underflow beyond
  ~87 nats below the best predecessor) maps to NEG_INF like a masked entry.
  """
  trans, emit, live = masked_inputs(log_trans, log_emit, target_lengths, graph_lengths)
  valid = trans > IMPOSSIBLE  # [B, L, L]
  shift = jax.lax.stop_gradient(jnp.max(trans, axis=1))  # [B, L]: c_j
  scaled = jnp.where(valid, jnp.exp(jnp.where(valid, trans - shift[:, None, :], 0.0)), 0.0)  # [B, L, L]

  def step(alpha, inputs):  # alpha [B, L]
    emit_m, live_m = inputs  # [B, L], bool[B]
    top = jax.lax.stop_gradient(jnp.max(alpha, axis=1, keepdims=True))  # [B, 1]
    q = jnp.einsum('bi,bij->bj', jnp.exp(alpha - top), scaled)  # [B, L]
    reached = q > 0
    log_q = jnp.where(reached, jnp.log(jnp.where(reached, q, 1.0)) + top + shift, NEG_INF)  # [B, L]
    return jnp.where(live_m[:, None], log_q + emit_m, alpha), None

  alpha, _ = jax.lax.scan(step, first_vertex(emit[0]), (emit[1:], live[1:]))
  return _read_out(alpha, target_lengths, graph_lengths)


def _lost_rows(ll: jax.Array, target_lengths: jax.Array, graph_lengths: jax.Array) -> jax.Array:
  """bool[B]: the scaled form returned -inf although a T-vertex path exists (all of it underflowed)."""
  return jnp.isneginf(ll) & path_exists(target_lengths, graph_lengths)


def _recover_lost(ll: jax.Array, lost: jax.Array, args: tuple) -> jax.Array:
  """ll f32[B] with the lost rows recomputed in log space; the log-space pass runs only if any is lost."""
  return jax.lax.cond(jnp.any(lost), lambda: jnp.where(lost, dag_log_likelihood_logspace(*args), ll), lambda: ll)


@jax.custom_vjp
def dag_log_likelihood(log_trans: jax.Array, log_emit: jax.Array, target_lengths: jax.Array,
                       graph_lengths: jax.Array) -> jax.Array:
  """log of the summed probability of all T-vertex paths (contract): f32[B], -inf where no path.

  log_trans f32[B, L, L] (log E_ij), log_emit f32[B, L, M] (log P(y_m | v)), lengths i32[B].
  Uses the scaled-probability form (the faster one, see benchmarks/components/dag_loss_speed.py). Rows that
  have a path but come out -inf there (every path underflowed) are recomputed in log space, in
  the forward and in the backward pass, each behind a lax.cond that is skipped when no row needs
  it. Gradients of rows without a path are zero. Reverse-mode only (custom VJP).
  """
  args = (log_trans, log_emit, target_lengths, graph_lengths)
  ll = dag_log_likelihood_scaled(*args)  # [B]
  return _recover_lost(ll, _lost_rows(ll, target_lengths, graph_lengths), args)


def _ll_fwd(log_trans, log_emit, target_lengths, graph_lengths):
  ll, scaled_vjp = jax.vjp(
      lambda lt, le: dag_log_likelihood_scaled(lt, le, target_lengths, graph_lengths), log_trans, log_emit)
  lost = _lost_rows(ll, target_lengths, graph_lengths)  # [B]
  args = (log_trans, log_emit, target_lengths, graph_lengths)
  return _recover_lost(ll, lost, args), (scaled_vjp, lost, args)


def _ll_bwd(residuals, cotangent):  # cotangent f32[B]
  scaled_vjp, lost, (log_trans, log_emit, target_lengths, graph_lengths) = residuals
  grads = scaled_vjp(jnp.where(lost, 0.0, cotangent))

  def logspace_grads():
    _, vjp = jax.vjp(lambda lt, le: dag_log_likelihood_logspace(lt, le, target_lengths, graph_lengths),
                     log_trans, log_emit)
    return vjp(jnp.where(lost, cotangent, 0.0))

  extra = jax.lax.cond(jnp.any(lost), logspace_grads, lambda: jax.tree_util.tree_map(jnp.zeros_like, grads))
  return grads[0] + extra[0], grads[1] + extra[1], None, None


dag_log_likelihood.defvjp(_ll_fwd, _ll_bwd)


def valid_pairs(ll: jax.Array, target_lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(valid, impossible), bool[B] each, from ll = dag_log_likelihood(...) f32[B].

  valid: the pair has a T-vertex path (ll finite), so it enters the loss. impossible: a pair with
  T > 0 but no path (T > G, or every path through a -inf entry): masked out of the loss and
  counted, never a crash. T = 0 rows are batch padding and count as neither.
  """
  valid = jnp.isfinite(ll)
  return valid, ~valid & (target_lengths > 0)


def dag_nll_per_pair(ll: jax.Array, target_lengths: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """From log P(y | x) f32[B]: (per-pair loss -log P(y | x) / T, 0 where not valid; valid bool[B];
  impossible bool[B]). What training sums (methods.dag) and `dag_nll_loss` averages."""
  valid, impossible = valid_pairs(ll, target_lengths)  # [B] each
  per_pair = jnp.where(valid, -ll / jnp.maximum(target_lengths, 1).astype(jnp.float32), 0.0)  # [B]
  return per_pair, valid, impossible


def dag_nll_loss(log_trans: jax.Array, log_emit: jax.Array, target_lengths: jax.Array,
                 graph_lengths: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(loss f32[], num_valid i32[], num_impossible i32[]).

  loss = mean over valid pairs of -log P(y | x) / T (valid and impossible pairs: `valid_pairs`).
  """
  ll = dag_log_likelihood(log_trans, log_emit, target_lengths, graph_lengths)  # [B]
  per_pair, valid, impossible = dag_nll_per_pair(ll, target_lengths)  # [B] each
  num_valid = jnp.sum(valid).astype(jnp.int32)
  num_impossible = jnp.sum(impossible).astype(jnp.int32)
  return jnp.sum(per_pair) / jnp.maximum(num_valid, 1), num_valid, num_impossible


def dag_best_alignment(log_trans: jax.Array, log_emit: jax.Array, target_lengths: jax.Array,
                       graph_lengths: jax.Array) -> jax.Array:
  """i32[B, M]: vertex of each target position on the most probable T-vertex path (contract).

  Viterbi (the forward recursion with max instead of logsumexp) plus a backtrace; -1 past the
  target length, and -1 everywhere for pairs without a path.
  """
  trans, emit, _ = masked_inputs(log_trans, log_emit, target_lengths, graph_lengths)
  delta = viterbi_forward(trans, emit)  # [M, B, L]
  last_step = jnp.clip(target_lengths - 1, 0, emit.shape[0] - 1)  # [B]
  final = jnp.take_along_axis(delta, last_step[None, :, None], axis=0)[0]  # [B, L]
  possible = jnp.isfinite(_read_out(final, target_lengths, graph_lengths))  # [B]
  last = jnp.clip(graph_lengths - 1, 0, log_trans.shape[-1] - 1)  # [B]
  return viterbi_backtrace(delta, trans, last, jnp.where(possible, target_lengths, 0))
