"""Orbax checkpoints: periodic saves with keep-N, a separate keep-best-by-BLEU directory,
resume with fallback past a corrupt latest checkpoint, and parameter averaging.

Layout inside a workdir:
  checkpoints/<step>/   latest N train states (params, optimizer state, step)
  best/<step>/          best N by validation BLEU
Each checkpoint also holds `meta` (JSON): step, seed, data position, metrics.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
  pass


def _manager(directory: str, max_to_keep: int, best: bool = False) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False,
      best_fn=(lambda m: m['bleu']) if best else None, best_mode='max',
      keep_checkpoints_without_metrics=not best)
  return ocp.CheckpointManager(os.path.abspath(directory), options=options)


class Checkpointer:
  """Latest-N and best-N train-state checkpoints of one workdir."""

  def __init__(self, workdir: str, keep: int = 3, keep_best: int = 1):
    self.latest = _manager(os.path.join(workdir, 'checkpoints'), keep)
    self.best = _manager(os.path.join(workdir, 'best'), keep_best, best=True)

  def save(self, step: int, state, meta: dict, bleu: Optional[float] = None):
    args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
    self.latest.save(step, args=args, force=True)
    if bleu is not None:
      self.best.save(step, args=args, metrics={'bleu': float(bleu)}, force=True)

  def restore_latest(self, abstract_state) -> tuple[Optional[Any], Optional[dict]]:
    """Newest readable checkpoint; a corrupt one is reported and the previous one tried."""
    return restore_newest(self.latest, abstract_state)

  def wait(self):
    self.latest.wait_until_finished()
    self.best.wait_until_finished()

  def close(self):
    self.latest.close()
    self.best.close()


def restore_newest(manager: ocp.CheckpointManager, abstract_state, steps=None):
  """(state, meta) from the newest step that restores, or (None, None) if there is none."""
  steps = sorted(manager.all_steps() if steps is None else steps, reverse=True)
  for i, step in enumerate(steps):
    try:
      restored = manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
      return restored['state'], dict(restored['meta'])
    except Exception as e:  # orbax raises various types for truncated/missing files
      older = f'falling back to step {steps[i + 1]}' if i + 1 < len(steps) else 'no older checkpoint left'
      log.warning('Checkpoint step %d in %s is unreadable (%s: %s); %s.', step, manager.directory,
                  type(e).__name__, str(e).splitlines()[0][:200], older)
      print(f'WARNING: checkpoint step {step} is unreadable ({type(e).__name__}); {older}.', flush=True)
  return None, None


def load_params(workdir: str, abstract_state, which: str = 'latest', average: int = 1):
  """Params (of a full abstract train state) for inference: from `checkpoints/` (which='latest') or `best/` (which='best').

  average > 1 averages the params of the newest (latest) or best (best) `average` checkpoints.
  Raises CheckpointError naming the workdir when nothing can be read.
  """
  sub = {'latest': 'checkpoints', 'best': 'best'}[which]
  directory = os.path.join(workdir, sub)
  if not os.path.isdir(directory):
    raise CheckpointError(f'No checkpoint directory {directory!r}: train a model into --workdir={workdir} first '
                          f'(python -m nat_jax.train --config=... --workdir={workdir}).')
  manager = ocp.CheckpointManager(os.path.abspath(directory), options=ocp.CheckpointManagerOptions(create=False))
  steps = manager.all_steps()
  if which == 'best':
    by_bleu = []
    for s in steps:
      metrics = manager.metrics(s) if hasattr(manager, 'metrics') else None
      by_bleu.append(((metrics or {}).get('bleu', float('-inf')), s))
    steps = [s for _, s in sorted(by_bleu, reverse=True)]
  else:
    steps = sorted(steps, reverse=True)
  if not steps:
    raise CheckpointError(f'{directory!r} holds no checkpoint: train first, or check --workdir.')
  restored = []
  for step in steps:
    if len(restored) == average:
      break
    state, meta = restore_newest(manager, abstract_state, steps=[step])
    if state is not None:
      restored.append((state.params, meta))
  if not restored:
    raise CheckpointError(f'No readable checkpoint in {directory!r} (all {len(steps)} failed to restore).')
  if len(restored) < average:
    print(f'WARNING: asked to average {average} checkpoints, only {len(restored)} readable.', flush=True)
  params = jax.tree_util.tree_map(lambda *xs: sum(xs) / len(xs), *[p for p, _ in restored])
  return params, [m for _, m in restored]
