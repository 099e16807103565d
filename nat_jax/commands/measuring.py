"""What the benchmark and evaluate command lines share: the flags of what is measured and how, and
their body (entries measured, the report written and printed)."""
from __future__ import annotations

import sys
from typing import Callable

from absl import flags

from nat_jax.commands import cli
from nat_jax.evaluation.benchmark import Entry, benchmark, write_report
from nat_jax.run.workdir import precision_label

FLAGS = flags.FLAGS


# The flags of what is measured and how.
MEASUREMENT_FLAGS = (
    cli.Flag('split', 'enum', 'test', 'Split to translate.', choices=('train', 'validation', 'test')),
    cli.Flag('max_sentences', 'int', 0, 'The first N sentences of the split.', low=1, zero='all'),
    cli.Flag('batch_sizes', 'list', ['1', '8', '64'], 'Batch sizes timed (1: the latency passes).', items='int', low=1,
             high=cli.MAX_ROWS, required=True),
    cli.Flag('latency_sentences', 'int', 100, 'Sentences translated one by one for batch-1 latency and words/s.',
             low=1, zero='no latency pass'),
    cli.Flag('batch1_runs', 'int', 3, 'Passes over the latency sentences at batch 1.', low=1, high=1000),
    cli.dtype_flag(help_text='Inference precision of entries without @precision'),
    cli.quantization_flag('of entries without @precision'),
    cli.int8_kernel_flag(),
    cli.checkpoint_flag(),
    cli.average_flag(),
)


def default_precision() -> str:
  """The precision label of entries without @precision: --dtype and --quantization's."""
  return precision_label(FLAGS.dtype, FLAGS.quantization)


def run_from_flags(make_entries: Callable[[], list[Entry]], baseline: str | None, out: str):
  """The command lines' body (benchmark, evaluate): the entries, measured as the measurement flags say,
  written to `out` and printed; a bad entry, decoder or option, or a missing run: `error: ...`, exit 2."""
  batch_sizes = [int(b) for b in FLAGS.batch_sizes]  # checked: MEASUREMENT_FLAGS
  entries = make_entries()
  report, hyps = benchmark(entries, baseline=baseline, batch_sizes=batch_sizes,
                           split=FLAGS.split, max_sentences=FLAGS.max_sentences,
                           latency_sentences=FLAGS.latency_sentences, batch1_runs=FLAGS.batch1_runs,
                           which=FLAGS.checkpoint, average=FLAGS.average, int8_kernel=FLAGS.int8_kernel,
                           log=lambda msg: print(msg, file=sys.stderr, flush=True))
  print(write_report(report, hyps, out))
  print(f'wrote {out}/results.json, results.md, pareto.png and outputs/')
