"""DA-Transformer: the shared encoder/decoder blocks over a directed acyclic graph of decoder positions.

The decoder runs non-causally over L = upsample_scale x source-length vertices. As in the
reference implementation the graph side reads BOS y EOS: vertex 0's input is the BOS embedding,
the last vertex's (G - 1) the EOS embedding, the others learned graph-position queries (glancing
swaps some of them for target-token embeddings), all plus sinusoidal positions. The outputs feed
two heads: the tied vocabulary projection (a token distribution per vertex) and the gated
multi-head transition head (the edge weights of the DAG), computed in fp32, which reads each
vertex's output concatenated with a learned link-position embedding (the reference's
`--links-feature feature:position`).
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nat_jax.core.graph import map_vertex_chunks, transition_mask, vertex_chunk_count
from nat_jax.core.masks import NEG_INF, attention_mask
from nat_jax.core.tokens import BOS_ID, EOS_ID
from nat_jax.models.layers import default_init, sinusoidal_positions
from nat_jax.models.transformer import Transformer, TransformerConfig


def link_mask(graph_lengths: jax.Array, size: int, max_transition_length: int = 0) -> jax.Array:
  """bool[B, L, L]: edge i -> j allowed iff i < j < graph_lengths[b] (and j - i <= max, if max > 0)."""
  mask = transition_mask(graph_lengths, size)  # [B, L, L]
  if max_transition_length > 0:
    v = jnp.arange(size)
    mask &= ((v[None, :] - v[:, None]) <= max_transition_length)[None]
  return mask


def vertex_end_tokens(graph_lengths: jax.Array, size: int) -> jax.Array:
  """i32[B, L]: BOS at vertex 0, EOS at vertex G - 1 (G = graph_lengths[b] >= 2), 0 elsewhere."""
  v = jnp.arange(size)[None, :]  # [1, L]
  last = (v == graph_lengths[:, None] - 1) & (v > 0)  # [B, L]
  return jnp.where(v == 0, BOS_ID, jnp.where(last, EOS_ID, 0)).astype(jnp.int32)


def gated_log_links(q: jax.Array, log_gate: jax.Array, mask: jax.Array, k: jax.Array) -> jax.Array:
  """log E f32[B, C, L] of the edges out of C vertices (all L vertices, or a slice of them):
  logsumexp_h(log_softmax_j(q_hi . k_hj / sqrt(d_h)) + log_gate_ih) on the allowed edges, NEG_INF elsewhere.

  q [B, C, H, Dh] and log_gate f32[B, C, H] of those vertices, mask bool[B, C, L] their allowed
  edges, k [B, L, H, Dh] the keys of every vertex.
  """
  scores = jnp.einsum('bihd,bjhd->bhij', q, k) / np.sqrt(q.shape[-1])  # [B, H, C, L]
  log_heads = jax.nn.log_softmax(jnp.where(mask[:, None], scores, NEG_INF), axis=-1)  # [B, H, C, L]
  log_trans = jax.nn.logsumexp(log_heads + jnp.swapaxes(log_gate, 1, 2)[..., None], axis=1)  # [B, C, L]
  return jnp.where(mask, log_trans, NEG_INF)


class TransitionHead(nn.Module):
  """log E_ij = logsumexp_h(log_softmax_j(q_hi . k_hj / sqrt(d_h)) + log_softmax_h(W_g f_i)), fp32,
  with features f_i = [h_i; p_i] (p: learned link-position embedding of vertex i), q = W_q f, k = W_k f.

  chunk_elements > 0: the per-head scores [B, H, L, L] are formed a slice of source vertices i at a
  time, at most this many elements per slice (`map_vertex_chunks`; same values, and the backward
  pass recomputes them per slice instead of keeping them).
  """
  num_heads: int
  d_model: int
  max_graph_size: int
  max_transition_length: int = 0
  chunk_elements: int = 0

  @nn.compact
  def __call__(self, hidden: jax.Array, graph_lengths: jax.Array) -> jax.Array:
    """hidden [B, L, D], graph_lengths i32[B] -> log_trans f32[B, L, L] (NEG_INF outside the mask)."""
    h, dh = self.num_heads, self.d_model // self.num_heads
    batch, size = hidden.shape[:2]
    link_positions = self.param(
        'link_positions', nn.with_logical_partitioning(nn.initializers.normal(0.02), (None, 'embed')),
        (self.max_graph_size, self.d_model), jnp.float32)
    x = jnp.concatenate([hidden.astype(jnp.float32),
                         jnp.broadcast_to(link_positions[None, :size], hidden.shape)], axis=-1)  # [B, L, 2D]
    proj = lambda name: nn.DenseGeneral(
        features=(h, dh), dtype=jnp.float32, name=name,
        kernel_init=nn.with_logical_partitioning(default_init, ('embed', 'heads', 'kv')),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ('heads', 'kv')))
    q, k = proj('query')(x), proj('key')(x)  # [B, L, H, Dh]
    mask = link_mask(graph_lengths, size, self.max_transition_length)  # [B, L, L]
    gate = nn.Dense(h, dtype=jnp.float32, name='gate',
                    kernel_init=nn.with_logical_partitioning(default_init, ('embed', 'heads')),
                    bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ('heads',)))(x)  # [B, L, H]
    log_gate = jax.nn.log_softmax(gate, axis=-1)  # [B, L, H]
    chunks = vertex_chunk_count(size, batch * h * size, self.chunk_elements)
    return map_vertex_chunks(functools.partial(gated_log_links, k=k), chunks, q, log_gate, mask)  # [B, L, L]


class DagTransformer(nn.Module):
  """Encoder + non-causal graph decoder + vocabulary and transition heads. Call methods via apply(method=...)."""
  cfg: TransformerConfig
  max_graph_size: int            # size of the learned graph-position table
  link_heads: int = 4
  max_transition_length: int = 0
  chunk_elements: int = 0        # > 0: the transition head's slice budget (TransitionHead); a decoder
                                 # whose attention weights [B, H, L, L] exceed it is rematerialised

  def setup(self):
    self.backbone = Transformer(self.cfg)
    self.graph_queries = self.param(
        'graph_queries', nn.with_logical_partitioning(nn.initializers.normal(1.0), (None, 'embed')),
        (self.max_graph_size, self.cfg.d_model), jnp.float32)
    self.transitions = TransitionHead(self.link_heads, self.cfg.d_model, self.max_graph_size,
                                      self.max_transition_length, self.chunk_elements)

  def encode(self, src, *, deterministic: bool = True):
    """src i32[B, S] -> encoded [B, S, D]."""
    return self.backbone.encode(src, deterministic=deterministic)

  def graph_hidden(self, encoded, src_valid, graph_lengths, glance_tokens, glance_mask, *,
                   deterministic: bool = True):
    """Decoder states of the L graph vertices: [B, L, D].

    encoded [B, S, D]; src_valid bool[B, S]; graph_lengths i32[B]; glance_tokens i32[B, L] and
    glance_mask bool[B, L]: vertices whose input is the embedding of glance_tokens instead of
    their graph query (all False outside glancing). Vertex 0 reads BOS and vertex G - 1 EOS
    unless glanced (a glanced target there is BOS / EOS anyway). Every vertex attends to every
    vertex < G. When one layer's attention weights [B, H, L, L] hold more than chunk_elements
    (> 0) elements, every decoder layer runs under `nn.remat` (`Transformer.decode_hidden`'s
    `remat`; the values are the same).
    """
    b, size = glance_mask.shape
    vertices = jnp.broadcast_to(jnp.arange(size), (b, size))  # [B, L]
    ends = vertex_end_tokens(graph_lengths, size)  # [B, L]: BOS, EOS or 0 (= use the graph query)
    queries = self.graph_queries[:size].astype(self.cfg.dtype)[None]  # [1, L, D]
    tokens = jnp.where(glance_mask, glance_tokens, ends)  # [B, L]
    x = jnp.where((glance_mask | (ends > 0))[..., None], self.backbone.embed(tokens), queries)
    x = x + sinusoidal_positions(vertices, self.cfg.d_model, self.cfg.position_timescales).astype(self.cfg.dtype)
    x = self.backbone.input_dropout(x, deterministic=deterministic)
    in_graph = vertices < graph_lengths[:, None]  # [B, L]
    self_mask = attention_mask(jnp.zeros_like(vertices), in_graph)  # [B, L, L]: every vertex sees the graph
    remat = 0 < self.chunk_elements < b * self.cfg.num_heads * size * size  # attention weights over the budget
    hidden, _ = self.backbone.decode_hidden(x, vertices, self_mask, encoded, src_valid,
                                            deterministic=deterministic, remat=remat)
    return hidden

  def links(self, hidden, graph_lengths):
    """hidden [B, L, D] -> log_trans f32[B, L, L]."""
    return self.transitions(hidden, graph_lengths)

  def log_probs(self, hidden):
    """hidden [B, K, D] (all vertices or a gathered subset) -> log P(y | v) f32[B, K, V]."""
    return jax.nn.log_softmax(self.backbone.logits(hidden), axis=-1)

  def __call__(self, src, graph_lengths, glance_tokens, glance_mask, *, deterministic: bool = True):
    """Full pass (used for initialisation): (log_trans f32[B, L, L], log_probs f32[B, L, V])."""
    encoded = self.encode(src, deterministic=deterministic)
    hidden = self.graph_hidden(encoded, src > 0, graph_lengths, glance_tokens, glance_mask,
                               deterministic=deterministic)
    return self.links(hidden, graph_lengths), self.log_probs(hidden)
