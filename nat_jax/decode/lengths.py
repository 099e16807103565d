"""Output lengths shared by every decoder: the decode-length bound and where a sequence ends."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from nat_jax.data.tokenizer import Tokenizer


def decode_length_bound(max_decode_len: int, src_len: int) -> int:
  """Output tokens (incl. EOS) a decoder may produce for a padded source width (static):
  min(config.max_decode_len, 1.5 x source width + 10)."""
  return min(max_decode_len, int(1.5 * src_len) + 10)


def resolve_max_len(view, src: jax.Array, max_len: int) -> int:
  """A decoder's `max_len` option (0: the view's bound for this source width)."""
  return max_len if max_len > 0 else view.max_decode_len(src.shape[1])


def through_first_eos(tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
  """tokens i32[B, T] -> (valid bool[B, T]: positions up to and including the first EOS,
  lengths i32[B]: their count, T where a row has no EOS)."""
  is_eos = tokens == Tokenizer.eos_id
  valid = (jnp.cumsum(is_eos, axis=1) - is_eos) == 0
  return valid, jnp.sum(valid, axis=1).astype(jnp.int32)
