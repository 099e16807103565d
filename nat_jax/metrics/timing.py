"""Timing for evaluate and every benchmark: warm-up, repeats, median, block_until_ready."""
from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable

import jax
import numpy as np


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
  """(fn()'s output, wall-clock seconds of the call with every array in it ready)."""
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn())
  return out, time.perf_counter() - t0


def median_timed(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> tuple[Any, float]:
  """(fn()'s output, median seconds over `repeats` timed calls after `warmup` untimed ones)."""
  out = None
  for _ in range(warmup):
    out = jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    out, seconds = timed(fn)
    times.append(seconds)
  return out, float(np.median(times))


def alternated(calls: dict[Any, Callable[[], Any]], passes: int) -> dict[Any, np.ndarray]:
  """{name: seconds of each pass} of `calls` timed in turn, once per pass, the order reversed every
  other pass (so a host that drifts during the run slows every call alike): what the side-by-side
  benchmarks compute their per-pass ratios from."""
  times = {name: [] for name in calls}
  for p in range(passes):
    for name in (list(calls) if p % 2 == 0 else list(calls)[::-1]):
      times[name].append(timed(calls[name])[1])
  return {name: np.asarray(t) for name, t in times.items()}


def machine() -> str:
  """The host, its CPU and cores, JAX version, device and today's date: the line every benchmark prints."""
  device = jax.devices()[0]
  return (f'{platform.node() or "host"}: {cpu_model()}, {os.cpu_count()} CPU cores, JAX {jax.__version__} on '
          f'{device.platform} ({device.device_kind}), {time.strftime("%Y-%m-%d")}')


def cpu_model() -> str:
  """The CPU's model name (Linux's /proc/cpuinfo; elsewhere what `platform` knows)."""
  try:
    with open('/proc/cpuinfo', encoding='utf-8', errors='replace') as f:
      return next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
  except (OSError, StopIteration):
    return platform.processor() or platform.machine()
