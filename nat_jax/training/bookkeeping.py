"""What a training keeps beside the model: the CPU clock that prices a recipe, the metrics log
(metrics.jsonl + TensorBoard), the SIGTERM flag, the workdir lock and the compilation cache."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from typing import Callable

import jax

from nat_jax.training.summaries import ScalarWriter

LOCK_FILE = 'train.lock'         # held (flock) by the training that writes the workdir


PREEMPTED_EXIT = 143            # exit status after SIGTERM saved a checkpoint (128 + 15, as a shell reports it)


def setup_compilation_cache(path: str):
  if path:
    jax.config.update('jax_compilation_cache_dir', os.path.expanduser(path))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)


class CpuClock:
  """Training CPU seconds of a run: `before` (spent by the processes it resumes) plus this process's CPU
  time since the clock started, less what was spent inside `excluded()` blocks (validation)."""

  def __init__(self, before: float = 0.0, clock: Callable[[], float] = time.process_time):
    self.clock, self.before, self.start, self.skipped = clock, before, clock(), 0.0

  def seconds(self) -> float:
    return self.before + self.clock() - self.start - self.skipped

  @contextlib.contextmanager
  def excluded(self):
    t0 = self.clock()
    try:
      yield
    finally:
      self.skipped += self.clock() - t0


class MetricsLog:
  """Appends JSON lines to workdir/metrics.jsonl and the same scalars to TensorBoard event files in
  workdir/tensorboard (process 0); on resume, drops what was logged past the resumed step."""

  def __init__(self, workdir: str, resume_step: int, active: bool):
    self.path = os.path.join(workdir, 'metrics.jsonl')
    self.active = active
    self.events = ScalarWriter(os.path.join(workdir, 'tensorboard'), resume_step) if active else None
    if active and os.path.exists(self.path):
      with open(self.path) as f:
        kept = [l for l in f if l.strip() and json.loads(l).get('step', 0) <= resume_step]
      with open(self.path, 'w') as f:
        f.writelines(kept)

  def write(self, step: int, split: str, values: dict):
    if self.active:
      values = {k: float(v) for k, v in values.items()}
      with open(self.path, 'a') as f:
        f.write(json.dumps({'step': int(step), 'split': split, 'time': time.time(), **values}) + '\n')
      self.events.write(step, values, prefix=f'{split}/')

  def close(self):
    if self.events is not None:
      self.events.close()


class SignalFlag:
  """Records a signal (SIGTERM) instead of dying; the loop checks it after each step. A context
  manager: the previous handler is back on exit."""

  def __init__(self, signum: int = signal.SIGTERM):
    self.signum, self.received = signum, None

  def __enter__(self):
    self.previous = signal.signal(self.signum, self._record)
    return self

  def _record(self, signum, frame):
    self.received = signum

  def __exit__(self, *exc):
    signal.signal(self.signum, self.previous)
