"""The floor under a product that reads its weight once: how long this core takes to read a number of bytes
(numpy's vectorized OR over them as u64 lanes: the fastest read measured here, 2026-12-04 lab note), timed as
the benchmarks time their programs (benchmarks.components.int8_product, benchmarks.systems.size_sweep)."""
from __future__ import annotations

from typing import Callable

import numpy as np


def read_once(nbytes: int, loop: int) -> Callable[[], list]:
  """fn(): `loop` reads of the same `nbytes` bytes (one buffer, warm in the caches as a decoder's weights are
  from one step to the next)."""
  blob = np.random.default_rng(1).integers(0, 2**63, max(nbytes // 8, 1), dtype=np.uint64)
  return lambda: [np.bitwise_or.reduce(blob) for _ in range(loop)]
