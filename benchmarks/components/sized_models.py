"""Our models at the sizes users run, with random weights, and the decoders the speed benchmarks time
(benchmarks.systems.size_sweep, benchmarks.components.pass_cost, benchmarks.components.argmax_speed): one place
for the shapes, the weights, the sources and the drafts they share. What a decoder call costs depends on the shapes and
on how many steps it runs, not on the weights.
"""
from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from nat_jax import decode, recipes
from nat_jax.core.tokens import EOS_ID, MASK_ID
from nat_jax.decode.drafted import drafted_decode
from nat_jax.errors import ConfigError
from nat_jax.methods import get_method
from nat_jax.run.workdir import inference_config, inference_params, precision
from nat_jax.views import LeftToRightScorer

VOCAB = 4000
SIZES = {
    128: dict(d_model=128, num_heads=4, d_ff=512, enc_layers=3, dec_layers=2),    # the tiny recipes
    256: dict(d_model=256, num_heads=4, d_ff=1024, enc_layers=6, dec_layers=2),   # configs/at_bible_mid.py
    512: dict(d_model=512, num_heads=8, d_ff=2048, enc_layers=6, dec_layers=6),   # Transformer-base
}

LENGTH_FREE = {'dag_lookahead'}  # decoders whose cost is set by the source, not by max_len


def sized_method(recipe: str, size: int, vocab: int = VOCAB, updates: Optional[dict] = None):
  """The recipe's method at `size` (SIZES' shapes, `vocab` pieces, no dropout; `updates` {'dat.upsample_scale':
  8.0, ...} set before the method is built)."""
  config = recipes.load_recipe(recipes.recipe_path(recipe))
  config.model.update(dropout=0.0, **SIZES[size])
  for key, value in (updates or {}).items():
    section, name = key.rsplit('.', 1)
    config[section][name] = value
  config.vocab_size = vocab
  config.init_from = ''
  return config, get_method(config, vocab)


def random_params(method, seed: int):
  """The method's initial parameters (random: what a call costs does not depend on them)."""
  batch = {'source': jnp.ones((1, 8), jnp.int32), 'target': jnp.ones((1, 8), jnp.int32)}
  return method.init_params(jax.random.PRNGKey(seed), batch)


def in_precision(config, params, label: str):
  """(method, params) of the float model `config` / `params` decoding in the precision `label` ('float32' as it
  is; a label of nat_jax.run.workdir.PRECISIONS as load_run loads a trained run: 'int8' quantized, its products by
  the kernel where it runs (nat_jax.kernels.onednn.resolve('auto')); 'int8/xla', 'int8/onednn': by that product)."""
  params = nn.meta.unbox(params)
  label, _, product = label.partition('/')
  if label == 'float32':
    return get_method(config, VOCAB), params
  config = inference_config(config, *precision(label), int8_kernel=product or 'auto')
  method = get_method(config, VOCAB)
  return method, inference_params(method, params, config)


def source_batch(seqs: list[list[int]], rows: int) -> np.ndarray:
  """i32[rows, S]: the `rows` sentences around the median length, padded to the longest (multiple of 8)."""
  order = np.argsort([len(s) for s in seqs], kind='stable')
  start = max(0, min(len(seqs) - rows, len(seqs) // 2 - rows // 2))
  chosen = [seqs[i] for i in order[start:start + rows]]
  width = -(-max(len(s) for s in chosen) // 8) * 8
  out = np.zeros((rows, width), np.int32)
  for r, s in enumerate(chosen):
    out[r, :len(s)] = s
  return out


def corrupt(tokens: np.ndarray, acceptance: float, vocab: int = VOCAB) -> np.ndarray:
  """A draft of `tokens` i32[B, T] (the verifier's greedy output) from which exact drafted decoding
  (update='draft', block >= acceptance) finalises `acceptance` tokens per pass: the last token of
  every gap wrong (EOS kept), gaps floor((j + 1) a) - floor(j a) tokens."""
  if acceptance < 1:
    raise ConfigError(f'--acceptance={acceptance}: a pass finalises at least one token.')
  ends = np.floor(np.arange(1, tokens.shape[1] + 1) * acceptance).astype(int) - 1  # last token of gap j
  wrong = np.zeros(tokens.shape[1], bool)
  wrong[ends[ends < tokens.shape[1]]] = True
  replaced = np.where(tokens + 1 >= vocab, MASK_ID + 1, tokens + 1)
  return np.where(wrong[None] & (tokens != EOS_ID) & (tokens > 0), replaced, tokens).astype(np.int32)


def decoder_fn(method, name: str, options: dict, draft: Optional[str], out_len: int) -> Callable:
  """fn(params, src, draft) -> DecodeOutput, jitted: the registered decoder (max_len = out_len unless
  its cost does not depend on it), or drafted decoding of a given draft (update='draft')."""
  if draft is not None:
    build = decode.method_view(method, LeftToRightScorer, 'sized_models')
    return decode.jit_decoding(lambda params, src, tokens: drafted_decode(build(params), src, tokens, update='draft',
                                                                          max_len=out_len, **options))
  options = decode.parse_options(name, {**options, **({} if name in LENGTH_FREE else {'max_len': out_len})})
  decode.check_decoder(method, name, options)
  fn, extra = decode.decode_program(method, name, options)
  jitted = decode.jit_decoding(fn)
  return lambda params, src, tokens: jitted(params, extra, src)


def steps_of(out) -> float:
  """Mean output tokens per row: the decoder's own count (`length`: HRT, DAG, Mask-Predict; `steps`:
  left-to-right decoders, incl. EOS), else the non-zero tokens."""
  for key in ('length', 'steps'):
    if key in out.aux:
      return float(np.mean(np.asarray(out.aux[key])))
  return float(np.mean(np.sum(np.asarray(out.tokens) > 0, axis=1)))
