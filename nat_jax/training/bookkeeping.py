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

from nat_jax.errors import log
from nat_jax.files import write_atomic
from nat_jax.training.summaries import ScalarWriter

LOCK_FILE = 'train.lock'         # held (flock) by the training that writes the workdir


PREEMPTED_EXIT = 143  # exit status after SIGTERM saved a checkpoint (128 + 15, as a shell reports it; Ctrl-C: 130)


def setup_compilation_cache(path: str):
  """JAX's persistent compilation cache in `path` ('' leaves JAX's own setting), for programs that take at
  least a second to compile unless JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS in the environment says otherwise."""
  if path:
    jax.config.update('jax_compilation_cache_dir', os.path.expanduser(path))
    if 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS' not in os.environ:
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


MAX_RECORD_BYTES = 1 << 20  # one metrics.jsonl record is a few hundred bytes; a longer line is not one of ours


def kept_records(path: str, resume_step: int) -> tuple[list[bytes], int, int]:
  """The lines of the metrics log `path` logged at or before `resume_step`, the number of lines past it, and
  the number unreadable (a line torn by a kill mid-append, garbage, a line past MAX_RECORD_BYTES); read
  line by line, never more than MAX_RECORD_BYTES at once."""
  kept, later, unreadable = [], 0, 0
  with open(path, 'rb') as f:
    while line := f.readline(MAX_RECORD_BYTES + 1):
      if len(line) > MAX_RECORD_BYTES:
        while line and not line.endswith(b'\n'):  # skip the rest of it
          line = f.readline(MAX_RECORD_BYTES)
        unreadable += 1
        continue
      try:
        record = json.loads(line) if line.endswith(b'\n') else None
      except ValueError:
        record = None
      step = record.get('step') if isinstance(record, dict) else None
      if not isinstance(step, int):
        unreadable += line.strip() != b''
      elif step <= resume_step:
        kept.append(line)
      else:
        later += 1
  return kept, later, unreadable


class MetricsLog:
  """Appends JSON lines to workdir/metrics.jsonl and the same scalars to TensorBoard event files in
  workdir/tensorboard (process 0). On resume it drops what was logged past the resumed step and any
  unreadable line (the torn tail of a process killed mid-append; said in a warning), replacing the file
  atomically; a log that is not a regular file (a device, a FIFO) is appended to, never read back."""

  def __init__(self, workdir: str, resume_step: int, active: bool):
    self.path = os.path.join(workdir, 'metrics.jsonl')
    self.active = active
    self.events = ScalarWriter(os.path.join(workdir, 'tensorboard'), resume_step) if active else None
    if active and os.path.isfile(self.path):
      kept, later, unreadable = kept_records(self.path, resume_step)
      if unreadable:
        log.warning('%s: dropped %d unreadable line%s (a process killed while writing it leaves a torn last line)',
                    self.path, unreadable, '' if unreadable == 1 else 's')
      if later or unreadable:
        write_atomic(self.path, b''.join(kept))

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
  """Records SIGTERM or SIGINT (Ctrl-C) instead of stopping; the loop checks it after each step, saves and
  raises errors.Stopped. A context manager: the previous handlers are back on exit."""

  def __init__(self, signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)):
    self.signums, self.received = signums, None

  def __enter__(self):
    self.previous = {s: signal.signal(s, self._record) for s in self.signums}
    return self

  def _record(self, signum, frame):
    self.received = signum

  def __exit__(self, *exc):
    for s, handler in self.previous.items():
      signal.signal(s, handler)
