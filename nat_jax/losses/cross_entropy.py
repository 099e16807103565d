"""Token-level cross-entropy with label smoothing."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from nat_jax.core.reduce import argmax


def smoothed_cross_entropy(logits: jax.Array, targets: jax.Array, weights: jax.Array,
                           label_smoothing: float = 0.0) -> dict[str, jax.Array]:
  """Sums over the batch (normalize by `tokens` after summing across devices / micro-batches).

  logits f32[B, T, V]; targets i32[B, T]; weights f32[B, T] (0 = ignore).
  The smoothed target puts 1 - ls on the reference and ls / (V - 1) on every other token; its
  entropy is subtracted so a perfect model scores 0.
  """
  vocab = logits.shape[-1]
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [B, T, V]
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]  # [B, T]
  if label_smoothing > 0:
    conf, low = 1.0 - label_smoothing, label_smoothing / (vocab - 1)
    smooth = -(conf * -nll + low * (jnp.sum(logp, -1) + nll))
    entropy = -(conf * jnp.log(conf) + (vocab - 1) * low * jnp.log(low + 1e-20))
    loss = smooth - entropy
  else:
    loss = nll
  correct = (argmax(logits) == targets).astype(jnp.float32)
  return {'loss': jnp.sum(loss * weights), 'nll': jnp.sum(nll * weights),
          'correct': jnp.sum(correct * weights), 'tokens': jnp.sum(weights)}
