"""Run by tests/integration/test_aot.py in a process with 4 fake CPU devices: every decoder of every method decodes
the same batch on one device and with its rows split over 4 devices (nat_jax.parallel.sharding.place_rows, what
translate does with a run on several devices); the outputs must be identical.

  XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu \
      python -m tests.integration.multidevice_decode [all]

Prints one line per (method, decoder) and `ALL-EQUAL` at the end; `all` runs every decoder of every
method (default: one or two decoders of each).
"""
import sys

import jax
import numpy as np

from nat_jax import decode
from nat_jax.parallel import sharding
from tests.support import random_model

VOCAB = 40
METHODS = {  # label: (random_model overrides, the decoders of the quick run)
    'at': ({}, ['greedy', 'jacobi_pgj']),
    'dat': ({'model.method': 'dat', 'dat.upsample_scale': 2.0}, ['dag_lookahead']),
    'cmlm': ({'model.method': 'cmlm'}, ['mask_predict']),
    'hrt': ({'model.method': 'hrt', 'hrt.chunk': 2}, ['hrt']),
    'ibsa': ({'model.method': 'ibdecoder', 'ibdecoder.h': 2, 'ibdecoder.c': 2}, ['greedy']),
    'selfdraft': ({'model.method': 'selfdraft', 'weight_decay': 0.0}, ['drafted']),
}
CORPUS = {'train': '', 'validation': '', 'test': ''}


def sources(rows: int = 8, width: int = 16, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  src = np.zeros((rows, width), np.int32)
  for r, n in enumerate(rng.integers(3, width - 1, rows)):
    src[r, :n], src[r, n] = rng.integers(5, VOCAB, n), 1
  return src


def main(everything: bool):
  assert jax.device_count() == 4, jax.devices()
  mesh = sharding.make_mesh(1)
  src = sources()
  for label, (overrides, quick) in METHODS.items():
    method, params = random_model(CORPUS, VOCAB, **overrides)
    one = jax.device_put(params, jax.devices()[0])
    many = jax.device_put(params, sharding.replicated(mesh))
    for name in decode.decoders_for(method) if everything else quick:
      fn, extra = decode.decode_program(method, name, decode.parse_options(name, {}))
      jitted = jax.jit(fn)
      alone = jitted(one, extra, jax.device_put(src, jax.devices()[0]))
      split = jitted(many, extra, sharding.place_rows(src, mesh))
      np.testing.assert_array_equal(np.asarray(alone.tokens), np.asarray(split.tokens), err_msg=f'{label} {name}')
      np.testing.assert_allclose(np.asarray(alone.scores), np.asarray(split.scores), rtol=1e-5, atol=1e-5,
                                 err_msg=f'{label} {name}')
      for key in alone.aux:
        np.testing.assert_array_equal(np.asarray(alone.aux[key]), np.asarray(split.aux[key]), err_msg=f'{label} {name}')
      print(f'{label} {name}: equal', flush=True)
  # The rows are really split: each device computes a quarter of greedy's arithmetic, not the whole batch.
  method, params = random_model(CORPUS, VOCAB)
  fn, extra = decode.decode_program(method, 'greedy', decode.parse_options('greedy', {}))
  flops = lambda p, s: jax.jit(fn).lower(p, extra, s).compile().cost_analysis()['flops']
  alone = flops(jax.device_put(params, jax.devices()[0]), jax.device_put(src, jax.devices()[0]))
  split = flops(jax.device_put(params, sharding.replicated(mesh)), sharding.place_rows(src, mesh))
  print(f'greedy FLOPs per device: {split:.0f} split over 4 devices, {alone:.0f} on one', flush=True)
  assert split < 0.4 * alone, (split, alone)
  print('ALL-EQUAL', flush=True)


if __name__ == '__main__':
  main(everything=sys.argv[1:] == ['all'])
