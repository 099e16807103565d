"""Autoregressive Transformer ('at'): teacher-forced training, and the left-to-right scorer view
that greedy, beam and the Jacobi decoders run on."""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from nat_jax.core.masks import attention_mask
from nat_jax.core.tokens import BOS_ID, EOS_ID, ceil_div, decode_length_bound, through_first_eos
from nat_jax.methods.base import Method
from nat_jax.methods.registry import register
from nat_jax.methods.teacher_forcing import DecoderInputs, batch_view, teacher_forced_loss
from nat_jax.models.transformer import Transformer, transformer_config
from nat_jax.views import LeftToRightScorer


def shift_right(target: jax.Array, bos: int) -> jax.Array:
  """i32[B, T] -> i32[B, T]: BOS followed by target[:, :-1].

  Inputs after EOS are irrelevant: the causal mask hides them from real positions and their loss is masked.
  """
  return jnp.concatenate([jnp.full_like(target[:, :1], bos), target[:, :-1]], axis=1)


def autoregressive_inputs(target: jax.Array) -> DecoderInputs:
  """target i32[B, T] (y + EOS, 0-padded) -> slot t reads y_(t-1) (BOS at t = 0) at position t,
  causally (one slot per step), and predicts y_t. Padding slots follow every real slot, so the
  causal mask alone keeps them out of real slots' attention."""
  positions = jnp.broadcast_to(jnp.arange(target.shape[1]), target.shape)  # [B, T]
  return DecoderInputs(tokens=shift_right(target, BOS_ID), positions=positions, groups=positions,
                       valid=jnp.ones(target.shape, bool), targets=target)


def init_transformer(model: Transformer, rng, batch):
  """Parameters of a Transformer, shaped by a left-to-right pass over `batch` (AT, HRT)."""
  inputs = autoregressive_inputs(batch['target'])
  return model.init(rng, batch['source'], inputs.tokens, inputs.positions, inputs.self_mask())['params']


@dataclasses.dataclass(frozen=True)
class TransformerScorer:
  """Decoding views of a Transformer decoder with bound parameters.

  As a LeftToRightScorer: slot t sits at position t * position_stride (1; HRT's Skip-AT: k), one
  slot per step, and the start slots read `start_token` (BOS; HRT's Skip-AT: <B_k>). As a
  MaskPredictor: `fill_logits` scores every slot of a partly masked sequence with full attention,
  and `length_log_probs` reads the model's length head (CMLM).
  """
  model: Transformer
  params: Any
  max_target_len: int  # config.max_decode_len
  tokens_per_step: int = 1
  position_stride: int = 1
  start_token: int = BOS_ID

  def _apply(self, *args, method):
    return self.model.apply({'params': self.params}, *args, method=method)

  def encode(self, src):
    """src i32[B, S] -> {'encoded': [B, S, D], 'src_valid': bool[B, S], 'cross_kv': per-layer keys/values}.

    Everything here is fixed per sentence, so beam search copies it once, never per step.
    """
    encoded = self._apply(src, method=Transformer.encode)
    return {'encoded': encoded, 'src_valid': src > 0,
            'cross_kv': self._apply(encoded, method=Transformer.precompute_cross)}

  def init_cache(self, enc, num_slots: int):
    """Self-attention cache: what changes while decoding (beam search reorders it every step)."""
    return self._apply(enc['encoded'].shape[0], num_slots, method=Transformer.init_cache)

  def resize_cache(self, cache, num_slots: int):
    """Every layer's keys [B, H, Dh, C] / values [B, H, C, Dh] and the positions [B, C] cut or padded to `num_slots`."""
    return Transformer.resize_cache(cache, num_slots)

  def step_logits(self, enc, cache, tokens, start):
    """tokens i32[B, T] at target slots start..start+T-1 -> (logits f32[B, T, V], cache)."""
    logits, _, cache = self.step_states(enc, cache, tokens, start)
    return logits, cache

  def step_states(self, enc, cache, tokens, start):
    """step_logits that also returns the final decoder states: (logits f32[B, T, V], hidden [B, T, D],
    cache); what a draft head reads (drafted decoding with a self-drafting run)."""
    b, t = tokens.shape
    num_slots = cache['positions'].shape[1]
    slots = start + jnp.arange(t)  # [T]
    z = self.tokens_per_step
    tokens = jnp.where(slots[None] < z, self.start_token, tokens)  # start slots hold BOS -> this view's start
    mask = attention_mask(jnp.arange(num_slots) // z, query_groups=slots // z)  # [T, C]: block-causal for z > 1
    directions = self.slot_directions(slots)
    return self.model.apply({'params': self.params}, tokens, jnp.broadcast_to(self.slot_positions(slots), (b, t)),
                            jnp.broadcast_to(mask, (b, t, num_slots)), enc['encoded'], enc['src_valid'],
                            cross_kv=enc['cross_kv'], cache=cache, cache_start=start,
                            directions=None if directions is None else jnp.broadcast_to(directions, (b, t)),
                            method=Transformer.decode_states)

  def slot_positions(self, slots):
    """i32[T] target slots -> the positions they embed: slot * position_stride."""
    return slots * self.position_stride

  def slot_directions(self, slots):
    """i32[T] target slots -> their direction embeddings, or None (this model has none)."""
    return None

  def read_out(self, tokens):
    """Decoded tokens in slot order i32[B, P] (0 after EOS) -> text order: the same here."""
    return tokens

  def write_in(self, tokens):
    """Text order i32[B, P] -> slot order: every position_stride-th token (HRT's Skip-AT writes
    s_k, s_2k, ..., s_N of the output padded with EOS to a multiple of k), 0 after the first EOS."""
    k = self.position_stride
    if k == 1:
      return tokens
    valid, _ = through_first_eos(tokens)
    padded = jnp.where(valid, tokens, EOS_ID)  # EOS from the first one on
    padded = jnp.pad(padded, ((0, 0), (0, -tokens.shape[1] % k)), constant_values=EOS_ID)
    skips = padded[:, k - 1::k]
    keep, _ = through_first_eos(skips)
    return jnp.where(keep, skips, 0)

  def fill_logits(self, enc, tokens):
    """tokens i32[B, W] (0 = no slot) -> logits f32[B, W, V]: one non-causal pass, slot w at position w,
    every slot attending every slot that holds a token."""
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)  # [B, W]
    mask = attention_mask(jnp.zeros_like(tokens), tokens > 0)  # [B, W, W]
    logits, _ = self.model.apply({'params': self.params}, tokens, positions, mask, enc['encoded'], enc['src_valid'],
                                 cross_kv=enc['cross_kv'], method=Transformer.decode)
    return logits

  def length_log_probs(self, enc):
    """log P(target length incl. EOS) f32[B, C] from the model's length head."""
    return jax.nn.log_softmax(self._apply(enc['encoded'], enc['src_valid'], method=Transformer.length_logits))

  def max_decode_len(self, src_len: int) -> int:
    """Steps this view may take: the output-length bound, over position_stride tokens per slot."""
    return ceil_div(decode_length_bound(self.max_target_len, src_len), self.position_stride)


@register('at')
class AutoregressiveMethod(Method):
  """Plain encoder-decoder Transformer trained with teacher forcing."""
  normalizer = 'tokens'
  feeds_draft_heads = True  # its scorer offers step_states, one token per step (nat_jax.methods.selfdraft)
  packable = True

  def __init__(self, config, vocab_size: int):
    super().__init__(config, vocab_size)
    self.model = Transformer(transformer_config(config.model, vocab_size))
    self.label_smoothing = config.label_smoothing

  def init_params(self, rng, batch):
    return init_transformer(self.model, rng, batch)

  def loss(self, params, batch, rng, step=0, deterministic: bool = False):
    inputs, packing = batch_view(batch, autoregressive_inputs, self.max_segments)
    return teacher_forced_loss(self.model, params, batch['source'], inputs, rng, label_smoothing=self.label_smoothing,
                               deterministic=deterministic, packing=packing)

  def scorer(self, params) -> TransformerScorer:
    return TransformerScorer(self.model, params, self.max_target_len)

  def views(self):
    return {LeftToRightScorer: self.scorer}

