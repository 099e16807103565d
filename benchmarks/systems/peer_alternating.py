"""Decoders alternated pass by pass on a shared, noisy machine: ours against a peer engine's, or two
implementations of one decoder.

  python -m benchmarks.systems.peer_alternating --workdir=runs/at_bible_tiny \
      [--rows=greedy,ct2_greedy/threads=1,beam/alpha=0,ct2_beam/threads=1] [--passes=5] \
      [--latency_sentences=100] [--batch=64]
  python -m benchmarks.systems.peer_alternating --workdir=runs/dat_bible_tiny --rows=dag_beam/search=device,dag_beam

`nat_jax.benchmark` measures its rows one after another, so a host that slows down halfway skews
their ratios. Here every pass times each row once, in turn, at batch 1 (each of the first
`latency_sentences` test sentences alone: the median ms) and at `--batch` (all test sentences:
sentences/s), after one untimed pass that compiles every shape. Reported per row: the median over
passes and the min-max spread, each row's ratio to the first row computed within every pass
(median and spread), which is what survives the host's drift, and how many sentences it translates
exactly as the first row does at `--batch`.
"""
from __future__ import annotations

import tempfile

import jax
import numpy as np
from absl import flags

from nat_jax.commands import cli
from nat_jax.data import inference_batches, load_split
from nat_jax.evaluation.benchmark import Entry, build_row
from nat_jax.metrics.timing import machine, timed
from nat_jax.run.translation import encode_sources, source_lengths
from nat_jax.run.workdir import load_run

flags.DEFINE_string('workdir', None, 'The autoregressive run.')
flags.DEFINE_list('rows', ['greedy', 'ct2_greedy/threads=1', 'beam/alpha=0', 'ct2_beam/threads=1'],
                  'Decoders (nat_jax.benchmark syntax, peers included); ratios are to the first.')
flags.DEFINE_integer('passes', 5, 'Timed passes (each times every row once at both batch sizes).')
flags.DEFINE_integer('latency_sentences', 100, 'Test sentences translated alone per pass.')
flags.DEFINE_integer('batch', 64, 'The large batch size.')
FLAGS = flags.FLAGS


def spread(values) -> str:
  return f'{np.median(values):.3g} ({min(values):.3g}-{max(values):.3g})'


def main(argv):
  del argv
  cli.quiet_logs()
  run = load_run(FLAGS.workdir)
  seqs = encode_sources([e.source for e in load_split(run.config.data, 'test')], run.tokenizer,
                        run.config.max_len, warn=False)
  lengths = source_lengths(run.config.max_len)
  alone = [src for _, src in inference_batches(seqs[:FLAGS.latency_sentences], 1, lengths)]
  batched = list(inference_batches(seqs, FLAGS.batch, lengths))
  batches = [src for _, src in batched]
  entry = Entry(FLAGS.workdir, 'float32', tuple(FLAGS.rows))
  with tempfile.TemporaryDirectory() as scratch:
    fns = {spec: build_row(run, entry, spec, scratch)[0] for spec in FLAGS.rows}
    outputs = {}  # spec -> {sentence: its output tokens at --batch}
    for spec, fn in fns.items():  # compile every shape
      print(f'compiling {spec} ...', flush=True)
      for src in alone:
        jax.block_until_ready(fn(run.params, src).tokens)
      outputs[spec] = {int(i): tuple(row) for (idx, src) in batched
                       for i, row in zip(idx, np.asarray(fn(run.params, src).tokens)) if i >= 0}
    latency = {spec: [] for spec in fns}
    throughput = {spec: [] for spec in fns}
    for p in range(FLAGS.passes):
      order = list(fns) if p % 2 == 0 else list(fns)[::-1]
      for spec in order:
        fn = fns[spec]
        ms = [timed(lambda src=src: fn(run.params, src).tokens)[1] * 1e3 for src in alone]
        latency[spec].append(float(np.median(ms)))
        _, seconds = timed(lambda: [fn(run.params, src).tokens for src in batches])
        throughput[spec].append(len(seqs) / seconds)
      print(f'pass {p + 1}/{FLAGS.passes}: ' + ', '.join(
          f'{s} {latency[s][-1]:.2f} ms / {throughput[s][-1]:.0f} sent/s' for s in fns), flush=True)
  first = FLAGS.rows[0]
  print(f'\n{machine()}; {FLAGS.passes} alternating passes; batch 1: median ms over the first '
        f'{len(alone)} test sentences alone; batch {FLAGS.batch}: sentences/s over {len(seqs)}.')
  print(f'| row | b=1 ms | {first} b=1 ms / row b=1 ms | b={FLAGS.batch} sent/s | row / {first} b={FLAGS.batch} '
        f'| b={FLAGS.batch} / b=1 sent/s | output as {first} |')
  print('|---|---|---|---|---|---|---|')
  for spec in fns:
    speed_1 = [a / b for a, b in zip(latency[first], latency[spec])]
    speed_b = [b / a for a, b in zip(throughput[first], throughput[spec])]
    scaling = [t / (1e3 / ms) for t, ms in zip(throughput[spec], latency[spec])]
    same = sum(outputs[spec][i] == outputs[first][i] for i in outputs[first])
    print(f'| {spec} | {spread(latency[spec])} | {spread(speed_1)} | {spread(throughput[spec])} | {spread(speed_b)} '
          f'| {spread(scaling)} | {same} / {len(outputs[first])} |')


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  cli.run_command(main)
