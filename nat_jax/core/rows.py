"""Per-row windows of batched arrays: every row reads or writes its own offset (drafted decoding's
windows, the draft head's memory)."""
from __future__ import annotations

import jax


def row_slices(x: jax.Array, starts: jax.Array, width: int) -> jax.Array:
  """x [B, N, ...], starts i32[B] -> [B, width, ...]: x[b, starts[b]:starts[b] + width] (clamped
  into the row, as lax.dynamic_slice is)."""
  return jax.vmap(lambda row, s: jax.lax.dynamic_slice_in_dim(row, s, width))(x, starts)


def row_updates(x: jax.Array, update: jax.Array, starts: jax.Array, axis: int = 1) -> jax.Array:
  """x [B, ..., N, ...] with update [B, ..., W, ...] written at starts[b] of each row, along `axis`
  (of x; 1: x [B, N, ...])."""
  return jax.vmap(lambda row, u, s: jax.lax.dynamic_update_slice_in_dim(row, u, s, axis=axis - 1))(x, update, starts)
