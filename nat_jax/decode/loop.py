"""The loop every left-to-right decoder runs (greedy, beam, multiword_beam, Jacobi, drafted):
fixed shapes, a cache that grows in chunks, a batch that shrinks to its live rows.

`lax.while_loop` needs fixed shapes, so a plain loop attends every step over the cache of the
whole length bound and steps every row until the batch's last row ends. Both cost more than the
work (measured: docs/lab-notes/2026-11-24-left-to-right-loop.md). `decode_loop` keeps fixed shapes but
runs one loop per (rows, cache size):

  cache  the loop over C slots (32, 64, 128, ... up to the bound) sees the first C slots of the
         cache and runs while the next step writes below C; slots past the ones written are
         masked, and a masked slot weighs exactly zero in the softmax;
  rows   a batch of B >= 16 rows goes on with B / 4 rows (its live ones, gathered) once no more
         than B / 4 are live, and so on down to 4 rows; the results are scattered back.

A row's outputs are those of one loop over the full cache and batch up to float rounding (the
same per-row arithmetic at another batch or cache size; tests/unit/test_decode_loop.py checks equal tokens
on every decoder).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

FIRST_SLOTS = 32  # slots of the first loop's cache; each further loop doubles them
SHRINK = 4        # a batch goes on with rows / SHRINK rows once no more are live
MIN_ROWS = 4      # the fewest rows a batch shrinks to


def cache_sizes(num_slots: int) -> list[int]:
  """The cache size of each loop: FIRST_SLOTS, twice that, ... below num_slots, then num_slots."""
  sizes, size = [], FIRST_SLOTS
  while size < num_slots:
    sizes.append(size)
    size *= 2
  return sizes + [num_slots]


def batch_sizes(rows: int) -> list[int]:
  """The rows of each stage: rows, rows / 4, ... while that is >= MIN_ROWS (64: 64, 16, 4)."""
  sizes = [rows]
  while sizes[-1] // SHRINK >= MIN_ROWS:
    sizes.append(sizes[-1] // SHRINK)
  return sizes


def take_rows(tree, index: jax.Array, rows: int):
  """Leaves [rows * m, ...] (m hypotheses per row, e.g. a beam) -> [n * m, ...]: the rows `index`
  i32[n]. Scalars (steps common to the batch) stay as they are."""
  def take(x):
    if x.ndim == 0:
      return x
    if x.shape[0] % rows:
      raise ValueError(f'decode_loop: a state leaf of shape {x.shape} has no batch axis of {rows} rows.')
    grouped = x.reshape((rows, x.shape[0] // rows) + x.shape[1:])
    return grouped[index].reshape((-1,) + x.shape[1:])
  return jax.tree_util.tree_map(take, tree)


def put_rows(tree, index: jax.Array, part, rows: int):
  """take_rows' inverse: `part`'s rows written back at `index`; scalars come from `part`."""
  def put(x, y):
    if x.ndim == 0:
      return y
    m = x.shape[0] // rows
    grouped = x.reshape((rows, m) + x.shape[1:])
    return grouped.at[index].set(y.reshape((-1, m) + y.shape[1:])).reshape(x.shape)
  return jax.tree_util.tree_map(put, tree, part)


def growing_cache_loop(scorer, cond, body, enc, state, num_slots: int, window: int, slots_needed):
  """while cond(state): state = body(enc, state), for each C in cache_sizes(num_slots) over the first C
  slots of state.cache, while slots_needed(state) <= C (a loop whose first step would not fit is
  skipped; sizes below the `window` slots one body call writes have none)."""
  for size in [c for c in cache_sizes(num_slots)[:-1] if c >= window]:
    fits = lambda s, size=size: cond(s) & (slots_needed(s) <= size)

    def run(s, size=size, fits=fits):
      part = jax.lax.while_loop(fits, lambda p: body(enc, p), s.replace(cache=scorer.resize_cache(s.cache, size)))
      return part.replace(cache=scorer.resize_cache(part.cache, num_slots))
    state = jax.lax.cond(fits(state), run, lambda s: s, state)
  return jax.lax.while_loop(cond, lambda s: body(enc, s), state)


def decode_loop(scorer, cond: Callable[[Any], jax.Array], body: Callable[[Any, Any], Any], enc: Any, state: Any,
                num_slots: int, window: int, slots_needed: Callable[[Any], jax.Array], rows: int,
                live: Optional[Callable[[Any], jax.Array]] = None) -> Any:
  """`lax.while_loop(cond, lambda s: body(enc, s), state)`, run over a growing cache and shrinking batch.

  state: a flax struct whose `cache` (`scorer.init_cache(enc, num_slots)`) has the slots of the
  whole bound; window: the slots one `body` call writes (static; greedy: z, Jacobi: its block);
  slots_needed(state) -> i32[]: the slots the next `body` call writes below (every row's
  writes; rows whose cache is no longer read excepted); rows: the batch (leaves of enc and state
  are [rows * m, ...] or scalars); live(state) -> bool[rows]: the rows still being decoded (None:
  the batch never shrinks). A row that is not live must leave its outputs unchanged under `body`.
  """
  stages = batch_sizes(rows) if live is not None else [rows]

  def run(enc, state, stages):
    smaller = stages[1] if len(stages) > 1 else 0
    stage_cond = cond if not smaller else (lambda s: cond(s) & (jnp.sum(live(s)) > smaller))
    state = growing_cache_loop(scorer, stage_cond, body, enc, state, num_slots, window, slots_needed)
    if not smaller:
      return state
    is_live = live(state)
    index = jnp.nonzero(is_live, size=smaller, fill_value=jnp.argmin(is_live))[0]  # [smaller]; fill: a row not live
    part = run(take_rows(enc, index, stages[0]), take_rows(state, index, stages[0]), stages[1:])
    return put_rows(state, index, part, stages[0])

  return run(enc, state, stages)
