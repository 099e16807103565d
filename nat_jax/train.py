"""Train any registered method: flags -> config -> mesh -> method -> loop.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/tiny [--config.<key>=<value> ...]

Writes into the workdir: config.json, spm.model, checkpoints/ (latest N), best/ (best N by
validation BLEU), metrics.jsonl, the same scalars as TensorBoard event files in tensorboard/
(`tensorboard --logdir=<workdir>`) and, at the end, test_results.json. Train and validation rows carry
`cpu_hours`: the process CPU time spent on training so far (every thread, compilation included,
validation excluded), summed over resumes through the checkpoints' `cpu_seconds`, which is the
recipe's cost on a shared machine where wall-clock is not. Restarting the same command
resumes from the newest readable checkpoint (data position and RNG are functions of the step,
so an interrupted run ends with the same parameters as an uninterrupted one). SIGTERM saves a
checkpoint before exiting.
"""
from __future__ import annotations

import contextlib
import dataclasses
import filecmp
import functools
import json
import math
import os
import signal
import sys
import time
from typing import Any, Callable

from absl import flags
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from tqdm import tqdm

from nat_jax import checkpoint, cli, sharding
from nat_jax.data import (PackedTrainBatches, TrainBatches, bucket_shapes, encode_pairs, load_or_train_tokenizer,
                          load_split, packed_shape)
from nat_jax.data.distilled import distilled_pairs, read_teacher_translations
from nat_jax.decode import build_decoder, check_decoder, parse_options
from nat_jax.errors import ConfigError, TrainingError, log
from nat_jax.files import exclusive, write_atomic
from nat_jax.methods import get_method
from nat_jax.runs import CONFIG_FILE, TOKENIZER_FILE, Run, load_run, read_run_config
from nat_jax.scoring import score_translations
from nat_jax.summaries import ScalarWriter
from nat_jax.translation import translate_texts
from nat_jax.train_state import TrainState, create_train_state, lr_schedule, make_optimizer, state_shardings

FLAGS = flags.FLAGS


COMMAND_FLAGS = (
    cli.Flag('config', 'config', None, 'Recipe file (configs/*.py) or recipe name; --config.<key>=<value> overrides '
             'a setting (checked before any work).', required=True),
    cli.Flag('workdir', 'str', None, 'Run directory (checkpoints, tokenizer, metrics).', path='new_dir', required=True),
    cli.Flag('distributed', 'bool', False, 'Call jax.distributed.initialize() (auto-detected on TPU pods / SLURM).'),
    cli.Flag('coordinator_address', 'str', None, 'host:port of process 0 for multi-process runs.'),
    cli.Flag('num_processes', 'int', None, 'Number of processes (multi-process runs).', low=1),
    cli.Flag('process_id', 'int', None, 'This process (multi-process runs).', low=0),
)


# --- pure step functions -------------------------------------------------------------------------
def grad_step(method, params, batch, rng, step):
  """Summed loss statistics and gradients of the summed loss for one micro-batch (step i32[]: the update)."""
  def loss_fn(p):
    sums = method.loss(p, batch, rng, step=step)
    return sums['loss'], sums
  grads, sums = jax.grad(loss_fn, has_aux=True)(params)
  return grads, sums


def loss_denominator(sums: dict, normalizer: str) -> jax.Array:
  """What the summed loss is divided by: the method's normalizer count ('tokens' or 'sentences'), >= 1."""
  return jnp.maximum(sums[normalizer], 1.0)


def normalize(sums: dict, normalizer: str) -> dict:
  """Per-unit metrics from summed loss statistics: loss / the normalizer's count, nll, correct
  (-> accuracy) and every `<name>_per_token` count (e.g. the DAT's glanced tokens) / tokens; other
  counts (tokens, sentences, impossible, ...) stay sums."""
  tokens = jnp.maximum(sums['tokens'], 1.0)
  out = {k: v / tokens if k.endswith('_per_token') else v
         for k, v in sums.items() if k not in ('loss', 'nll', 'correct')}
  out.update(loss=sums['loss'] / loss_denominator(sums, normalizer), nll=sums['nll'] / tokens,
             accuracy=sums['correct'] / tokens)
  return out


def apply_step(tx, normalizer: str, state: TrainState, grads, sums):
  """Normalize the summed gradients like the loss and take one optimizer step."""
  denominator = loss_denominator(sums, normalizer)
  grads = jax.tree_util.tree_map(lambda g: g / denominator, grads)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = normalize(sums, normalizer)
  metrics.update(grad_norm=optax.tree.norm(grads))
  return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


def eval_step(method, params, batch):
  return method.loss(params, batch, jax.random.PRNGKey(0), deterministic=True)


def compile_steps(method, tx, mesh, state_sh):
  """Jitted (grad_fn, apply_fn, eval_fn) with the state sharded as `state_sh` and batches over `data`."""
  batch_sh, repl = sharding.batch_sharding(mesh), sharding.replicated(mesh)
  grad_fn = jax.jit(functools.partial(grad_step, method), in_shardings=(state_sh.params, batch_sh, repl, repl),
                    out_shardings=(state_sh.params, repl))
  apply_fn = jax.jit(functools.partial(apply_step, tx, method.normalizer),
                     in_shardings=(state_sh, state_sh.params, repl),
                     out_shardings=(state_sh, repl), donate_argnums=(0,))
  eval_fn = jax.jit(functools.partial(eval_step, method), in_shardings=(state_sh.params, batch_sh),
                    out_shardings=repl)
  return grad_fn, apply_fn, eval_fn


# --- helpers -------------------------------------------------------------------------------------
MAX_LEN = 4096                  # tokens per side: attention over more does not fit a batch row's memory
MAX_TOKENS_PER_BATCH = 1 << 20  # rows x padded length of one micro-batch
LOCK_FILE = 'train.lock'         # held (flock) by the training that writes the workdir
PREEMPTED_EXIT = 143            # exit status after SIGTERM saved a checkpoint (128 + 15, as a shell reports it)
# Config keys whose change makes a run's checkpoints another model's: refused on resume.
MODEL_KEYS = ('model', 'vocab_size', 'max_len', 'max_decode_len')


def validate_config(config: ml_collections.ConfigDict):
  """Every check that needs no data, before any work: sizes, intervals, the method and its section,
  and the validation / test decoders (known, offered by the method, options valid)."""
  checks = [
      (config.total_steps > 0, 'total_steps must be > 0'),
      (config.tokens_per_batch >= config.max_len, 'tokens_per_batch must be >= max_len'),
      (config.grad_accum_steps >= 1, 'grad_accum_steps must be >= 1'),
      (config.num_buckets >= 1, 'num_buckets must be >= 1'),
      (config.max_len >= 8, 'max_len must be >= 8'),
      (config.max_decode_len >= 1, 'max_decode_len must be >= 1'),
      (config.vocab_size >= 16, 'vocab_size must be >= 16'),
      (config.decode_batch_size >= 1, 'decode_batch_size must be >= 1'),
      (min(config.log_every, config.eval_every, config.checkpoint_every) >= 1,
       'log_every, eval_every and checkpoint_every must be >= 1'),
      (min(config.keep_checkpoints, config.keep_best, config.test_average) >= 1,
       'keep_checkpoints, keep_best and test_average must be >= 1'),
      (config.eval_max_sentences >= 0, 'eval_max_sentences must be >= 0 (0 = all)'),
      (config.warmup_steps >= 0, 'warmup_steps must be >= 0'),
      (0 <= config.learning_rate <= 1, 'learning_rate must be in [0, 1] (0: frozen; Adam takes steps of about '
                                         'this size, so a larger one diverges)'),
      (0.0 <= config.data.get('raw_prob', 0.0) <= 1.0, 'data.raw_prob must be in [0, 1]'),
      (0 <= config.label_smoothing < 1, 'label_smoothing must be in [0, 1)'),
      (0 <= config.weight_decay <= 1, 'weight_decay must be in [0, 1]'),
      (0 <= config.adam_b1 < 1 and 0 <= config.adam_b2 < 1, 'adam_b1 and adam_b2 must be in [0, 1)'),
      (0 <= config.clip_norm < math.inf, 'clip_norm must be a finite number >= 0 (0: no clipping)'),
      (0 <= config.model.dropout < 1 and 0 <= config.model.attention_dropout < 1,
       'model.dropout and model.attention_dropout must be in [0, 1)'),
      (min(config.model.d_model, config.model.num_heads, config.model.d_ff, config.model.enc_layers) >= 1
       and config.model.dec_layers >= 0, 'model.d_model, num_heads, d_ff and enc_layers must be >= 1'),
      (config.model.d_model % max(config.model.num_heads, 1) == 0, 'model.d_model must be a multiple of num_heads'),
      (config.max_len <= MAX_LEN and config.max_decode_len <= MAX_LEN,
       f'max_len and max_decode_len must be <= {MAX_LEN}'),
      (config.cooldown_steps >= 0, 'cooldown_steps must be >= 0'),
  ]
  for ok, msg in checks:
    if not ok:
      raise ConfigError(f'Bad config: {msg}.')
  method = get_method(config, config.vocab_size)  # an unknown method or a bad section: ConfigError
  for key in ('eval_decoder', 'test_decoder'):
    try:
      check_decoder(method, config[key], parse_options(config[key], {}))
    except ConfigError as e:
      raise ConfigError(f'config.{key}={config[key]!r}: {e}') from None


def setup_compilation_cache(path: str):
  if path:
    jax.config.update('jax_compilation_cache_dir', os.path.expanduser(path))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)


def estimated_parameters(config) -> int:
  """About how many parameters the config's encoder-decoder has: embeddings (shared or not, counted
  twice), attention and feed-forward blocks (a method's heads are small beside them)."""
  m = config.model
  d, ff = m.d_model, m.d_ff
  return 2 * config.vocab_size * d + m.enc_layers * (4 * d * d + 2 * d * ff) + m.dec_layers * (8 * d * d + 2 * d * ff)


def device_memory_bytes() -> int:
  """Memory of one device: its `bytes_limit` where the backend reports it (GPU, TPU), else the host's RAM."""
  stats = jax.local_devices()[0].memory_stats() or {}
  if stats.get('bytes_limit'):
    return int(stats['bytes_limit'])
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


def fit_bytes(config) -> tuple[float, float]:
  """(parameters and Adam state, the output logits and their gradient) in bytes per device, in fp32: 16
  bytes a parameter split over `mesh.model_parallel` devices, and 8 bytes a logit of a micro-batch
  ([rows, length] = tokens_per_batch positions x vocab_size) split over the data-parallel devices. Both
  are floors: the other activations (per layer, attention) come on top."""
  model_parallel = max(config.mesh.model_parallel, 1)
  data_parallel = max(jax.device_count() // model_parallel, 1)
  return (16 * estimated_parameters(config) / model_parallel,
          8 * config.tokens_per_batch * config.vocab_size / data_parallel)


def check_fits(config):
  """ConfigError when training this config here cannot fit: a micro-batch of more than
  MAX_TOKENS_PER_BATCH tokens, or parameters, their gradients and Adam's two moments plus the
  micro-batch's output logits and their gradient (`fit_bytes`) beyond one device's memory: refused
  before anything is allocated. Those are floors: a config that passes may still need a smaller
  tokens_per_batch for its other activations. (`nat_jax.aot` does not ask this: it compiles for
  another chip and reports the fit.)"""
  if config.tokens_per_batch > MAX_TOKENS_PER_BATCH:
    raise ConfigError(f'Bad config: tokens_per_batch must be <= {MAX_TOKENS_PER_BATCH} (use grad_accum_steps for '
                      'larger batches).')
  state, logits = fit_bytes(config)
  have = device_memory_bytes()
  if state + logits > have:
    raise ConfigError(f'Bad config: about {estimated_parameters(config) / 1e6:,.0f}M parameters and their optimizer '
                      f'state ({state / 2**30:,.1f} GiB per device) and a micro-batch\'s output logits and their '
                      f'gradient ({logits / 2**30:,.1f} GiB: tokens_per_batch {config.tokens_per_batch} x vocab_size '
                      f'{config.vocab_size}) need more than the {have / 2**30:,.1f} GiB one device has; lower '
                      'tokens_per_batch (grad_accum_steps keeps the update size), make the model smaller or split '
                      'it over more devices (mesh.model_parallel).')


def check_same_model(workdir: str, config):
  """ConfigError, before any work, when `workdir` holds a run (checkpoints or test results) of another
  model than `config`: another method, sizes, vocabulary or length bounds (MODEL_KEYS and the method's
  own section). Training on would set its checkpoints aside and overwrite its config and results."""
  path = os.path.join(workdir, CONFIG_FILE)
  has_run = os.path.exists(os.path.join(workdir, 'test_results.json')) or checkpoint.has_checkpoints(workdir)
  if not (has_run and os.path.exists(path)):
    return
  old, new = read_run_config(path).to_dict(), json.loads(config.to_json_best_effort())
  keys = MODEL_KEYS + (new['model']['method'],)
  differ = [f'{k}{"." + s if s else ""}: {a!r} -> {b!r}' for k in keys
            for s, a, b in dict_diff(old.get(k), new.get(k))]
  if differ:
    raise ConfigError(f'--workdir={workdir} holds a trained run of another model ({"; ".join(differ[:5])}'
                      f'{" ..." if len(differ) > 5 else ""}); use a new --workdir, or the run\'s own config '
                      f'to resume it.')


def dict_diff(a, b, prefix: str = '') -> list[tuple[str, Any, Any]]:
  """(key path, a's value, b's value) for each leaf where the nested dicts `a` and `b` differ."""
  if isinstance(a, dict) and isinstance(b, dict):
    return [d for k in sorted(set(a) | set(b))
            for d in dict_diff(a.get(k), b.get(k), f'{prefix}.{k}' if prefix else k)]
  return [] if a == b else [(prefix, a, b)]


def write_config(workdir: str, config):
  path = os.path.join(workdir, CONFIG_FILE)
  new = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    old = read_run_config(path).to_dict()
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if changed:
      log.warning('the config differs from the one saved in %s in %s; using the new values.', path, changed)
  write_atomic(path, json.dumps(new, indent=2, sort_keys=True))


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


def initialize_distributed():
  if FLAGS.coordinator_address:
    jax.distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  elif FLAGS.distributed:
    jax.distributed.initialize()


def load_data(config, workdir: str):
  """Examples of all splits + the tokenizer (trained on the train split by process 0 on first use)."""
  splits = {s: load_split(config.data, s) for s in ('train', 'validation', 'test')}
  spm_path = os.path.join(workdir, TOKENIZER_FILE)
  if jax.process_index() == 0:
    texts = (t for e in splits['train'] for t in (e.source, e.references[0]))
    tokenizer = load_or_train_tokenizer(spm_path, texts, config.vocab_size)
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices('tokenizer')
  if jax.process_index() != 0:
    tokenizer = load_or_train_tokenizer(spm_path, (), config.vocab_size)
  return splits, tokenizer


def evaluate_bleu(run, decode_fn, examples, rows: int) -> tuple[dict[str, Any], list[str]]:
  """(BLEU/chrF against the first and all references, translations) of `examples`' sources."""
  hyps, _ = translate_texts(run, [e.source for e in examples], decode_fn, rows)
  return score_translations(hyps, examples), hyps


def training_batches(config, examples, tokenizer, shapes, method=None,
                     row_multiple: int = 1) -> tuple[TrainBatches, str]:
  """The training batches (raw references, or the teacher translations of data.distill_dir mixed
  with raw references at data.raw_prob; bucketed, or packed when the method packs: data.pack > 0)
  and a one-line description for the log."""
  distill_dir, raw_prob = config.data.get('distill_dir', ''), config.data.get('raw_prob', 0.0)
  where = (jax.process_index(), jax.process_count())

  def batches(pairs, **raw):
    if method is None or not method.max_segments:
      return TrainBatches(pairs, shapes, config.seed, *where, **raw)
    return PackedTrainBatches(pairs, packed_shape(config.max_len, config.tokens_per_batch, row_multiple), config.seed,
                              method.max_segments, method.slot_multiple, *where, **raw)

  if not distill_dir:
    if raw_prob:
      raise ConfigError(f'data.raw_prob={raw_prob} mixes raw references into distilled targets, but '
                        'data.distill_dir is empty; set it to a directory written by nat_jax.distill.')
    pairs, dropped = encode_pairs(examples, tokenizer, config.max_len)
    return (batches(pairs),
            f'{len(pairs)} training pairs ({dropped} longer than max_len={config.max_len} dropped)')
  teacher = read_teacher_translations(distill_dir, 'train', examples)
  pairs, raw_targets, counts = distilled_pairs(examples, teacher, tokenizer, config.max_len)
  if not pairs:
    raise ConfigError(f'No distilled training pair fits max_len={config.max_len}.')
  return batches(pairs, raw_targets=raw_targets, raw_prob=raw_prob), (
      f'{len(pairs)} training pairs with teacher targets from {distill_dir} (raw reference kept with '
                   f'probability {raw_prob}; {counts["empty_teacher"]} empty teacher translations replaced by the '
                   f'reference; {counts["dropped"]} longer than max_len={config.max_len} dropped)')


def adopt_tokenizer(init_from: str, workdir: str):
  """Copy the tokenizer of the run we start from (its embeddings index that vocabulary)."""
  src = os.path.join(init_from, TOKENIZER_FILE)
  dst = os.path.join(workdir, TOKENIZER_FILE)
  if not os.path.exists(src):
    raise ConfigError(f'init_from={init_from!r} holds no {TOKENIZER_FILE}: is it the workdir of a trained run?')
  if not os.path.exists(dst):
    with open(src, 'rb') as f:
      write_atomic(dst, f.read())
  elif not filecmp.cmp(src, dst, shallow=False):
    raise ConfigError(f'{dst} differs from the tokenizer of init_from={init_from!r}; use a fresh --workdir.')


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


# --- the training loop ---------------------------------------------------------------------------
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
  results, or None when SIGTERM stopped training (a checkpoint was saved; rerun to resume)."""
  validate_config(config)
  check_fits(config)
  check_same_model(workdir, config)
  setup_compilation_cache(config.compilation_cache_dir)
  os.makedirs(workdir, exist_ok=True)
  lead = jax.process_index() == 0
  with exclusive(os.path.join(workdir, LOCK_FILE), f'--workdir={workdir}', 'a training') if lead \
      else contextlib.nullcontext():
    return train_in(config, workdir, lead)


def train_in(config: ml_collections.ConfigDict, workdir: str, lead: bool):
  """train_and_evaluate once the config is checked and the workdir is this process's."""
  if lead:
    write_config(workdir, config)

  if config.init_from and lead:
    adopt_tokenizer(config.init_from, workdir)
  splits, tokenizer = load_data(config, workdir)
  method = get_method(config, tokenizer.vocab_size)
  mesh = sharding.make_mesh(config.mesh.model_parallel)
  row_multiple = int(np.lcm(mesh.shape['data'], jax.process_count()))
  shapes = bucket_shapes(config.max_len, config.tokens_per_batch, config.num_buckets, row_multiple=row_multiple)
  batches, described = training_batches(config, splits['train'], tokenizer, shapes, method, row_multiple)
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
    decode_fn, _ = build_decoder(method, config.eval_decoder, {}, tokenizer, load_run)
    metrics_log = MetricsLog(workdir, start, lead)
    loop = TrainLoop(config, method, tokenizer, mesh, grad_fn, apply_fn, eval_fn, decode_fn, batches, val_batches,
                     splits['validation'][:config.eval_max_sentences or None], ckpt, metrics_log, lead,
                     CpuClock(cpu_before))
    with SignalFlag(signal.SIGTERM) as stop:
      state, step = loop.run(state, start, stop)
  finally:
    ckpt.wait()
    ckpt.close()
    if metrics_log is not None:
      metrics_log.close()
  if stop.received is not None:
    print(f'Received signal {stop.received}: saved checkpoint at step {step}; rerun the same command to resume '
          f'(exit status {PREEMPTED_EXIT}).')
    return None
  return final_test(config, workdir, splits['test'], lead)


def final_test(config, workdir: str, examples, lead: bool):
  """Test-set BLEU (1 and all references), chrF, signatures and sample translations."""
  run = load_run(workdir, which='latest', average=config.test_average)
  decode_fn, options = build_decoder(run.method, config.test_decoder, {}, run.tokenizer, load_run)
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
  return result


def main(argv):
  initialize_distributed()
  if train_and_evaluate(FLAGS.config, FLAGS.workdir) is None:  # preempted: a checkpoint was saved
    sys.exit(PREEMPTED_EXIT)


console = cli.command(COMMAND_FLAGS, main)  # `nat-jax-train`, `python -m nat_jax.train`


if __name__ == '__main__':
  console()
