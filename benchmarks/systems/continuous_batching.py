"""Would continuous batching beat batch-at-a-time for a served left-to-right decoder on this CPU?

  python -m benchmarks.systems.continuous_batching [--size=256] [--clients=8,32,64] [--stage_steps=1,8] \
      [--sentences=256] [--passes=5] [--tokenizer=spm.model] [--json=OUT.json]

The question of issue 35: a server whose `c` clients each send one sentence and wait for its answer
holds at most `c` sentences. Batch-at-a-time (what `nat_jax.serve` does) decodes them together and
the next sentences wait for the batch's longest; continuous batching would refill a finished row
with a waiting sentence every `K` steps (`--stage_steps`), so no row idles while work waits. Which
wins depends on what a decoder step costs at each row count and cache size, so this measures those
costs and replays both schedules over the same sentences:

- measured (the AT greedy step of benchmarks.components.sized_models at `--size`, random weights, alternated
  passes, median): `t(B, C, S)`, one greedy step (decoder over one position + argmax) at B rows
  against a C-slot cache and an S-wide source, and `e(B, S)`, the encoder;
- replayed (benchmarks.systems.batch_schedules, plain Python over the sentences' real lengths):
  batch-at-a-time as nat_jax.decode.loop runs it (rows padded to a power of two; the cache growing
  32, 64, 128 slots; the batch shrinking to a quarter once no more are live; the source padded to the
  batch's longest, geometric widths) and continuous batching, as favourably as it could be built (c
  rows always; every K steps, finished rows refilled in arrival order, each refill one encoder call at
  its own row count and its own sentences' width, its memory then padded into the batch's; the
  decoder's source memory as wide as the widest live row needs; the cache as large as the furthest
  live row needs; once nothing waits, the rows
  shrink as the loop's do).

Lengths are real where they can be: source widths are the Acts test sentences in the Bible recipes'
4,000-piece vocabulary, and each sentence's output length is its first reference's length in pieces
+ EOS (the trained models' greedy outputs track it; random weights would not stop). Left out on
purpose, in continuous batching's favour: the per-row positions it needs (a scatter into the cache
and a per-row mask instead of one slice), the host round trip of every refill, and HTTP. So its
figure is an upper bound: if it does not beat batch-at-a-time by a clear margin, building it would
not pay on this CPU. A check of the replay itself: the model's cost of one real batch run to a fixed
length (every row the same length) against the measured decoder call.
"""
from __future__ import annotations

import functools
import json
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks.components.sized_models import VOCAB, decoder_fn, random_params, sized_method
from benchmarks.systems.batch_schedules import (
  MAX_LEN,
  batch_schedule,
  continuous_schedule,
  cost,
  mean_shape,
  padded_width,
  slots_for,
)
from nat_jax import decode, recipes
from nat_jax.commands import cli
from nat_jax.core.reduce import argmax
from nat_jax.data import load_or_train_tokenizer, load_split
from nat_jax.data.tokenizer import TOKENIZER_FILE
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.metrics.timing import alternated, machine, timed
from nat_jax.run.translation import encode_sources
from nat_jax.views import LeftToRightScorer

flags.DEFINE_integer('size', 256, "d_model (benchmarks.components.sized_models.SIZES; 256: the mid-size recipes' "
                     'E6D2).')
flags.DEFINE_list('clients', ['8', '32', '64'], 'Concurrent one-sentence clients (rows in flight); powers of two.')
flags.DEFINE_list('stage_steps', ['1', '8'], 'Continuous batching: steps between refills.')
flags.DEFINE_integer('sentences', 256, 'The first this many Acts test sentences, in order (the arrival order).')
flags.DEFINE_integer('passes', 5, 'Timed passes (alternating order).')
flags.DEFINE_string('tokenizer', '', 'A 4,000-piece spm.model; trained there on the Bible training split when missing '
                    '(default: in a scratch directory).')
flags.DEFINE_string('json', '', 'Also write the results here (JSON).')
FLAGS = flags.FLAGS
STEPS = 16     # greedy steps per timed call of t(B, C, S)


def step_program(scorer_of):
  """fn(params, enc, cache) -> (cache, last): STEPS greedy steps, each fed the argmax of the one before."""
  def run(params, enc, cache):
    scorer = scorer_of(params)
    rows = jax.tree_util.tree_leaves(enc)[0].shape[0]

    def body(i, carry):
      cache, last = carry
      logits, cache = scorer.step_logits(enc, cache, last[:, None], i)
      return cache, argmax(logits)[:, 0]
    return jax.lax.fori_loop(0, STEPS, body, (cache, jnp.full((rows,), 5, jnp.int32)))
  return run


def measure_costs(method, params, shapes: set[tuple[int, int, int]], encoder_shapes: set[tuple[int, int]]):
  """({(B, C, S): seconds per greedy step}, {(B, S): seconds per encoder call}), medians of alternated passes."""
  scorer_of = decode.method_view(method, LeftToRightScorer, 'continuous_batching')
  scorer = scorer_of(params)
  encode = jax.jit(lambda p, src: scorer_of(p).encode(src))
  steps = jax.jit(step_program(scorer_of))
  calls = {}
  for rows, slots, width in sorted(shapes):
    src = jnp.full((rows, width), 7, jnp.int32)
    enc = encode(params, src)
    cache = scorer.init_cache(enc, slots)
    calls['step', rows, slots, width] = functools.partial(steps, params, enc, cache)
  for rows, width in sorted(encoder_shapes):
    calls['encoder', rows, width] = functools.partial(encode, params, jnp.full((rows, width), 7, jnp.int32))
  for fn in calls.values():
    jax.block_until_ready(fn())  # compile, untimed
  print(f'timing {len(calls)} programs, {FLAGS.passes} passes ...', flush=True)
  times = alternated(calls, FLAGS.passes)
  med = {key: float(np.median(t)) for key, t in times.items()}
  step = {key[1:]: t / STEPS for key, t in med.items() if key[0] == 'step'}
  encoder = {key[1:]: t for key, t in med.items() if key[0] == 'encoder'}
  return step, encoder


def sentence_lengths(tokenizer, count: int):
  """(output lengths, source widths) of the first `count` Acts test sentences: first reference in pieces
  + EOS, source in pieces + EOS (both at most MAX_LEN)."""
  data_cfg = recipes.load_recipe(recipes.recipe_path('at_bible_tiny')).data
  test = load_split(data_cfg, 'test')[:count]
  sources = encode_sources([e.source for e in test], tokenizer, MAX_LEN, warn=False)
  outputs = [min(len(tokenizer.encode(e.references[0])) + 1, MAX_LEN) for e in test]
  return outputs, [len(s) for s in sources]


def check_replay(method, params, step, encoder, width: int, rows: int, out_len: int) -> dict:
  """The replay's cost of one batch of `rows` rows run `out_len` steps vs the measured greedy call."""
  fn = decoder_fn(method, 'greedy', {}, None, out_len)
  src = jnp.full((rows, width), 7, jnp.int32)
  out = timed(lambda: fn(params, src, None))[0]
  ran = float(np.mean(np.asarray(out.aux['steps'])))
  if ran != out_len:
    raise AssertionError(f'random weights stopped early ({ran} steps, not {out_len}): the check needs full rows.')
  measured = float(np.median(alternated({'greedy': lambda: fn(params, src, None)}, FLAGS.passes)['greedy']))
  calls = [('encoder', (rows, width))] + [('step', (rows, slots_for(t), width)) for t in range(out_len)]
  return {'rows': rows, 'width': width, 'out_len': out_len, 'measured_ms': 1e3 * measured,
          'replayed_ms': 1e3 * cost(calls, step, encoder)}


def main(_):
  cli.quiet_logs()
  clients = [int(c) for c in FLAGS.clients]
  stage_steps = [int(k) for k in FLAGS.stage_steps]
  if any(c < 1 or c & (c - 1) for c in clients) or any(k < 1 for k in stage_steps):
    raise ConfigError('--clients must be powers of two and --stage_steps positive.')
  with tempfile.TemporaryDirectory() as scratch:
    path = FLAGS.tokenizer or os.path.join(scratch, TOKENIZER_FILE)
    if not os.path.exists(path):
      train = load_split(recipes.load_recipe(recipes.recipe_path('at_bible_tiny')).data, 'train')
      load_or_train_tokenizer(path, (t for e in train for t in (e.source, e.references[0])), VOCAB)
    tokenizer = load_or_train_tokenizer(path, (), VOCAB)
    lengths, widths = sentence_lengths(tokenizer, FLAGS.sentences)
  schedules = {}
  for c in clients:
    schedules[c, 'batch'] = batch_schedule(lengths, widths, c)
    for k in stage_steps:
      schedules[c, k] = continuous_schedule(lengths, widths, c, k)
  shapes = {shape for calls, _ in schedules.values() for kind, shape in calls if kind == 'step'}
  encoder_shapes = {shape for calls, _ in schedules.values() for kind, shape in calls if kind == 'encoder'}
  check_shape = (32, padded_width(int(np.median(widths))), 37)
  shapes |= {(check_shape[0], slots_for(t), check_shape[1]) for t in range(check_shape[2])}
  encoder_shapes.add(check_shape[:2])
  _, method = sized_method('at_bible_tiny', FLAGS.size)
  params = random_params(method, 0)
  print(f'{len(lengths)} sentences, {sum(lengths)} output tokens (mean {np.mean(lengths):.1f}, max {max(lengths)}), '
        f'source widths mean {np.mean(widths):.1f}, max {max(widths)}; d_model {FLAGS.size}', flush=True)
  step, encoder = measure_costs(method, params, shapes, encoder_shapes)
  check = check_replay(method, params, step, encoder, check_shape[1], check_shape[0], check_shape[2])
  print(f"replay check: {check['rows']} rows x {check['out_len']} steps, width {check['width']}: measured "
        f"{check['measured_ms']:.1f} ms, replayed {check['replayed_ms']:.1f} ms "
        f"({check['replayed_ms'] / check['measured_ms']:.2f}x)\n")
  needed = sum(lengths)
  print('| clients | schedule | row-steps (busy) | steps: mean rows, slots, width | encoder s | seconds | '
        'sentences/s | vs batch-at-a-time |')
  print('|---|---|---|---|---|---|---|---|')
  rows = []
  for c in clients:
    base = cost(schedules[c, 'batch'][0], step, encoder)
    for key in [(c, 'batch')] + [(c, k) for k in stage_steps]:
      calls, row_steps = schedules[key]
      seconds = cost(calls, step, encoder)
      name = 'batch at a time' if key[1] == 'batch' else f'continuous, refill every {key[1]} step(s)'
      rows.append({'clients': c, 'schedule': name, 'row_steps': row_steps, 'busy': needed / row_steps,
                   'mean_step_shape': mean_shape(calls), 'encoder_seconds': cost(calls, step, encoder, ('encoder',)),
                   'seconds': seconds, 'sentences_per_s': len(lengths) / seconds, 'speedup': base / seconds})
      r = rows[-1]
      shape = ', '.join(f'{v:.1f}' for v in r['mean_step_shape'])
      print(f"| {c} | {name} | {row_steps} ({r['busy']:.0%}) | {shape} | {r['encoder_seconds']:.2f} | "
            f"{seconds:.2f} | {r['sentences_per_s']:.1f} | {r['speedup']:.2f}x |", flush=True)
  print(f'\nmachine: {machine()}')
  if FLAGS.json:
    write_atomic(FLAGS.json, json.dumps({'machine': machine(), 'size': FLAGS.size, 'check': check, 'rows': rows,
                                         'step_ms': {str(k): 1e3 * v for k, v in step.items()},
                                         'encoder_ms': {str(k): 1e3 * v for k, v in encoder.items()}}, indent=1))


if __name__ == '__main__':
  cli.run_command(main)
