"""Why the decoders take their argmax with nat_jax.core.reduce: `jnp.argmax` against `max_and_argmax`
alone over [rows, V], and greedy's step as it was (jnp.argmax, jnp.max - logsumexp) against
`scored_argmax` inside the whole greedy decoder, alternated in one process.

  python -m benchmarks.components.argmax_speed [--sizes=128,256] [--batch_sizes=1,64] [--passes=7]

Alone: one device loop of 64 argmaxes over a [rows, 4000] array (the Bible vocabulary) per call.
Greedy: benchmarks.components.sized_models' AT at each size (random weights, 37 output tokens, the median Acts
sources), the decoder traced twice: once as it is, once with greedy's step reading its logits as before
(the tokens are checked equal). Reported: median ms per call and the speed-up, median
(min-max) of the per-pass ratios.
"""
from __future__ import annotations

from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks.components import sized_models
from nat_jax.commands import cli
from nat_jax.core.reduce import max_and_argmax
from nat_jax.decode import greedy
from nat_jax.metrics.timing import alternated, machine

flags.DEFINE_list('sizes', ['128', '256'], 'd_model of each size (benchmarks.components.sized_models.SIZES).')
flags.DEFINE_list('batch_sizes', ['1', '64'], 'Rows.')
flags.DEFINE_integer('passes', 7, 'Timed passes (alternating order).')
FLAGS = flags.FLAGS
LOOP = 64


def jnp_max_and_argmax(x, axis=-1):
  """What the decoders did before nat_jax.core.reduce: jnp.max and jnp.argmax."""
  return jnp.max(x, axis=axis), jnp.argmax(x, axis=axis).astype(jnp.int32)


def jnp_scored_argmax(logits, tokens=None):
  """Greedy's step before nat_jax.core.reduce: jnp.argmax, and jnp.max - logsumexp as its log-probability."""
  del tokens
  return (jnp.argmax(logits, axis=-1).astype(jnp.int32), jnp.max(logits, axis=-1) - jax.nn.logsumexp(logits, axis=-1),
          None)


def alone(fn):
  """A jitted loop of LOOP argmaxes over x f32[rows, V] (each feeding the next, so none is skipped)."""
  def loop(x):
    def body(_, carry):
      x, acc = carry
      _, index = fn(x)
      return x.at[:, 0].add(1e-7 * index.astype(x.dtype)), acc + index
    return jax.lax.fori_loop(0, LOOP, body, (x, jnp.zeros(x.shape[:1], jnp.int32)))[1]
  return jax.jit(loop)


def report(label: str, times: dict, per_call: float = 1.0):
  before, after = times['jnp.argmax'], times['core.reduce']
  ratio = before / after
  print(f'| {label} | {1e3 * np.median(before) / per_call:.3f} | {1e3 * np.median(after) / per_call:.3f} | '
        f'{np.median(ratio):.2f}x ({ratio.min():.2f}-{ratio.max():.2f}) |', flush=True)


def main(_):
  cli.quiet_logs()
  print('| what | ms, jnp.argmax (before) | ms, nat_jax.core.reduce | speed-up, median (min-max) |')
  print('|---|---|---|---|')
  rng = np.random.default_rng(0)
  for rows in map(int, FLAGS.batch_sizes):
    x = jnp.asarray(rng.standard_normal((rows, sized_models.VOCAB)), jnp.float32)
    fns = {'jnp.argmax': alone(jnp_max_and_argmax), 'core.reduce': alone(max_and_argmax)}
    outs = {name: np.asarray(fn(x)) for name, fn in fns.items()}
    assert np.array_equal(outs['jnp.argmax'], outs['core.reduce'])
    calls = {name: (lambda f=fn: f(x)) for name, fn in fns.items()}
    report(f'argmax over [{rows}, {sized_models.VOCAB}], per argmax', alternated(calls, FLAGS.passes), LOOP)
  for size in map(int, FLAGS.sizes):
    _, method = sized_models.sized_method('at_bible_tiny', size)
    params = sized_models.random_params(method, 0)
    for rows in map(int, FLAGS.batch_sizes):
      src = jnp.asarray(np.tile(np.arange(5, 37, dtype=np.int32), (rows, 1)))
      after = sized_models.decoder_fn(method, 'greedy', {}, None, 37)
      before = sized_models.decoder_fn(method, 'greedy', {}, None, 37)
      with mock.patch.object(greedy, 'scored_argmax', jnp_scored_argmax):
        want = before(params, src, None)  # traced (and compiled) with jnp.argmax
      got = after(params, src, None)
      assert np.array_equal(np.asarray(want.tokens), np.asarray(got.tokens))
      calls = {'jnp.argmax': lambda: before(params, src, None), 'core.reduce': lambda: after(params, src, None)}
      report(f'greedy decoder, d={size}, batch {rows}, 37 tokens', alternated(calls, FLAGS.passes))
  print(f'\nmachine: {machine()}')


if __name__ == '__main__':
  cli.run_command(main)
