"""Decode-loop cost against its floor, for greedy and beam search on a trained run.

  python -m benchmarks.components.decode_speed --workdir=runs/at_bible_tiny [--repeats=5]

For batch 1 and batch 64 (the first sentences of the test split): the median time of the whole
jitted decode (encoder + while_loop), the median time of one jitted decoder step (the scorer's
`step_logits` on [rows * beam, 1] against a cache of the same size), the number of loop
iterations, and loop / (step x iterations): how far the loop is from running its steps back to
back. Latency over many sentences and BLEU come from `python -m nat_jax.evaluate`.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from absl import flags

from nat_jax import decode
from nat_jax.commands import cli
from nat_jax.data import inference_batches, load_split
from nat_jax.decode import LeftToRightScorer
from nat_jax.decode.beam import add_beam_dim
from nat_jax.metrics.timing import machine, median_timed
from nat_jax.run.translation import encode_sources, source_lengths
from nat_jax.run.workdir import load_run

flags.DEFINE_string('workdir', None, 'Trained run.')
flags.DEFINE_list('decoders', ['greedy', 'beam'], 'Decoders.')
flags.DEFINE_list('batch_sizes', ['1', '64'], 'Rows per batch.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats (median).')
FLAGS = flags.FLAGS


def first_batch(run, rows: int):
  examples = load_split(run.config.data, 'test')[:rows]
  seqs = encode_sources([e.source for e in examples], run.tokenizer, run.config.max_len)
  _, src = next(inference_batches(seqs, rows, source_lengths(run.config.max_len)))
  return jnp.asarray(src)


def main(_):
  cli.quiet_logs()
  run = load_run(FLAGS.workdir)
  params, build = run.params, decode.method_view(run.method, LeftToRightScorer, 'decode_speed')
  encode = jax.jit(lambda p, src: build(p).encode(src))
  step = jax.jit(lambda p, enc, cache, tokens, start: build(p).step_logits(enc, cache, tokens, start))
  print('| decoder | rows | decode (ms) | encoder (ms) | one step (ms) | iterations | loop / (step x iterations) '
        '| (loop - encoder) / (step x iterations) |')
  print('|---|---|---|---|---|---|---|---|')
  for name in FLAGS.decoders:
    decode_fn, typed = decode.build_decoder(run.method, name, {})
    options = dataclasses.asdict(typed)
    width = options.get('beam_size', 1)
    for rows in map(int, FLAGS.batch_sizes):
      src = first_batch(run, rows)
      out, t_decode = median_timed(lambda: decode_fn(params, src), FLAGS.repeats)
      iterations = int(jnp.max(out.aux.get('loop_steps', out.aux['steps'])))
      _, t_enc = median_timed(lambda: encode(params, src), FLAGS.repeats)
      enc = add_beam_dim(encode(params, src), width)
      t_max = build(params).max_decode_len(src.shape[1])
      cache = jax.jit(lambda p, e: build(p).init_cache(e, t_max))(params, enc)
      tokens = jnp.full((rows * width, 1), 5, jnp.int32)
      start = jnp.int32(iterations // 2)
      _, t_step = median_timed(lambda: step(params, enc, cache, tokens, start), FLAGS.repeats * 4)
      floor = t_step * iterations
      print(f'| {name} {options} | {rows} | {1e3 * t_decode:.1f} | {1e3 * t_enc:.1f} | {1e3 * t_step:.2f} | '
            f'{iterations} | {t_decode / floor:.2f} | {(t_decode - t_enc) / floor:.2f} |', flush=True)
  print(f'\nmachine: {machine()}')


if __name__ == '__main__':
  cli.run_command(main)
