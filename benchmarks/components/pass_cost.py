"""What a verification pass over k positions costs against one greedy step, and where the time goes.

  python -m benchmarks.components.pass_cost [--sizes=128,256,512] [--positions=1,4,8] [--batch=1] [--passes=9] \
      [--dtypes=float32,int8] [--profile] \
      [--variants='xnn:xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY']

For each size (benchmarks.components.sized_models.SIZES, random weights) one device loop of 32 decoder calls of
the AT's `step_logits` on k new positions against a 64-slot cache, then the argmax of every
position (what greedy and a verification pass read), per k: ms per call and the cost in calls of
k = 1 in float32 (a float32 greedy step), median over passes that alternate every program; `--dtypes`
times the same weights in each precision (int8: quantized as load_run does). `--variants` compiles
each program again with XLA compiler options (`name:key=value,key=value;name2:...`, set per
compilation, so the variants alternate in one process) and checks their outputs equal the default's.
`--profile` adds, per size and k, the XLA:CPU kernels (thunks) of one loop under jax.profiler,
grouped by kind (`dot`: XLA's own dot kernels; `ynn_fusion` / `xnn_fusion`: YNNPACK / XNNPACK
calls; fusions by their root op): microseconds per call, which is where a k-row pass's time goes.
"""
from __future__ import annotations

import collections
import functools
import glob
import gzip
import json
import os
import re
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks.components import sized_models
from nat_jax import decode
from nat_jax.commands import cli
from nat_jax.core.reduce import argmax
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.kernels import onednn
from nat_jax.metrics.timing import alternated, machine
from nat_jax.views import LeftToRightScorer

flags.DEFINE_list('sizes', ['128', '256', '512'], 'd_model of each size (benchmarks.components.sized_models.SIZES).')
flags.DEFINE_list('positions', ['1', '4', '8'], 'Positions per call (1: a greedy step).')
flags.DEFINE_integer('batch', 1, 'Rows.')
flags.DEFINE_integer('passes', 9, 'Timed passes (alternating order).')
flags.DEFINE_list('dtypes', ['float32'], 'Precisions timed side by side (float32, int8, bfloat16); the unit is '
                  'the float32 greedy step.')
flags.DEFINE_string('variants', '', "XLA compiler options timed beside the default: 'name:key=value,...;name2:...'.")
flags.DEFINE_string('json', '', 'Also write the results here (JSON).')
flags.DEFINE_boolean('profile', False, 'Add the per-kernel breakdown of every program (jax.profiler).')
FLAGS = flags.FLAGS
CALLS, SLOTS, SOURCE = 32, 64, 32


def parse_variants(spec: str) -> dict[str, dict[str, str]]:
  """'a:k=v,k2=v2;b:k=v' -> {'default': {}, 'a': {...}, 'b': {...}}."""
  variants = {'default': {}}
  for part in filter(None, (p.strip() for p in spec.split(';'))):
    name, _, options = part.partition(':')
    pairs = [o.split('=', 1) for o in options.split(',') if o]
    if not name or not pairs or any(len(p) != 2 for p in pairs):
      raise ConfigError(f"--variants: {part!r} is not 'name:key=value[,key=value...]'.")
    variants[name] = dict(pairs)
  return variants


def loop_program(method, positions: int):
  """fn(params, enc, cache) running CALLS decoder calls on `positions` new slots, each fed the argmax
  of the one before (so none can be skipped)."""
  build = decode.method_view(method, LeftToRightScorer, 'pass_cost')

  def run(params, enc, cache):
    scorer = build(params)

    def body(i, carry):
      cache, last = carry
      tokens = jnp.broadcast_to(last[:, None], (last.shape[0], positions))
      logits, cache = scorer.step_logits(enc, cache, tokens, 8 + i % 4)
      return cache, argmax(logits)[:, 0]
    return jax.lax.fori_loop(0, CALLS, body, (cache, jnp.full((FLAGS.batch,), 5, jnp.int32)))
  return run


def kernel_profile(fn, args) -> dict[str, float]:
  """{kernel kind: microseconds per call} of fn(*args) under jax.profiler (5 calls)."""
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir):
      for _ in range(5):
        jax.block_until_ready(fn(*args))
    events = json.load(gzip.open(glob.glob(os.path.join(trace_dir, '**', '*.trace.json.gz'), recursive=True)[0]))
  kinds = collections.Counter()
  for e in events['traceEvents']:
    name = e.get('name', '')
    if e.get('ph') != 'X' or 'dur' not in e or not re.match(r'[a-z_\-]+(\.\d+)?$', name) or name.startswith('while'):
      continue  # thunks only; a while loop's own span holds its body's
    kinds[re.sub(r'\.\d+$', '', name)] += e['dur'] / 5 / CALLS
  return dict(kinds.most_common())


def main(_):
  cli.quiet_logs()
  variants = parse_variants(FLAGS.variants)
  positions = [int(k) for k in FLAGS.positions]
  if 1 not in positions:
    raise ConfigError('--positions must include 1 (the greedy step every cost is divided by).')
  if 'float32' not in FLAGS.dtypes:
    raise ConfigError('--dtypes must include float32: every cost is in float32 greedy steps.')
  results = []
  print('| d_model | variant | ' + ' | '.join(f'{k} positions: ms (greedy steps)' for k in positions) + ' |')
  print('|---|---|' + '---|' * len(positions))
  for size in map(int, FLAGS.sizes):
    config, float_method = sized_models.sized_method('at_bible_tiny', size)
    float_params = sized_models.random_params(float_method, 0)
    src = jnp.asarray(np.tile(np.arange(5, 5 + SOURCE, dtype=np.int32), (FLAGS.batch, 1)))
    programs, args = {}, {}
    for dtype in FLAGS.dtypes:
      method, params = sized_models.in_precision(config, float_params, dtype)
      scorer = decode.method_view(method, LeftToRightScorer, 'pass_cost')(params)
      enc = jax.jit(scorer.encode)(src)
      args[dtype] = (params, enc, scorer.init_cache(enc, SLOTS))
      for name, options in variants.items():
        for k in positions:
          programs[name, dtype, k] = decode.jit_decoding(loop_program(method, k)).lower(*args[dtype]).compile(options)
    outs = {key: jax.block_until_ready(fn(*args[key[1]])) for key, fn in programs.items()}
    for (name, dtype, k), out in outs.items():
      if not all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(out),
                                                      jax.tree_util.tree_leaves(outs['default', dtype, k]))):
        print(f'  note: variant {name} at {k} positions changes the outputs ({dtype})')
    times = alternated({key: functools.partial(fn, *args[key[1]]) for key, fn in programs.items()}, FLAGS.passes)
    med = {key: float(np.median(t)) / CALLS for key, t in times.items()}
    step = med['default', 'float32', 1]
    for name in variants:
      for dtype in FLAGS.dtypes:
        cells = [f'{1e3 * med[name, dtype, k]:.3f} ({med[name, dtype, k] / step:.2f})' for k in positions]
        print(f'| {size} | {name} {dtype} | ' + ' | '.join(cells) + ' |', flush=True)
        results += [{'size': size, 'variant': name, 'dtype': dtype, 'positions': k, 'ms': 1e3 * med[name, dtype, k],
                     'greedy_steps': med[name, dtype, k] / step} for k in positions]
    if FLAGS.json:
      write_atomic(FLAGS.json, json.dumps({'machine': machine(), 'int8_product': onednn.resolve('auto'),
                                           'batch': FLAGS.batch, 'command': 'python -m benchmarks.'
                                           'components.pass_cost ' + ' '.join(sys.argv[1:]), 'rows': results},
                                          indent=1) + '\n')
    if FLAGS.profile:
      for dtype in FLAGS.dtypes:
        for k in positions:
          kinds = kernel_profile(programs['default', dtype, k], args[dtype])
          top = ', '.join(f'{kind} {us:.0f}' for kind, us in list(kinds.items())[:8])
          print(f'  d={size}, {dtype}, {k} positions, us per call by kernel kind (profiled): '
                f'total {sum(kinds.values()):.0f}: {top}')
  print(f'\nbatch {FLAGS.batch}, {CALLS} calls per loop, {SLOTS}-slot cache, {SOURCE}-piece source; '
        f'machine: {machine()}')


if __name__ == '__main__':
  cli.run_command(main)
