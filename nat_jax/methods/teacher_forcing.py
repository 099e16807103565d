"""Teacher-forced views of a batch and the one token-level loss every such method shares.

A token-level method (AT, CMLM, HRT's four tasks, the IBDecoder family) describes
what its decoder sees with one pure function from the batch to `DecoderInputs`: input tokens,
the position embedded at each slot, the decoding step of each slot (which fixes the attention
mask, see nat_jax.models.layers.attention_mask) and the token each slot must predict. The loss
is then the same label-smoothed cross-entropy over whatever view the method built, normalized
per target token.
"""
from __future__ import annotations

from typing import Optional

import flax
import jax
import jax.numpy as jnp

from nat_jax.losses.cross_entropy import smoothed_cross_entropy
from nat_jax.core.masks import attention_mask


@flax.struct.dataclass
class DecoderInputs:
  tokens: jax.Array     # i32[B, T]: input token of each slot
  positions: jax.Array  # i32[B, T]: position embedded at each slot
  groups: jax.Array     # i32[B, T]: decoding step of each slot (a slot sees its own step and earlier ones)
  valid: jax.Array      # bool[B, T]: slots that exist as attention keys
  targets: jax.Array    # i32[B, T]: token each slot predicts, 0 = no loss at this slot
  directions: Optional[jax.Array] = None  # i32[B, T]: direction embedding of each slot (IMDecoder), or none

  def self_mask(self) -> jax.Array:
    """bool[B, T, T]: the decoder self-attention mask of this view."""
    return attention_mask(self.groups, self.valid)


def teacher_forced_loss(model, params, source: jax.Array, inputs: DecoderInputs, rng, *, label_smoothing: float,
                        deterministic: bool) -> dict[str, jax.Array]:
  """Sums {'loss', 'nll', 'correct', 'tokens'} of the label-smoothed cross-entropy of one view
  (source i32[B, S]); normalized by 'tokens' (the target tokens of the view)."""
  logits = model.apply({'params': params}, source, inputs.tokens, inputs.positions, inputs.self_mask(),
                       deterministic=deterministic, directions=inputs.directions, rngs={'dropout': rng})  # [B, T, V]
  return smoothed_cross_entropy(logits, inputs.targets, (inputs.targets > 0).astype(jnp.float32), label_smoothing)
