"""DA-Transformer ('dat'): DAG NLL with glancing, or the FA-DAT fuzzy n-gram loss; a graph view for
the DAG decoders.

Training (config.dat):
  loss='nll'    -log P(y | x) / |y| by the forward algorithm (NLL pre-training)
  loss='fuzzy'  FA-DAT: -BP * clipped expected n-gram matches / expected n-grams, n = config.dat.ngram
Both are per-sentence losses: the summed loss is normalized by the number of valid sentences.
As in the reference implementation (thu-coai/DA-Transformer) the graph side reads BOS y EOS: the
path starts at vertex 0 emitting BOS and ends at the last vertex emitting EOS, whose inputs are
the BOS and EOS embeddings (nat_jax.models.dag_transformer); decoders drop BOS/EOS from the text.
Glancing (GLAT) in both: a first decoder pass (no gradient) gives the best alignment; at
round((|y| - correct) * tau) randomly chosen aligned vertices the decoder input becomes the target
token's embedding, and a second pass with the same dropout rng computes the loss. tau goes
linearly from glance_start to glance_end over glance_steps (0 = total_steps). In NLL training
the alignment of glanced positions is forced, as in GLAT and the reference: a glanced target
position may be emitted only at its own vertex, with log-probability 0 there, so glanced tokens
carry no loss (and no gradient) of their own. The fuzzy loss has no alignment to force: it sees
the glanced inputs only.
A pair whose target has more tokens than its graph has vertices is masked out and counted
('impossible' in the metrics).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from nat_jax.core.graph import map_vertex_chunks, vertex_chunk_count
from nat_jax.core.masks import NEG_INF
from nat_jax.core.reduce import argmax
from nat_jax.core.tokens import BOS_ID, decode_length_bound
from nat_jax.errors import ConfigError
from nat_jax.losses.dag import dag_best_alignment, dag_log_likelihood, dag_nll_per_pair
from nat_jax.losses.fuzzy import fuzzy_alignment_loss
from nat_jax.methods.base import Method
from nat_jax.methods.registry import register
from nat_jax.methods.sampling import random_subset
from nat_jax.models.dag_transformer import DagTransformer
from nat_jax.models.transformer import transformer_config
from nat_jax.settings import setting
from nat_jax.views import Graph, GraphPredictor

LOSSES = ('nll', 'fuzzy')


@dataclasses.dataclass(frozen=True)
class DatSettings:
  """The `config.dat` section of a DA-Transformer recipe."""
  upsample_scale: float = setting(8.0, 'lambda: graph size = ceil(upsample_scale x source length)', low=0.1)
  link_heads: int = setting(0, 'heads of the transition head', low=1, zero='model.num_heads')
  max_transition_length: int = setting(0, 'edges i -> j only for j - i <= this', low=1, zero='any')
  loss: str = setting('nll', "'nll' (pre-training) or 'fuzzy' (FA-DAT fine-tuning)", choices=LOSSES)
  ngram: int = setting(2, 'FA-DAT n-gram order', low=1, high=4)
  glance_start: float = setting(0.5, 'glancing ratio tau at the start', low=0, high=1)
  glance_end: float = setting(0.1, 'glancing ratio tau after glance_steps', low=0, high=1)
  glance_steps: int = setting(0, 'updates over which tau goes linearly from glance_start to glance_end', low=1,
                              zero='total_steps')
# Memory budget, in elements over the whole batch (2^27 fp32 = 512 MiB; per device, / the data-parallel
# devices). A [B, L, V] vocabulary or [B, H, L, L] transition-score tensor larger than this is formed a
# slice of vertices at a time (nat_jax.core.graph.map_vertex_chunks), and a decoder whose attention
# weights [B, H, L, L] exceed it is rematerialised layer by layer; the values are the same. The tiny
# recipes stay whole; configs/dat_wmt14_ende.py takes up to 32 slices.
CHUNK_ELEMENTS = 2**27


def glance_ratio(step, start: float, end: float, steps: int) -> jax.Array:
  """tau at `step`: linear from start to end over `steps` updates, then end."""
  frac = jnp.clip(jnp.asarray(step, jnp.float32) / max(steps, 1), 0.0, 1.0)
  return start + (end - start) * frac


def glance_inputs(rng, align, hit, targets, tau, size: int):
  """Which vertices see a target embedding, and which token.

  align i32[B, M] (vertex of each target position, -1 past the target / for impossible pairs);
  hit bool[B, M] (argmax token at that vertex == target). Picks round((T - correct) * tau)
  random aligned target positions per row. Returns (tokens i32[B, L], mask bool[B, L],
  glanced bool[B, M]: the chosen target positions).
  """
  aligned = align >= 0  # [B, M]
  wrong = jnp.sum(aligned & ~hit, axis=1)  # [B]
  count = jnp.round(wrong.astype(jnp.float32) * tau).astype(jnp.int32)  # [B]
  chosen = random_subset(rng, aligned, count)  # [B, M]
  rows = jnp.arange(align.shape[0])[:, None]
  dest = jnp.where(chosen, align, size)  # out of range = dropped
  mask = jnp.zeros((align.shape[0], size), bool).at[rows, dest].set(True, mode='drop')
  tokens = jnp.zeros((align.shape[0], size), jnp.int32).at[rows, dest].set(targets, mode='drop')
  return tokens, mask, chosen


def graph_targets(targets: jax.Array) -> jax.Array:
  """i32[B, M] rows `y EOS 0...` -> i32[B, M + 1] rows `BOS y EOS 0...` (all-pad rows stay all pad)."""
  bos = jnp.where(targets[:, :1] > 0, BOS_ID, 0).astype(targets.dtype)  # [B, 1]
  return jnp.concatenate([bos, targets], axis=1)


def force_alignment(log_emit: jax.Array, align: jax.Array, glanced: jax.Array) -> jax.Array:
  """log_emit f32[B, L, M] with each glanced position m (glanced bool[B, M]) emitted only at its
  aligned vertex align[b, m], with log-probability 0 there (NEG_INF at every other vertex)."""
  at_vertex = jnp.arange(log_emit.shape[1])[None, :, None] == align[:, None, :]  # [B, L, M]
  forced = jnp.where(at_vertex, 0.0, NEG_INF)
  return jnp.where(glanced[:, None, :], forced, log_emit)


@register('dat', DatSettings)
class DagMethod(Method):
  """Directed Acyclic Transformer trained with DAG NLL (+ glancing) or the FA-DAT fuzzy loss."""
  normalizer = 'sentences'

  def __init__(self, config, vocab_size: int):
    super().__init__(config, vocab_size)
    dat = config.dat
    link_heads = dat.link_heads or config.model.num_heads
    if config.model.d_model % link_heads:
      raise ConfigError(f'model.d_model={config.model.d_model} must be divisible by dat.link_heads={link_heads}.')
    self.loss_name, self.ngram = dat.loss, dat.ngram
    self.upsample_scale = float(dat.upsample_scale)
    self.max_graph_size = self.graph_size(config.max_len)
    self.vocab_size, self.chunk_elements = vocab_size, CHUNK_ELEMENTS
    self.model = DagTransformer(transformer_config(config.model, vocab_size), self.max_graph_size, link_heads,
                                dat.max_transition_length, self.chunk_elements)
    self.glance = (dat.glance_start, dat.glance_end, dat.glance_steps or config.total_steps)

  # --- graph sizes ------------------------------------------------------------------------------
  def graph_size(self, src_len: int) -> int:
    """Static padded graph size for a padded source width."""
    return max(1, math.ceil(self.upsample_scale * src_len))

  def padded_graph_size(self, src) -> int:
    """L for a batch of sources i32[B, S] (static)."""
    return min(self.graph_size(src.shape[1]), self.max_graph_size)

  def graph_lengths(self, src) -> jax.Array:
    """i32[B]: ceil(upsample_scale x source length incl. EOS), capped by the padded graph size."""
    src_len = jnp.sum(src > 0, axis=1).astype(jnp.float32)
    return jnp.minimum(jnp.ceil(self.upsample_scale * src_len), self.padded_graph_size(src)).astype(jnp.int32)

  def _no_glance(self, src):
    """(tokens i32[B, L], mask bool[B, L]): every vertex gets its graph query."""
    zeros = jnp.zeros((src.shape[0], self.padded_graph_size(src)), jnp.int32)
    return zeros, zeros > 0

  # --- passes -----------------------------------------------------------------------------------
  def _apply(self, params, *args, method, rng=None, **kwargs):
    return self.model.apply({'params': params}, *args, method=method, rngs=None if rng is None else {'dropout': rng},
                            **kwargs)

  def _graph(self, params, encoded, src, graph_lengths, glance=None, rng=None, deterministic=True):
    """(hidden [B, L, D], log_trans f32[B, L, L]); glance = (tokens i32[B, L], mask bool[B, L]) or None."""
    tokens, mask = glance if glance is not None else self._no_glance(src)
    hidden = self._apply(params, encoded, src > 0, graph_lengths, tokens, mask, method=DagTransformer.graph_hidden,
                         rng=rng, deterministic=deterministic)  # [B, L, D]
    return hidden, self._apply(params, hidden, graph_lengths, method=DagTransformer.links)

  def _graph_pass(self, params, encoded, src, graph_lengths, targets, glance, rng, deterministic):
    """(log_trans f32[B, L, L], log_emit f32[B, L, M] = log P(y_m | v), argmax token i32[B, L])."""
    hidden, log_trans = self._graph(params, encoded, src, graph_lengths, glance, rng, deterministic)
    log_emit, best_token = self.emissions(params, hidden, targets)
    return log_trans, log_emit, best_token

  def emissions(self, params, hidden, targets):
    """(log_emit f32[B, L, M] = log P(targets[b, m] | v), argmax_y log P(y | v) i32[B, L]) for the
    vertex states hidden [B, L, D] and targets i32[B, M]: `vertex_log_probs` gathered at the targets.

    The log-probabilities over the vocabulary [B, L, V] are formed a slice of vertices at a time, at
    most `chunk_elements` per slice (`map_vertex_chunks`): same values, and the backward pass
    recomputes them per slice instead of keeping [B, L, V] (a single slice when they fit the budget).
    """
    (batch, size, _), tlen = hidden.shape, targets.shape[1]

    def gather(h):  # h [B, C, D]: C of the vertices
      log_probs = self.vertex_log_probs(params, h)  # [B, C, V]
      index = jnp.broadcast_to(targets[:, None, :], (batch, h.shape[1], tlen))  # [B, C, M]
      return jnp.take_along_axis(log_probs, index, axis=2), argmax(log_probs)

    chunks = vertex_chunk_count(size, batch * self.vocab_size, self.chunk_elements)
    return map_vertex_chunks(gather, chunks, hidden)  # [B, L, M], [B, L]

  # --- training ---------------------------------------------------------------------------------
  def init_params(self, rng, batch):
    src = batch['source']
    return self.model.init(rng, src, self.graph_lengths(src), *self._no_glance(src))['params']

  def loss(self, params, batch, rng, step=0, deterministic: bool = False):
    """Sums: loss (per-sentence losses of valid pairs; normalized by 'sentences' = their count),
    nll and correct (normalized by 'tokens'), impossible (pairs that do not fit their graph)."""
    src, targets = batch['source'], graph_targets(batch['target'])  # [B, S], [B, M]: BOS y EOS
    target_lengths = jnp.sum(targets > 0, axis=1).astype(jnp.int32)  # [B]
    graph_lengths = self.graph_lengths(src)  # [B]
    enc_rng, dec_rng, glance_rng = jax.random.split(rng, 3)
    encoded = self._apply(params, src, method=DagTransformer.encode, rng=enc_rng, deterministic=deterministic)

    log_trans, log_emit, best_token = self._graph_pass(params, encoded, src, graph_lengths, targets, None, dec_rng,
                                                   deterministic)
    align = dag_best_alignment(jax.lax.stop_gradient(log_trans), jax.lax.stop_gradient(log_emit),
                               target_lengths, graph_lengths)  # [B, M]
    hit = (align >= 0) & (jnp.take_along_axis(best_token, jnp.maximum(align, 0), axis=1) == targets)  # [B, M]
    nll_loss = self.loss_name == 'nll'
    start, end, steps = self.glance
    glanced = jnp.zeros(targets.shape, bool)  # [B, M]
    if not deterministic and (start > 0 or end > 0):
      tokens, mask, glanced = glance_inputs(glance_rng, align, hit, targets, glance_ratio(step, start, end, steps),
                                            log_trans.shape[1])
      log_trans, log_emit, _ = self._graph_pass(params, encoded, src, graph_lengths, targets, (tokens, mask),
                                                dec_rng, deterministic)
      if nll_loss:
        log_emit = force_alignment(log_emit, align, glanced)

    stop = (lambda x: x) if nll_loss else jax.lax.stop_gradient  # fuzzy: the likelihood is a metric only
    ll = dag_log_likelihood(stop(log_trans), stop(log_emit), target_lengths, graph_lengths)  # [B]
    per_pair, valid, impossible = dag_nll_per_pair(ll, target_lengths)  # [B] each: the tested NLL loss per pair
    if not nll_loss:
      per_pair = fuzzy_alignment_loss(log_trans, log_emit, targets, target_lengths, graph_lengths, self.ngram)
    weights = valid.astype(jnp.float32)
    return {'loss': jnp.sum(jnp.where(valid, per_pair, 0.0)), 'sentences': jnp.sum(weights),
            'nll': jnp.sum(jnp.where(valid, -ll, 0.0)),
            'correct': jnp.sum(jnp.where(valid[:, None], hit, False)).astype(jnp.float32),
            'tokens': jnp.sum(weights * target_lengths),
            'impossible': jnp.sum(impossible).astype(jnp.float32),
            'glanced_per_token': jnp.sum(jnp.where(valid[:, None], glanced, False)).astype(jnp.float32)}

  def adopt_params(self, loaded, fresh):
    """`init_from` a DA-Transformer run (FA-DAT fine-tuning): its parameters as they are. From an AT
    run (a warm start from the teacher): the AT's encoder, decoder layers and embeddings become the
    backbone (same shapes; the decoder then runs without its causal mask), the graph queries and
    the transition heads start fresh."""
    if 'backbone' in loaded:
      return loaded
    return {**fresh, 'backbone': loaded}

  # --- decoding view (nat_jax.decode.dag) -------------------------------------------------------
  def predict_graph(self, params, src) -> Graph:
    """The graph of each source sentence i32[B, S]."""
    graph_lengths = self.graph_lengths(src)
    encoded = self._apply(params, src, method=DagTransformer.encode)
    hidden, log_trans = self._graph(params, encoded, src, graph_lengths)
    return Graph(hidden=hidden, log_trans=log_trans, graph_lengths=graph_lengths)

  def vertex_log_probs(self, params, hidden):
    """hidden [B, K, D] (any subset of vertices) -> log P(y | v) f32[B, K, V]."""
    return self._apply(params, hidden, method=DagTransformer.log_probs)

  def max_decode_len(self, src_len: int) -> int:
    """Output-length bound for a padded source width: the shared bound, at most the graph size."""
    return min(decode_length_bound(self.max_target_len, src_len), self.graph_size(src_len))

  def views(self):
    return {GraphPredictor: lambda params: DagGraphView(self, params)}

  def label(self) -> str:
    """Short description for tables."""
    loss = f', FA-DAT {self.ngram}-gram loss' if self.loss_name == 'fuzzy' else ''
    return f'{self.name} (lambda={self.upsample_scale:g}{loss})'


@dataclasses.dataclass(frozen=True)
class DagGraphView:
  """GraphPredictor of a DagMethod with bound parameters."""
  method: DagMethod
  params: Any

  def predict_graph(self, src) -> Graph:
    return self.method.predict_graph(self.params, src)

  def vertex_log_probs(self, hidden):
    return self.method.vertex_log_probs(self.params, hidden)

  def max_decode_len(self, src_len: int) -> int:
    return self.method.max_decode_len(src_len)
