"""Attention masks and the finite "minus infinity" every masked score uses."""
from __future__ import annotations

from typing import Optional

import jax

NEG_INF = -1e9  # finite mask value: a fully masked row stays NaN-free in softmax.


def attention_mask(groups: jax.Array, valid: Optional[jax.Array] = None, *,
                   query_groups: Optional[jax.Array] = None) -> jax.Array:
  """bool[..., Tq, Tk]: query i may attend key j iff groups[j] <= query_groups[i] and valid[j].

  groups i32[..., Tk] numbers the decoding step that produces each slot; a slot sees every slot
  of its own step and of earlier ones. valid bool[..., Tk] (default all True) removes keys that
  do not exist (padding). query_groups i32[..., Tq] defaults to groups (self-attention over the
  same slots); with a KV cache the queries are the new slots and the keys every cache slot.
  Leading dimensions broadcast. Every self-attention mask in nat_jax is one call:

    causal (AT; HRT Skip-AT over its U slots)   groups = 0 1 2 3     ->  1 0 0 0
                                                                          1 1 0 0
                                                                          1 1 1 0
                                                                          1 1 1 1
    full (encoder, DAT, CMLM, HRT Skip-CMLM)    groups = 0 0 0 0,    ->  1 1 1 0
                                                valid  = 1 1 1 0         (every row)
    block-causal, z = 2 slots per step          groups = 0 0 1 1     ->  1 1 0 0
    (SA / IBDecoder: groups = slot // z)                                 1 1 0 0
                                                                          1 1 1 1
                                                                          1 1 1 1
    cached step: queries at slots 2, 3 of a     groups = 0 1 2 3 4,  ->  1 1 1 0 0
    5-slot cache (z = 1)                        query_groups = 2 3        1 1 1 1 0
  """
  query_groups = groups if query_groups is None else query_groups
  mask = groups[..., None, :] <= query_groups[..., :, None]  # [..., Tq, Tk]
  return mask if valid is None else mask & valid[..., None, :]
