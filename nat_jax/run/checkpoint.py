"""Orbax checkpoints: periodic saves with keep-N, a separate keep-best-by-BLEU directory,
resume with fallback past a corrupt latest checkpoint, and parameter averaging.

Layout inside a workdir:
  checkpoints/<step>/   latest N train states (params, optimizer state, step)
  best/<step>/          best N by validation BLEU
  set_aside/            checkpoints a resumed run could not use (unreadable, or from steps past the
                        one it resumed from), moved here instead of deleted
Each checkpoint also holds `meta` (JSON): step, seed, data position, metrics and `checksum`, the
sha256 of every array of the saved state. A restore recomputes it: a checkpoint whose bytes changed
after it was written (bit rot, a partial copy) is treated like an unreadable one, and so is one
with non-finite parameters. What cannot be detected: bit rot in a checkpoint written before
checksums existed (its meta has none), and a state that was already wrong when it was saved.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from typing import Any, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

from nat_jax.errors import CheckpointError, log

ASIDE = 'set_aside'


def _manager(directory: str, max_to_keep: int, best: bool = False) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False,
      best_fn=(lambda m: m['bleu']) if best else None, best_mode='max',
      keep_checkpoints_without_metrics=not best)
  return ocp.CheckpointManager(os.path.abspath(directory), options=options)


def host_leaves(state) -> Optional[list[tuple[str, np.ndarray]]]:
  """(path, host array) of every leaf in tree order; None when an array is not fully addressable by
  this process (multi-host sharding: not checked)."""
  leaves = jax.tree_util.tree_leaves_with_path(state)
  if any(isinstance(x, jax.Array) and not x.is_fully_addressable for _, x in leaves):
    return None
  return [(jax.tree_util.keystr(path), np.ascontiguousarray(jax.device_get(x))) for path, x in leaves]


def checksum(leaves: Optional[list[tuple[str, np.ndarray]]]) -> Optional[str]:
  """sha256 over `host_leaves` (path, dtype, shape, bytes); None for None."""
  if leaves is None:
    return None
  digest = hashlib.sha256()
  for path, x in leaves:
    digest.update(f'{path}|{x.dtype}|{x.shape}|'.encode())
    digest.update(x.tobytes())
  return digest.hexdigest()


def state_checksum(state) -> Optional[str]:
  return checksum(host_leaves(state))


def check_restored(state, meta: dict):
  """Raises CheckpointError when `state` does not match the checksum its meta recorded at save time,
  or holds non-finite floating-point values (each array copied to the host once)."""
  leaves = host_leaves(state)
  if leaves is None:
    return
  want = meta.get('checksum')
  if want is not None and checksum(leaves) != want:
    raise CheckpointError('its arrays do not match the checksum recorded when it was saved (changed on disk)')
  for path, x in leaves:
    if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
      raise CheckpointError(f'{path} holds non-finite values')


def check_free_space(directory: str, state, margin: float = 1.1):
  """CheckpointError when the filesystem of `directory` has less free space than `state` needs."""
  need = int(margin * sum(getattr(x, 'nbytes', 0) for x in jax.tree_util.tree_leaves(state))) + (1 << 20)
  free = shutil.disk_usage(directory).free
  if free < need:
    raise CheckpointError(f'{directory} has {free / 2**20:.1f} MiB free, a checkpoint needs about '
                          f'{need / 2**20:.1f} MiB; free some space, then rerun the same command (training '
                          'resumes from the last checkpoint).')


def write_failure(e: Exception) -> str:
  """The reason of a failed write in a few words: the OS error when the message holds one."""
  text = str(e)
  for reason in ('No space left on device', 'Read-only file system', 'Permission denied', 'Disk quota exceeded'):
    if reason in text:
      return reason
  return f'{type(e).__name__}: {text.splitlines()[0][:200] if text else ""}'


def remove_partial(directory: str, step: int):
  """Removes what a failed save of `step` left (orbax's `<step>.orbax-checkpoint-tmp*` directories)."""
  for name in os.listdir(directory):
    if name.startswith(f'{step}.orbax-checkpoint-tmp'):
      shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


class Checkpointer:
  """Latest-N and best-N train-state checkpoints of one workdir."""

  def __init__(self, workdir: str, keep: int = 3, keep_best: int = 1):
    self.workdir = workdir
    self.latest = _manager(os.path.join(workdir, 'checkpoints'), keep)
    self.best = _manager(os.path.join(workdir, 'best'), keep_best, best=True)

  def save(self, step: int, state, meta: dict, bleu: Optional[float] = None):
    """Saves `state` as step `step` (and into best/ when `bleu` is given). A disk without room for it
    is a CheckpointError before anything is written; a write that fails anyway is one too, and its
    partial files are removed."""
    meta = {**meta, 'checksum': state_checksum(state)}
    args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
    targets = [(self.latest, {})] + ([(self.best, {'metrics': {'bleu': float(bleu)}})] if bleu is not None else [])
    for manager, extra in targets:
      check_free_space(str(manager.directory), state)
      try:
        manager.save(step, args=args, force=True, **extra)
      except Exception as e:  # tensorstore reports a full disk as ValueError('RESOURCE_EXHAUSTED ...')
        remove_partial(str(manager.directory), step)
        raise CheckpointError(f'could not write checkpoint step {step} into {manager.directory} '
                              f'({write_failure(e)}); free some space or fix the directory, then rerun the same '
                              'command: training resumes from the last checkpoint.') from e

  def restore_latest(self, abstract_state) -> tuple[Optional[Any], Optional[dict]]:
    """Newest usable checkpoint (a corrupt one is reported and the previous one tried), or (None, None).

    Then, so that training can go on from there: the unusable checkpoints and every checkpoint of
    a later step (in checkpoints/ and best/: the abandoned run's future, which training would write
    again) are moved to `set_aside/`, each move reported on stderr."""
    state, meta, bad = restore_newest(self.latest, abstract_state)
    resumed = int(meta['step']) if meta is not None else 0
    if state is None and (bad or self.best.all_steps()):
      log.warning('no usable checkpoint in %s: training starts again from step 0.', self.latest.directory)
    for manager in (self.latest, self.best):
      later = [s for s in manager.all_steps() if s > resumed or (manager is self.latest and s in bad)]
      for step in sorted(later):
        why = 'unreadable' if manager is self.latest and step in bad else f'newer than the resumed step {resumed}'
        self._set_aside(manager, step, why)
      if later:
        manager.reload()
    return state, meta

  def _set_aside(self, manager: ocp.CheckpointManager, step: int, why: str):
    source = os.path.join(str(manager.directory), str(step))
    target = os.path.join(self.workdir, ASIDE, f'{os.path.basename(str(manager.directory))}-{step}-{int(time.time())}')
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.move(source, target)
    log.warning('moved checkpoint %s (%s) to %s; training goes on without it.', source, why, target)

  def wait(self):
    self.latest.wait_until_finished()
    self.best.wait_until_finished()

  def close(self):
    self.latest.close()
    self.best.close()


def has_checkpoints(workdir: str) -> bool:
  """Whether `workdir` holds a saved step in checkpoints/ or best/."""
  return any(name.isdigit() for sub in ('checkpoints', 'best') if os.path.isdir(os.path.join(workdir, sub))
             for name in os.listdir(os.path.join(workdir, sub)))


def shape_mismatches(manager: ocp.CheckpointManager, step: int, abstract_state) -> list[str]:
  """'<parameter>: stored <shape>, the config makes <shape>' for each parameter whose shape in the
  saved step differs from `abstract_state`'s (its config's model), or is missing from one of them;
  [] when they agree or the step's metadata cannot be read (a damaged step is found by the restore)."""
  absl_log = logging.getLogger('absl')
  level = absl_log.level
  absl_log.setLevel(logging.ERROR)  # orbax warns that an item directory has no step metadata: it never does
  try:
    stored = ocp.StandardCheckpointer().metadata(os.path.join(str(manager.directory), str(step), 'state'))
    stored = getattr(stored, 'item_metadata', stored)['params']
  except Exception:  # unreadable metadata: the restore reports the step
    return []
  finally:
    absl_log.setLevel(level)
  flat = lambda tree: {jax.tree_util.keystr(p): tuple(getattr(x, 'shape', ()))
                       for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
  have, want = flat(stored), flat(abstract_state.params)
  return [f'params{k}: stored {have.get(k, "(none)")}, the config makes {want.get(k, "(none)")}'
          for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)]


def check_same_shapes(manager: ocp.CheckpointManager, steps, abstract_state):
  """CheckpointError, before any restore, when the newest of `steps` holds parameters of other shapes
  than the run's config.json makes: every checkpoint would fail to restore (and a resumed training
  would set them all aside), when what is wrong is the config."""
  if not steps:
    return
  differ = shape_mismatches(manager, max(steps), abstract_state)
  if differ:
    raise CheckpointError(
        f'the checkpoints in {manager.directory} and the config.json beside them describe different models '
        f'({len(differ)} parameters differ, e.g. {"; ".join(differ[:3])}): config.json was changed after '
        'training or belongs to another run; restore the config the run was trained with.')


def restore_checked(manager: ocp.CheckpointManager, abstract_state, step: int):
  """(state, meta) of one step, checked by `check_restored`; raises whatever the restore or the
  check raises."""
  restored = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
  state, meta = restored['state'], dict(restored['meta'])
  check_restored(state, meta)
  return state, meta


def report_unusable(manager: ocp.CheckpointManager, step: int, error: Exception, fallback: Optional[int]):
  older = f'using step {fallback} instead' if fallback is not None else 'no older checkpoint to fall back to'
  reason = str(error).splitlines()[0][:200] if str(error) else ''
  log.warning('checkpoint step %d is unreadable (%s: %s) in %s; %s.', step, type(error).__name__, reason,
              manager.directory, older)


def restore_newest(manager: ocp.CheckpointManager, abstract_state, steps=None):
  """(state, meta, unusable steps) from the newest step that restores and passes `check_restored`;
  (None, None, unusable steps) if there is none. Every unusable step is reported on stderr."""
  steps = sorted(manager.all_steps() if steps is None else steps, reverse=True)
  check_same_shapes(manager, steps, abstract_state)
  bad = []
  for i, step in enumerate(steps):
    try:
      return (*restore_checked(manager, abstract_state, step), bad)
    except Exception as e:  # orbax raises various types for truncated/missing files
      bad.append(step)
      report_unusable(manager, step, e, steps[i + 1] if i + 1 < len(steps) else None)
  return None, None, bad


def load_params(workdir: str, abstract_state, which: str = 'latest', average: int = 1):
  """Params (of a full abstract train state) for inference: from `checkpoints/` (which='latest') or
  `best/` (which='best').

  average > 1 averages the params of the newest (latest) or best (best) `average` usable
  checkpoints. Raises CheckpointError naming the workdir when nothing can be read.
  """
  if average < 1:
    raise CheckpointError(f'--average={average}: average at least 1 checkpoint.')
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
  check_same_shapes(manager, steps, abstract_state)
  restored = []
  for i, step in enumerate(steps):
    if len(restored) == average:
      break
    try:
      state, meta = restore_checked(manager, abstract_state, step)
      restored.append((state.params, meta))
    except Exception as e:  # orbax raises various types for truncated/missing files
      report_unusable(manager, step, e, steps[i + 1] if i + 1 < len(steps) else None)
  if not restored:
    raise CheckpointError(f'No usable checkpoint in {directory!r} (all {len(steps)} failed to restore or '
                          'failed their checks; see the warnings above).')
  if len(restored) < average:
    log.warning('asked to average %d checkpoints, only %d usable: averaging %d.', average, len(restored),
                len(restored))
  params = jax.tree_util.tree_map(lambda *xs: sum(xs) / len(xs), *[p for p, _ in restored])
  return params, [m for _, m in restored]
