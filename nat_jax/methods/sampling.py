"""Random choices several methods make: which slots of a row to mask (CMLM, HRT's CMLM task) or to
glance at (the DA-Transformer's GLAT)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def random_subset(rng, eligible: jax.Array, count: jax.Array) -> jax.Array:
  """bool[B, T]: per row, min(count[b], eligible slots) of its eligible slots (bool[B, T]), chosen
  uniformly without replacement; ineligible slots are never chosen."""
  keys = jnp.where(eligible, jax.random.uniform(rng, eligible.shape), 2.0)  # ineligible sort last
  rank = jnp.argsort(jnp.argsort(keys, axis=1), axis=1)  # [B, T]: 0 = smallest key
  return eligible & (rank < count[:, None])
