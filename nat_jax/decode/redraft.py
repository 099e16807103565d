"""Re-drafting (drafted decoding, `--decoder.update=redraft`): after every verifier pass a
whole-output drafter drafts the next window again, conditioned on the prefix the verifier has made
final, instead of leaving its first draft (misaligned after the first rejection) in place.

Each re-drafter is a WindowDrafter (nat_jax.views) that does not read the verifier's
states; it is built from the drafter run's view and the source inside the same jitted call:

- DA-Transformer (GraphPredictor, decoder `dag_lookahead`): the graph depends only on the source,
  so re-drafting needs no network pass. The final prefix y_1..y_k is aligned to the graph by a
  Viterbi recursion over vertex paths from vertex 0 (which emits BOS): alpha_k(u) = max_v
  alpha_{k-1}(v) + log E_vu + log P(y_k | u), extended by the tokens each pass makes final. The
  draft continues from the best end vertex argmax_u alpha_k(u) the way `dag_lookahead` walks
  (next = argmax_j log E_ij + max_y log P(y | j), the argmax token of each vertex, repeats of the
  previous token dropped, EOS on reaching the last vertex). Before any token is final this is
  exactly `dag_lookahead`'s output.
- CMLM (MaskPredictor, decoder `mask_predict`): the first draft is Mask-Predict's output; each
  re-draft is one more fill pass with the final prefix unmasked and the rest of the predicted
  length masked (the length grows to the prefix + 1 when the prefix has outrun it). One CMLM
  decoder pass per verifier pass.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from nat_jax.core.graph import clean_log, first_vertex, transition_mask, viterbi_step
from nat_jax.core.reduce import argmax
from nat_jax.core.rows import row_slices
from nat_jax.core.tokens import EOS_ID, MASK_ID, PAD_ID, not_text
from nat_jax.decode.dag import successors, vertex_scores
from nat_jax.decode.mask_predict import NOT_TEXT, mask_predict_search, mask_predict_width, predict
from nat_jax.views import GraphPredictor, MaskPredictor


def take_rows(x: jax.Array, index: jax.Array) -> jax.Array:
  """x [B, N], index i32[B] -> [B]: x[b, index[b]]."""
  return jnp.take_along_axis(x, index[:, None], axis=1)[:, 0]


@dataclasses.dataclass(frozen=True)
class GraphRedrafter:
  """WindowDrafter over a DA-Transformer graph (module docstring). Its state: alpha f32[B, L]."""
  log_trans: jax.Array      # f32[B, L, L], masked entries very negative
  log_probs: jax.Array      # f32[B, L, V] log P(y | v)
  successor: jax.Array      # i32[B, L] lookahead's next vertex (the last vertex stays)
  best: jax.Array           # i32[B, L] argmax token of each vertex
  graph_lengths: jax.Array  # i32[B]
  window: int
  remove_repeats: bool = True
  reads_states = False

  def start(self, enc, num_slots: int):
    return first_vertex(jnp.zeros(self.best.shape, jnp.float32))  # [B, L]: BOS at vertex 0

  def first(self, alpha):
    """dag_lookahead's first W tokens: vertex 0's token (BOS, normally), then the walk from it."""
    token = self.best[:, 0]
    lead = (token, ~not_text(token) & (self.graph_lengths > 0))
    return self.walk(jnp.zeros_like(token), token, lead)

  def absorb(self, alpha, tokens, starts, fixed):
    """alpha extended by output tokens starts .. fixed - 1 (tokens i32[B, P]), as many as the pass made final."""
    def body(carry):
      j, alpha = carry
      pos = starts + j  # [B]
      y = take_rows(tokens, jnp.minimum(pos, tokens.shape[1] - 1))  # [B]
      index = jnp.broadcast_to(y[:, None, None], self.log_probs.shape[:2] + (1,))
      emit = jnp.take_along_axis(self.log_probs, index, axis=2)[..., 0]  # [B, L]
      return j + 1, jnp.where((pos < fixed)[:, None], viterbi_step(alpha, self.log_trans, emit), alpha)
    _, alpha = jax.lax.while_loop(lambda c: jnp.any(starts + c[0] < fixed), body, (jnp.int32(0), alpha))
    return alpha

  def draft(self, alpha, states, starts, fixed, tokens):
    alpha = self.absorb(alpha, tokens, starts, fixed)
    return self.walk(argmax(alpha, axis=1), take_rows(tokens, fixed - 1)), alpha

  def walk(self, vertex: jax.Array, prev: jax.Array, lead=None) -> jax.Array:
    """i32[B, W]: the lookahead continuation after `vertex` i32[B], the token before it `prev` i32[B]
    (repeats of it are dropped); `lead` = (token, keep) i32[B], bool[B] comes first. Walks until W
    tokens are drafted or the last vertex is reached (EOS)."""
    batch, width = vertex.shape[0], self.window
    end = self.graph_lengths - 1  # [B]
    rows = jnp.arange(batch)

    def put(out, count, token, keep):
      out = out.at[rows, jnp.where(keep & (count < width), count, width)].set(token, mode='drop')
      return out, count + keep.astype(jnp.int32)

    out, count = jnp.zeros((batch, width), jnp.int32), jnp.zeros((batch,), jnp.int32)
    if lead is not None:
      out, count = put(out, count, *lead)
    out, count = put(out, count, jnp.full_like(vertex, EOS_ID), vertex >= end)  # already at the end: EOS

    def step(carry):
      vertex, prev, out, count = carry
      moving = (vertex < end) & (count < width)
      nxt = take_rows(self.successor, vertex)
      token = take_rows(self.best, nxt)
      fresh = (token != prev) if self.remove_repeats else jnp.ones_like(moving)
      out, count = put(out, count, token, moving & ~not_text(token) & fresh)
      out, count = put(out, count, jnp.full_like(token, EOS_ID), moving & (nxt >= end))
      return jnp.where(moving, nxt, vertex), jnp.where(moving, token, prev), out, count

    def going(carry):
      vertex, _, _, count = carry
      return jnp.any((vertex < end) & (count < width))

    return jax.lax.while_loop(going, step, (vertex, prev, out, count))[2]


def graph_redrafter(view: GraphPredictor, src: jax.Array, window: int, remove_repeats: bool = True) -> GraphRedrafter:
  """The re-drafter of a DA-Transformer run: its graph of each source, projected once."""
  graph = view.predict_graph(src)
  log_probs = view.vertex_log_probs(graph.hidden)  # [B, L, V]
  best, bonus = vertex_scores(log_probs, graph.graph_lengths)  # [B, L] each
  size = graph.log_trans.shape[1]
  log_trans = clean_log(graph.log_trans, transition_mask(graph.graph_lengths, size))
  return GraphRedrafter(log_trans, log_probs, successors(graph.log_trans, bonus, graph.graph_lengths), best,
                        graph.graph_lengths, window, remove_repeats)


@dataclasses.dataclass(frozen=True)
class MaskRedrafter:
  """WindowDrafter over a CMLM (module docstring); stateless."""
  view: Any             # MaskPredictor
  enc: Any              # its encoder state of the sources
  initial: jax.Array    # i32[B, C]: Mask-Predict's output (text, EOS, 0)
  lengths: jax.Array    # i32[B]: its length incl. EOS
  window: int
  reads_states = False

  def start(self, enc, num_slots: int):
    return None

  def first(self, state):
    return jnp.pad(self.initial, ((0, 0), (0, self.window)))

  def draft(self, state, states, starts, fixed, tokens):
    width = self.initial.shape[1]
    slots = jnp.arange(width)[None, :]  # [1, C]
    prefix = jnp.pad(tokens, ((0, 0), (0, max(0, width - tokens.shape[1]))))[:, :width]  # [B, C]
    n = jnp.clip(jnp.maximum(self.lengths, fixed + 1), 2, width)[:, None]  # [B, 1] tokens incl. EOS
    known, text = slots < fixed[:, None], slots < n - 1
    frame = jnp.where(slots == n - 1, EOS_ID, PAD_ID)
    tok, _ = predict(self.view, self.enc, jnp.where(known, prefix, jnp.where(text, MASK_ID, frame)), NOT_TEXT)
    full = jnp.where(known, prefix, jnp.where(text, tok, frame))  # [B, C]
    return row_slices(jnp.pad(full, ((0, 0), (0, self.window))), fixed, self.window), state


def mask_redrafter(view: MaskPredictor, src: jax.Array, window: int, iterations: int = 10, length_beam: int = 5,
                   max_len: int = 0) -> MaskRedrafter:
  """The re-drafter of a CMLM run: Mask-Predict (its options) for the first draft, one fill pass per re-draft."""
  enc = view.encode(src)
  out = mask_predict_search(view, enc, mask_predict_width(view, src, max_len), iterations, length_beam)
  return MaskRedrafter(view, enc, out.tokens, out.aux['length'], window)


@dataclasses.dataclass(frozen=True)
class Redraft:
  decoder: str  # the drafter decoder whose first draft (and options) re-drafting continues
  build: Callable[..., Any]  # build(view, src, window, **that decoder's options) -> WindowDrafter


# Which drafter views can re-draft, by the Protocol the drafter run's method offers.
REDRAFTERS: dict[type, Redraft] = {GraphPredictor: Redraft('dag_lookahead', graph_redrafter),
                                   MaskPredictor: Redraft('mask_predict', mask_redrafter)}
