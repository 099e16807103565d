"""DAG beam search (`dag_beam`): DA-Transformer's best decoder, over the marginal of every path.

A hypothesis is an output prefix y_1 .. y_t, not a path: its forward vector
  a_y[v] = log sum over paths 0 = v_0 < v_1 < ... < v_t = v of prod_i E(v_(i-1), v_i) P(y_i | v_i)^beta
sums every alignment of the prefix to the graph (vertex 0 emits no token, as in the reference,
thu-coai/DA-Transformer's `beamsearch`). One step extends every hypothesis by one token at a later
vertex, a_(y, w)[j] = logsumexp_i (a_y[i] + log E_ij) + beta log P(w | j), so hypotheses of one step
all have t tokens; a prefix whose path reaches the last vertex G - 1 is finished, scored as the
reference scores it: log P(y) / |y|^alpha (|y| counts the token of vertex G - 1, EOS in a trained
model). The answer is the best finished hypothesis; its text drops BOS / EOS and, with
`remove_repeats`, consecutive repeats, as every DAG decoder's does.

Candidates: each vertex offers its `top_cand` most likely tokens (the reference's top_cand_n); the
scores of a token offered by several vertices are summed (logsumexp), the K best (hypothesis,
token) pairs stay alive, and the K best finished ones are kept. With top_cand = V and K at least
the number of prefixes the search is exhaustive (tests/unit/test_decode_dag_beam.py checks it against
enumerating every path and output). Differences from the reference, which walks the graph vertex by
vertex and ranks prefixes of different lengths together: this search is token-synchronous and ranks
only prefixes of one length against each other.

Two implementations of the one search (`--decoder.search`), held to the same enumeration tests and to
each other: `dag_beam_search`, one batched while_loop on the device (fixed shapes: every row runs
as many steps as the batch's largest graph, over all of its vertices), and `dag_beam_search_host`,
which searches each row in numpy on the host (a jax.pure_callback), as the reference's C++ search
does, over its own graph, its alive prefixes and the vertices they can still reach, and stops a row
once no alive prefix can finish among the K best. A step of either is the same three moves: the mass
arriving at each vertex, the finished prefixes (`finished_scores`: both score them with one function),
the surviving extensions (`choose_extensions`: both choose with one function, the LM pool included);
they differ only in the representation each is fast with (fixed-shape log-space sums over all L
vertices and K prefixes on the device; exp-space matmuls over the row's own vertices and live prefixes
on the host), handed to the shared functions as `top` / `take` / `xp`. `--decoder.search=auto` (the default)
takes the one faster on a CPU, the host search without an LM and the device's with one
(measured: docs/lab-notes/2026-11-24-students-cpu-budget.md); on an accelerator the device's (no host callback).

With an n-gram LM (`lm`: an ARPA file over the target pieces, e.g. `python -m nat_jax.lm`'s; read
by the run layer, nat_jax.run.resources) the score is the reference's (log P(y) + gamma log10 P_lm(y)) / |y|^alpha,
P_lm over every token of y from <s> on, its last (EOS) as </s>. The LM term is added to the
`lm_pool` x K best extensions by the graph score (the reference scores every candidate it keeps
after top_cand and top_p; here a pool of the best, so an extension far down the graph's ranking
cannot be lifted by the LM).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from nat_jax.core.graph import clean_log, transition_mask
from nat_jax.core.tokens import BOS_ID, clean_path_tokens
from nat_jax.decode import ngram_lm
from nat_jax.decode.ngram_lm import LmTables, lm_logprob
from nat_jax.decode.options import Options, Rule, choice, hypotheses, option, remove_repeats, weight
from nat_jax.decode.registry import register_decoder
from nat_jax.errors import ConfigError
from nat_jax.views import DecodeOutput, GraphPredictor, RunResources

DEAD = -jnp.inf  # the forward score of no path


@flax.struct.dataclass
class DagBeamState:
  step: jax.Array        # i32[]: tokens in every alive prefix
  seqs: jax.Array        # i32[B, K, L]: alive prefixes (0 after the step-th token)
  forward: jax.Array     # f32[B, K, L]: their forward vectors a_y[v] (-inf: no path; an empty beam is all -inf)
  fin_seqs: jax.Array    # i32[B, K, L]: the K best finished prefixes
  fin_scores: jax.Array  # f32[B, K]: log P(y) / |y|^alpha, -inf when empty
  fin_lengths: jax.Array  # i32[B, K]: their tokens |y|
  lm_score: jax.Array    # f32[B, K]: log10 P_lm of the alive prefixes (0 without an LM)


def lm_context(seqs: jax.Array, step, order: int, xp=jnp) -> jax.Array:
  """The LM context of prefixes i32[..., L] of `step` tokens: their last order - 1 tokens
  i32[..., order - 1], oldest first, <s> (BOS) before the first token, -1 before that (xp: jax.numpy
  or, on the host, numpy)."""
  at = step - (order - 1) + xp.arange(order - 1)  # [order - 1]
  tokens = xp.take(seqs, xp.maximum(at, 0), axis=-1)
  return xp.where(at >= 0, tokens, xp.where(at == -1, BOS_ID, -1))


def log_matmul(a: jax.Array, log_trans: jax.Array) -> jax.Array:
  """a f32[B, K, L] (log), log_trans f32[B, L, L] -> f32[B, K, L]: logsumexp_i a[..., i] + log_trans[i, j],
  as an exp-space matmul shifted by each row's max (no [B, K, L, L] tensor)."""
  peak = jnp.max(a, axis=-1, keepdims=True)  # [B, K, 1]
  peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
  summed = jnp.einsum('bki,bij->bkj', jnp.exp(a - peak), jnp.exp(log_trans))
  return jnp.log(summed) + peak


def merge_by_token(scores: jax.Array, tokens: jax.Array, vocab: int) -> jax.Array:
  """scores f32[B, K, N] of tokens i32[B, N] -> f32[B, K, V]: logsumexp of the scores of each token
  (-inf for a token nobody offers)."""
  peak = jnp.max(scores, axis=-1, keepdims=True)  # [B, K, 1]
  peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
  batch, k, _ = scores.shape
  rows = jnp.arange(batch)[:, None, None]
  hyps = jnp.arange(k)[None, :, None]
  summed = jnp.zeros((batch, k, vocab), jnp.float32).at[rows, hyps, tokens[:, None, :]].add(jnp.exp(scores - peak))
  return jnp.log(summed) + peak


def candidates(log_trans: jax.Array, log_probs: jax.Array, graph_lengths: jax.Array, top_cand: int,
               beta: float) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """What both searches start from: trans f32[B, L, L] (log E, -inf off the graph), token_lp f32[B, L, V]
  (beta log P(y | v)) and the top_cand offers of each vertex, top_lp f32[B, L, c] and top_tok i32[B, L, c]."""
  edges = transition_mask(graph_lengths, log_trans.shape[1])  # [B, L, L]
  trans = jnp.where(edges, clean_log(log_trans, edges), DEAD)  # [B, L, L]
  token_lp = beta * log_probs.astype(jnp.float32)  # [B, L, V]
  top_lp, top_tok = jax.lax.top_k(token_lp, min(top_cand, log_probs.shape[-1]))  # [B, L, c]
  return trans, token_lp, top_lp, top_tok


def finished_scores(at_last, last_lp, last_tok, seqs, step, lm_score, t, alpha: float, lm: Optional[LmTables],
                    gamma: float, xp=jnp):
  """Both searches: the score of finishing each alive prefix with each token offered at the last vertex.
  at_last f32[..., K, 1] (mass arriving at G - 1), last_lp / last_tok [..., c], seqs i32[..., K, L] of
  `step` tokens, lm_score f32[..., K] -> (f32[..., K, c]: (log P + gamma log10 P_lm) / t^alpha, the LM
  context i32[..., K, n - 1] of the prefixes or None without an LM). xp: jax.numpy, or numpy on the host."""
  fin = at_last + last_lp[..., None, :]  # [..., K, c]
  context = None
  if lm is not None:
    context = lm_context(seqs, step, lm.order, xp)  # [..., K, n - 1]
    tokens = xp.broadcast_to(last_tok[..., None, :], fin.shape)
    fin_lm = lm_logprob(lm, xp.broadcast_to(context[..., None, :], fin.shape + (lm.order - 1,)), tokens, xp)
    fin = fin + gamma * (lm_score[..., None] + fin_lm)
  return fin / t ** alpha, context


def choose_extensions(merged, lm_score, context, tokens, k: int, lm: Optional[LmTables], gamma: float, lm_pool: int,
                      top, take, xp=jnp):
  """Both searches: which extensions of the alive prefixes survive a step. merged f32[..., K*N]: each
  prefix's mass with each of N candidate tokens (column col of prefix p at p * N + col; tokens(col) -> the
  token ids), lm_score f32[..., K] and context i32[..., K, n - 1] of the prefixes. Without an LM the K best
  by the graph; with one the lm_pool x K best by the graph, re-ranked with gamma x their LM score.
  top(scores, n) -> (scores, indices) of the n best along the last axis; take(x, index) gathers x's
  prefix axis (axis 1 on the device, 0 on the host); xp: jax.numpy or numpy. Returns (graph score,
  parent, column, token, LM score) of each survivor."""
  n = merged.shape[-1] // lm_score.shape[-1]
  if lm is None:
    best, pick = top(merged, k)
    parent, col = pick // n, pick % n
    return best, parent, col, tokens(col), take(lm_score, parent)
  pool, pick = top(merged, lm_pool * k)
  parent, col = pick // n, pick % n
  pool_lm = take(lm_score, parent) + lm_logprob(lm, take(context, parent), tokens(col), xp)
  _, chosen = top(pool + gamma * pool_lm, k)
  pool, parent, col, pool_lm = (take(x, chosen) for x in (pool, parent, col, pool_lm))
  return pool, parent, col, tokens(col), pool_lm


@flax.struct.dataclass
class DeviceGraph:
  """What each step of the device search reads (from `candidates`, padded to L vertices)."""
  trans: jax.Array     # f32[B, L, L]: log E, -inf off the graph
  token_lp: jax.Array  # f32[B, L, V]: beta log P(y | v)
  top_tok: jax.Array   # i32[B, L, c]: each vertex's offered tokens
  offer: jax.Array     # f32[B, L*c]: their beta log P at inner vertices, -inf elsewhere
  inner: jax.Array     # bool[B, L]: vertices where a prefix can stop and go on
  last: jax.Array      # i32[B]: the last vertex G - 1 (0 for an empty graph)
  last_lp: jax.Array   # f32[B, c]: the last vertex's offers
  last_tok: jax.Array  # i32[B, c]


def device_graph(log_trans, log_probs, graph_lengths, top_cand: int, beta: float) -> DeviceGraph:
  batch, size, _ = log_probs.shape
  trans, token_lp, top_lp, top_tok = candidates(log_trans, log_probs, graph_lengths, top_cand, beta)
  vertex = jnp.arange(size)[None, :]  # [1, L]
  inner = (vertex > 0) & (vertex < (graph_lengths - 1)[:, None])  # [B, L]
  last = jnp.maximum(graph_lengths - 1, 0)  # [B]
  return DeviceGraph(trans, token_lp, top_tok, jnp.where(inner[:, :, None], top_lp, DEAD).reshape(batch, -1), inner,
                     last, jnp.take_along_axis(top_lp, last[:, None, None], axis=1)[:, 0],
                     jnp.take_along_axis(top_tok, last[:, None, None], axis=1)[:, 0])


def device_finish(g: DeviceGraph, state: DagBeamState, arrive, alpha: float, lm, gamma: float):
  """The K best finished prefixes after this step (kept ones and new ones ending at G - 1), and the LM
  context of the alive prefixes (None without an LM)."""
  batch, k, size = state.seqs.shape
  t = state.step + 1
  at_last = jnp.take_along_axis(arrive, g.last[:, None, None], axis=2)  # [B, K, 1]
  fin, context = finished_scores(at_last, g.last_lp, g.last_tok, state.seqs, state.step, state.lm_score,
                                 t.astype(jnp.float32), alpha, lm, gamma)  # [B, K, c]
  fin_tok = jnp.broadcast_to(g.last_tok[:, None, :], fin.shape)
  fin_new = jnp.broadcast_to(state.seqs[:, :, None, :], fin.shape + (size,))
  fin_new = fin_new.at[:, :, :, state.step].set(fin_tok)  # [B, K, c, L]
  c = fin.shape[-1]
  all_scores = jnp.concatenate([state.fin_scores, fin.reshape(batch, k * c)], axis=1)
  all_seqs = jnp.concatenate([state.fin_seqs, fin_new.reshape(batch, k * c, size)], axis=1)
  all_lengths = jnp.concatenate([state.fin_lengths, jnp.full((batch, k * c), t, jnp.int32)], axis=1)
  fin_scores, keep = jax.lax.top_k(all_scores, k)
  return (jnp.take_along_axis(all_seqs, keep[:, :, None], axis=1), fin_scores,
          jnp.take_along_axis(all_lengths, keep, axis=1), context)


def device_top(scores, n: int):
  return jax.lax.top_k(scores, min(n, scores.shape[-1]))


def device_take(x, index):
  """x[B, K, ...] at index i32[B, P] along the prefix axis -> [B, P, ...]."""
  return jnp.take_along_axis(x, index.reshape(index.shape + (1,) * (x.ndim - 2)), axis=1)


def device_extend(g: DeviceGraph, state: DagBeamState, arrive, context, lm, gamma: float, lm_pool: int):
  """The K best alive prefixes of one more token (offered at an inner vertex, summed over the vertices
  offering it; chosen by `choose_extensions`): (seqs, forward, lm_score)."""
  batch, k, size = state.seqs.shape
  vocab = g.token_lp.shape[-1]
  c = g.top_tok.shape[-1]
  offers = (arrive[:, :, :, None] + g.offer.reshape(batch, 1, size, c)).reshape(batch, k, size * c)
  merged = merge_by_token(offers, g.top_tok.reshape(batch, size * c), vocab).reshape(batch, k * vocab)  # [B, K*V]
  best, parent, _, token, lm_score = choose_extensions(merged, state.lm_score, context,
                                                       lambda col: col.astype(jnp.int32), k, lm, gamma, lm_pool,
                                                       device_top, device_take)  # [B, K] each
  grown = device_take(arrive, parent)  # [B, K, L]
  emit = jnp.take_along_axis(g.token_lp, jnp.broadcast_to(token[:, None, :], (batch, size, k)), axis=2)  # [B, L, K]
  forward = jnp.where(g.inner[:, None, :] & jnp.isfinite(best)[:, :, None], grown + jnp.swapaxes(emit, 1, 2), DEAD)
  seqs = device_take(state.seqs, parent).at[:, :, state.step].set(token)
  return seqs, forward, lm_score


def dag_beam_search(log_trans: jax.Array, log_probs: jax.Array, graph_lengths: jax.Array, beam_size: int,
                    top_cand: int, alpha: float, beta: float, lm: Optional[LmTables] = None, gamma: float = 0.0,
                    lm_pool: int = 4) -> DagBeamState:
  """The search over graphs log_trans f32[B, L, L], log_probs f32[B, L, V], graph_lengths i32[B]
  (with `lm`: + gamma x its log10 probability, added to the lm_pool x K best extensions), on the
  device: one jax.lax.while_loop over the batch, every row padded to L vertices and K prefixes."""
  batch, size, _ = log_probs.shape
  k = beam_size
  g = device_graph(log_trans, log_probs, graph_lengths, top_cand, beta)
  root = jnp.where(jnp.arange(size) == 0, 0.0, DEAD)  # [L]
  init = DagBeamState(
      step=jnp.int32(0), seqs=jnp.zeros((batch, k, size), jnp.int32),
      forward=jnp.concatenate([jnp.broadcast_to(root, (batch, 1, size)), jnp.full((batch, k - 1, size), DEAD)], axis=1),
      fin_seqs=jnp.zeros((batch, k, size), jnp.int32), fin_scores=jnp.full((batch, k), DEAD),
      fin_lengths=jnp.zeros((batch, k), jnp.int32), lm_score=jnp.zeros((batch, k), jnp.float32))

  def step(state: DagBeamState) -> DagBeamState:
    arrive = log_matmul(state.forward, g.trans)  # [B, K, L]: mass arriving at each vertex
    fin_seqs, fin_scores, fin_lengths, context = device_finish(g, state, arrive, alpha, lm, gamma)
    seqs, forward, lm_score = device_extend(g, state, arrive, context, lm, gamma, lm_pool)
    return DagBeamState(step=state.step + 1, seqs=seqs, forward=forward, fin_seqs=fin_seqs, fin_scores=fin_scores,
                        fin_lengths=fin_lengths, lm_score=lm_score)

  def going(state: DagBeamState) -> jax.Array:
    return (state.step < size - 1) & jnp.any(jnp.isfinite(state.forward))

  return jax.lax.while_loop(going, step, init)


@flax.struct.dataclass
class Finished:
  """The K best finished prefixes of each row, best first (the device search's fin_* fields)."""
  fin_seqs: jax.Array     # i32[B, K, L]
  fin_scores: jax.Array   # f32[B, K]: log P(y) / |y|^alpha (+ the LM term), -inf when empty
  fin_lengths: jax.Array  # i32[B, K]


def best_first(scores: np.ndarray, n: int) -> np.ndarray:
  """Indices of the n largest finite scores, best first; equal scores among them in index order (as
  jax.lax.top_k; which of several equal scores at the n-th place is kept is argpartition's choice)."""
  pick = np.argpartition(-scores, n - 1)[:n] if scores.size > n else np.arange(scores.size)
  pick = pick[np.lexsort((pick, -scores[pick]))]
  return pick[np.isfinite(scores[pick])]


class HostGraph(NamedTuple):
  """One row's graph on the host, over its own G vertices (numpy; see `host_search`)."""
  e_trans: np.ndarray   # f32[G, G]: exp(log E), 0 off the graph
  tokens: np.ndarray    # i32[U]: the tokens offered at inner vertices
  offers: np.ndarray    # f32[G, U]: W[v, u], the offered probability of token u at vertex v (0: not offered)
  emit: np.ndarray      # f32[G, U]: beta log P(u | v), -inf at vertices 0 and G - 1
  last_lp: np.ndarray   # f32[c]: the last vertex's offers
  last_tok: np.ndarray  # i32[c]


def host_graph(trans, top_lp, top_tok, cand_lp, g: int) -> HostGraph:
  c = top_tok.shape[1]
  tokens, first, which = np.unique(top_tok[1:g - 1], return_index=True, return_inverse=True)  # [U]: offered inside
  offers = np.zeros((g, len(tokens)), np.float32)
  np.add.at(offers, (np.repeat(np.arange(1, g - 1), c), which.ravel()), np.exp(top_lp[1:g - 1].ravel()))
  emit = cand_lp[:g, c + first]  # [G, U]: column c + first offers the token (at vertex 1 + first // c)
  emit[[0, g - 1]] = -np.inf  # alive prefixes end at inner vertices
  return HostGraph(np.exp(trans[:g, :g]), tokens, offers, emit, top_lp[g - 1], top_tok[g - 1])


class HostBeam(NamedTuple):
  """One row's search state on the host: alive prefixes over vertices lo .. G - 1, and the finished ones."""
  forward: np.ndarray      # f32[K', G - lo]
  seqs: np.ndarray         # i32[K', L]
  lm_score: np.ndarray     # f32[K']
  fin_seqs: np.ndarray     # i32[<= K, L], best first
  fin_scores: np.ndarray   # f32[<= K]
  fin_lengths: np.ndarray  # i32[<= K]


def host_finish(beam: HostBeam, arrive, g: HostGraph, lo: int, k: int, alpha: float, lm, gamma: float):
  """The K best finished prefixes (kept and new ones ending at G - 1) and the alive ones' LM context."""
  t = lo + 1
  fin, context = finished_scores(arrive[:, -1:], g.last_lp, g.last_tok, beam.seqs, lo, beam.lm_score, t, alpha, lm,
                                 gamma, np)  # [K', c]
  scores = np.concatenate([beam.fin_scores, fin.ravel()])
  keep = best_first(scores, k)
  old = keep < len(beam.fin_scores)
  parent, j = np.divmod(keep[~old] - len(beam.fin_scores), len(g.last_tok))
  seqs, lengths = np.empty((len(keep), beam.seqs.shape[1]), np.int32), np.full(len(keep), t, np.int32)
  seqs[old], lengths[old] = beam.fin_seqs[keep[old]], beam.fin_lengths[keep[old]]
  seqs[~old] = beam.seqs[parent]
  seqs[~old, lo] = g.last_tok[j]
  return seqs, scores[keep], lengths, context


def host_top(scores: np.ndarray, n: int):
  pick = best_first(scores, n)
  return scores[pick], pick


def host_extend(beam: HostBeam, arrive, merged, context, g: HostGraph, lo: int, k: int, lm, gamma: float,
                lm_pool: int):
  """The K best alive prefixes of one more token (merged f32[K' * U]: each prefix + offered token's
  mass; chosen by `choose_extensions`): (forward, seqs, lm_score, mass), dead prefixes dropped; mass
  f32[K']: each one's largest forward score."""
  _, parent, col, token, lm_score = choose_extensions(merged, beam.lm_score, context, lambda col: g.tokens[col], k,
                                                      lm, gamma, lm_pool, host_top, lambda x, i: x[i], np)
  forward = (arrive[parent] + g.emit[lo:, col].T)[:, 1:]  # [K', G - t]: no prefix of t tokens sits before t
  seqs = beam.seqs[parent]
  seqs[:, lo] = token
  mass = forward.max(axis=1)
  alive = np.isfinite(mass)
  return forward[alive], seqs[alive], lm_score[alive], mass[alive]


def cannot_improve(beam: HostBeam, mass, k: int, bound: float, gamma: float) -> bool:
  """No alive prefix can finish among the K best: its mass (+ gamma LM) over at most bound = (G - 1)^alpha
  bounds every output extending it."""
  if len(beam.fin_scores) < k or not len(beam.seqs):
    return False
  peak = mass[:, None]
  best = np.max(np.log(np.sum(np.exp(beam.forward - peak), axis=1)) + peak[:, 0] + gamma * beam.lm_score)
  return bool(best / bound < beam.fin_scores[-1])


def host_search(trans: np.ndarray, top_lp: np.ndarray, top_tok: np.ndarray, cand_lp: np.ndarray, length: int,
                beam_size: int, alpha: float, lm: Optional[LmTables] = None, gamma: float = 0.0,
                lm_pool: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """One row of `candidates` searched on the host in numpy: the device search's steps, on the graph's
  own G = length vertices and its alive prefixes only. Both sums over vertices are exp-space matmuls:
  a step's arriving mass is exp(a) @ exp(trans), its offers merged by token are that @ W (W[v, u]: the
  offered probability of token u at inner vertex v), and after t tokens only vertices >= t are
  computed. A row stops when no alive prefix can still finish among the K best: a prefix's mass (and
  LM score) bounds every output extending it, and an output of at most G - 1 tokens is divided by at
  most (G - 1)^alpha, so (mass + gamma LM) / (G - 1)^alpha bounds its score; the K best finished
  outputs are the ones the full search would keep.
  trans f32[L, L], top_lp / top_tok [L, c], cand_lp f32[L, L*c] (beta log P of each offered token,
  top_tok flattened, at every vertex); `lm`: numpy tables (ngram_lm.host_tables).
  Returns fin_seqs i32[K, L], fin_scores f32[K], fin_lengths i32[K]."""
  size = top_tok.shape[0]
  k, length = beam_size, int(length)
  forward = np.full((1, max(length, 1)), -np.inf, np.float32)
  forward[0, 0] = 0.0
  beam = HostBeam(forward, np.zeros((1, size), np.int32), np.zeros(1, np.float32), np.zeros((0, size), np.int32),
                  np.zeros(0, np.float32), np.zeros(0, np.int32))
  if length >= 2:  # else no path emits a token
    g = host_graph(trans, top_lp, top_tok, cand_lp, length)
    lo = 0
    with np.errstate(divide='ignore'):
      while len(beam.seqs) and lo < size - 1:
        peak = beam.forward.max(axis=1, keepdims=True)  # [K', 1]
        reach = np.exp(beam.forward - peak) @ g.e_trans[lo:, lo:]  # [K', G - lo]: exp(arrive - peak)
        arrive = np.log(reach) + peak
        merged = (np.log(reach @ g.offers[lo:]) + peak).ravel()  # [K' * U]
        fin_seqs, fin_scores, fin_lengths, context = host_finish(beam, arrive, g, lo, k, alpha, lm, gamma)
        forward, seqs, lm_score, mass = host_extend(beam, arrive, merged, context, g, lo, k, lm, gamma, lm_pool)
        beam = HostBeam(forward, seqs, lm_score, fin_seqs, fin_scores, fin_lengths)
        lo += 1
        if cannot_improve(beam, mass, k, (length - 1) ** alpha, gamma):
          break
  pad = k - len(beam.fin_scores)
  fin_scores = np.pad(beam.fin_scores, (0, pad), constant_values=-np.inf).astype(np.float32)
  return np.pad(beam.fin_seqs, ((0, pad), (0, 0))), fin_scores, np.pad(beam.fin_lengths, (0, pad))


def dag_beam_search_host(log_trans: jax.Array, log_probs: jax.Array, graph_lengths: jax.Array, beam_size: int,
                         top_cand: int, alpha: float, beta: float, lm: Optional[LmTables] = None,
                         gamma: float = 0.0, lm_pool: int = 4) -> Finished:
  """`dag_beam_search` with the search on the host (`host_search`, row after row, in one
  jax.pure_callback per batch; jittable): the device computes `candidates` and the emission of every
  offered token at every vertex, cand_lp f32[B, L, L*c], so the host never sees the [B, L, V]
  distribution. `lm`: numpy tables (ngram_lm.host_tables). Rows run on the calling thread, not a thread
  pool: a row's search is many small numpy calls, which hold the GIL."""
  trans, token_lp, top_lp, top_tok = candidates(log_trans, log_probs, graph_lengths, top_cand, beta)
  batch, size, c = top_tok.shape
  flat = jnp.broadcast_to(top_tok.reshape(batch, 1, size * c), (batch, size, size * c))
  cand_lp = jnp.take_along_axis(token_lp, flat, axis=2)  # [B, L, L*c]

  def on_host(trans, top_lp, top_tok, cand_lp, lengths):
    trans, top_lp, top_tok, cand_lp, lengths = (np.asarray(x) for x in (trans, top_lp, top_tok, cand_lp, lengths))
    rows = [host_search(trans[r], top_lp[r], top_tok[r], cand_lp[r], lengths[r], beam_size, alpha, lm, gamma,
                        lm_pool) for r in range(batch)]
    return tuple(np.stack(x) for x in zip(*rows))

  shapes = (jax.ShapeDtypeStruct((batch, beam_size, size), jnp.int32),
            jax.ShapeDtypeStruct((batch, beam_size), jnp.float32), jax.ShapeDtypeStruct((batch, beam_size), jnp.int32))
  seqs, scores, lengths = jax.pure_callback(on_host, shapes, trans, top_lp, top_tok, cand_lp, graph_lengths)
  return Finished(seqs, scores, lengths)


SEARCHES = {'host': dag_beam_search_host, 'device': dag_beam_search}  # --decoder.search


def chosen_search(search: str, lm: bool, platform: str = 'cpu', devices: int = 1) -> str:
  """--decoder.search, 'auto' resolved to the faster search: on a CPU the host without an LM, the device
  with one (whose lookups would be many small numpy calls on the host);
  on an accelerator always the device, so a default decoder never calls back to the host
  (nat_jax.aot counts host callbacks per program). With several devices a batch's rows are split over
  them and a host callback stalls their collectives (XLA:CPU's in-process all-reduce waits for the
  device running the callback), so the search stays on the devices there too."""
  if search != 'auto':
    return search
  return 'device' if lm or platform != 'cpu' or devices > 1 else 'host'


def prepare_lm(method, options: 'DagBeamOptions', resources: Optional[RunResources], platform: str = 'cpu'):
  """The registry's prepare: resolve `search` for `platform`, and turn `lm` (an ARPA file over the run's
  sentencepiece pieces, read by the run layer: `resources.ngram_model`) into LmTables once; `dag_beam`
  gets them as `lm_tables`, as device arrays (jit arguments) for the device search, as numpy arrays (held
  by the host search's callback) for the host one. Without an LM, nothing."""
  search = chosen_search(options.search, bool(options.lm), platform, jax.device_count())
  if search == 'host' and jax.device_count() > 1:
    raise ConfigError(f'--decoder.search=host searches on one device; this process has {jax.device_count()} (a '
                      'batch is split over them): use --decoder.search=device or auto.')
  kwargs = {**options.kwargs(), 'search': search}
  path = kwargs.pop('lm')
  if not path:
    return (lambda extra, src: {}), None, kwargs
  if resources is None or resources.tokenizer is None:
    raise ConfigError('--decoder.lm needs the run\'s tokenizer to map the LM\'s pieces to token ids.')
  tokenizer = resources.tokenizer
  tables = ngram_lm.build_tables(resources.ngram_model(path), tokenizer.word_ids(), tokenizer.vocab_size)
  if search == 'host':
    return (lambda extra, src: {}), None, {**kwargs, 'lm_tables': ngram_lm.host_tables(tables)}
  return (lambda extra, src: {'lm_tables': extra}), tables, kwargs


@dataclasses.dataclass(frozen=True)
class DagBeamOptions(Options):
  beam_size: int = hypotheses(16, 'output prefixes kept per sentence')
  top_cand: int = option(5, 'best tokens each vertex offers to the prefixes',
                         Rule(1, 1 << 20, words='1 to 1048576 candidate tokens per vertex (past the vocabulary: '
                                                'all of it)'))
  alpha: float = weight(1.1, 'length exponent of the final score (1.0 was best on our validation set; 0: log P(y) '
                             'alone, where the shortest output, often the empty one, is the true best)')
  beta: float = weight(1.0, 'exponent of the token probabilities against the transitions: P(y | v)^beta (0: tokens '
                            'do not count, every output of a length ties and the transitions choose the length)')
  remove_repeats: bool = remove_repeats()
  lm: str = option('', "an ARPA n-gram model over the run's target pieces (set by the command line or the server, "
                       'never by a request)', names_file=True)
  gamma: float = weight(0.1, "the LM's weight (used with `lm`; 1.0 was best on our validation set, the reference's "
                             '0.1 suits converged models)')
  lm_pool: int = option(4, 'extensions per beam re-ranked with the LM (lm_pool x beam_size)', Rule(1, 64))
  search: str = choice('auto', 'host (numpy, one sentence at a time, stops early), device (one batched loop) or '
                               'auto: the host on a one-device CPU without an LM, else the device; same outputs',
                       ('auto', *SEARCHES))


@register_decoder('dag_beam', GraphPredictor, DagBeamOptions, prepare=prepare_lm, row_bounds=True,
                  about='DA-Transformer beam search over outputs, each scored by the sum over all of its paths '
                        'through the graph, (log P(y) + gamma log10 P_lm(y)) / |y|^alpha, optionally with an n-gram '
                        'language model over the target pieces (`python -m nat_jax.lm` estimates one from a run). '
                        'Exact against enumeration on small graphs, with and without an LM.')
def dag_beam(graphs: GraphPredictor, src, beam_size: int = 16, top_cand: int = 5, alpha: float = 1.1,
             beta: float = 1.0, remove_repeats: bool = True, gamma: float = 0.1, lm_pool: int = 4,
             search: str = 'auto', lm_tables: Optional[LmTables] = None) -> DecodeOutput:
  """The text of the best finished prefix of the search (defaults: the reference's top_cand_n, alpha,
  beta and gamma (used only with an LM, `lm`); its beam of 200 over prefix-vertex pairs is a beam of
  prefixes here). `search`: 'host' (`dag_beam_search_host`, each row in numpy on the host), 'device'
  (`dag_beam_search`, one batched loop on the device) or 'auto' (`chosen_search`: on a CPU the host
  without an LM, the device with one; on an accelerator the device); both give the same outputs.
  Returns its normalized score; aux 'length' (text tokens) and 'path' (tokens incl. the last vertex's)."""
  graph = graphs.predict_graph(src)
  log_probs = graphs.vertex_log_probs(graph.hidden)
  search = chosen_search(search, lm_tables is not None, jax.default_backend(), jax.device_count())
  final = SEARCHES[search](graph.log_trans, log_probs, graph.graph_lengths, beam_size, top_cand, alpha, beta,
                           lm_tables, gamma, lm_pool)
  found = jnp.isfinite(final.fin_scores[:, 0])  # [B]: a row with no finished prefix (no path) gives an empty text
  steps = jnp.where(found, final.fin_lengths[:, 0], 0)
  out, count = clean_path_tokens(final.fin_seqs[:, 0], steps, remove_repeats, graphs.max_decode_len(src.shape[1]))
  return DecodeOutput(out, final.fin_scores[:, 0], {'length': count, 'path': steps})
