"""Encoder-decoder Transformer (pre-norm by default) with an explicit, fixed-size decoder KV cache.

The decoder takes the positions and the self-attention mask from its caller, so one module
serves left-to-right decoding, Skip-AT (positions 0, k, 2k, ...), block-causal masks
(IBDecoder/SA) and bidirectional masks (CMLM, DAG decoders).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from nat_jax.core.masks import attention_mask
from nat_jax.errors import ConfigError
from nat_jax.models.int8 import Int8Weights
from nat_jax.models.layers import (
    CACHE_SLOT_AXIS,
    FLOAT,
    Attention,
    Embed,
    FeedForward,
    FloatWeights,
    layer_norm,
    sinusoidal_positions,
)

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16, 'float16': jnp.float16}  # of activations
# How the weight matrices are held (model.quantization): float32 ('none', every training), or quantized once at
# load for decoding ('int8': int8 weight matrices, float32 activations; by the product model.int8_kernel names).
QUANTIZATIONS = {'none': lambda product: FLOAT, 'int8': lambda product: Int8Weights(product)}


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """The model's settings: those of a recipe's config.model (nat_jax.recipes.defaults.ModelSettings declares each
  with its default, help and rule), what a method adds (start_tokens, length_classes, directions) and the
  vocabulary size."""
  vocab_size: int
  d_model: int
  num_heads: int
  d_ff: int
  enc_layers: int
  dec_layers: int
  dropout: float
  attention_dropout: float
  pre_norm: bool
  relative_window: int
  activation: str             # of the FFN: a name in nat_jax.models.layers.ACTIVATIONS
  position_timescales: str    # the sinusoid frequencies (layers.POSITION_TIMESCALES)
  scale_embedding: bool
  attention_bias: bool
  output_bias: bool
  layer_norm_epsilon: float
  start_tokens: int = 0     # input-only start tokens after the vocabulary (HRT's Skip-AT <B_k>)
  length_classes: int = 0   # >0: a target-length head over lengths 0 .. length_classes - 1 (CMLM)
  directions: int = 0       # >0: trainable direction embeddings added to decoder inputs (IMDecoder, h)
  dtype: Any = jnp.float32  # activation dtype (model.dtype); params and softmax statistics stay fp32
  weights: FloatWeights = FLOAT  # how the weight matrices are held: model.quantization (QUANTIZATIONS)


def transformer_config(model_cfg, vocab_size: int, **extra) -> TransformerConfig:
  """A recipe's `config.model` (its values held to their rules: nat_jax.recipes.defaults.check_config) ->
  TransformerConfig; `extra` sets what a method adds (start_tokens, length_classes, directions)."""
  if model_cfg.d_model % model_cfg.num_heads:
    raise ConfigError(f'model.d_model={model_cfg.d_model} must be divisible by model.num_heads={model_cfg.num_heads}.')
  taken = {f.name: model_cfg[f.name] for f in dataclasses.fields(TransformerConfig)
           if f.name not in ('vocab_size', 'dtype', 'weights') and f.name in model_cfg}
  return TransformerConfig(vocab_size=vocab_size, dtype=DTYPES[model_cfg.dtype], weights=model_weights(model_cfg),
                           **taken, **extra)


def model_weights(model_cfg) -> FloatWeights:
  """How the model holds its weight matrices: model.quantization (QUANTIZATIONS), int8 by the product
  model.int8_kernel names ('xla' or 'onednn', resolved at load: nat_jax.kernels.onednn.resolve); ConfigError
  for a quantization with activations other than float32."""
  name = model_cfg.quantization
  if name != 'none' and model_cfg.dtype != 'float32':
    raise ConfigError(f'model.quantization {name} computes in float32 (model.dtype float32), got model.dtype '
                      f'{model_cfg.dtype!r}.')
  return QUANTIZATIONS[name](model_cfg.int8_kernel)


def residual(f, x, norm, dropout, pre_norm: bool, deterministic: bool):
  """x + dropout(f(norm(x))) (pre-norm) or norm(x + dropout(f(x))) (post-norm); f returns (y, aux)."""
  y, aux = f(norm(x) if pre_norm else x)
  y = x + dropout(y, deterministic=deterministic)
  return (y if pre_norm else norm(y)), aux


def feed_forward(c: TransformerConfig) -> FeedForward:
  return FeedForward(c.d_model, c.d_ff, c.dropout, dtype=c.dtype, weights=c.weights, activation=c.activation)


class EncoderLayer(nn.Module):
  cfg: TransformerConfig

  def setup(self):
    c = self.cfg
    self.self_attention = Attention(c.num_heads, c.d_model, c.attention_dropout, dtype=c.dtype, weights=c.weights,
                                    use_bias=c.attention_bias, fuse_qkv=True)
    self.ffn = feed_forward(c)
    self.norm_attention = layer_norm('norm_attention', c.dtype, c.layer_norm_epsilon)
    self.norm_ffn = layer_norm('norm_ffn', c.dtype, c.layer_norm_epsilon)
    self.dropout = nn.Dropout(c.dropout)

  def __call__(self, x, mask, *, deterministic: bool):
    """x [B, S, D], mask bool[B, S, S] -> [B, S, D]."""
    c = self.cfg
    x, _ = residual(lambda h: self.self_attention(h, h, mask, deterministic=deterministic), x,
                    self.norm_attention, self.dropout, c.pre_norm, deterministic)
    x, _ = residual(lambda h: (self.ffn(h, deterministic=deterministic), None), x,
                    self.norm_ffn, self.dropout, c.pre_norm, deterministic)
    return x


class DecoderLayer(nn.Module):
  cfg: TransformerConfig

  def setup(self):
    c = self.cfg
    self.self_attention = Attention(c.num_heads, c.d_model, c.attention_dropout, c.relative_window, c.dtype, c.weights,
                                    c.attention_bias, fuse_qkv=True)
    self.cross_attention = Attention(c.num_heads, c.d_model, c.attention_dropout, dtype=c.dtype, weights=c.weights,
                                     use_bias=c.attention_bias)
    self.ffn = feed_forward(c)
    self.norm_self = layer_norm('norm_self', c.dtype, c.layer_norm_epsilon)
    self.norm_cross = layer_norm('norm_cross', c.dtype, c.layer_norm_epsilon)
    self.norm_ffn = layer_norm('norm_ffn', c.dtype, c.layer_norm_epsilon)
    self.dropout = nn.Dropout(c.dropout)

  def cross_kv(self, encoded):
    return self.cross_attention.project_kv(encoded)

  def __call__(self, x, self_mask, encoded, cross_mask, *, deterministic: bool, positions, kv_positions,
               cross_kv: Optional[dict] = None, cache: Optional[dict] = None, cache_start=None):
    """x [B, T, D]; self_mask bool[B, T, T or C]; cross_mask bool[B, T, S]. Returns (x, self cache).

    cross_kv: this layer's precomputed encoder keys/values (else projected from `encoded`).
    """
    c = self.cfg
    x, cache = residual(
        lambda h: self.self_attention(h, h, self_mask, deterministic=deterministic, q_pos=positions,
                                      kv_pos=kv_positions, cache=cache, cache_start=cache_start),
        x, self.norm_self, self.dropout, c.pre_norm, deterministic)
    x, _ = residual(
        lambda h: self.cross_attention(h, encoded, cross_mask, deterministic=deterministic,
                                       precomputed_kv=cross_kv),
        x, self.norm_cross, self.dropout, c.pre_norm, deterministic)
    x, _ = residual(lambda h: (self.ffn(h, deterministic=deterministic), None), x,
                    self.norm_ffn, self.dropout, c.pre_norm, deterministic)
    return x, cache


class Transformer(nn.Module):
  """Shared-vocabulary encoder-decoder. Call `encode`, `decode`, `init_cache` via `apply(method=...)`."""
  cfg: TransformerConfig

  def setup(self):
    c = self.cfg
    self.embed = Embed(c.vocab_size, c.d_model, c.dtype, c.start_tokens, c.weights, c.scale_embedding)
    if c.output_bias:
      self.output_bias = self.param('output_bias', nn.with_logical_partitioning(nn.initializers.zeros, ('vocab',)),
                                    (c.vocab_size,), jnp.float32)
    if c.length_classes:
      self.length_embed = self.param(
          'length_embed', nn.with_logical_partitioning(nn.initializers.normal(c.d_model**-0.5), (None, 'embed')),
          (c.length_classes, c.d_model), jnp.float32)
    self.encoder_layers = [EncoderLayer(c, name=f'encoder_{i}') for i in range(c.enc_layers)]
    self.decoder_layers = [DecoderLayer(c, name=f'decoder_{i}') for i in range(c.dec_layers)]
    if c.pre_norm:
      self.encoder_norm = layer_norm('encoder_norm', c.dtype, c.layer_norm_epsilon)
      self.decoder_norm = layer_norm('decoder_norm', c.dtype, c.layer_norm_epsilon)
    if c.directions:
      self.direction_embed = self.param(
          'direction_embed', nn.with_logical_partitioning(nn.initializers.normal(0.02), (None, 'embed')),
          (c.directions, c.d_model), jnp.float32)
    self.input_dropout = nn.Dropout(c.dropout)

  def embed_tokens(self, tokens, positions, *, deterministic: bool, directions=None):
    """tokens, positions i32[B, T] -> [B, T, D]: scaled embedding + sinusoidal position (+ the
    direction embedding of each slot, directions i32[B, T], when the model has them)."""
    c = self.cfg
    x = self.embed(tokens) + sinusoidal_positions(positions, c.d_model, c.position_timescales).astype(c.dtype)
    if directions is not None:
      x = x + jnp.take(self.direction_embed, directions, axis=0).astype(self.cfg.dtype)
    return self.input_dropout(x, deterministic=deterministic)

  def encode(self, src, *, deterministic: bool = True, positions=None, mask=None):
    """src i32[B, S] (0 = pad) -> encoded [B, S, D].

    Packed rows (nat_jax.core.packing) pass each slot's position within its sentence, positions
    i32[B, S], and the self-attention mask bool[B, S, S]; by default a row is one sentence.
    """
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(src.shape[1]), src.shape)
    if mask is None:
      mask = attention_mask(jnp.zeros_like(src), src > 0)  # [B, S, S]: every query sees every valid key
    x = self.embed_tokens(src, positions, deterministic=deterministic)
    for layer in self.encoder_layers:
      x = layer(x, mask, deterministic=deterministic)
    return self.encoder_norm(x) if self.cfg.pre_norm else x

  def decode(self, tokens, positions, self_mask, encoded, src_valid, *, deterministic: bool = True,
             cross_kv: Optional[list] = None, cache: Optional[dict] = None, cache_start=None, directions=None):
    """Decoder pass from tokens to logits.

    tokens, positions i32[B, T]; self_mask bool[B, T, T] (no cache) or bool[B, T, C] (cache of C slots);
    encoded [B, S, D]; src_valid bool[B, S] (the source tokens every slot sees) or bool[B, T, S] (per slot:
    packed rows); cross_kv: `precompute_cross(encoded)` (optional). With a
    cache the new keys go to slots [cache_start, cache_start + T); directions i32[B, T] (IMDecoder) selects
    each slot's direction embedding. Returns (logits f32[B, T, V], cache or None).
    """
    logits, _, new_cache = self.decode_states(tokens, positions, self_mask, encoded, src_valid,
                                              deterministic=deterministic, cross_kv=cross_kv, cache=cache,
                                              cache_start=cache_start, directions=directions)
    return logits, new_cache

  def decode_states(self, tokens, positions, self_mask, encoded, src_valid, *, deterministic: bool = True,
                    cross_kv: Optional[list] = None, cache: Optional[dict] = None, cache_start=None,
                    directions=None):
    """`decode` that also returns the final hidden states: (logits f32[B, T, V], hidden [B, T, D], cache)."""
    x = self.embed_tokens(tokens, positions, deterministic=deterministic, directions=directions)
    hidden, new_cache = self.decode_hidden(x, positions, self_mask, encoded, src_valid, deterministic=deterministic,
                                           cross_kv=cross_kv, cache=cache, cache_start=cache_start)
    return self.logits(hidden), hidden, new_cache

  def decode_hidden(self, x, positions, self_mask, encoded, src_valid, *, deterministic: bool = True,
                    cross_kv: Optional[list] = None, cache: Optional[dict] = None, cache_start=None,
                    remat: bool = False):
    """The decoder layers on input embeddings x [B, T, D] -> (final hidden states [B, T, D], cache or None).

    Methods whose decoder inputs are not tokens (DA-Transformer's graph queries) enter here. `remat`
    (training without a cache): every layer under `nn.remat`, keeping only its projections (dots
    without batch dimensions), so the backward pass recomputes one layer's attention weights
    [B, H, T, T] at a time instead of keeping all layers'; the values are the same.
    """
    if remat and cache is not None:
      raise ValueError('decode_hidden: remat is for training passes, without a cache.')
    if src_valid.ndim == 3:
      cross_mask = src_valid  # [B, T, S]
    else:
      cross_mask = jnp.broadcast_to(src_valid[:, None, :], (x.shape[0], x.shape[1], src_valid.shape[1]))
    cross = cross_kv if cross_kv is not None else [None] * len(self.decoder_layers)
    if cache is None:
      kv_positions, layer_caches = positions, [None] * len(self.decoder_layers)
    else:
      kv_positions = jax.lax.dynamic_update_slice_in_dim(cache['positions'], positions, cache_start, axis=1)
      layer_caches = cache['layers']
    def apply(layer, x, self_mask, encoded, cross_mask, positions, kv_positions, layer_cross, layer_cache):
      return layer(x, self_mask, encoded, cross_mask, deterministic=deterministic, positions=positions,
                   kv_positions=kv_positions, cross_kv=layer_cross, cache=layer_cache, cache_start=cache_start)

    if remat:
      apply = nn.remat(apply, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    new_layers = []
    for layer, layer_cross, layer_cache in zip(self.decoder_layers, cross, layer_caches):
      x, layer_cache = apply(layer, x, self_mask, encoded, cross_mask, positions, kv_positions, layer_cross,
                             layer_cache)
      new_layers.append(layer_cache)
    if self.cfg.pre_norm:
      x = self.decoder_norm(x)
    new_cache = None if cache is None else {'layers': new_layers, 'positions': kv_positions}
    return x, new_cache

  def logits(self, hidden):
    """Output projection (tied to the embeddings; + the output bias where the model has one): [B, T, D] ->
    f32[B, T, V]."""
    logits = self.embed.attend(hidden)
    return logits + self.output_bias if self.cfg.output_bias else logits

  def length_logits(self, encoded, src_valid):
    """Target-length scores f32[B, length_classes]: the mean-pooled encoder states [B, S, D] (over
    src_valid bool[B, S]) against a learned embedding per length (Mask-Predict's length predictor)."""
    weights = src_valid.astype(jnp.float32)[..., None]  # [B, S, 1]
    pooled = jnp.sum(encoded.astype(jnp.float32) * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1.0)
    return pooled @ self.length_embed.T  # [B, C]

  def precompute_cross(self, encoded):
    """Per decoder layer, the encoder keys/values ({'k': [B, H, Dh, S], 'v': [B, H, S, Dh]}): once per sentence."""
    return [layer.cross_kv(encoded) for layer in self.decoder_layers]

  def init_cache(self, batch: int, num_slots: int):
    """Empty self-attention cache of `num_slots` slots per layer in Attention.project_kv's layout (keys
    [B, H, Dh, C], values [B, H, C, Dh]), and the position of every slot."""
    c = self.cfg
    b, h, dh = batch, c.num_heads, c.d_model // c.num_heads
    return {'layers': [{'k': jnp.zeros((b, h, dh, num_slots), c.dtype), 'v': jnp.zeros((b, h, num_slots, dh), c.dtype)}
                       for _ in self.decoder_layers],
            'positions': jnp.zeros((batch, num_slots), jnp.int32)}

  @staticmethod
  def resize_cache(cache, num_slots: int):
    """`init_cache`'s cache, its first `num_slots` slots or padded with empty ones up to `num_slots`."""
    def resize(x, axis):
      if num_slots <= x.shape[axis]:
        return jax.lax.slice_in_dim(x, 0, num_slots, axis=axis)
      return jnp.pad(x, [(0, num_slots - x.shape[axis]) if a == axis else (0, 0) for a in range(x.ndim)])
    return {'layers': [{name: resize(kv, CACHE_SLOT_AXIS[name]) for name, kv in layer.items()}
                       for layer in cache['layers']],
            'positions': resize(cache['positions'], 1)}

  def __call__(self, src, tokens, positions, self_mask, *, deterministic: bool = True, directions=None,
               src_positions=None, src_mask=None, cross_mask=None):
    """Teacher-forced pass: src i32[B, S], tokens/positions (/directions) i32[B, T] -> logits f32[B, T, V].

    Packed rows also give the source positions i32[B, S], the encoder mask bool[B, S, S] and the
    cross-attention mask bool[B, T, S] (nat_jax.core.packing.Packing).
    """
    encoded = self.encode(src, deterministic=deterministic, positions=src_positions, mask=src_mask)
    logits, _ = self.decode(tokens, positions, self_mask, encoded, src > 0 if cross_mask is None else cross_mask,
                            deterministic=deterministic, directions=directions)
    return logits
