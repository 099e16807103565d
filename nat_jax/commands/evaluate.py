"""BLEU / chrF and speed of several decoders of one run, side by side: the benchmark on one run.

  python -m nat_jax.evaluate --workdir=runs/at_bible_tiny [--decoders=greedy,beam] [--decoder.<opt>=<v>] \
      [--split=test] [--batch_sizes=1,8,64] [--latency_sentences=100] [--dtype=bfloat16] [--out=DIR]

Without --decoders: the run's test decoder (its recipe's `test_decoder`, one its method runs) and
greedy where the method has a left-to-right view. `--decoder.<opt>=<v>` goes to every listed
decoder that has the option (one none of them has is an error). Measures and writes what
`python -m nat_jax.benchmark` does (nat_jax.evaluation.benchmark's docstring), into <workdir>/eval by default:
results.json, results.md, pareto.png, outputs/; speed-ups against the run's own greedy and beam.
"""
from __future__ import annotations

import os

from absl import flags

from nat_jax import decode
from nat_jax.commands import cli
from nat_jax.commands.measuring import MEASUREMENT_FLAGS, default_precision, run_from_flags
from nat_jax.errors import ConfigError
from nat_jax.evaluation.benchmark import Entry

FLAGS = flags.FLAGS


COMMAND_FLAGS = MEASUREMENT_FLAGS + (
    cli.workdir_flag(),
    cli.decoder_flag("Comma-separated decoder names (default: the run's test decoder, and greedy where its method "
                     'has a left-to-right view).', [], 'decoders', 'list'),
    cli.Flag('out', 'str', None, 'Output directory (default <workdir>/eval).', path='new_dir'),
)


def decoder_specs(decoders: list[str], overrides: dict[str, str]) -> list[str]:
  """Per decoder, its spec with the --decoder.<opt> overrides it understands ('beam/beam_size=2');
  an option none of them has, or an unknown decoder, is an error."""
  if overrides and not decoders:
    raise ConfigError(f'--decoder.{sorted(overrides)[0]}: name the decoders it is for (--decoders=...).')
  for name in decoders:
    decode.parse_options(name, {})
  unknown = sorted(set(overrides) - {k for name in decoders for k in decode.DECODERS[name].option_names})
  if unknown:
    raise ConfigError(f'--decoder.{unknown[0]}: none of the decoders {decoders} has this option.')
  return ['/'.join([name] + [f'{k}={v}' for k, v in overrides.items() if k in decode.DECODERS[name].option_names])
          for name in decoders]


def main(argv, decoder_options: dict[str, str]):
  def entries():  # inside run_from_flags: a bad decoder name or option is its `error: ...`, exit 2
    return [Entry(FLAGS.workdir, default_precision(), tuple(decoder_specs(FLAGS.decoders, decoder_options)))]
  baseline = Entry(FLAGS.workdir, default_precision(), ()).label  # its own greedy and beam
  run_from_flags(entries, baseline, FLAGS.out or os.path.join(FLAGS.workdir, 'eval'))


console = cli.command(COMMAND_FLAGS, main, decoder_options=True)  # `nat-jax-evaluate`, `python -m nat_jax.evaluate`


if __name__ == '__main__':
  console()
