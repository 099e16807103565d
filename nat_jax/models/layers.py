"""Transformer building blocks: embeddings, positions, attention with masks, relative keys and a KV cache, FFN.

Every parameter carries logical axis names (`embed`, `heads`, `kv`, `mlp`, `vocab`) that
`nat_jax.parallel.sharding` maps onto the device mesh, so the same module runs on one CPU or a pod.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nat_jax.core.masks import NEG_INF

Dtype = Any
default_init = nn.initializers.xavier_uniform()


# Frequencies of the sinusoidal positions, i = 0 .. dim/2 - 1: tensor2tensor's w_i = 10000^(-i / (dim/2 - 1))
# (every run trained here), or the Transformer paper's w_i = 10000^(-i / (dim/2)) (Marian / OPUS-MT).
POSITION_TIMESCALES = {'tensor2tensor': lambda half: max(half - 1, 1), 'vaswani': lambda half: half}
ACTIVATIONS = {'relu': nn.relu, 'swish': nn.swish, 'gelu': lambda x: nn.gelu(x, approximate=False)}


@dataclasses.dataclass(frozen=True)
class FloatWeights:
  """How the layers hold and multiply their weight matrices: in float32 (this), or quantized (a subclass:
  nat_jax.models.int8.Int8Weights). The one point where a model's quantization is injected: every projection
  (`dense`) and the token embedding (`embedding_table`, `lookup`, `attend`) ask it, no layer asks which it is."""
  name: ClassVar[str] = 'none'  # model.quantization's value
  fuses_qkv: ClassVar[bool] = False  # a self-attention's query, key and value as one product (one matrix)

  def dense(self, features: tuple, in_features: tuple, axes: tuple, use_bias: bool, dtype, name=None) -> nn.Module:
    """A projection of the trailing `in_features` axes to `features` (kernel [in..., out...] with logical `axes`)."""
    kernel_init = nn.with_logical_partitioning(default_init, axes)
    bias_init = nn.with_logical_partitioning(nn.initializers.zeros, axes[len(in_features):])
    if len(features) == len(in_features) == 1:
      return nn.Dense(features[0], dtype=dtype, use_bias=use_bias, name=name, kernel_init=kernel_init,
                      bias_init=bias_init)
    return nn.DenseGeneral(features=features, axis=tuple(range(-len(in_features), 0)), dtype=dtype,
                           use_bias=use_bias, name=name, kernel_init=kernel_init, bias_init=bias_init)

  def embedding_table(self, module: nn.Module, vocab_size: int, features: int) -> dict:
    """The token table's params, made in `module` (Embed's setup): 'embedding' f32[V, D]."""
    init = nn.initializers.normal(features**-0.5)
    return {'embedding': module.param('embedding', nn.with_logical_partitioning(init, ('vocab', 'embed')),
                                      (vocab_size, features), jnp.float32)}

  def lookup(self, table: dict, ids: jax.Array) -> jax.Array:
    """Rows of ids i32[B, T] -> [B, T, D]."""
    return jnp.take(table['embedding'], ids, axis=0)

  def attend(self, table: dict, x: jax.Array, dtype) -> jax.Array:
    """dtype[B, T, D] -> f32[B, T, V] logits against the table."""
    return jnp.einsum('btd,vd->btv', x, table['embedding'].astype(dtype)).astype(jnp.float32)


FLOAT = FloatWeights()


def sinusoidal_positions(positions: jax.Array, dim: int, timescales: str) -> jax.Array:
  """Sinusoidal embeddings of integer positions (negative positions allowed).

  positions: i32[...]; returns f32[..., dim] = [sin(p * w_i), cos(p * w_i)] with w_i from
  POSITION_TIMESCALES[timescales]. sin is odd and cos even, so -p differs from +p.
  """
  half = dim // 2
  freqs = np.exp(-np.log(10000.0) * np.arange(half) / POSITION_TIMESCALES[timescales](half))  # [half]
  angles = positions.astype(jnp.float32)[..., None] * freqs  # [..., half]
  return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


class Embed(nn.Module):
  """Token embedding shared by encoder, decoder and output projection (joint vocabulary).

  `start_tokens` > 0 adds input-only tokens with ids vocab_size .. vocab_size + start_tokens - 1
  (param `start_embeddings`), e.g. HRT's Skip-AT start token <B_k>: they can be fed, never predicted.
  `weights` holds the table and reads it (FloatWeights: float32; int8: nat_jax.models.int8.Int8Weights).
  """
  vocab_size: int
  features: int
  dtype: Dtype = jnp.float32
  start_tokens: int = 0
  weights: FloatWeights = FLOAT
  scale: bool = True  # lookups times sqrt(D)

  def setup(self):
    self.table = self.weights.embedding_table(self, self.vocab_size, self.features)
    if self.start_tokens:
      init = nn.initializers.normal(self.features**-0.5)
      self.start_embeddings = self.param('start_embeddings', nn.with_logical_partitioning(init, (None, 'embed')),
                                         (self.start_tokens, self.features), jnp.float32)

  def __call__(self, tokens: jax.Array) -> jax.Array:
    """i32[B, T] -> dtype[B, T, D], scaled by sqrt(D).

    Start tokens are looked up in their own table and selected per token: concatenating the two
    tables first would copy the whole [V, D] vocabulary every call (every HRT decoding step) where
    XLA does not fuse the copy into the lookup."""
    ids = jnp.minimum(tokens, self.vocab_size - 1)  # [B, T]
    rows = self.weights.lookup(self.table, ids)  # [B, T, D]
    if self.start_tokens:
      extra = tokens - self.vocab_size  # [B, T]: >= 0 for a start token
      start = jnp.take(self.start_embeddings, jnp.clip(extra, 0, self.start_tokens - 1), axis=0)
      rows = jnp.where((extra >= 0)[..., None], start, rows)
    rows = rows.astype(self.dtype)
    return rows * np.sqrt(self.features) if self.scale else rows

  def attend(self, x: jax.Array) -> jax.Array:
    """dtype[B, T, D] -> f32[B, T, V] logits against the embedding matrix."""
    return self.weights.attend(self.table, x, self.dtype)


def relative_buckets(q_pos: jax.Array, kv_pos: jax.Array, window: int) -> jax.Array:
  """i32[B, Tq, Tk] in [0, 2w]: clip(p_key - p_query, -w, w) + w, the row of the relative-key table
  (q_pos i32[B, Tq], kv_pos i32[B, Tk]: the positions actually fed)."""
  return jnp.clip(kv_pos[:, None, :] - q_pos[:, :, None], -window, window) + window


class Attention(nn.Module):
  """Multi-head attention; optional key-only relative positions (HRT) and a fixed-size KV cache.

  Relative keys: logits_ij = q_i . (k_j + r[clip(p_j - p_i, -w, w)]) / sqrt(d_head), where p are
  the positions actually fed (so Skip-AT's 0, k, 2k, ... give the true distances). `weights` makes the four
  projections (quantized ones in int8; attention itself stays in `dtype`). `fuse_qkv` (self-attention, where
  queries, keys and values are projections of one input): where the weights fuse them (int8) the three are one
  product of one matrix [D, 3, H, Dh] ('qkv', stacked from the float run's 'query', 'key' and 'value' at load:
  nat_jax.models.int8.FUSED), so a step quantizes its input once and calls one product instead of three.
  """
  num_heads: int
  d_model: int
  dropout: float = 0.0
  relative_window: int = 0
  dtype: Dtype = jnp.float32
  weights: FloatWeights = FLOAT
  use_bias: bool = False  # biases on the four projections (Marian)
  fuse_qkv: bool = False  # one product for queries, keys and values where the weights fuse them (see above)

  @property
  def fused(self) -> bool:
    return self.fuse_qkv and self.weights.fuses_qkv

  def setup(self):
    h, dh, w = self.num_heads, self.d_model // self.num_heads, self.weights
    proj = lambda heads=(h, dh), axes=('heads', 'kv'): w.dense(heads, (self.d_model,), ('embed', *axes),
                                                               self.use_bias, self.dtype)
    self.out = w.dense((self.d_model,), (h, dh), ('heads', 'kv', 'embed'), self.use_bias, self.dtype)
    if self.fused:
      self.qkv = proj((3, h, dh), (None, 'heads', 'kv'))
    else:
      self.query, self.key, self.value = proj(), proj(), proj()
    if self.relative_window:
      self.relative_keys = self.param(
          'relative_keys', nn.with_logical_partitioning(nn.initializers.normal(0.02), ('relpos', 'kv')),
          (2 * self.relative_window + 1, dh), jnp.float32)
    self.attn_dropout = nn.Dropout(self.dropout)

  def project_kv(self, x_kv):
    """Keys/values of x_kv [B, Tk, D] -> {'k': [B, H, Dh, Tk], 'v': [B, H, Tk, Dh]} (the cross-attention cache).

    The layouts of the KV cache (CACHE_SLOT_AXIS): a decoding step multiplies each head's query by a contiguous
    [Dh, Tk] block of keys and its weights by a [Tk, Dh] block of values, so nothing of the cache is moved per
    step (keys stored [Tk, Dh], XLA:CPU transposes every head's keys for the query's product at every step)."""
    if self.fused:
      return self.project_qkv(x_kv)[1]
    return cache_layout(self.key(x_kv), self.value(x_kv))

  def project_qkv(self, x):
    """x [B, T, D] -> (queries [B, T, H, Dh], `project_kv`'s keys/values of x)."""
    if self.fused:
      qkv = self.qkv(x)  # [B, T, 3, H, Dh]
      return qkv[:, :, 0], cache_layout(qkv[:, :, 1], qkv[:, :, 2])
    return self.query(x), self.project_kv(x)

  def __call__(self, x_q, x_kv, mask, *, deterministic: bool, q_pos=None, kv_pos=None,
               cache: Optional[dict] = None, cache_start=None, precomputed_kv=None):
    """Attend x_q [B, Tq, D] to x_kv [B, Tk, D] under bool mask [B, Tq, Tk'] (True = may attend).

    With `cache` (`project_kv`'s layout over C slots: {'k': [B, H, Dh, C], 'v': [B, H, C, Dh]}) the new
    keys/values go to slots [cache_start, cache_start + Tk) (Tk = Tq; a start past C - Tk is moved back, as
    dynamic_update_slice does) and the queries attend over all C slots (mask is [B, Tq, C], kv_pos then gives
    the positions of all C slots). The step reads the cache as it was and its own keys/values apart, and writes
    them last, so XLA can update the cache in place. With `precomputed_kv` (the cross-attention cache,
    `project_kv`'s) x_kv is ignored. Returns (out [B, Tq, D], cache).
    """
    dh = self.d_model // self.num_heads
    if self.fuse_qkv:  # self-attention: the three projections of one input
      if x_kv is not x_q or precomputed_kv is not None:
        raise ValueError('Attention(fuse_qkv=True) is self-attention: call it with x_kv = x_q and no precomputed_kv.')
      q, kv = self.project_qkv(x_q)  # [B, Tq, H, Dh]
    else:
      q = self.query(x_q)
      kv = precomputed_kv if precomputed_kv is not None else self.project_kv(x_kv)
    k, v = kv['k'], kv['v']  # [B, H, Dh, Tk], [B, H, Tk, Dh]
    if cache is None:
      logits = jnp.einsum('bqhd,bhdk->bhqk', q, k.astype(self.dtype)).astype(jnp.float32)  # [B, H, Tq, Tk]
    else:
      slots, start = cached_slots(cache, q.shape[1], cache_start)
      logits = jax.lax.dynamic_update_slice_in_dim(  # the cache as it was, then the new keys at their slots
          jnp.einsum('bqhd,bhdk->bhqk', q, cache['k'].astype(self.dtype)).astype(jnp.float32),  # [B, H, Tq, C]
          block_scores(q, k), start, axis=3)
    if self.relative_window:
      dist = relative_buckets(q_pos, kv_pos, self.relative_window)  # [B, Tq, Tk]
      q_rel = jnp.einsum('bqhd,rd->bhqr', q.astype(jnp.float32), self.relative_keys)  # [B, H, Tq, 2w+1]
      logits = logits + jnp.take_along_axis(q_rel, jnp.broadcast_to(dist[:, None], logits.shape), axis=-1)
    logits = jnp.where(mask[:, None], logits / np.sqrt(dh), NEG_INF)
    weights = jax.nn.softmax(logits, axis=-1)
    weights = self.attn_dropout(weights, deterministic=deterministic).astype(self.dtype)
    if cache is None:
      out = jnp.einsum('bhqk,bhkd->bqhd', weights, v.astype(self.dtype))  # [B, Tq, H, Dh]
    else:
      new = jax.lax.dynamic_slice_in_dim(weights, start, q.shape[1], axis=3)  # [B, H, Tq, Tq]: on the new slots
      old = jnp.where(slots, 0, weights)  # [B, H, Tq, C]: on the rest of the cache
      out = (jnp.einsum('bhqk,bhkd->bqhd', old, cache['v'].astype(self.dtype))
             + block_values(new, v.astype(self.dtype)))  # [B, Tq, H, Dh]
      cache = {name: jax.lax.dynamic_update_slice_in_dim(cache[name], new_kv.astype(cache[name].dtype), start,
                                                         axis=CACHE_SLOT_AXIS[name])
               for name, new_kv in (('k', k), ('v', v))}
    return self.out(out), cache


# The slot axis of each KV cache leaf (Attention.project_kv's layout): keys [B, H, Dh, C], values [B, H, C, Dh].
CACHE_SLOT_AXIS = {'k': 3, 'v': 2}


def cache_layout(k: jax.Array, v: jax.Array) -> dict:
  """Projected keys and values [B, T, H, Dh] -> {'k': [B, H, Dh, T], 'v': [B, H, T, Dh]} (CACHE_SLOT_AXIS)."""
  return {'k': jnp.transpose(k, (0, 2, 3, 1)), 'v': jnp.swapaxes(v, 1, 2)}


def slot_count(kv: dict) -> int:
  """The slots C of one layer's keys/values in project_kv's layout (CACHE_SLOT_AXIS)."""
  return kv['v'].shape[CACHE_SLOT_AXIS['v']]


def cached_slots(cache: dict, tq: int, cache_start) -> tuple[jax.Array, jax.Array]:
  """(bool[C]: the slots that Tq new keys overwrite, i32[]: the first of them) in a cache of C slots."""
  size = slot_count(cache)
  start = jnp.clip(cache_start, 0, size - tq)  # where dynamic_update_slice puts them
  return (jnp.arange(size) >= start) & (jnp.arange(size) < start + tq), start


def block_scores(q: jax.Array, k: jax.Array) -> jax.Array:
  """q [B, Tq, H, Dh] . k [B, H, Dh, Tq] -> f32[B, H, Tq, Tq], as products summed in one fused loop.

  A step's queries against its own keys: as a dot these are B x H products of Tq rows, mostly call overhead,
  and reading the keys before they are written lets XLA update the cache in place (Attention.__call__)."""
  qh = jnp.swapaxes(q, 1, 2).astype(jnp.float32)  # [B, H, Tq, Dh]
  kh = jnp.swapaxes(k, 2, 3).astype(jnp.float32)  # [B, H, Tq, Dh]
  return jnp.sum(qh[:, :, :, None, :] * kh[:, :, None, :, :], axis=-1)


def block_values(weights: jax.Array, v: jax.Array) -> jax.Array:
  """weights [B, H, Tq, Tq] times the step's own values v [B, H, Tq, Dh] -> [B, Tq, H, Dh] (block_scores' way)."""
  return jnp.swapaxes(jnp.sum(weights[..., None] * v[:, :, None], axis=3), 1, 2)


class FeedForward(nn.Module):
  d_model: int
  d_ff: int
  dropout: float = 0.0
  dtype: Dtype = jnp.float32
  weights: FloatWeights = FLOAT  # makes both matrices (float32, or quantized)
  activation: str = 'relu'  # a name in ACTIVATIONS

  @nn.compact
  def __call__(self, x, *, deterministic: bool):
    """[B, T, D] -> [B, T, D]."""
    y = self.dense(self.d_model, self.d_ff, ('embed', 'mlp'), 'wi')(x)
    y = ACTIVATIONS[self.activation](y)
    y = nn.Dropout(self.dropout)(y, deterministic=deterministic)
    return self.dense(self.d_ff, self.d_model, ('mlp', 'embed'), 'wo')(y)

  def dense(self, d_in: int, d_out: int, axes: tuple, name: str) -> nn.Module:
    return self.weights.dense((d_out,), (d_in,), axes, True, self.dtype, name)


def layer_norm(name: str, dtype, epsilon: float) -> nn.LayerNorm:
  return nn.LayerNorm(dtype=dtype, name=name, epsilon=epsilon,
                      scale_init=nn.with_logical_partitioning(nn.initializers.ones, ('embed',)),
                      bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ('embed',)))
