"""Teacher-forced views of a batch and the one token-level loss every such method shares.

A token-level method (AT, CMLM, HRT's four tasks, the IBDecoder family) describes
what its decoder sees with one pure function from the batch to `DecoderInputs`: input tokens,
the position embedded at each slot, the decoding step of each slot (which fixes the attention
mask, see nat_jax.models.layers.attention_mask) and the token each slot must predict. The loss
is then the same label-smoothed cross-entropy over whatever view the method built, normalized
per target token.

Packed batches (several pairs per row, nat_jax.core.packing) go through `batch_view`: the view is
built on the unpacked targets and packed back, so a method's view function never sees packing.
"""
from __future__ import annotations

from typing import Callable, Optional

import flax
import jax
import jax.numpy as jnp

from nat_jax.core.masks import attention_mask
from nat_jax.core.packing import Packing, segment_mask
from nat_jax.losses.cross_entropy import smoothed_cross_entropy


@flax.struct.dataclass
class DecoderInputs:
  tokens: jax.Array     # i32[B, T]: input token of each slot
  positions: jax.Array  # i32[B, T]: position embedded at each slot
  groups: jax.Array     # i32[B, T]: decoding step of each slot (a slot sees its own step and earlier ones)
  valid: jax.Array      # bool[B, T]: slots that exist as attention keys
  targets: jax.Array    # i32[B, T]: token each slot predicts, 0 = no loss at this slot
  directions: Optional[jax.Array] = None  # i32[B, T]: direction embedding of each slot (IMDecoder), or none
  segments: Optional[jax.Array] = None    # i32[B, T]: packed rows: the pair of each slot (0 = padding), or none

  def self_mask(self) -> jax.Array:
    """bool[B, T, T]: the decoder self-attention mask of this view (within each pair when packed)."""
    mask = attention_mask(self.groups, self.valid)
    return mask if self.segments is None else mask & segment_mask(self.segments, self.segments)

  def pack(self, packing: Packing) -> 'DecoderInputs':
    """This view of the unpacked targets ([R * K, W], W >= L) -> the packed rows' view [R, L]."""
    fields = dict(tokens=self.tokens, positions=self.positions, groups=self.groups, valid=self.valid,
                  targets=self.targets, directions=self.directions)
    return DecoderInputs(**{name: None if x is None else packing.pack_target(x) for name, x in fields.items()},
                         segments=packing.target_segments)


def batch_view(batch: dict, make_view: Callable[[jax.Array], DecoderInputs],
               max_segments: int) -> tuple[DecoderInputs, Optional[Packing]]:
  """(make_view(batch['target']), None) for a plain batch; for a packed one, make_view over the
  unpacked targets, packed back, and the batch's Packing."""
  packing = Packing.of(batch, max_segments)
  if packing is None:
    return make_view(batch['target']), None
  return make_view(packing.unpack_target(batch['target'])).pack(packing), packing


def source_args(source: jax.Array, packing: Optional[Packing]) -> dict[str, Optional[jax.Array]]:
  """Keyword arguments of Transformer.__call__ for the source side: the encoder positions and mask
  (None: one pair per row, the defaults) and the cross-attention mask (bool[B, T, S] for packed
  rows, else the valid source tokens bool[B, S])."""
  if packing is None:
    return dict(src_positions=None, src_mask=None, cross_mask=source > 0)
  return dict(src_positions=packing.source_positions, src_mask=packing.encoder_mask(),
              cross_mask=packing.cross_mask())


def teacher_forced_loss(model, params, source: jax.Array, inputs: DecoderInputs, rng, *, label_smoothing: float,
                        deterministic: bool, packing: Optional[Packing] = None) -> dict[str, jax.Array]:
  """Sums {'loss', 'nll', 'correct', 'tokens'} of the label-smoothed cross-entropy of one view
  (source i32[B, S]; packed rows: with their `packing`); normalized by 'tokens' (the target tokens)."""
  logits = model.apply({'params': params}, source, inputs.tokens, inputs.positions, inputs.self_mask(),
                       deterministic=deterministic, directions=inputs.directions, rngs={'dropout': rng},
                       **source_args(source, packing))  # [B, T, V]
  return smoothed_cross_entropy(logits, inputs.targets, (inputs.targets > 0).astype(jnp.float32), label_smoothing)
