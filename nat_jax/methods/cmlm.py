"""Conditional masked language model ('cmlm', Ghazvininejad et al. 2019) for Mask-Predict decoding.

The decoder reads the target with some tokens replaced by [MASK] and predicts them all at once
with full (non-causal) self-attention; slot t sits at position t. A length head on the
mean-pooled encoder states predicts the target length, counting the EOS (Transformer.length_logits).

Our choices where the papers and their two codebases leave room (docs/methods/cmlm.md):
- EOS is part of the length and sits, unmasked, at slot N - 1; only the N - 1 text tokens are
  masked and predicted, so the decoder is told where the sentence ends exactly as Mask-Predict
  tells it (the length is given).
- Training masks m text tokens, m uniform in 1 .. N - 1, positions uniform without replacement
  (`random_mask`); label-smoothed cross-entropy on the masked tokens only.
- Fine-tuning from an AT run (init_from, configs/cmlm_ft_bible_tiny.py): `adopt_params` takes every
  parameter from it and only the length head (absent there) from the fresh initialisation; the
  decoder's causal training is then unlearned by the non-causal masked-token loss.
- Loss = sum of masked-token losses + length_loss_weight x (masked tokens / sentences) x sum of
  per-sentence length NLLs, normalized per masked token: the token mean plus length_loss_weight
  times the sentence mean of the length NLL (fairseq's weighting; weight 0.1, the original 1.0).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import traverse_util

from nat_jax.core.reduce import argmax
from nat_jax.core.tokens import EOS_ID, MASK_ID
from nat_jax.losses.cross_entropy import smoothed_cross_entropy
from nat_jax.methods.autoregressive import TransformerScorer
from nat_jax.methods.base import Method
from nat_jax.methods.registry import register
from nat_jax.methods.sampling import random_subset
from nat_jax.methods.teacher_forcing import DecoderInputs, batch_view, source_args
from nat_jax.models.transformer import Transformer, transformer_config
from nat_jax.settings import setting
from nat_jax.views import MaskPredictor


@dataclasses.dataclass(frozen=True)
class CmlmSettings:
  """The `config.cmlm` section of a CMLM recipe."""
  length_loss_weight: float = setting(0.1, "weight of the target-length head's cross-entropy", low=0)


def random_mask(rng, maskable: jax.Array) -> jax.Array:
  """bool[B, T]: per row, m of its maskable slots (bool[B, T]) chosen uniformly without replacement,
  m uniform in 1 .. (number of maskable slots); rows with none stay unmasked."""
  count_rng, pick_rng = jax.random.split(rng)
  available = jnp.sum(maskable, axis=1)  # [B]
  m = jnp.floor(jax.random.uniform(count_rng, available.shape) * available).astype(jnp.int32) + 1  # [B] in 1..avail
  return random_subset(pick_rng, maskable, m)


def masked_inputs(target: jax.Array, masked: jax.Array) -> DecoderInputs:
  """target i32[B, T] (y + EOS, 0-padded), masked bool[B, T] -> the non-causal view: slot t reads
  target_t or [MASK] at position t, sees every real slot, and predicts target_t where masked."""
  positions = jnp.broadcast_to(jnp.arange(target.shape[1]), target.shape)
  return DecoderInputs(tokens=jnp.where(masked, MASK_ID, target), positions=positions,
                       groups=jnp.zeros_like(target), valid=target > 0, targets=jnp.where(masked, target, 0))


def text_slots(target: jax.Array) -> jax.Array:
  """bool[B, T]: the slots before each row's EOS (the tokens CMLM masks)."""
  return (target > 0) & (target != EOS_ID)


@register('cmlm', CmlmSettings)
class CmlmMethod(Method):
  """CMLM: masked-token cross-entropy + target-length cross-entropy; a MaskPredictor view."""
  normalizer = 'tokens'
  packable = True

  def __init__(self, config, vocab_size: int):
    super().__init__(config, vocab_size)
    self.length_classes = config.max_len + 1  # lengths 0 .. max_len (incl. EOS)
    self.model = Transformer(transformer_config(config.model, vocab_size, length_classes=self.length_classes))
    self.label_smoothing = config.label_smoothing
    self.length_loss_weight = config.cmlm.length_loss_weight

  def init_params(self, rng, batch):
    inputs = masked_inputs(batch['target'], jnp.zeros(batch['target'].shape, bool))
    params = self.model.init(rng, batch['source'], inputs.tokens, inputs.positions, inputs.self_mask())['params']
    return params

  def loss(self, params, batch, rng, step=0, deterministic: bool = False):
    """Sums: loss (masked tokens + weighted length term, normalized by 'tokens' = masked tokens),
    nll / correct of the masked tokens, length_nll and length_correct over 'sentences'."""
    src = batch['source']
    mask_rng, dropout_rng = jax.random.split(rng)
    inputs, packing = batch_view(batch, lambda t: masked_inputs(t, random_mask(mask_rng, text_slots(t))),
                                 self.max_segments)
    rngs = {'dropout': dropout_rng}
    apply = lambda *a, **k: self.model.apply({'params': params}, *a, deterministic=deterministic, rngs=rngs, **k)
    args = source_args(src, packing)
    encoded = apply(src, positions=args['src_positions'], mask=args['src_mask'], method=Transformer.encode)
    logits, _ = apply(inputs.tokens, inputs.positions, inputs.self_mask(), encoded, args['cross_mask'],
                      method=Transformer.decode)
    sums = smoothed_cross_entropy(logits, inputs.targets, (inputs.targets > 0).astype(jnp.float32),
                                  self.label_smoothing)
    target = batch['target'] if packing is None else packing.unpack_target(batch['target'])  # [B, T]: a pair per row
    if packing is not None:  # the length head pools each pair's own source states
      encoded, src = packing.unpack_source(encoded), packing.unpack_source(src)
    real = jnp.any(target > 0, axis=1)  # [B]
    lengths = jnp.minimum(jnp.sum(target > 0, axis=1), self.length_classes - 1)  # [B], incl. EOS
    length_logp = jax.nn.log_softmax(self.model.apply({'params': params}, encoded, src > 0,
                                                      method=Transformer.length_logits))  # [B, C]
    length_nll = -jnp.take_along_axis(length_logp, lengths[:, None], axis=1)[:, 0]  # [B]
    sentences = jnp.sum(real).astype(jnp.float32)
    length_sum = jnp.sum(jnp.where(real, length_nll, 0.0))
    sums['loss'] = sums['loss'] + self.length_loss_weight * sums['tokens'] / jnp.maximum(sentences, 1.0) * length_sum
    sums.update(sentences=sentences, length_nll=length_sum,
                length_correct=jnp.sum(real & (argmax(length_logp, axis=1) == lengths)).astype(jnp.float32))
    return sums

  def adopt_params(self, loaded, fresh):
    """An AT run's params (`init_from`) completed with the length head of the fresh initialisation;
    other differences are left for the caller's check."""
    have, want = traverse_util.flatten_dict(loaded), traverse_util.flatten_dict(fresh)
    have.update({key: like for key, like in want.items() if key not in have and key[-1] == 'length_embed'})
    return traverse_util.unflatten_dict(have)

  def views(self):
    return {MaskPredictor: lambda params: TransformerScorer(self.model, params, self.max_target_len)}

