"""The int8 matrix product on the CPU: the packed oneDNN kernel (nat_jax.kernels.onednn) against XLA's int8 dot,
each inside a jitted loop as decoding calls it, and the core's read speed beside them.

  python -m benchmarks.components.int8_product [--rows=1,2,8,64] [--shapes=512x2048,2048x512,512x512,256x1024]
      [--megabytes=16] [--loop=8] [--passes=9] [--threads=1,2] [--json=OUT.json]

Per weight shape [k, n] and row count m: one program runs --loop times a chain of products s8[m, k] x [k, n]
-> s32, one per distinct weight of that shape, as many weights as make --megabytes (a d=512 decoder step reads
about 20 MB: more than a core's caches but the last level's), in a fori_loop (each product's input made from
the last one's output, so nothing is hoisted); XLA's side is
`jax.lax.dot_general` with one-row inputs padded to two (nat_jax.models.int8.MIN_ROWS: what the int8 model
does), the kernel's side reads the weight packed once, on each of --threads OpenMP thread counts. Programs
alternate over --passes passes; reported: microseconds per product (median), the weight's bytes over that
time (GB/s), and the kernel's speed over XLA's dot per pass, median (min-max). Every kernel output is checked
equal to XLA's first. `read` rows: the time to read the weights' bytes once (benchmarks.components.read_floor), per
weight: the floor a product that reads its weight once cannot go under.
"""
from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks.components.read_floor import read_once
from nat_jax.commands import cli
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.kernels import onednn
from nat_jax.metrics.timing import alternated, machine
from nat_jax.models.int8 import MIN_ROWS

flags.DEFINE_list('rows', ['1', '2', '8', '64'], 'Rows (m) of the products.')
flags.DEFINE_list('shapes', ['512x2048', '2048x512', '512x512', '256x1024'], 'Weight shapes k x n.')
flags.DEFINE_integer('megabytes', 16, 'Bytes of the distinct weights each program cycles through.')
flags.DEFINE_integer('loop', 8, 'Passes over the weights per timed program (one fori_loop).')
flags.DEFINE_integer('passes', 9, 'Timed passes (the order alternating).')
flags.DEFINE_list('threads', ['1', '2'], "OpenMP threads of the kernel's rows.")
flags.DEFINE_string('json', '', 'Also write the results here (JSON).')
FLAGS = flags.FLAGS


def looped(product, k: int, loop: int):
  """jit(weights, x s8[m, k] -> s8[m, k]): `loop` passes over the weights, one product each, every product fed
  the low bits of the last one's output (tiled to k columns)."""
  def chain(weights, x):
    for w in weights:
      y = product(x, w)
      x = (jnp.tile(y, (1, -(-k // y.shape[1])))[:, :k] % 127).astype(jnp.int8)
    return x
  return jax.jit(lambda weights, x: jax.lax.fori_loop(0, loop, lambda _, v: chain(weights, v), x))


def xla_dot(x, w):
  m = x.shape[0]
  xp = jnp.pad(x, ((0, MIN_ROWS - m), (0, 0))) if m < MIN_ROWS else x
  return jax.lax.dot_general(xp, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)[:m]


def measure(k: int, n: int, rows: int, threads: list[int]) -> list[dict]:
  rng = np.random.default_rng(k + n + rows)
  count = max(1, (FLAGS.megabytes << 20) // (k * n))
  ws = [rng.integers(-127, 128, (k, n), dtype=np.int8) for _ in range(count)]
  weights = {'xla': [jnp.asarray(w) for w in ws], 'onednn': [jnp.asarray(onednn.pack(w)) for w in ws]}
  x = jnp.asarray(rng.integers(-127, 128, (rows, k), dtype=np.int8))
  programs = {'xla': (looped(xla_dot, k, FLAGS.loop), weights['xla'])}
  for t in threads:
    product = lambda v, p, t=t: onednn.matmul(v, p, n, threads=t)
    programs[f'onednn {t}t'] = (looped(product, k, FLAGS.loop), weights['onednn'])
  want = np.asarray(programs['xla'][0](weights['xla'], x))
  for name, (program, w) in programs.items():
    if not np.array_equal(np.asarray(program(w, x)), want):
      raise AssertionError(f'{name} at [{rows}, {k}] x [{k}, {n}] differs from XLA\'s int8 dot.')
  calls = {name: (lambda p=program, w=w: p(w, x)) for name, (program, w) in programs.items()}
  calls['read'] = read_once(k * n * count, FLAGS.loop)
  calls['read']()
  times = {name: t / (FLAGS.loop * count) for name, t in alternated(calls, FLAGS.passes).items()}
  out = []
  for name, t in times.items():
    row = {'k': k, 'n': n, 'rows': rows, 'product': name, 'us': 1e6 * float(np.median(t)),
           'weight_gb_s': k * n / float(np.median(t)) / 1e9}
    if name.startswith('onednn'):
      ratio = times['xla'] / t
      row.update(vs_xla=float(np.median(ratio)), vs_xla_min=float(ratio.min()), vs_xla_max=float(ratio.max()))
    out.append(row)
    speed = f" | {row['vs_xla']:.2f}x ({row['vs_xla_min']:.2f}-{row['vs_xla_max']:.2f})" if 'vs_xla' in row else ' | '
    print(f"| {k}x{n} | {rows} | {name} | {row['us']:.1f} | {row['weight_gb_s']:.1f}{speed} |", flush=True)
  return out


def main(_):
  cli.quiet_logs()
  problem = onednn.unavailable()
  if problem:
    raise ConfigError(f'the oneDNN kernel cannot run here: {problem}.')
  shapes = [tuple(int(v) for v in s.split('x')) for s in FLAGS.shapes]
  print('| weight k x n | rows | product | us per product | weight GB/s | kernel over XLA\'s dot, median (min-max) |')
  print('|---|---|---|---|---|---|')
  results = []
  for k, n in shapes:
    for rows in map(int, FLAGS.rows):
      results += measure(k, n, rows, [int(t) for t in FLAGS.threads])
  print(f'\nmachine: {machine()}')
  if FLAGS.json:
    command = 'python -m benchmarks.components.int8_product ' + ' '.join(sys.argv[1:])
    write_atomic(FLAGS.json, json.dumps({'machine': machine(), 'command': command, 'rows': results}, indent=1) + '\n')


if __name__ == '__main__':
  cli.run_command(main)
