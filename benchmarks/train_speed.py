"""Training throughput of a recipe: tokens/s of the jitted train step on real batches.

  python -m benchmarks.train_speed --config=configs/at_bible_tiny.py [--steps=40]

Compiles every bucket shape first (not timed), then times `--steps` consecutive real batches
(each step blocked on). Reports target tokens/s (non-pad, what the loss sees) and padded
tokens/s (source + target slots the hardware processes).
"""
from __future__ import annotations

import tempfile
import time

from absl import app, flags
import jax
import numpy as np

from benchmarks.common import machine
from nat_jax import inference, sharding
from nat_jax.data import TrainBatches, bucket_shapes, encode_pairs
from nat_jax.methods import get_method
from nat_jax.train import compile_steps, load_data
from nat_jax.train_state import create_train_state, make_optimizer, state_shardings

flags.DEFINE_integer('steps', 40, 'Timed steps.')
FLAGS = flags.FLAGS  # --config and --workdir (tokenizer location; default a temp dir) come from nat_jax.train


def main(_):
  inference.quiet_logs()
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

  t0 = time.perf_counter()
  for rows, length in shapes:  # compile + warm every shape
    state, m = step(state, {'source': np.ones((rows, length), np.int32), 'target': np.ones((rows, length), np.int32)})
    jax.block_until_ready(m)
  compile_s = time.perf_counter() - t0
  times, target_tokens, padded = [], 0.0, 0
  for i in range(FLAGS.steps):
    local = batches(i)
    t0 = time.perf_counter()
    state, m = step(state, local)
    jax.block_until_ready(m)
    times.append(time.perf_counter() - t0)
    target_tokens += float(m['tokens'])
    padded += local['source'].size + local['target'].size
  total = sum(times)
  n_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
  print('| recipe | params | steps | median step (s) | target tokens/s | padded tokens/s | compile+warm-up (s) |')
  print('|---|---|---|---|---|---|---|')
  print(f'| {config.model.method} d={config.model.d_model} '
        f'E{config.model.enc_layers}D{config.model.dec_layers} | {n_params / 1e6:.2f}M | {FLAGS.steps} | '
        f'{np.median(times):.3f} | {target_tokens / total:.0f} | {padded / total:.0f} | {compile_s:.1f} |')
  print(f'\nmachine: {machine()}')


if __name__ == '__main__':
  app.run(main)
