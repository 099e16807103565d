"""Decode-loop cost against its floor, for greedy and beam search on a trained run.

  python -m benchmarks.decode_speed --workdir=runs/at_bible_tiny [--repeats=5]

For batch 1 and batch 64 (the first sentences of the test split): the median time of the whole
jitted decode (encoder + while_loop), the median time of one jitted decoder step (`step_logits`
on [rows * beam, 1] against a cache of the same size), the number of loop iterations, and
loop / (step x iterations): how far the loop is from running its steps back to back. Latency
over many sentences and BLEU come from `python -m nat_jax.evaluate`.
"""
from __future__ import annotations

from absl import app, flags
import jax
import jax.numpy as jnp

from benchmarks.common import machine, median_seconds
from nat_jax import inference
from nat_jax.data import inference_batches, load_split

flags.DEFINE_string('workdir', None, 'Trained run.')
flags.DEFINE_list('decoders', ['greedy', 'beam'], 'Decoders.')
flags.DEFINE_list('batch_sizes', ['1', '64'], 'Rows per batch.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats (median).')
FLAGS = flags.FLAGS


def first_batch(run, rows: int):
  examples = load_split(run.config.data, 'test')[:rows]
  seqs = inference.encode_sources([e.source for e in examples], run.tokenizer, run.config.max_len)
  lengths = inference.source_lengths(run.config.max_len, run.config.num_buckets)
  _, src = next(inference_batches(seqs, rows, lengths))
  return jnp.asarray(src)


def main(_):
  inference.quiet_logs()
  run = inference.load_run(FLAGS.workdir)
  method, params = run.method, run.params
  print('| decoder | rows | decode (ms) | encoder (ms) | one step (ms) | iterations | loop / (step x iterations) | (loop - encoder) / (step x iterations) |')
  print('|---|---|---|---|---|---|---|---|')
  for name in FLAGS.decoders:
    decode_fn, options = inference.make_decoder(method, name, {})
    width = options.get('beam_size', 1)
    for rows in map(int, FLAGS.batch_sizes):
      src = first_batch(run, rows)
      out = decode_fn(params, src)
      iterations = int(jnp.max(out.aux.get('loop_steps', out.aux['steps'])))
      t_decode = median_seconds(lambda: decode_fn(params, src).tokens, FLAGS.repeats)
      encode = jax.jit(method.encode)
      t_enc = median_seconds(lambda: encode(params, src), FLAGS.repeats)
      t_max = method.max_decode_len(src.shape[1])
      enc = jax.tree_util.tree_map(lambda x: jnp.repeat(x, width, axis=0), encode(params, src))
      cache = jax.jit(method.init_cache, static_argnums=2)(params, enc, t_max)
      step = jax.jit(method.step_logits)
      tokens = jnp.full((rows * width, 1), 5, jnp.int32)
      start = jnp.int32(iterations // 2)
      t_step = median_seconds(lambda: step(params, enc, cache, tokens, start), FLAGS.repeats * 4)
      floor = t_step * iterations
      print(f'| {name} {options} | {rows} | {1e3 * t_decode:.1f} | {1e3 * t_enc:.1f} | {1e3 * t_step:.2f} | '
            f'{iterations} | {t_decode / floor:.2f} | {(t_decode - t_enc) / floor:.2f} |', flush=True)
  print(f'\nmachine: {machine()}')


if __name__ == '__main__':
  app.run(main)
