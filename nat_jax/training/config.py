"""A recipe's checks before any work: its values (validate_config), whether its parameters, optimizer
state and logits fit a device (check_fits), and that a resumed workdir holds the same model; config.json."""
from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_collections

from nat_jax.decode import check_decoder, run_options
from nat_jax.errors import ConfigError, log
from nat_jax.files import write_atomic
from nat_jax.methods import get_method
from nat_jax.run import checkpoint
from nat_jax.run.workdir import CONFIG_FILE, read_run_config

MAX_TOKENS_PER_BATCH = 1 << 20  # rows x padded length of one micro-batch


# Config keys whose change makes a run's checkpoints another model's: refused on resume.
MODEL_KEYS = ('model', 'vocab_size', 'max_len', 'max_decode_len')


def validate_config(config: ml_collections.ConfigDict):
  """Every check that needs no data, before any work: each value against its declared rule and the method's
  section (get_method: nat_jax.recipes.defaults.check_config), what relates two settings, and the validation /
  test decoders (known, offered by the method, options valid)."""
  method = get_method(config, config.vocab_size)
  if config.tokens_per_batch < config.max_len:
    raise ConfigError(f'Bad config: tokens_per_batch={config.tokens_per_batch} must be >= max_len={config.max_len} '
                      '(a batch holds at least one row).')
  if config.model.quantization != 'none':
    raise ConfigError('Bad config: model.quantization must be none to train (int8 is for decoding a trained run: '
                      'translate / evaluate / serve --quantization=int8).')
  for key in ('eval_decoder', 'test_decoder'):
    try:
      check_decoder(method, config[key], run_options(method, config[key]))
    except ConfigError as e:
      raise ConfigError(f'config.{key}={config[key]!r}: {e}') from None


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
  differ = [f'{k}{"." + s if s else ""}: {short(a)} -> {short(b)}' for k in keys
            for s, a, b in dict_diff(old.get(k), new.get(k))]
  if differ:
    more = f' and {len(differ) - 3} more' if len(differ) > 3 else ''
    raise ConfigError(f'--workdir={workdir} holds a trained run of another model ({"; ".join(differ[:3])}{more}); '
                      f'use a new --workdir, or the run\'s own config to resume it.')


def short(value, limit: int = 24) -> str:
  """A config value as an error shows it: its repr, cut to `limit` characters."""
  text = repr(value)
  return text if len(text) <= limit else text[:limit - 3] + '...'


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
