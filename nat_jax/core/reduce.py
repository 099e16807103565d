"""Reductions the decoders take every step, in the form XLA:CPU runs fast.

`jnp.argmax` lowers to one reduction over (value, index) pairs, which XLA:CPU compiles to scalar
code, several times slower than a plain maximum (measured: docs/lab-notes/2026-11-26-speed-at-size.md).
`max_and_argmax` takes the maximum, then the smallest index that holds it: two plain reductions that
vectorise, same result. `scored_argmax` adds the log-probabilities a decoder keeps without writing a
[..., V] log-softmax table.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp


def max_and_argmax(x: jax.Array, axis: int = -1) -> tuple[jax.Array, jax.Array]:
  """(max, argmax) of x along `axis`, that axis removed: the maximum and the first index holding it
  (i32), exactly `jnp.max` and `jnp.argmax`: a NaN counts as the maximum (its first index), and a
  row of equal values (all -inf too) gives index 0."""
  axis = axis % x.ndim
  top = jnp.max(x, axis=axis, keepdims=True)
  hit = x == top
  if jnp.issubdtype(x.dtype, jnp.floating):
    hit = hit | jnp.isnan(x)
  index = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)
  first = jnp.min(jnp.where(hit, index, x.shape[axis]), axis=axis)
  return jnp.squeeze(top, axis), first


def argmax(x: jax.Array, axis: int = -1) -> jax.Array:
  """i32: `jnp.argmax(x, axis)` (first maximum; NaN counts as the maximum), as `max_and_argmax`."""
  return max_and_argmax(x, axis)[1]


def scored_argmax(logits: jax.Array, tokens: Optional[jax.Array] = None):
  """(argmax i32[...], its log-probability f32[...], the log-probability of `tokens` i32[...] or None)
  under log_softmax(logits) along the last axis, computed as jax.nn.log_softmax does (x - max -
  log sum exp(x - max)) but without writing the [..., V] table: what a decoding step or a
  verification pass reads of the distribution."""
  top, index = max_and_argmax(logits)
  shift = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))[..., None]  # [..., 1]
  log_sum = jnp.log(jnp.sum(jnp.exp(logits - shift), axis=-1))  # [...]
  top_lp = (top - shift[..., 0]) - log_sum
  if tokens is None:
    return index, top_lp, None
  picked = jnp.take_along_axis(logits, tokens[..., None], axis=-1)[..., 0]
  return index, top_lp, (picked - shift[..., 0]) - log_sum
