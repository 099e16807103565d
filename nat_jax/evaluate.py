"""BLEU / chrF and speed of several decoders of one run, side by side: the benchmark on one run.

  python -m nat_jax.evaluate --workdir=runs/at_bible_tiny [--decoders=greedy,beam] [--decoder.<opt>=<v>] \
      [--split=test] [--batch_sizes=1,8,64] [--latency_sentences=100] [--dtype=bfloat16] [--out=DIR]

Without --decoders: the run's test decoder (its recipe's `test_decoder`, one its method runs) and
greedy where the method has a left-to-right view. `--decoder.<opt>=<v>` goes to every listed
decoder that has the option (one none of them has is an error). Measures and writes what
`python -m nat_jax.benchmark` does (nat_jax.benchmark's docstring), into <workdir>/eval by default:
results.json, results.md, pareto.png, outputs/; speed-ups against the run's own greedy and beam.
"""
from __future__ import annotations

import os

from absl import app, flags

from nat_jax import benchmark, cli, decode, hugepages

FLAGS = flags.FLAGS
DECODER_OVERRIDES: dict[str, str] = {}  # --decoder.<opt>=<v>, taken out of argv before absl parses it


def define_flags():
  benchmark.define_measurement_flags()
  flags.DEFINE_string('workdir', None, 'Run directory written by nat_jax.train.')
  flags.DEFINE_list('decoders', [], 'Comma-separated decoder names (default: the run\'s test decoder, and greedy '
                    'where its method has a left-to-right view).\n' + decode.describe_options())
  flags.DEFINE_string('out', None, 'Output directory (default <workdir>/eval).')


def decoder_specs(decoders: list[str], overrides: dict[str, str]) -> list[str]:
  """Per decoder, its spec with the --decoder.<opt> overrides it understands ('beam/beam_size=2');
  an option none of them has, or an unknown decoder, is an error."""
  if overrides and not decoders:
    raise ValueError(f'--decoder.{sorted(overrides)[0]}: name the decoders it is for (--decoders=...).')
  for name in decoders:
    decode.parse_options(name, {})
  unknown = sorted(set(overrides) - {k for name in decoders for k in decode.DECODERS[name].defaults})
  if unknown:
    raise ValueError(f'--decoder.{unknown[0]}: none of the decoders {decoders} has this option.')
  return ['/'.join([name] + [f'{k}={v}' for k, v in overrides.items() if k in decode.DECODERS[name].defaults])
          for name in decoders]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS.workdir:
    raise app.UsageError('--workdir=<dir of a trained run> is required.')

  def entries():  # inside run_from_flags: a bad decoder name or option is its `error: ...`, exit 2
    return [benchmark.Entry(FLAGS.workdir, FLAGS.dtype, tuple(decoder_specs(FLAGS.decoders, DECODER_OVERRIDES)))]
  baseline = benchmark.Entry(FLAGS.workdir, FLAGS.dtype, ()).label  # its own greedy and beam
  benchmark.run_from_flags(entries, baseline, FLAGS.out or os.path.join(FLAGS.workdir, 'eval'))


def console():
  """The `nat-jax-evaluate` command (a console script of the installed package): the same as
  `python -m nat_jax.evaluate`."""
  hugepages.reexec_command_line()
  define_flags()
  cli.run_command(main, DECODER_OVERRIDES)


if __name__ == '__main__':
  console()
