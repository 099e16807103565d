"""What a large vocabulary (an OPUS-MT teacher's 58k pieces, kept by a student distilled with
--config.tokenizer_from) costs a DA-Transformer pass, against the AT's greedy decoding at the same
vocabulary: random weights, one model size, the vocabulary the only thing that changes.

  python -m benchmarks.components.vocab_cost [--size=512] [--vocabs=4000,32000,58102] [--batch_sizes=1,16] \
      [--upsample=8] [--source_width=32] [--out_len=37] [--passes=5] [--json=OUT.json]

Rows per vocabulary size V (each compiled first, untimed; then --passes passes time every row of
every V once, the order reversed every other pass):
  DAT dag_lookahead   one pass of the DA-Transformer (dat_bible_tiny's options at SIZES[--size],
                      graph --upsample x the source width) and its lookahead path search
  DAT projection      the pass's output projection alone: vertex states f32[B, L, D] times the
                      embedding [V, D], log-softmax normaliser and max over V (what dag_lookahead
                      reads of every vertex)
  AT greedy           at_bible_tiny's AT at the same size and V, --out_len tokens (random weights
                      never write EOS earlier)
Reported: median ms, each row over its own V=first-size row (the cost of the vocabulary), the
projection's share of the DAT pass, and DAT over AT greedy at each V (the speed-up a student keeps).
Sources: random ids of --source_width tokens (what a call costs depends on the shapes, not the ids).
"""
from __future__ import annotations

import functools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from flax import linen as nn

from benchmarks.components.sized_models import SIZES, decoder_fn, random_params, sized_method
from nat_jax.commands import cli
from nat_jax.core.reduce import max_and_argmax
from nat_jax.core.tokens import EOS_ID
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.metrics.timing import alternated, machine, timed

flags.DEFINE_integer('size', 512, 'd_model (a key of benchmarks.components.sized_models.SIZES; 512: Transformer-base).')
flags.DEFINE_list('vocabs', ['4000', '32000', '58102'], 'Vocabulary sizes; the first is the unit (4,000: our '
                  'Bible recipes; 58,102: opus-mt-en-de converted, 58,101 + our mask).')
flags.DEFINE_list('batch_sizes', ['1', '16'], 'Sentences per call.')
flags.DEFINE_float('upsample', 8.0, 'Graph vertices per source token (8: the paper\'s WMT setting, '
                   'configs/dat_wmt14_ende.py).')
flags.DEFINE_integer('source_width', 32, 'Source tokens per sentence (incl. EOS).')
flags.DEFINE_integer('out_len', 37, 'Tokens (incl. EOS) AT greedy writes (benchmarks.systems.size_sweep\'s).')
flags.DEFINE_integer('passes', 5, 'Timed passes (alternating order).')
flags.DEFINE_string('json', '', 'Also write the results here (JSON).')
FLAGS = flags.FLAGS


def projection_fn():
  """jit fn(h f32[B, L, D], embedding f32[V, D]) -> (max f32[B, L], logZ f32[B, L]): a graph's output
  projection and what a lookahead reads of it (the best token's logit and the softmax normaliser)."""
  @jax.jit
  def fn(h, embedding):
    logits = jnp.einsum('bld,vd->blv', h, embedding)  # [B, L, V]
    top, _ = max_and_argmax(logits)
    return top, jax.nn.logsumexp(logits, axis=-1)
  return fn


def rows_for(vocab: int, batch: int, seed: int = 0) -> dict[str, functools.partial]:
  """{row label: a call} at vocabulary `vocab` and `batch` sentences, each run once (compiled)."""
  rng = np.random.default_rng(seed)
  src = np.asarray(rng.integers(5, vocab, (batch, FLAGS.source_width)), np.int32)
  src[:, -1] = EOS_ID
  src = jnp.asarray(src)  # [B, S]
  _, dat = sized_method('dat_bible_tiny', FLAGS.size, vocab, {'dat.upsample_scale': FLAGS.upsample})
  dat_params = random_params(dat, seed)
  _, at = sized_method('at_bible_tiny', FLAGS.size, vocab)
  at_params = random_params(at, seed)
  vertices = int(FLAGS.upsample * FLAGS.source_width)
  h = jnp.asarray(rng.normal(0, 1, (batch, vertices, SIZES[FLAGS.size]['d_model'])), jnp.float32)  # [B, L, D]
  embedding = jnp.asarray(nn.meta.unbox(dat_params)['backbone']['embed']['embedding'])  # [V, D]
  calls = {
      'DAT dag_lookahead': functools.partial(decoder_fn(dat, 'dag_lookahead', {}, None, FLAGS.out_len), dat_params,
                                             src, None),
      'DAT projection': functools.partial(projection_fn(), h, embedding),
      'AT greedy': functools.partial(decoder_fn(at, 'greedy', {}, None, FLAGS.out_len), at_params, src, None),
  }
  for call in calls.values():
    timed(call)  # compiles
  return calls


def measure(batch: int) -> list[dict]:
  """Every row at every vocabulary size for `batch` sentences, timed side by side."""
  vocabs = [int(v) for v in FLAGS.vocabs]
  calls = {}
  for vocab in vocabs:
    for label, call in rows_for(vocab, batch).items():
      calls[vocab, label] = call
    print(f'# batch {batch}: V={vocab} compiled', file=sys.stderr, flush=True)
  times = alternated(calls, FLAGS.passes)
  results = []
  for (vocab, label), t in times.items():
    over_first = t / times[vocabs[0], label]  # per pass: this V's cost over the first V's
    row = {'batch': batch, 'vocab': vocab, 'row': label, 'ms': 1e3 * float(np.median(t)),
           'cost_vs_first_vocab': float(np.median(over_first)), 'cost_min': float(over_first.min()),
           'cost_max': float(over_first.max())}
    if label == 'DAT dag_lookahead':
      row['projection_share'] = float(np.median(times[vocab, 'DAT projection'] / t))
      speed = times[vocab, 'AT greedy'] / t
      row['speed_vs_at_greedy'] = float(np.median(speed))
      row['speed_min'], row['speed_max'] = float(speed.min()), float(speed.max())
    results.append(row)
    print(format_row(row), flush=True)
  return results


def format_row(r: dict) -> str:
  extra = ''
  if 'projection_share' in r:
    extra = (f" | projection {100 * r['projection_share']:.0f}% of the pass | "
             f"{r['speed_vs_at_greedy']:.2f}x AT greedy ({r['speed_min']:.2f}-{r['speed_max']:.2f})")
  return (f"| {r['batch']} | {r['vocab']} | {r['row']} | {r['ms']:.1f} | {r['cost_vs_first_vocab']:.2f}x "
          f"({r['cost_min']:.2f}-{r['cost_max']:.2f}){extra} |")


def main(_):
  cli.quiet_logs()
  if FLAGS.size not in SIZES:
    raise ConfigError(f'--size={FLAGS.size}: no shapes for it; known: {sorted(SIZES)}.')
  if FLAGS.upsample < 1 or FLAGS.source_width < 2 or FLAGS.passes < 1:
    raise ConfigError('--upsample must be >= 1, --source_width >= 2 and --passes >= 1.')
  print(f'# {machine()}; d={FLAGS.size}, source width {FLAGS.source_width}, graph {FLAGS.upsample:g}x, '
        f'AT greedy {FLAGS.out_len} tokens, {FLAGS.passes} passes')
  print('| batch | V | row | ms (median) | cost over the first V (min-max) | |')
  results = [r for batch in map(int, FLAGS.batch_sizes) for r in measure(batch)]
  if FLAGS.json:
    payload = {'machine': machine(), 'command': ' '.join(['python -m benchmarks.components.vocab_cost'] + sys.argv[1:]),
               'size': FLAGS.size, 'source_width': FLAGS.source_width, 'upsample': FLAGS.upsample,
               'out_len': FLAGS.out_len, 'passes': FLAGS.passes, 'rows': results}
    write_atomic(FLAGS.json, json.dumps(payload, indent=2) + '\n')


if __name__ == '__main__':
  cli.run_command(main)
