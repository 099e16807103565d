"""BLEU / chrF and speed of several decoders of one run, side by side: the benchmark on one run.

  python -m nat_jax.evaluate --workdir=runs/at_bible_tiny --decoders=greedy,beam [--decoder.<opt>=<v>] \
      [--split=test] [--batch_sizes=1,8,64] [--latency_sentences=100] [--dtype=bfloat16] [--out=DIR]

`--decoder.<opt>=<v>` goes to every listed decoder that has the option (one none of them has is an
error). Measures and writes what `python -m nat_jax.benchmark` does (nat_jax.benchmark's
docstring), into <workdir>/eval by default: results.json, results.md, pareto.png, outputs/; speed-ups
against the run's own greedy and beam.
"""
from __future__ import annotations

import os
import sys

from absl import flags

from nat_jax import benchmark, cli, decode

FLAGS = flags.FLAGS
DECODER_OVERRIDES: dict[str, str] = {}  # --decoder.<opt>=<v>, taken out of argv before absl parses it


def define_flags():
  benchmark.define_measurement_flags()
  flags.DEFINE_string('workdir', None, 'Run directory written by nat_jax.train.')
  flags.DEFINE_list('decoders', ['greedy', 'beam'], 'Comma-separated decoder names.')
  flags.DEFINE_string('out', None, 'Output directory (default <workdir>/eval).')


def decoder_specs(decoders: list[str], overrides: dict[str, str]) -> list[str]:
  """Per decoder, its spec with the --decoder.<opt> overrides it understands ('beam/beam_size=2');
  an option none of them has, or an unknown decoder, is an error."""
  for name in decoders:
    decode.parse_options(name, {})
  unknown = sorted(set(overrides) - {k for name in decoders for k in decode.DECODERS[name].defaults})
  if unknown:
    raise ValueError(f'--decoder.{unknown[0]}: none of the decoders {decoders} has this option.')
  return ['/'.join([name] + [f'{k}={v}' for k, v in overrides.items() if k in decode.DECODERS[name].defaults])
          for name in decoders]


def main(argv):
  def prepare(run):  # fail before any work on a bad decoder name/option
    specs = decoder_specs(FLAGS.decoders, DECODER_OVERRIDES)
    for spec in specs:
      decode.build_decoder(run.method, *benchmark.parse_decoder(spec))
    return specs
  run, specs = cli.cli_prologue(argv, FLAGS.workdir, FLAGS.checkpoint, FLAGS.average, prepare, FLAGS.dtype)
  del run  # loaded once more by the benchmark; this one only checked the decoders
  entry = benchmark.Entry(FLAGS.workdir, FLAGS.dtype, tuple(specs))
  report, hyps = benchmark.benchmark([entry], baseline=entry.label, batch_sizes=[int(b) for b in FLAGS.batch_sizes],
                                     split=FLAGS.split, max_sentences=FLAGS.max_sentences,
                                     latency_sentences=FLAGS.latency_sentences, batch1_runs=FLAGS.batch1_runs,
                                     which=FLAGS.checkpoint, average=FLAGS.average,
                                     log=lambda msg: print(msg, file=sys.stderr, flush=True))
  out = FLAGS.out or os.path.join(FLAGS.workdir, 'eval')
  print(benchmark.write_report(report, hyps, out))
  print(f'wrote {out}/results.json, results.md, pareto.png and outputs/')


if __name__ == '__main__':
  define_flags()
  cli.run_with_decoder_flags(main, DECODER_OVERRIDES)
