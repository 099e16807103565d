"""TensorBoard event files written without TensorFlow (the `tensorboard` package's own writer and protos).

  tensorboard --logdir=runs        # every run's <workdir>/tensorboard, side by side

Training logs each scalar as `<split>/<name>` (train/loss, train/lr, train/tokens_per_s,
validation/bleu, method counts such as train/impossible or train/glance_ratio). A resumed run first
writes a SessionLog.START event just after its resume step, which tells TensorBoard to drop the steps
after that step which the interrupted run had logged (its checkpoint is older than them).
"""
from __future__ import annotations

import time

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class ScalarWriter:
  """Scalars into an event file under `logdir` (a new file per process start, as TensorBoard expects)."""

  def __init__(self, logdir: str, resume_step: int = 0):
    self._writer = EventFileWriter(logdir)
    if resume_step:
      self._writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(resume_step) + 1,  # purges >= this
                                             session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))

  def write(self, step: int, values: dict[str, float], prefix: str = ''):
    """One event at `step` holding every value as a scalar named prefix + key; flushed to disk."""
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=f'{prefix}{k}', simple_value=float(v))
                                         for k, v in values.items()])
    self._writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))
    self._writer.flush()

  def close(self):
    self._writer.close()
