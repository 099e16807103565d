"""DA-Transformer decoders: pure functions over a predicted graph, and the registered decoders.

Pure functions take log_trans f32[B, L, L] (log E_ij, ignored outside 0 <= i < j < G),
log_probs f32[B, L, V] (log P(y | v), ignored for v >= G), graph_lengths i32[B], and return
tokens i32[B, L] (left-aligned, 0-padded) and lengths i32[B]; an empty graph (G = 0) gives an
empty output.

Registered decoders (`dag_greedy`, `dag_lookahead`, `dag_joint_viterbi`) run on a GraphPredictor
view (nat_jax.views), one jitted call per batch. Greedy's path depends on the
transitions only, so it projects just the vertices on its path onto the vocabulary (gathered into
L slots, since the path is walked to the last vertex before repeats are removed and the length
bound applied, so on a CPU it costs about what projecting the whole graph does); lookahead and
joint-Viterbi need every vertex's best token score and project the whole graph.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from nat_jax.core.graph import IMPOSSIBLE, clean_log, transition_mask, viterbi_backtrace, viterbi_forward
from nat_jax.core.reduce import argmax, max_and_argmax
from nat_jax.core.tokens import clean_path_tokens
from nat_jax.decode.options import Options, remove_repeats, weight
from nat_jax.decode.registry import register_decoder
from nat_jax.views import DecodeOutput, GraphPredictor


def vertex_scores(log_probs: jax.Array, graph_lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(best token i32[B, L], its log-probability f32[B, L], NEG_INF for v >= G)."""
  in_graph = jnp.arange(log_probs.shape[1])[None, :] < graph_lengths[:, None]  # [B, L]
  top, token = max_and_argmax(log_probs)  # [B, L]
  return token, clean_log(top, in_graph)


def path_tokens(path: jax.Array, tokens: jax.Array) -> jax.Array:
  """tokens[b, path[b, k]] where path >= 0, else 0 (path i32[B, K], tokens i32[B, L]) -> i32[B, K]."""
  picked = jnp.take_along_axis(tokens, jnp.maximum(path, 0), axis=1)  # [B, K]
  return jnp.where(path >= 0, picked, 0)


def successors(log_trans: jax.Array, bonus: jax.Array, graph_lengths: jax.Array) -> jax.Array:
  """i32[B, L]: each vertex's next vertex argmax_j (log E_ij + bonus_j) (bonus f32[B, L]); the last
  vertex G - 1 (and padding) stays put."""
  size = log_trans.shape[1]
  mask = transition_mask(graph_lengths, size)  # [B, L, L]
  scores = jnp.where(mask, clean_log(log_trans, mask) + bonus[:, None, :], -jnp.inf)  # [B, L, L]
  vertex = jnp.arange(size)[None, :]  # [1, L]
  nxt = argmax(scores)  # [B, L]
  return jnp.where(vertex < graph_lengths[:, None] - 1, nxt, vertex)


def follow_argmax(log_trans: jax.Array, bonus: jax.Array, graph_lengths: jax.Array,
                   max_steps: int = 0) -> jax.Array:
  """i32[B, K]: path from vertex 0 taking next = argmax_j (log E_ij + bonus_j) until vertex G - 1; -1 after.

  No sequential loop: every vertex's successor is one argmax over [B, L, L]; the vertices
  reachable from 0 are then marked by pointer doubling (after round t the set holds the first
  2^(t+1) path vertices, and the successor table jumps 2^(t+1) steps), ceil(log2 L) rounds of
  [B, L] gathers and scatters. Paths strictly increase, so sorting the marked vertices gives the
  path. K = max_steps (0: L) bounds it; a longer path is cut after K vertices. bonus f32[B, L].
  """
  batch, size, _ = log_trans.shape
  steps = min(max_steps or size, size)
  vertex = jnp.arange(size)[None, :]  # [1, L]
  nxt = successors(log_trans, bonus, graph_lengths)  # [B, L]
  rows = jnp.arange(batch)[:, None]
  on = ((vertex == 0) & (graph_lengths[:, None] > 0)).astype(jnp.int32)  # [B, L]
  for _ in range(max(1, math.ceil(math.log2(size))) + 1):
    on = on.at[rows, nxt].max(on)  # on[nxt[i]] |= on[i]
    nxt = jnp.take_along_axis(nxt, nxt, axis=1)  # successor of the successor
  position = jnp.cumsum(on, axis=1) - 1  # [B, L]
  dest = jnp.where((on > 0) & (position < steps), position, steps)  # steps = dropped
  return jnp.full((batch, steps), -1, jnp.int32).at[rows, dest].set(
      jnp.broadcast_to(vertex, (batch, size)).astype(jnp.int32), mode='drop')


def _joint_viterbi_path(log_trans: jax.Array, best: jax.Array, graph_lengths: jax.Array,
                        beta: float) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(path i32[B, L], length i32[B], normalized score f32[B]) of joint-Viterbi (best f32[B, L]: max_y log P)."""
  size = log_trans.shape[1]
  trans = clean_log(log_trans, transition_mask(graph_lengths, size))  # [B, L, L]
  delta = viterbi_forward(trans, jnp.broadcast_to(best[None], (size,) + best.shape))  # [L, B, L]
  last = jnp.clip(graph_lengths - 1, 0, size - 1)  # [B]
  final = jnp.take_along_axis(delta, last[None, :, None], axis=2)[..., 0]  # [L(m), B]: S_m
  num = jnp.arange(1, size + 1, dtype=jnp.float32)[:, None]  # [L, 1]
  normed = jnp.where(final > IMPOSSIBLE, final / num ** beta, -jnp.inf)  # [L, B]
  found = jnp.any(final > IMPOSSIBLE, axis=0)  # [B]
  top, best_m = max_and_argmax(normed, axis=0)  # [B]
  length = jnp.where(found, best_m + 1, 0).astype(jnp.int32)
  return viterbi_backtrace(delta, trans, last, length), length, jnp.where(found, top, -jnp.inf)


def joint_viterbi(log_trans: jax.Array, log_probs: jax.Array, graph_lengths: jax.Array,
                  beta: float) -> tuple[jax.Array, jax.Array]:
  """Contract: (tokens i32[B, L], length i32[B]).

  For every m, S_m = max over m-vertex paths 0 -> G-1 of sum log E + sum_v max_y log P(y | v)
  (a Viterbi pass over L steps); the output length is m* = argmax_m S_m / m**beta and the tokens
  are the argmax tokens along the best m*-vertex path.
  """
  tokens, best = vertex_scores(log_probs, graph_lengths)  # [B, L] each
  path, length, _ = _joint_viterbi_path(log_trans, best, graph_lengths, beta)
  return path_tokens(path, tokens), length


# --- registered decoders over a GraphPredictor view ------------------------------------------
def _path_score(log_trans: jax.Array, path: jax.Array) -> jax.Array:
  """f32[B]: sum of log E along path i32[B, K] (-1 = past the end)."""
  src, dst = jnp.maximum(path[:, :-1], 0), path[:, 1:]  # [B, K-1]
  rows = jnp.take_along_axis(log_trans, src[:, :, None], axis=1)  # [B, K-1, L]
  step = jnp.take_along_axis(rows, jnp.maximum(dst, 0)[:, :, None], axis=2)[..., 0]  # [B, K-1]
  return jnp.sum(jnp.where(dst >= 0, step, 0.0), axis=1)


def _finish(graphs: GraphPredictor, src, path: jax.Array, tokens: jax.Array, score: jax.Array,
            dedup: bool) -> DecodeOutput:
  """DecodeOutput of a path i32[B, K] (-1 past its end) and its tokens i32[B, K]: text tokens by
  `clean_path_tokens` within the method's length bound; aux 'length' (text tokens) and 'path' (vertices)."""
  path_len = jnp.sum(path >= 0, axis=1).astype(jnp.int32)
  out, count = clean_path_tokens(tokens, path_len, dedup, graphs.max_decode_len(src.shape[1]))
  return DecodeOutput(out, score, {'length': count, 'path': path_len})


def greedy_path(graphs: GraphPredictor, src) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(path i32[B, L] (-1 past its end), its tokens i32[B, L], score f32[B]) of `dag_greedy`: follow
  the argmax transition from vertex 0 to the last vertex; the argmax token of each visited vertex.
  Only the vertices on the path go through the vocabulary projection."""
  graph = graphs.predict_graph(src)
  log_trans, lengths_g = graph.log_trans, graph.graph_lengths
  bonus = jnp.zeros(log_trans.shape[:2], jnp.float32)  # [B, L]
  path = follow_argmax(log_trans, bonus, lengths_g)  # [B, L]
  on_path = jnp.take_along_axis(graph.hidden, jnp.maximum(path, 0)[:, :, None], axis=1)  # [B, K, D]
  log_probs = graphs.vertex_log_probs(on_path)  # [B, K, V]
  top, token = max_and_argmax(log_probs)  # [B, K]
  tokens = jnp.where(path >= 0, token, 0)
  score = _path_score(log_trans, path) + jnp.sum(jnp.where(path >= 0, top, 0.0), axis=1)
  return path, tokens, score


def _full_graph(graphs: GraphPredictor, src):
  """(log_trans [B, L, L], log_probs [B, L, V], graph_lengths [B]) with every vertex projected."""
  graph = graphs.predict_graph(src)
  return graph.log_trans, graphs.vertex_log_probs(graph.hidden), graph.graph_lengths


def lookahead_path(graphs: GraphPredictor, src) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(path, tokens, score) of `dag_lookahead`: next vertex = argmax_j log E_ij + max_y log P(y | j);
  the argmax token of each visited vertex."""
  log_trans, log_probs, lengths_g = _full_graph(graphs, src)
  best_tokens, bonus = vertex_scores(log_probs, lengths_g)  # [B, L] each
  path = follow_argmax(log_trans, bonus, lengths_g)  # [B, L]
  score = _path_score(log_trans, path) + jnp.sum(jnp.where(path >= 0, jnp.take_along_axis(
      bonus, jnp.maximum(path, 0), axis=1), 0.0), axis=1)
  return path, path_tokens(path, best_tokens), score


def joint_viterbi_path(graphs: GraphPredictor, src, beta: float = 1.0) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(path, tokens, normalized path score) of `dag_joint_viterbi`: the best path per length, length
  chosen by score / m**beta (contract `joint_viterbi`)."""
  log_trans, log_probs, lengths_g = _full_graph(graphs, src)
  tokens, best = vertex_scores(log_probs, lengths_g)
  path, _, score = _joint_viterbi_path(log_trans, best, lengths_g, beta)
  return path, path_tokens(path, tokens), score


# The path each DAG decoder takes (options as the decoder's, less remove_repeats): also drawn by nat_jax.dagviz.
DAG_PATHS = {'dag_greedy': greedy_path, 'dag_lookahead': lookahead_path, 'dag_joint_viterbi': joint_viterbi_path}


@dataclasses.dataclass(frozen=True)
class PathOptions(Options):
  remove_repeats: bool = remove_repeats()


@dataclasses.dataclass(frozen=True)
class JointViterbiOptions(PathOptions):
  beta: float = weight(1.0, 'length exponent of the normalisation score / m^beta (the papers tune it per task, 0.1 '
                            'to 3.5)')


@register_decoder('dag_greedy', GraphPredictor, PathOptions, row_bounds=True,
                  about='DA-Transformer: from vertex 0, follow the most probable transition to the last vertex and '
                        'read the most probable token of every vertex on the path. Only the path is projected onto '
                        'the vocabulary; BOS, EOS and PAD leave the text, and the length bound applies after repeat '
                        'removal.')
def dag_greedy(graphs: GraphPredictor, src, remove_repeats: bool = True) -> DecodeOutput:
  """The text of `greedy_path`."""
  return _finish(graphs, src, *greedy_path(graphs, src), remove_repeats)


@register_decoder('dag_lookahead', GraphPredictor, PathOptions, row_bounds=True,
                  about='DA-Transformer: as `dag_greedy`, but the next vertex maximises the transition plus that '
                        "vertex's best token score (log E_ij + max_y log P(y | j)). The DA-Transformer recipes' "
                        'default: one loop-free program per batch.')
def dag_lookahead(graphs: GraphPredictor, src, remove_repeats: bool = True) -> DecodeOutput:
  """The text of `lookahead_path`."""
  return _finish(graphs, src, *lookahead_path(graphs, src), remove_repeats)


@register_decoder('dag_joint_viterbi', GraphPredictor, JointViterbiOptions, row_bounds=True,
                  about='DA-Transformer: for every length m, the best path of m vertices scored by its transitions '
                        "plus each vertex's best token; the length with the best score / m^beta wins (FA-DAT's "
                        'joint-Viterbi decoding).')
def dag_joint_viterbi(graphs: GraphPredictor, src, beta: float = 1.0, remove_repeats: bool = True) -> DecodeOutput:
  """The text of `joint_viterbi_path`; the returned score is that normalized path score."""
  return _finish(graphs, src, *joint_viterbi_path(graphs, src, beta), remove_repeats)
