"""Autoregressive Transformer ('at'): teacher-forced training, left-to-right decoding interface."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from nat_jax.data.tokenizer import Tokenizer
from nat_jax.losses.cross_entropy import smoothed_cross_entropy
from nat_jax.methods import register
from nat_jax.models import Transformer, TransformerConfig
from nat_jax.models.layers import causal_mask

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16, 'float16': jnp.float16}


def transformer_config(model_cfg, vocab_size: int) -> TransformerConfig:
  """ml_collections `config.model` -> TransformerConfig."""
  if model_cfg.dtype not in DTYPES:
    raise ValueError(f'model.dtype must be one of {sorted(DTYPES)}, got {model_cfg.dtype!r}.')
  if model_cfg.d_model % model_cfg.num_heads:
    raise ValueError(f'model.d_model={model_cfg.d_model} must be divisible by model.num_heads={model_cfg.num_heads}.')
  return TransformerConfig(
      vocab_size=vocab_size, d_model=model_cfg.d_model, num_heads=model_cfg.num_heads, d_ff=model_cfg.d_ff,
      enc_layers=model_cfg.enc_layers, dec_layers=model_cfg.dec_layers, dropout=model_cfg.dropout,
      attention_dropout=model_cfg.attention_dropout, pre_norm=model_cfg.pre_norm,
      relative_window=model_cfg.relative_window, dtype=DTYPES[model_cfg.dtype])


def shift_right(target: jax.Array, bos: int) -> jax.Array:
  """i32[B, T] -> i32[B, T]: BOS followed by target[:, :-1].

  Inputs after EOS are irrelevant: the causal mask hides them from real positions and their loss is masked.
  """
  return jnp.concatenate([jnp.full_like(target[:, :1], bos), target[:, :-1]], axis=1)


@register('at')
class AutoregressiveMethod:
  """Plain encoder-decoder Transformer trained with teacher forcing."""
  decoders = ('greedy', 'beam', 'jacobi_pj', 'jacobi_pgj', 'jacobi_hgj')

  def __init__(self, config, vocab_size: int):
    self.config = config
    self.model = Transformer(transformer_config(config.model, vocab_size))
    self.label_smoothing = config.label_smoothing
    self.max_target_len = config.max_decode_len

  # --- training -------------------------------------------------------------------------------
  def _inputs(self, target):
    """target i32[B, T] -> (tokens, positions, self_mask bool[B, T, T])."""
    tokens = shift_right(target, Tokenizer.bos_id)
    positions = jnp.broadcast_to(jnp.arange(target.shape[1]), target.shape)
    return tokens, positions, causal_mask(positions, positions)

  def init_params(self, rng, batch):
    tokens, positions, mask = self._inputs(batch['target'])
    return self.model.init(rng, batch['source'], tokens, positions, mask)['params']

  def loss(self, params, batch, rng, step=0, deterministic: bool = False):
    tokens, positions, mask = self._inputs(batch['target'])
    logits = self.model.apply({'params': params}, batch['source'], tokens, positions, mask,
                              deterministic=deterministic, rngs={'dropout': rng})
    weights = (batch['target'] > 0).astype(jnp.float32)
    return smoothed_cross_entropy(logits, batch['target'], weights, self.label_smoothing)

  # --- autoregressive decoding interface ------------------------------------------------------
  def encode(self, params, src):
    """src i32[B, S] -> {'encoded': [B, S, D], 'src_valid': bool[B, S], 'cross_kv': per-layer keys/values}.

    Everything here is fixed per sentence, so beam search copies it once, never per step.
    """
    encoded = self.model.apply({'params': params}, src, method=Transformer.encode)
    cross_kv = self.model.apply({'params': params}, encoded, method=Transformer.precompute_cross)
    return {'encoded': encoded, 'src_valid': src > 0, 'cross_kv': cross_kv}

  def init_cache(self, params, enc, num_slots: int):
    """Self-attention cache: what changes while decoding (beam search reorders it every step)."""
    return self.model.apply({'params': params}, enc['encoded'].shape[0], num_slots, method=Transformer.init_cache)

  def step_logits(self, params, enc, cache, tokens, start):
    """tokens i32[B, T] at target positions start..start+T-1 (cache slots alike) -> logits f32[B, T, V]."""
    b, t = tokens.shape
    num_slots = cache['positions'].shape[1]
    q_slots = start + jnp.arange(t)  # [T]
    mask = jnp.broadcast_to(causal_mask(q_slots, jnp.arange(num_slots)), (b, t, num_slots))
    positions = jnp.broadcast_to(q_slots, (b, t))
    return self.model.apply({'params': params}, tokens, positions, mask, enc['encoded'], enc['src_valid'],
                            cross_kv=enc['cross_kv'], cache=cache, cache_start=start, method=Transformer.decode)

  def max_decode_len(self, src_len: int) -> int:
    """Decode-length bound for a padded source width (static, so a few shapes compile)."""
    return min(self.max_target_len, int(1.5 * src_len) + 10)
