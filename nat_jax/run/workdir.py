"""A trained run: its config, tokenizer and parameters, loaded from its workdir."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from nat_jax.data import Tokenizer
from nat_jax.data.tokenizer import open_tokenizer, tokenizer_path
from nat_jax.errors import CheckpointError, ConfigError, DataError
from nat_jax.kernels import onednn
from nat_jax.methods import SETTINGS, get_method
from nat_jax.models.int8 import quantize_params
from nat_jax.models.transformer import DTYPES, QUANTIZATIONS
from nat_jax.parallel.sharding import make_mesh
from nat_jax.recipes import recipe_path
from nat_jax.recipes.defaults import with_defaults
from nat_jax.run import checkpoint
from nat_jax.run.train_state import dummy_batch, make_optimizer, state_shardings

CONFIG_FILE = 'config.json'


@dataclasses.dataclass
class Run:
  config: ml_collections.ConfigDict
  tokenizer: Tokenizer
  method: Any
  params: Any
  meta: list  # checkpoint metadata of the loaded step(s), newest first
  mesh: Any = None  # the devices its parameters live on (inference batches are split over its `data` axis)


def cast_params(params, dtype: str):
  """Floating-point parameters cast to `dtype` (once, at load: half-precision inference)."""
  to = DTYPES[dtype]
  return jax.tree_util.tree_map(lambda x: x.astype(to) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)


def inference_params(method, params, config):
  """A float run's params for decoding by `method`, built for `config` (an inference_config): cast to its
  model.dtype, or quantized to the layout its model declares (int8: weight matrices int8 with their scales)."""
  if config.model.quantization == 'none':
    return cast_params(params, config.model.dtype)
  target = nn.meta.unbox(jax.eval_shape(method.init_params, jax.random.PRNGKey(0), dummy_batch()))
  return quantize_params(params, target)


# An inference precision's label (a benchmark entry's @label, a results row's 'dtype'): a dtype of the activations,
# or a quantization of the weights (float32 activations).
PRECISIONS = (*DTYPES, *(q for q in QUANTIZATIONS if q != 'none'))


def precision(label: str) -> tuple[str, str]:
  """(dtype, quantization) of a precision label: 'bfloat16' -> ('bfloat16', 'none'), 'int8' -> ('float32', 'int8');
  ConfigError naming PRECISIONS for another."""
  if label not in PRECISIONS:
    raise ConfigError(f'precision {label!r}: expected one of {", ".join(PRECISIONS)}.')
  return (label, 'none') if label in DTYPES else ('float32', label)


def precision_label(dtype: str, quantization: str) -> str:
  """The precision label of (dtype, quantization) (precision's inverse): the quantization where there is one,
  else the dtype; ConfigError for a quantization with a dtype other than float32 (quantized products compute in
  float32)."""
  if quantization == 'none':
    return dtype
  if dtype != 'float32':
    raise ConfigError(f'quantization {quantization} computes in float32: drop dtype {dtype}.')
  return quantization


def inference_config(config, dtype: str = 'float32', quantization: str = 'none',
                     int8_kernel: str = 'auto') -> ml_collections.ConfigDict:
  """A new config (`config` unchanged): the run decoding with activations in `dtype` and its weight matrices held
  by `quantization` (model.quantization; int8: by the product `int8_kernel` resolves to, nat_jax.kernels.onednn)."""
  model = {**config.model.to_dict(), 'dtype': dtype, 'quantization': quantization}
  if quantization == 'int8':
    model['int8_kernel'] = onednn.resolve(int8_kernel)
  return ml_collections.ConfigDict({**config.to_dict(), 'model': model})


def read_run_config(path: str) -> ml_collections.ConfigDict:
  """A run's config.json as a ConfigDict; CheckpointError naming the file when it is not JSON, not an object,
  lacks the model, or is of a layout before method sections."""
  try:
    with open(path, encoding='utf-8') as f:
      raw = json.load(f)
  except (ValueError, UnicodeDecodeError) as e:
    raise CheckpointError(f'{path} is not valid JSON ({e}); restore the config the run was trained with.') from None
  problem = run_config_problem(raw)
  if problem:
    raise CheckpointError(f'{path}: {problem}; restore the config the run was trained with.')
  return ml_collections.ConfigDict(with_generate_beam(with_defaults(raw, SETTINGS)))


def with_generate_beam(raw: dict) -> dict:
  """A config.json whose `beam` defaults say style 'generate' (a converted OPUS-MT run before `generate_beam`
  was a decoder of its own) as that decoder's: its default decoder and option defaults renamed; any other
  config unchanged."""
  defaults = raw.get('decoder_defaults') or {}
  beam = defaults.get('beam') if isinstance(defaults, dict) else None
  if not isinstance(beam, dict) or beam.get('style') != 'generate':
    return raw
  rename = lambda name: 'generate_beam' if name == 'beam' else name
  moved = {k: v for k, v in beam.items() if k != 'style'}
  return {**raw, 'default_decoder': rename(raw.get('default_decoder', '')),
          'test_decoder': rename(raw.get('test_decoder', '')),
          'decoder_defaults': {**{k: v for k, v in defaults.items() if k != 'beam'}, 'generate_beam': moved}}


def run_config_problem(raw) -> Optional[str]:
  """What makes a parsed config.json unusable (its shape and the types of the keys every run reads), or None."""
  if not isinstance(raw, dict):
    return f'holds a JSON {type(raw).__name__}, not an object of settings'
  model = raw.get('model')
  if not isinstance(model, dict) or not isinstance(model.get('method'), str):
    return 'has no "model" section naming its method'
  if 'dag' in raw or 'upsample_scale' in model:
    return ('is of the layout before method sections (DA-Transformer settings in "model" and "dag", nat_jax of '
            'November 2026): retrain the run with this version')
  ints = [('vocab_size', raw.get('vocab_size')), ('max_len', raw.get('max_len')),
          ('max_decode_len', raw.get('max_decode_len'))]
  ints += [(f'model.{k}', model.get(k)) for k in ('d_model', 'num_heads', 'd_ff', 'enc_layers', 'dec_layers')]
  for key, value in ints:
    if type(value) is not int or value < 0:
      return f'{key} is {value!r}, not a whole number'
  return None


def train_command(workdir: str) -> str:
  """The command that trains a run into `workdir`: with the recipe of the workdir's name where there is one
  (runs/dat_bible_tiny: configs/dat_bible_tiny.py), else with a recipe to choose."""
  name = os.path.basename(os.path.normpath(workdir))
  recipe = name if recipe_path(name) else '<recipe> (configs/, e.g. at_bible_tiny)'
  return f'python -m nat_jax.train --config={recipe} --workdir={workdir}'


def load_run(workdir: str, which: str = 'latest', average: int = 1, dtype: str = 'float32',
             quantization: str = 'none', int8_kernel: str = 'auto') -> Run:
  """Config, tokenizer and params of a training run; clear errors when something is missing.

  dtype 'bfloat16' / 'float16' loads it for half-precision inference: the parameters are cast once
  and the model computes in that dtype (model.dtype), with attention and output softmax statistics,
  the length head and the DAG transition head in fp32 as always. 'float32' computes in fp32 even for a run
  trained with bf16 activations (configs/at_base.py). quantization 'int8': the weight matrices and the
  embedding quantized once (nat_jax.models.int8), activations in fp32, the products by `int8_kernel`
  (nat_jax.kernels.onednn.CHOICES: 'auto' takes the packed oneDNN kernel where it runs; the run's
  config.model.int8_kernel says which did). The run's config is the one it was trained with, or a new one
  (inference_config) with the precision asked for.
  """
  if quantization == 'int8':
    onednn.resolve(int8_kernel)  # an int8 product that cannot run here: refused before any work
  config_path = os.path.join(workdir, CONFIG_FILE)
  spm_path = tokenizer_path(workdir)  # a converted run's vocabulary.json (python -m nat_jax.convert) or spm.model
  for path, what in ((config_path, 'config'), (spm_path, 'sentencepiece model')):
    if not os.path.exists(path):
      raise CheckpointError(f'{path!r} not found: --workdir={workdir} holds no trained run ({what} missing). '
                            f'Train first: {train_command(workdir)}')
  config = read_run_config(config_path)
  try:
    tokenizer = open_tokenizer(workdir, (), config.vocab_size)
  except DataError as e:  # a damaged sentencepiece model, a converted run's vocabulary
    raise CheckpointError(str(e)) from None
  try:
    trained = get_method(config, tokenizer.vocab_size)
    mesh = make_mesh(1)
    abstract, _ = state_shardings(trained, make_optimizer(config), dummy_batch(), mesh)
  except (TypeError, AttributeError, KeyError, ZeroDivisionError) as e:  # a value of the wrong type or size
    raise CheckpointError(f'{config_path} does not describe a model that can be built ({type(e).__name__}: '
                          f'{str(e)[:160]}); restore the config the run was trained with.') from None
  if (dtype, quantization) == (config.model.dtype, config.model.quantization):
    return Run(config, tokenizer, trained, *checkpoint.load_params(workdir, abstract, which=which, average=average),
               mesh)
  wanted = inference_config(config, dtype, quantization, int8_kernel)  # the caller's, whatever the run trained in
  method = get_method(wanted, tokenizer.vocab_size)  # a precision it cannot take: ConfigError before any loading
  params, meta = checkpoint.load_params(workdir, abstract, which=which, average=average)
  return Run(wanted, tokenizer, method, inference_params(method, params, wanted), meta, mesh)
