"""Timing helpers for benchmarks: warm-up, repeats, median, block_until_ready."""
from __future__ import annotations

import time
from typing import Callable

import jax
import numpy as np


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
  """Median wall-clock seconds of fn() (its outputs blocked on) after `warmup` untimed calls."""
  for _ in range(warmup):
    jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def machine() -> str:
  import os
  import platform
  device = jax.devices()[0]
  return (f'{platform.node() or "host"}: {os.cpu_count()} CPU cores, JAX {jax.__version__} on '
          f'{device.platform} ({device.device_kind}), {time.strftime("%Y-%m-%d")}')
