"""Jacobi decoding vs greedy: iterations and wall-clock per sentence at batch 1 and batch 64.

  python -m benchmarks.jacobi_speed --workdir=runs/at_bible_tiny [--max_sentences=100] [--repeats=5]

For greedy, PJ, PGJ (b = 2, 3, 5) and HGJ (b = 3): mean iterations per sentence (greedy: steps),
ms per sentence at batch 1 (each sentence timed alone: median of --repeats after a warm-up call
that compiles its shape, block_until_ready) and at batch --batch_size (per batch the median of
repeats, summed, divided by the sentences), decoder passes per batch, the iteration speedup
(greedy mean steps / mean iterations) and the wall-clock speedups against greedy, reported
separately; and whether the output equals greedy's token for token. Prints a markdown table.
"""
from __future__ import annotations

import sys

from absl import app, flags
import jax
import numpy as np

from nat_jax import cli, decode
from nat_jax.data import inference_batches, load_split
from nat_jax.runs import load_run
from nat_jax.timing import machine, median_timed
from nat_jax.translation import encode_sources, source_lengths

flags.DEFINE_string('workdir', None, 'Run directory written by nat_jax.train.')
flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Split whose sources are decoded.')
flags.DEFINE_integer('max_sentences', 100, 'First N sentences of the split (0 = all).')
flags.DEFINE_integer('batch_size', 64, 'Batch size of the throughput measurement.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats per call (median).')
FLAGS = flags.FLAGS

CONFIGS = [('greedy', {}), ('jacobi_pj', {}), ('jacobi_pgj', {'block_size': '2'}), ('jacobi_pgj', {'block_size': '3'}),
           ('jacobi_pgj', {'block_size': '5'}), ('jacobi_hgj', {'block_size': '3'})]


def measure(run, decode_fn, seqs, rows: int, repeats: int) -> dict:
  """Tokens per sentence, per-sentence iterations, total seconds and decoder passes per batch at batch `rows`."""
  lengths = source_lengths(run.config.max_len)
  tokens, iterations, seconds, passes = [None] * len(seqs), np.zeros(len(seqs)), 0.0, []
  for idx, src in inference_batches(seqs, rows, lengths):
    out, s = median_timed(lambda: decode_fn(run.params, src), repeats)
    aux = jax.device_get(out.aux)
    rows_iters = aux.get('iterations', aux['steps'])
    passes.append(int(aux['passes'][0]) if 'passes' in aux else int(np.max(aux['steps'][idx >= 0])))
    seconds += s
    for row, j in enumerate(idx):
      if j >= 0:
        tokens[j], iterations[j] = np.asarray(out.tokens[row]), rows_iters[row]
  return {'tokens': tokens, 'iterations': float(iterations.mean()), 'ms': 1000 * seconds / len(seqs),
          'passes': float(np.mean(passes))}


def table(rows: list[dict], batch: int) -> str:
  lines = [f'| decoder | iterations/sent | iteration speedup | ms/sent b=1 | wall-clock speedup b=1 | '
           f'ms/sent b={batch} | passes/batch b={batch} | wall-clock speedup b={batch} | same as greedy |',
           '|---|---|---|---|---|---|---|---|---|']
  base = rows[0]
  for r in rows:
    lines.append(f'| {r["label"]} | {r["b1"]["iterations"]:.2f} | {base["b1"]["iterations"] / r["b1"]["iterations"]:.3f} | '
                 f'{r["b1"]["ms"]:.2f} | {base["b1"]["ms"] / r["b1"]["ms"]:.3f} | {r["bn"]["ms"]:.2f} | '
                 f'{r["bn"]["passes"]:.1f} | {base["bn"]["ms"] / r["bn"]["ms"]:.3f} | {r["same"]} |')
  return '\n'.join(lines)


def main(argv):
  del argv
  cli.quiet_logs()
  run = load_run(FLAGS.workdir)
  examples = load_split(run.config.data, FLAGS.split)[:FLAGS.max_sentences or None]
  seqs = encode_sources([e.source for e in examples], run.tokenizer, run.config.max_len)
  rows = []
  for name, overrides in CONFIGS:
    decode_fn, options = decode.build_decoder(run.method, name, overrides)
    label = f'{name} {options}'
    print(f'timing {label} on {len(seqs)} sentences ...', file=sys.stderr, flush=True)
    b1 = measure(run, decode_fn, seqs, 1, FLAGS.repeats)
    bn = measure(run, decode_fn, seqs, FLAGS.batch_size, FLAGS.repeats)
    greedy = rows[0] if rows else {'b1': b1, 'bn': bn}  # the same batch shapes, so the same max lengths
    same = all(np.array_equal(a, g) for mode, ours in (('b1', b1), ('bn', bn))
               for a, g in zip(ours['tokens'], greedy[mode]['tokens']))
    rows.append({'label': label, 'b1': b1, 'bn': bn, 'same': same})
  print(f'{FLAGS.workdir}, {FLAGS.split} split, {len(seqs)} sentences, median of {FLAGS.repeats} repeats; '
        f'{machine()}\n')
  print(table(rows, FLAGS.batch_size))


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  app.run(main)
