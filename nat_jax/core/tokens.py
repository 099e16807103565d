"""Special token ids, output lengths and the token layouts that training and decoding share."""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

PAD_ID, EOS_ID, BOS_ID, UNK_ID, MASK_ID = 0, 1, 2, 3, 4  # fixed in every sentencepiece model we train

WIDTH_STEP = 8  # padded widths (training buckets, inference shapes) are multiples of this

# Output tokens (incl. EOS) a decoder may write for a padded source width S: LENGTH_RATIO * S + LENGTH_MARGIN.
LENGTH_RATIO, LENGTH_MARGIN = 1.5, 10


def ceil_div(a, b):
  """ceil(a / b) for positive b (steps of b tokens that cover a tokens); ints or integer arrays."""
  return -(-a // b)


def decode_length_bound(max_decode_len: int, src_len: int) -> int:
  """Output tokens (incl. EOS) a decoder may produce for a padded source width (static):
  min(config.max_decode_len, 1.5 x source width + 10)."""
  return min(max_decode_len, int(LENGTH_RATIO * src_len) + LENGTH_MARGIN)


def row_length_bounds(bound_of_width: Callable[[int], int], src: jax.Array) -> jax.Array:
  """i32[B]: each row's output bound, `bound_of_width` (a view's static max_decode_len) at the row's own
  padded width: its tokens rounded up to WIDTH_STEP, at most the batch's width S. A row decoded in a
  wider batch then gets the bound it has alone in a batch of its own width (a row of padding: the
  narrowest width's)."""
  width = src.shape[1]
  table = jnp.asarray([bound_of_width(min(max(k, 1) * WIDTH_STEP, width))
                       for k in range(ceil_div(width, WIDTH_STEP) + 1)], jnp.int32)  # [S/8 + 1]
  return table[ceil_div(jnp.sum(src != PAD_ID, axis=1), WIDTH_STEP)]


def through_first_eos(tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
  """tokens i32[B, T] -> (valid bool[B, T]: positions up to and including the first EOS,
  lengths i32[B]: their count, T where a row has no EOS)."""
  is_eos = tokens == EOS_ID
  valid = (jnp.cumsum(is_eos, axis=1) - is_eos) == 0
  return valid, jnp.sum(valid, axis=1).astype(jnp.int32)


def not_text(tokens: jax.Array) -> jax.Array:
  """bool[...]: BOS, EOS or PAD, which the text of a graph path leaves out."""
  return (tokens == BOS_ID) | (tokens == EOS_ID) | (tokens == PAD_ID)


def clean_path_tokens(tokens: jax.Array, lengths: jax.Array, dedup: bool, limit: int) -> tuple[jax.Array, jax.Array]:
  """The text tokens of a path's tokens, as the reference decoders make them.

  tokens i32[B, K] (left-aligned, lengths i32[B]) -> (i32[B, limit], lengths i32[B]): with
  `dedup`, a token equal to the one before it on the path is dropped (runs collapse to one);
  then BOS, EOS and PAD are dropped; then at most limit - 1 tokens are kept and EOS follows them.
  """
  batch, klen = tokens.shape
  pos = jnp.arange(klen)[None, :]  # [1, K]
  prev = jnp.pad(tokens[:, :-1], ((0, 0), (1, 0)), constant_values=-1)  # [B, K]
  keep = (pos < lengths[:, None]) & ~not_text(tokens)  # [B, K]
  if dedup:
    keep &= tokens != prev
  rank = jnp.cumsum(keep, axis=1) - 1  # [B, K]
  keep &= rank < limit - 1
  count = jnp.sum(keep, axis=1).astype(jnp.int32)  # [B]
  rows = jnp.broadcast_to(jnp.arange(batch)[:, None], (batch, klen))
  out = jnp.zeros((batch, limit), tokens.dtype).at[rows, jnp.where(keep, rank, limit)].set(tokens, mode='drop')
  out = out.at[jnp.arange(batch), count].set(EOS_ID, mode='drop')
  return out, count


def skip_frame(skips: jax.Array, k: int, mask_id: int = MASK_ID) -> tuple[jax.Array, jax.Array]:
  """HRT's Skip-CMLM input: skips i32[R, m] (Skip-AT tokens, 0 after the first EOS) -> (input
  i32[R, k m]: z_j at slot jk + k - 1, [MASK] at the other slots of the chunks through the first EOS
  (all m where there is none), 0 past them; fill bool[R, k m]: the [MASK] slots). What the hrt
  decoder feeds and what training feeds (methods.hrt.chunk_samples, from the Skip-AT targets)."""
  _, z_len = through_first_eos(skips)  # [R] chunks in use (m where no EOS)
  slots = jnp.arange(k * skips.shape[1])  # [km]
  on_skip = slots % k == k - 1
  in_use = slots[None, :] < k * z_len[:, None]  # [R, km]
  z = jnp.take(skips, slots // k, axis=1)  # [R, km]: z of each slot's chunk
  fill = in_use & ~on_skip[None, :]
  return jnp.where(in_use, jnp.where(on_skip[None, :], z, mask_id), 0), fill
