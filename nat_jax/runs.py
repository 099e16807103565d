"""A trained run: its config, tokenizer and parameters, loaded from its workdir."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from nat_jax import checkpoint
from nat_jax.data import Tokenizer, load_or_train_tokenizer
from nat_jax.data.tokenizer import TOKENIZER_FILE
from nat_jax.methods import get_method, upgrade_config
from nat_jax.models.transformer import DTYPES
from nat_jax.sharding import make_mesh
from nat_jax.train_state import dummy_batch, make_optimizer, state_shardings
from nat_jax.errors import ConfigError

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


def load_run(workdir: str, which: str = 'latest', average: int = 1, dtype: str = 'float32') -> Run:
  """Config, tokenizer and params of a training run; clear errors when something is missing.

  dtype 'bfloat16' / 'float16' loads it for half-precision inference: the parameters are cast once
  and the model computes in that dtype (model.dtype), with attention and output softmax statistics,
  the length head and the DAG transition head in fp32 as always. 'float32' computes in fp32 even
  for a run trained with bf16 activations (configs/at_base.py).
  """
  if dtype not in DTYPES:
    raise ConfigError(f'dtype must be one of {sorted(DTYPES)}, got {dtype!r}.')
  config_path = os.path.join(workdir, CONFIG_FILE)
  spm_path = os.path.join(workdir, TOKENIZER_FILE)
  for path, what in ((config_path, 'config'), (spm_path, 'sentencepiece model')):
    if not os.path.exists(path):
      raise checkpoint.CheckpointError(
          f'{path!r} not found: --workdir={workdir} holds no trained run ({what} missing). '
          f'Train first: python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir={workdir}')
  with open(config_path) as f:
    config = ml_collections.ConfigDict(upgrade_config(json.load(f)))
  tokenizer = load_or_train_tokenizer(spm_path, (), config.vocab_size)
  method = get_method(config, tokenizer.vocab_size)
  mesh = make_mesh(1)
  abstract, _ = state_shardings(method, make_optimizer(config), dummy_batch(), mesh)
  params, meta = checkpoint.load_params(workdir, abstract, which=which, average=average)
  if dtype != config.model.dtype:  # the inference precision is the caller's, whatever the run trained in
    config.model.dtype = dtype
    method = get_method(config, tokenizer.vocab_size)
    params = cast_params(params, dtype)
  return Run(config, tokenizer, method, params, meta, mesh)
