"""A decoder's `max_len` option against its view's bound (the bound itself: nat_jax.core.tokens)."""
from __future__ import annotations

import jax

from nat_jax.core.tokens import ceil_div


def resolve_max_len(view, src: jax.Array, max_len: int) -> int:
  """A decoder's `max_len` option (0: the view's bound for this source width)."""
  return max_len if max_len > 0 else view.max_decode_len(src.shape[1])


def decode_steps(scorer, src: jax.Array, max_len: int) -> int:
  """Decoding steps of z = scorer.tokens_per_step tokens a left-to-right decoder may take (greedy,
  multi-word beam, Jacobi, drafted): the length bound over z."""
  return ceil_div(resolve_max_len(scorer, src, max_len), scorer.tokens_per_step)
