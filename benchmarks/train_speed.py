"""Training throughput of a recipe: tokens/s of the jitted train step on real batches.

  python -m benchmarks.train_speed --config=configs/at_bible_tiny.py [--steps=40]

Compiles every bucket shape first (not timed), then times `--steps` consecutive real batches
(each step blocked on). Reports the median step, target tokens/s (non-pad, what the loss sees),
padded tokens/s (source + target slots the hardware processes) and the CPU time (user + system,
all threads) per step, which a virtual machine's stolen time does not inflate. Like every command line here it runs
with glibc's huge-page malloc on Linux (nat_jax/hugepages.py); NAT_JAX_HUGEPAGES=0 measures
without it.
"""
from __future__ import annotations

import os
import tempfile
import time

from absl import flags
import jax
import numpy as np

from nat_jax import cli, sharding
from nat_jax.data import TrainBatches, bucket_shapes, encode_pairs
from nat_jax.methods import get_method
from nat_jax.timing import machine, timed
from nat_jax.train import compile_steps, load_data
from nat_jax.train_state import create_train_state, make_optimizer, state_shardings

flags.DEFINE_integer('steps', 40, 'Timed steps.')
FLAGS = flags.FLAGS  # --config and --workdir (tokenizer location; default a temp dir) come from nat_jax.train


def main(_):
  cli.quiet_logs()
  config = FLAGS.config
  workdir = FLAGS.workdir or tempfile.mkdtemp()
  splits, tokenizer = load_data(config, workdir)
  method = get_method(config, tokenizer.vocab_size)
  mesh = sharding.make_mesh(config.mesh.model_parallel)
  shapes = bucket_shapes(config.max_len, config.tokens_per_batch, config.num_buckets, mesh.shape['data'])
  pairs, _ = encode_pairs(splits['train'], tokenizer, config.max_len)
  batches = TrainBatches(pairs, shapes, config.seed)
  tx = make_optimizer(config)
  _, state_sh = state_shardings(method, tx, batches(0), mesh)
  state = create_train_state(method, tx, batches(0), mesh, jax.random.PRNGKey(0))
  grad_fn, apply_fn, _ = compile_steps(method, tx, mesh, state_sh)
  rng = jax.random.PRNGKey(0)

  def step(state, local):
    g, s = grad_fn(state.params, sharding.global_batch(local, mesh), rng, state.step)
    return apply_fn(state, g, s)

  compile_s = 0.0
  for rows, length in shapes:  # compile + warm every shape
    dummy = {'source': np.ones((rows, length), np.int32), 'target': np.ones((rows, length), np.int32)}
    (state, _), seconds = timed(lambda: step(state, dummy))
    compile_s += seconds
  times, target_tokens, padded = [], 0.0, 0
  cpu0 = time.process_time()
  for i in range(FLAGS.steps):
    local = batches(i)
    (state, m), seconds = timed(lambda: step(state, local))
    times.append(seconds)
    target_tokens += float(m['tokens'])
    padded += local['source'].size + local['target'].size
  total, cpu_per_step = sum(times), (time.process_time() - cpu0) / FLAGS.steps
  n_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
  print('| recipe | params | steps | median step (s) | target tokens/s | padded tokens/s | CPU s/step | '
        'compile+warm-up (s) |')
  print('|---|---|---|---|---|---|---|---|')
  print(f'| {config.model.method} d={config.model.d_model} '
        f'E{config.model.enc_layers}D{config.model.dec_layers} | {n_params / 1e6:.2f}M | {FLAGS.steps} | '
        f'{np.median(times):.3f} | {target_tokens / total:.0f} | {padded / total:.0f} | {cpu_per_step:.2f} | '
        f'{compile_s:.1f} |')
  tunables = os.environ.get('GLIBC_TUNABLES', '(none)')
  print(f'\nmachine: {machine()}; GLIBC_TUNABLES={tunables}')


if __name__ == '__main__':
  cli.run_command(main)
