"""The training loop: data and tokenizer, the train state (fresh, resumed or warm-started), the
steps with validation and checkpoints, the final test. `train_and_evaluate(config, workdir)` is the entry point."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from tqdm import tqdm

from nat_jax.data import (
  PackedTrainBatches,
  TrainBatches,
  bucket_shapes,
  encode_pairs,
  load_split,
  packed_shape,
)
from nat_jax.data.distilled import distilled_pairs, read_teacher_translations
from nat_jax.data.tokenizer import TOKENIZER_FILE, VOCABULARY_FILE, copy_tokenizer, has_tokenizer, open_tokenizer
from nat_jax.decode import build_decoder
from nat_jax.errors import ConfigError, Stopped, TrainingError, log
from nat_jax.files import exclusive, write_atomic
from nat_jax.methods import get_method
from nat_jax.metrics.scoring import score_translations
from nat_jax.parallel import sharding
from nat_jax.run import checkpoint
from nat_jax.run.resources import Resources
from nat_jax.run.train_state import TrainState, create_train_state, lr_schedule, make_optimizer, state_shardings
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import Run, load_run
from nat_jax.training.bookkeeping import (
  LOCK_FILE,
  CpuClock,
  MetricsLog,
  SignalFlag,
  setup_compilation_cache,
)
from nat_jax.training.config import check_fits, check_same_model, validate_config, write_config
from nat_jax.training.steps import compile_steps, normalize

# Parameters below which the closing report says what such a model can and cannot do: trained on one
# small corpus, it is a demonstration and a teacher for the distillation chain, not a translator.
SMALL_MODEL = 20_000_000


def load_splits(config) -> dict[str, list]:
  """The examples of every split (a bad data.source, data.pair or data file refused here, before anything is
  written)."""
  return {s: load_split(config.data, s) for s in ('train', 'validation', 'test')}


def load_data(config, workdir: str, splits: Optional[dict] = None):
  """Examples of all splits (`splits` when already loaded) + the tokenizer (trained on the train split by
  process 0 on first use)."""
  splits = load_splits(config) if splits is None else splits
  if jax.process_index() == 0:
    texts = (t for e in splits['train'] for t in (e.source, e.references[0]))
    tokenizer = open_tokenizer(workdir, texts, config.vocab_size)
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices('tokenizer')
  if jax.process_index() != 0:
    tokenizer = open_tokenizer(workdir, (), config.vocab_size)
  return splits, tokenizer


def evaluate_bleu(run, decode_fn, examples, rows: int) -> tuple[dict[str, Any], list[str]]:
  """(BLEU/chrF against the first and all references, translations) of `examples`' sources."""
  hyps, _ = translate_texts(run, [e.source for e in examples], decode_fn, rows)
  return score_translations(hyps, examples), hyps


def check_raw_prob(config):
  """ConfigError when data.raw_prob mixes raw references into distilled targets that data.distill_dir does
  not name."""
  raw_prob = config.data.raw_prob
  if raw_prob and not config.data.distill_dir:
    raise ConfigError(f'data.raw_prob={raw_prob} mixes raw references into distilled targets, but '
                      'data.distill_dir is empty; set it to a directory written by nat_jax.distill.')


def training_batches(config, examples, tokenizer, shapes, method=None, row_multiple: int = 1,
                     teacher: Optional[Sequence[str]] = None) -> tuple[TrainBatches, str]:
  """The training batches (raw references, or the teacher translations of data.distill_dir mixed
  with raw references at data.raw_prob; bucketed, or packed when the method packs: data.pack > 0)
  and a one-line description for the log. `teacher`: data.distill_dir's translations of `examples`,
  when already read (check_before_writing)."""
  distill_dir, raw_prob = config.data.distill_dir, config.data.raw_prob
  where = (jax.process_index(), jax.process_count())

  def batches(pairs, **raw):
    if method is None or not method.max_segments:
      return TrainBatches(pairs, shapes, config.seed, *where, **raw)
    return PackedTrainBatches(pairs, packed_shape(config.max_len, config.tokens_per_batch, row_multiple), config.seed,
                              method.max_segments, method.slot_multiple, *where, **raw)

  check_raw_prob(config)
  if not distill_dir:
    pairs, dropped = encode_pairs(examples, tokenizer, config.max_len)
    return (batches(pairs),
            f'{len(pairs)} training pairs ({dropped} longer than max_len={config.max_len} dropped)')
  teacher = read_teacher_translations(distill_dir, 'train', examples) if teacher is None else teacher
  pairs, raw_targets, counts = distilled_pairs(examples, teacher, tokenizer, config.max_len)
  if not pairs:
    raise ConfigError(f'No distilled training pair fits max_len={config.max_len}.')
  return batches(pairs, raw_targets=raw_targets, raw_prob=raw_prob), (
      f'{len(pairs)} training pairs with teacher targets from {distill_dir} (raw reference kept with '
                   f'probability {raw_prob}; {counts["empty_teacher"]} empty teacher translations replaced by the '
                   f'reference; {counts["dropped"]} longer than max_len={config.max_len} dropped)')


def check_before_writing(config) -> tuple[dict[str, list], Optional[list[str]]]:
  """Everything about `config` that can be refused without training a tokenizer, checked before the run
  directory is touched (a refused setting must not reach an existing run's config.json): the data (source, pair,
  files), the mesh, the distilled targets of data.distill_dir (and data.raw_prob), the runs named by init_from /
  tokenizer_from. Returns the splits' examples and the teacher translations of the train split (None without
  data.distill_dir), read once."""
  splits = load_splits(config)
  sharding.make_mesh(config.mesh.model_parallel)
  check_raw_prob(config)
  teacher = None
  if config.data.distill_dir:
    teacher = read_teacher_translations(config.data.distill_dir, 'train', splits['train'])
  for key in ('init_from', 'tokenizer_from'):
    if config.get(key) and not has_tokenizer(config[key]):
      raise ConfigError(f'{key}={config[key]!r} holds no tokenizer ({TOKENIZER_FILE} or {VOCABULARY_FILE}): is it '
                        'the workdir of a trained or converted run?')
  return splits, teacher


def adopt_tokenizer(key: str, source_run: str, workdir: str):
  """Copy the tokenizer of the run we start from (`key` init_from: its embeddings index that vocabulary) or
  whose tokenizer we take (`key` tokenizer_from: e.g. a converted OPUS-MT teacher's, for its students); the
  run was checked to hold one (check_before_writing)."""
  differs = copy_tokenizer(source_run, workdir)
  if differs:
    raise ConfigError(f'{os.path.join(workdir, differs)} differs from the tokenizer of {key}={source_run!r}; use a '
                      'fresh --workdir.')


def initial_params(init_from: str, method, like, shardings):
  """The latest params of the run in `init_from` (completed by the method's `adopt_params` with what
  it adds to that run's model), checked against this model's parameter shapes."""
  params = load_run(init_from).params
  params = method.adopt_params(params, like)
  signature = lambda tree: {jax.tree_util.keystr(k): (tuple(x.shape), str(x.dtype)) for k, x in
                            jax.tree_util.tree_leaves_with_path(tree)}
  have, want = signature(params), signature(like)
  diff = [f'{k}: {have.get(k, "missing")} in init_from vs {want.get(k, "missing")} here'
          for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)]
  if diff:
    raise ConfigError(f'init_from={init_from!r}: its parameters do not fit this model ({len(diff)} differ: '
                      f'{"; ".join(diff[:4])}{" ..." if len(diff) > 4 else ""}); the model sections of both '
                      f'configs must agree (sizes, layers, vocabulary).')
  return jax.device_put(params, shardings)


@dataclasses.dataclass
class TrainLoop:
  """Everything the loop needs besides the train state, which its methods take and return."""
  config: ml_collections.ConfigDict
  method: Any
  tokenizer: Any
  mesh: Any
  grad_fn: Callable
  apply_fn: Callable
  eval_fn: Callable
  decode_fn: Callable  # config.eval_decoder, for validation BLEU
  batches: TrainBatches
  val_batches: TrainBatches
  val_examples: list
  ckpt: checkpoint.Checkpointer
  metrics_log: MetricsLog
  lead: bool
  cpu: CpuClock

  def save(self, step: int, state: TrainState, bleu=None):
    c = self.config
    self.ckpt.save(step, state, {'step': step, 'seed': c.seed, 'data_position': step * c.grad_accum_steps,
                                 'rng': f'fold_in(PRNGKey({c.seed}), step)', 'bleu': bleu,
                                 'cpu_seconds': round(self.cpu.seconds(), 1)}, bleu=bleu)

  def validate(self, step: int, params) -> dict[str, float]:
    """Validation loss statistics and BLEU (first reference) of `params`, logged (its CPU time is not
    training's)."""
    sums = None
    with self.cpu.excluded():
      for i in range(self.val_batches.batches_per_epoch):
        s = jax.device_get(self.eval_fn(params, sharding.global_batch(self.val_batches(i), self.mesh)))
        sums = s if sums is None else {k: sums[k] + s[k] for k in s}
      run = Run(self.config, self.tokenizer, self.method, params, [], self.mesh)
      bleu, _ = evaluate_bleu(run, self.decode_fn, self.val_examples, self.config.decode_batch_size)
    values = {k: float(v) for k, v in normalize(sums, self.method.normalizer).items()}
    values.update(bleu=bleu['first_ref']['bleu'], cpu_hours=self.cpu.seconds() / 3600)
    self.metrics_log.write(step, 'validation', values)
    return values

  def update(self, state: TrainState, step: int) -> tuple[TrainState, dict]:
    """One optimizer update from `grad_accum_steps` micro-batches (data and rng: functions of step)."""
    c = self.config
    rng = jax.random.fold_in(jax.random.PRNGKey(c.seed), step)
    grads, sums = None, None
    for micro in range(c.grad_accum_steps):
      batch = sharding.global_batch(self.batches(step * c.grad_accum_steps + micro), self.mesh)
      g, s = self.grad_fn(state.params, batch, jax.random.fold_in(rng, micro), jnp.int32(step))
      grads = g if grads is None else jax.tree_util.tree_map(jnp.add, grads, g)
      sums = s if sums is None else jax.tree_util.tree_map(jnp.add, sums, s)
    return self.apply_fn(state, grads, sums)

  def run(self, state: TrainState, start: int, stop: SignalFlag) -> tuple[TrainState, int]:
    """Updates from `start` to total_steps (or until `stop`), with logging, validation and checkpoints."""
    c = self.config
    schedule = lr_schedule(c)
    window, t_window = [], time.time()
    step = start
    with tqdm(total=c.total_steps, initial=start, disable=not self.lead, dynamic_ncols=True, mininterval=2.0,
              desc='train', file=sys.stdout) as bar:
      while step < c.total_steps:
        state, metrics = self.update(state, step)
        step += 1
        window.append(metrics)
        bar.update(1)
        saving = step % c.eval_every == 0 or step % c.checkpoint_every == 0 or step == c.total_steps
        if saving or stop.received is not None:  # never save a diverged state
          check_finite_loss(float(jax.device_get(metrics['loss'])), step, c)
        if step % c.log_every == 0 or step == c.total_steps:
          window = jax.device_get(window)
          check_finite_loss(next((float(m['loss']) for m in window if not np.isfinite(m['loss'])), 0.0), step, c)
          elapsed = time.time() - t_window
          avg = {k: float(np.mean([m[k] for m in window])) for k in window[0] if k != 'tokens'}
          avg.update(tokens_per_s=sum(float(m['tokens']) for m in window) / max(elapsed, 1e-9),
                     lr=float(schedule(jnp.int32(step - 1))), cpu_hours=self.cpu.seconds() / 3600)
          bar.set_postfix(loss=f'{avg["loss"]:.3f}', tok_s=f'{avg["tokens_per_s"]:.0f}', lr=f'{avg["lr"]:.2e}')
          self.metrics_log.write(step, 'train', avg)
          window, t_window = [], time.time()
        if step % c.eval_every == 0 or step == c.total_steps:
          values = self.validate(step, state.params)
          if self.lead:
            tqdm.write(f'step {step}: validation loss {values["loss"]:.3f}, BLEU {values["bleu"]:.2f}', file=sys.stdout)
          self.save(step, state, values['bleu'])
          t_window = time.time()
        elif step % c.checkpoint_every == 0 or stop.received is not None:
          self.save(step, state)
        if stop.received is not None:
          break
    return state, step


def check_finite_loss(loss: float, step: int, config):
  """TrainingError when the training loss is NaN or infinite: the run diverged; its last checkpoint is kept."""
  if not math.isfinite(loss):
    raise TrainingError(
        f'the training loss is {loss} by step {step}: training diverged, nothing was saved from this step on; '
        f'lower learning_rate (now {config.learning_rate}) or raise warmup_steps (now {config.warmup_steps}) and '
        'rerun the same command: it resumes from the last checkpoint.')


def initial_state(config, method, tx, batch, mesh, state_sh, abstract_state, ckpt,
                  lead: bool) -> tuple[TrainState, int, float]:
  """(state, step, training CPU seconds spent so far): the newest readable checkpoint, else fresh (or
  `init_from`) parameters at step 0."""
  state, meta = ckpt.restore_latest(abstract_state)
  if state is not None:
    if meta.get('seed') != config.seed:
      log.warning('resuming a run trained with seed %s using seed %s.', meta.get('seed'), config.seed)
    if 'cpu_seconds' not in meta:
      log.warning('the checkpoint predates CPU accounting: cpu_hours counts from this resume.')
    if lead:
      print(f'Resumed from step {int(state.step)}.', flush=True)
    return state, int(state.step), float(meta.get('cpu_seconds', 0.0))
  state = create_train_state(method, tx, batch, mesh, jax.random.PRNGKey(config.seed))
  if config.init_from:
    state = state.replace(params=initial_params(config.init_from, method, state.params, state_sh.params))
    if lead:
      print(f'Initialised the parameters from {config.init_from} (fresh optimizer, step 0).', flush=True)
  return state, 0, 0.0


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str):
  """Train (or resume) a run in `workdir`, then evaluate it on the test split. Returns the test
  results; raises errors.Stopped when SIGTERM or SIGINT stopped training (a checkpoint was saved first;
  rerun to resume)."""
  validate_config(config)
  check_fits(config)
  check_same_model(workdir, config)
  splits, teacher = check_before_writing(config)
  setup_compilation_cache(config.compilation_cache_dir)
  os.makedirs(workdir, exist_ok=True)
  lead = jax.process_index() == 0
  with exclusive(os.path.join(workdir, LOCK_FILE), f'--workdir={workdir}', 'a training') if lead \
      else contextlib.nullcontext():
    return train_in(config, workdir, lead, splits, teacher)


def train_in(config: ml_collections.ConfigDict, workdir: str, lead: bool, splits: dict,
             teacher: Optional[list[str]]):
  """train_and_evaluate once the config is checked and the workdir is this process's."""
  if lead:
    write_config(workdir, config)

  for key in ('init_from', 'tokenizer_from'):
    if config.get(key) and lead:
      adopt_tokenizer(key, config[key], workdir)
  splits, tokenizer = load_data(config, workdir, splits)
  method = get_method(config, tokenizer.vocab_size)
  mesh = sharding.make_mesh(config.mesh.model_parallel)
  row_multiple = int(np.lcm(mesh.shape['data'], jax.process_count()))
  shapes = bucket_shapes(config.max_len, config.tokens_per_batch, config.num_buckets, row_multiple=row_multiple)
  batches, described = training_batches(config, splits['train'], tokenizer, shapes, method, row_multiple, teacher)
  val_pairs, _ = encode_pairs(splits['validation'], tokenizer, config.max_len)
  val_batches = TrainBatches(val_pairs, shapes, config.seed, jax.process_index(), jax.process_count())
  if lead:
    packed = f' packed, up to {method.max_segments} pairs per row' if method.max_segments else ''
    print(f'Data: {described}, '
          f'{len(splits["validation"])} validation, {len(splits["test"])} test; vocab {tokenizer.vocab_size}; '
          f'batch shapes (rows, length) {batches.shapes}{packed}'
          f' (validation {shapes}); mesh {dict(mesh.shape)} over {jax.device_count()} devices, '
          f'{jax.process_count()} process(es).', flush=True)

  tx = make_optimizer(config)
  first = {k: jnp.asarray(v) for k, v in batches(0).items()}
  abstract_state, state_sh = state_shardings(method, tx, first, mesh)
  ckpt = checkpoint.Checkpointer(workdir, config.keep_checkpoints, config.keep_best)
  metrics_log = None
  try:
    state, start, cpu_before = initial_state(config, method, tx, first, mesh, state_sh, abstract_state, ckpt, lead)
    if lead:
      n_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
      print(f'Model: {config.model.method}, {n_params / 1e6:.2f}M parameters.', flush=True)
    grad_fn, apply_fn, eval_fn = compile_steps(method, tx, mesh, state_sh)
    decode_fn, _ = build_decoder(method, config.eval_decoder, {}, Resources(tokenizer))
    metrics_log = MetricsLog(workdir, start, lead)
    loop = TrainLoop(config, method, tokenizer, mesh, grad_fn, apply_fn, eval_fn, decode_fn, batches, val_batches,
                     splits['validation'][:config.eval_max_sentences or None], ckpt, metrics_log, lead,
                     CpuClock(cpu_before))
    with SignalFlag() as stop:
      state, step = loop.run(state, start, stop)
  finally:
    ckpt.wait()
    ckpt.close()
    if metrics_log is not None:
      metrics_log.close()
  if stop.received is not None:
    raise Stopped(stop.received, f'saved checkpoint at step {step}; rerun the same command to resume')
  return final_test(config, workdir, splits['test'], lead)


def final_test(config, workdir: str, examples, lead: bool):
  """Test-set BLEU (1 and all references), chrF, signatures and sample translations."""
  run = load_run(workdir, which='latest', average=config.test_average)
  decode_fn, typed = build_decoder(run.method, config.test_decoder, {}, Resources(run.tokenizer))
  options = dataclasses.asdict(typed)
  t0 = time.time()
  result, hyps = evaluate_bleu(run, decode_fn, examples, config.decode_batch_size)
  result.update(decoder=config.test_decoder, options=options, sentences=len(examples),
                decode_seconds=round(time.time() - t0, 1), averaged_checkpoints=len(run.meta),
                step=run.meta[0]['step'])
  if lead:
    write_atomic(os.path.join(workdir, 'test_results.json'), json.dumps(result, indent=2))
    print(f'\nTest set ({len(examples)} sentences, decoder {config.test_decoder} {options}, '
          f'{result["decode_seconds"]}s):')
    for key, label in (('first_ref', '1 reference'), ('all_refs', 'all references')):
      if key in result:
        r = result[key]
        print(f'  BLEU ({label}): {r["bleu"]:.2f}   chrF: {r["chrf"]:.2f}   {r["bleu_signature"]}')
    print('\nSample translations:')
    for e, h in list(zip(examples, hyps))[:config.num_samples]:
      print(f'  SRC: {e.source}\n  REF: {e.references[0]}\n  HYP: {h}\n')
    empty = sum(not h.strip() for h in hyps)
    print(run_note(config, workdir, result, sum(x.size for x in jax.tree_util.tree_leaves(run.params)), empty))
  return result


def run_note(config, workdir: str, result: dict, n_params: int, empty: int) -> str:
  """What this run is (a teacher on the raw references or a student on a distillation, its method), what its test
  BLEU says (`empty`: test outputs with no words), and the next step that fits it."""
  method, student, bleu = config.model.method, bool(config.data.distill_dir), result['first_ref']['bleu']
  what = (f'a student of method {method}, trained on the teacher translations in {config.data.distill_dir}'
          if student else f'a model of method {method} trained on the raw references')
  lines = [f'This run is {what}: {n_params / 1e6:.1f}M parameters, {result["step"]} updates.']
  if bleu < 1 or empty * 2 > result['sentences']:
    lines.append(f'Its test BLEU of {bleu:.2f} ({empty} of {result["sentences"]} outputs empty) says it does not '
                 f'translate yet: {result["step"]} updates are a smoke run. Train the recipe to its total_steps '
                 '(drop --config.total_steps) before reading anything into its scores.')
  elif n_params < SMALL_MODEL:
    lines.append(f'Its test BLEU of {bleu:.2f} (one reference) is a small model\'s on one small corpus: it gets the '
                 'gist of short sentences and repeats words in long ones. It shows the machinery, not a translator; '
                 'a larger recipe on a GPU or TPU makes one (docs/accelerators.md).')
  else:
    lines.append(f'Its test BLEU: {bleu:.2f} (one reference; the signature above says how it was computed).')
  lines.append('Next: ' + next_step(config, workdir))
  return '\n'.join(lines)


def next_step(config, workdir: str) -> str:
  """The command that fits a run after training: distil a teacher, give a non-autoregressive method a teacher to
  learn from, or compare a student (trained on config.data.distill_dir) with its teacher and serve it."""
  name, method = os.path.basename(os.path.normpath(workdir)), config.model.method
  if config.data.distill_dir:
    teacher = f'{config.init_from},' if config.init_from else '<its teacher>,'
    return (f'compare it with its teacher on BLEU and speed, python -m nat_jax.benchmark --runs={teacher}{workdir}, '
            f'then serve it: python -m nat_jax.serve --workdir={workdir}.')
  if method == 'at':
    return (f'distil it for a fast student, python -m nat_jax.distill --workdir={workdir} '
            f'--out=runs/distill_{name}, then train a student recipe on that directory (docs/quickstart.md); or '
            f'serve it: python -m nat_jax.serve --workdir={workdir}.')
  return (f'a model of method {method} learns from a teacher\'s translations: train an AT teacher, distil it '
          '(python -m nat_jax.distill), and train this recipe with --config.data.distill_dir=<that directory> '
          '(docs/training.md).')
