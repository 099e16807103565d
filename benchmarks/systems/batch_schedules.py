"""Two ways a server could schedule left-to-right decoding, replayed call by call in plain Python (what
benchmarks.systems.continuous_batching prices with measured costs; tests/unit/test_benchmarks_batch_schedules.py
checks them on small cases by hand).

A schedule is a list of program calls, ('encoder', (rows, width)) or ('step', (rows, cache slots, width)),
and the row-steps it runs (the rows of every step, summed): batch-at-a-time as nat_jax.decode.loop runs
a batch, and continuous batching refilling finished rows every K steps.
"""
from __future__ import annotations

import collections

import numpy as np

from nat_jax.data.batching import power_of_two_rows
from nat_jax.decode.loop import batch_sizes, cache_sizes
from nat_jax.run.translation import source_lengths

MAX_LEN = 128  # the Bible recipes' max_len: source widths and the output bound


def padded_width(width: int) -> int:
  """The geometric width a batch of mixed widths is padded to (decode.cuts_rows decoders)."""
  return next(w for w in source_lengths(MAX_LEN, geometric=True) if w >= width)


def slots_for(position: int) -> int:
  """The cache size a step writing slot `position` runs with (nat_jax.decode.loop's growing cache)."""
  return next(c for c in cache_sizes(MAX_LEN) if position < c)


def batch_schedule(lengths, widths, clients: int):
  """Batch-at-a-time: [(kind, shape)] of every program call, and the row-steps it runs."""
  calls, row_steps = [], 0
  for start in range(0, len(lengths), clients):
    part = lengths[start:start + clients]
    rows, width = power_of_two_rows(len(part), clients), padded_width(max(widths[start:start + clients]))
    calls.append(('encoder', (rows, width)))
    stages, live = batch_sizes(rows), sorted(part, reverse=True)
    for t in range(max(part)):
      alive = sum(1 for n in live if n > t)
      while len(stages) > 1 and alive <= stages[1]:
        stages = stages[1:]
      calls.append(('step', (stages[0], slots_for(t), width)))
      row_steps += stages[0]
  return calls, row_steps


def tail_rows(clients: int, live: int) -> int:
  """The rows a continuous batch with nothing left waiting runs with: it shrinks as the loop does."""
  return next(rows for rows in reversed(batch_sizes(clients)) if rows >= live)


def continuous_schedule(lengths, widths, clients: int, stage_steps: int):
  """Continuous batching: [(kind, shape)] of every program call, and the row-steps it runs."""
  waiting = collections.deque(range(len(lengths)))
  slots = [None] * clients  # per row: [sentence, steps done] or None
  calls, row_steps = [], 0
  while waiting or any(slots):
    free = [r for r, s in enumerate(slots) if s is None or s[1] >= lengths[s[0]]]
    refill = free[:len(waiting)]
    for r in free:
      slots[r] = None
    for r in refill:
      slots[r] = [waiting.popleft(), 0]
    if refill:
      refill_width = padded_width(max(widths[slots[r][0]] for r in refill))
      calls.append(('encoder', (power_of_two_rows(len(refill), clients), refill_width)))
    if not any(slots):
      break
    width = padded_width(max(widths[s[0]] for s in slots if s))
    for _ in range(stage_steps):
      if not any(s and s[1] < lengths[s[0]] for s in slots):
        break
      furthest = max(s[1] for s in slots if s)
      rows = clients if waiting else tail_rows(clients, sum(1 for s in slots if s and s[1] < lengths[s[0]]))
      calls.append(('step', (rows, slots_for(furthest), width)))
      row_steps += rows
      for s in slots:
        if s and s[1] < lengths[s[0]]:
          s[1] += 1
  return calls, row_steps


def cost(calls, step, encoder, kinds=('step', 'encoder')) -> float:
  """Seconds the calls cost (only those of `kinds`)."""
  return sum(step[shape] if kind == 'step' else encoder[shape] for kind, shape in calls if kind in kinds)


def mean_shape(calls) -> tuple[float, float, float]:
  """(rows, cache slots, source width) of the steps, averaged over them."""
  shapes = np.asarray([shape for kind, shape in calls if kind == 'step'], np.float64)
  return tuple(shapes.mean(axis=0))
