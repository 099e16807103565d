"""Shared fixtures: a small real parallel corpus (Bible verses from the SQLite DB) and a tiny config."""
from __future__ import annotations

import os
import sqlite3

os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import ml_collections  # noqa: E402
import pytest  # noqa: E402

from nat_jax.config_defaults import base_config  # noqa: E402
from nat_jax.methods import DEFAULTS  # noqa: E402
from nat_jax.data.bible import DB_PATH  # noqa: E402

SPLIT_QUERIES = {  # (book, how many short verses)
    'train': (1, 600), 'validation': (8, 12), 'test': (44, 16)}


def _verses(book: int, limit: int) -> list[tuple[str, str, str]]:
  query = """
      SELECT TRIM(s.vText), TRIM(e.vText), TRIM(r.vText) FROM bible s
      JOIN bible e ON e.bbName = 'e' AND (e.bNumber, e.cNumber, e.vNumber) = (s.bNumber, s.cNumber, s.vNumber)
      JOIN bible r ON r.bbName = 's' AND (r.bNumber, r.cNumber, r.vNumber) = (s.bNumber, s.cNumber, s.vNumber)
      WHERE s.bbName = '4' AND s.bNumber = ? AND LENGTH(s.vText) < 120 AND LENGTH(e.vText) < 120
        AND TRIM(e.vText) != '' AND TRIM(r.vText) != ''
      ORDER BY s.cNumber, s.vNumber LIMIT ?"""
  with sqlite3.connect(DB_PATH) as db:
    return db.execute(query, (book, limit)).fetchall()


@pytest.fixture(scope='session')
def corpus(tmp_path_factory) -> dict[str, str]:
  """TSV files (source, Elberfelder, Schlachter) of short verses: 600 train, 12 validation, 16 test."""
  root = tmp_path_factory.mktemp('corpus')
  paths = {}
  for split, (book, limit) in SPLIT_QUERIES.items():
    path = root / f'{split}.tsv'
    path.write_text(''.join('\t'.join(v) + '\n' for v in _verses(book, limit)), encoding='utf-8')
    paths[split] = str(path)
  return paths


@pytest.fixture(scope='session')
def compile_cache(tmp_path_factory) -> str:
  return str(tmp_path_factory.mktemp('jax_cache'))


def tiny_config(corpus: dict[str, str], compile_cache: str = '', **overrides) -> ml_collections.ConfigDict:
  """A model small enough to compile and train in seconds on one CPU core; overrides may name
  another method ('model.method') and keys of its config section."""
  c = base_config()
  c.model.update(d_model=32, num_heads=2, d_ff=64, enc_layers=1, dec_layers=1, dropout=0.1)
  c.data.update(source='files', train_files=corpus['train'], validation_files=corpus['validation'],
                test_files=corpus['test'])
  c.update(vocab_size=400, max_len=48, max_decode_len=40, tokens_per_batch=384, num_buckets=2, total_steps=8,
           learning_rate=3e-3, warmup_steps=2, log_every=2, eval_every=4, checkpoint_every=2, eval_max_sentences=6,
           decode_batch_size=8, test_decoder='greedy', num_samples=1, compilation_cache_dir=compile_cache)
  method = overrides.get('model.method', c.model.method)
  if method in DEFAULTS:
    c[method] = DEFAULTS[method]()
  return with_overrides(c, overrides)


def with_overrides(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """config with dotted keys set, e.g. {'model.d_model': 48}."""
  for key, value in overrides.items():
    target = config
    *parents, leaf = key.split('.')
    for p in parents:
      target = target[p]
    target[leaf] = value
  return config


def config_flags_for(config: ml_collections.ConfigDict) -> list[str]:
  """The same config as --config.<key>=<value> flags over configs/at_bible_tiny.py (for subprocess runs)."""
  flat = {}

  def walk(prefix, node):
    for k, v in node.items():
      if isinstance(v, ml_collections.ConfigDict):
        walk(f'{prefix}{k}.', v)
      else:
        flat[f'{prefix}{k}'] = v
  walk('', config)
  return [f'--config.{k}={v}' for k, v in flat.items() if v != '' and not isinstance(v, (list, tuple))]


def random_tiny_model(corpus, vocab_size: int, seed: int = 3, logit_scale: float = 4.0):
  """(AT method, unboxed params) of a randomly initialised tiny model, dropout off. The output
  embedding is scaled so a tiny vocabulary gets peaked, varied next-token distributions."""
  import jax
  import jax.numpy as jnp
  from flax import linen as nn
  from nat_jax.methods.autoregressive import AutoregressiveMethod
  method = AutoregressiveMethod(tiny_config(corpus, **{'model.dropout': 0.0}), vocab_size=vocab_size)
  dummy = {'source': jnp.ones((1, 5), jnp.int32), 'target': jnp.ones((1, 5), jnp.int32)}
  params = nn.meta.unbox(method.init_params(jax.random.PRNGKey(seed), dummy))
  params['embed']['embedding'] = params['embed']['embedding'] * logit_scale
  return method, params


def random_model(corpus, vocab_size: int, seed: int = 3, logit_scale: float = 4.0, **overrides):
  """(method, unboxed params) of a randomly initialised tiny model of any method (overrides as in
  tiny_config, e.g. {'model.method': 'hrt', 'hrt.chunk': 2}), dropout off, output embedding scaled as
  in random_tiny_model."""
  import jax
  import jax.numpy as jnp
  from flax import linen as nn
  from nat_jax.methods import get_method
  method = get_method(tiny_config(corpus, **{'model.dropout': 0.0, **overrides}), vocab_size)
  dummy = {'source': jnp.ones((1, 5), jnp.int32), 'target': jnp.ones((1, 5), jnp.int32)}
  params = nn.meta.unbox(method.init_params(jax.random.PRNGKey(seed), dummy))
  model = params.get('verifier', params)  # a self-drafting run holds its frozen verifier
  model['embed']['embedding'] = model['embed']['embedding'] * logit_scale
  return method, params


@pytest.fixture(scope='session')
def trained_run(tmp_path_factory, corpus, compile_cache) -> str:
  """Workdir of a tiny model trained for 8 steps (checkpoints at 2, 4, 6, 8)."""
  from nat_jax import train
  workdir = str(tmp_path_factory.mktemp('trained_run'))
  train.train_and_evaluate(tiny_config(corpus, compile_cache), workdir)
  return workdir


def tiny_pairs(shapes, vocab: int, width: int, seed: int = 0):
  """{'source', 'target'} i32[len(shapes), width] of random pairs (token ids 5..vocab-1, then EOS, then 0);
  shapes: (source length, target length) per row, both < width."""
  import jax.numpy as jnp
  import numpy as np
  rng = np.random.default_rng(seed)
  src, tgt = np.zeros((len(shapes), width), np.int32), np.zeros((len(shapes), width), np.int32)
  for i, (n, m) in enumerate(shapes):
    src[i, :n], src[i, n] = rng.integers(5, vocab, n), 1
    tgt[i, :m], tgt[i, m] = rng.integers(5, vocab, m), 1
  return {'source': jnp.asarray(src), 'target': jnp.asarray(tgt)}
