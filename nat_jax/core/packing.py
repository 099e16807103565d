"""Packed batches: several sentence pairs per row, told apart by segment ids (as flax examples/wmt).

A packed batch has, besides 'source' and 'target' (i32[R, L]), where each pair sits:

  source_segments, target_segments  i32[R, L]: 1, 2, ... = the pair's place in its row, 0 = padding
  source_positions, target_positions i32[R, L]: the slot's index within its pair (0 at each start)

Attention stays within a pair (`segment_mask`), positions restart per pair, and a method builds its
decoder inputs on the *unpacked* targets, one pair per row of `R * K` rows (K = the most pairs a row
may hold), exactly as it would for the pairs alone, then packs that view back into the rows. So any
view with one slot per target slot (AT, CMLM, HRT's four samples, the IBDecoder slot order) packs
without method-specific code. The batcher reserves each pair a multiple of the method's
`slot_multiple` target slots (IBDecoder's z, HRT's k), so a view that works in blocks keeps its
last block. tests/unit/test_core_packing.py checks that a packed batch gives the losses and gradients of its
pairs alone.
"""
from __future__ import annotations

from typing import Optional

import flax
import jax
import jax.numpy as jnp

PACKING_KEYS = ('source_segments', 'source_positions', 'target_segments', 'target_positions')


def segment_mask(query_segments: jax.Array, key_segments: jax.Array) -> jax.Array:
  """bool[B, Tq, Tk]: query i may see key j iff both belong to the same pair (segment ids i32[B, T],
  0 = padding, which sees nothing and is seen by nothing)."""
  same = query_segments[:, :, None] == key_segments[:, None, :]
  return same & (key_segments[:, None, :] > 0)


@flax.struct.dataclass
class Packing:
  source_segments: jax.Array   # i32[R, Ls]
  source_positions: jax.Array  # i32[R, Ls]
  target_segments: jax.Array   # i32[R, Lt]
  target_positions: jax.Array  # i32[R, Lt]
  max_segments: int = flax.struct.field(pytree_node=False, default=1)  # K

  @classmethod
  def of(cls, batch: dict, max_segments: int) -> Optional['Packing']:
    """The batch's packing, or None for a plain batch (one pair per row)."""
    if 'target_segments' not in batch:
      return None
    if max_segments < 1:
      raise ValueError('A packed batch needs max_segments >= 1 (config data.pack).')
    return cls(*(batch[key] for key in PACKING_KEYS), max_segments=max_segments)

  def encoder_mask(self) -> jax.Array:
    """bool[R, Ls, Ls]: encoder self-attention within each source."""
    return segment_mask(self.source_segments, self.source_segments)

  def cross_mask(self) -> jax.Array:
    """bool[R, Lt, Ls]: each target slot sees the source of its own pair."""
    return segment_mask(self.target_segments, self.source_segments)

  def _flat_index(self, segments, positions, width: int) -> jax.Array:
    """i32[R, L]: each slot's index in the flattened unpacked array [R * K * width] (padding: past the end)."""
    rows = jnp.arange(segments.shape[0])[:, None] * self.max_segments + segments - 1  # [R, L]
    return jnp.where(segments > 0, rows * width + positions, segments.shape[0] * self.max_segments * width)

  def _unpack(self, x, segments, positions):
    """x [R, L, ...] -> [R * K, L, ...]: pair k of row r on row r * K + k - 1, from slot 0, zero-padded."""
    r, width = segments.shape
    flat = jnp.zeros((r * self.max_segments * width,) + x.shape[2:], x.dtype)
    index = self._flat_index(segments, positions, width).reshape(-1)
    flat = flat.at[index].set(x.reshape((-1,) + x.shape[2:]), mode='drop')
    return flat.reshape((r * self.max_segments, width) + x.shape[2:])

  def _pack(self, x, segments, positions):
    """x [R * K, W, ...] (W >= L) -> [R, L, ...]: the inverse of `_unpack`; padding slots get zeros."""
    width = x.shape[1]
    index = self._flat_index(segments, positions, width)  # [R, L]
    flat = x.reshape((-1,) + x.shape[2:])
    return jnp.take(flat, index, axis=0, mode='fill', fill_value=0)

  def unpack_source(self, x):
    return self._unpack(x, self.source_segments, self.source_positions)

  def unpack_target(self, x):
    return self._unpack(x, self.target_segments, self.target_positions)

  def pack_target(self, x):
    return self._pack(x, self.target_segments, self.target_positions)
