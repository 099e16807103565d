"""Sequence-level knowledge distillation: a teacher run translates the sources of whole splits.

  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny \
      [--decoder=beam --decoder.beam_size=4] [--splits=train,validation] [--limit=N]

Writes `<out>/<split>.tsv`, one line per example of the split (as `nat_jax.data.load_split`
returns it, in its order): `source<TAB>teacher translation<TAB>reference 1[<TAB>reference 2 ...]`,
and `<out>/manifest.json` (teacher workdir and step, decoder and options, the data settings, the
line count and a hash of the sources of every split, the date). A recipe then trains on the
teacher translations with `--config.data.distill_dir=<out>` (nat_jax.data.distilled).
How the work is organised (chunks, resume, several processes): nat_jax.training.distill.
"""
from __future__ import annotations

import time

import jax
from absl import flags

from nat_jax import decode
from nat_jax.commands import cli
from nat_jax.data.sources import SPLITS
from nat_jax.errors import DistillError
from nat_jax.training.distill import distill

FLAGS = flags.FLAGS


COMMAND_FLAGS = (
    cli.workdir_flag('Teacher run directory (any method with a left-to-right decoder).'),
    cli.Flag('out', 'str', None, 'Directory for <split>.tsv and manifest.json.', path='new_dir', required=True),
    cli.decoder_flag('Teacher decoder; options via --decoder.<opt>=<v> (default beam, beam 4).', 'beam'),
    cli.Flag('splits', 'list', ['train', 'validation'], 'Splits to distill.', choices=SPLITS, required=True),
    cli.Flag('limit', 'int', 0, 'Distil only the first N examples of each split (smoke runs).', low=1, zero='all'),
    cli.batch_size_flag(),
    cli.Flag('chunk_sentences', 'int', 1024, 'Sentences per resumable chunk.', low=1, high=1 << 24),
    cli.checkpoint_flag(),
    cli.average_flag(),
    cli.Flag('process_index', 'int', None, 'This process (default: jax.process_index()).', low=0),
    cli.Flag('process_count', 'int', None, 'Number of processes (default: jax.process_count()).', low=1),
    cli.Flag('wait_seconds', 'int', 86400, 'How long process 0 waits for the chunks of the other processes.', low=0),
)


def main(argv, decoder_options: dict[str, str]):
  process_index = jax.process_index() if FLAGS.process_index is None else FLAGS.process_index
  process_count = jax.process_count() if FLAGS.process_count is None else FLAGS.process_count
  if not 0 <= process_index < process_count:
    raise DistillError(f'--process_index={process_index} must be in [0, --process_count={process_count}).')
  # Decoder name and options are checked before the teacher is loaded (its method: in cli_prologue).
  decode.parse_options(FLAGS.decoder, decoder_options)
  run, options = cli.cli_prologue(FLAGS.workdir, FLAGS.checkpoint, FLAGS.average,
                                  lambda run: decode.run_options(run.method, FLAGS.decoder, decoder_options))
  t0 = time.time()
  manifest = distill(run, FLAGS.decoder, options, FLAGS.out, FLAGS.splits, limit=FLAGS.limit,
                    batch_size=FLAGS.batch_size, chunk_sentences=FLAGS.chunk_sentences,
                    process_index=process_index, process_count=process_count, wait_seconds=FLAGS.wait_seconds,
                    teacher_workdir=FLAGS.workdir)
  if process_index == 0:
    counts = ', '.join(f'{s}: {e["examples"]} lines ({e["empty_translations"]} empty)'
                       for s, e in manifest['splits'].items())
    print(f'Distilled with {FLAGS.decoder} {manifest["options"]} from {FLAGS.workdir} (step {manifest["step"]}) '
          f'in {time.time() - t0:.0f}s -> {FLAGS.out}: {counts}', flush=True)


console = cli.command(COMMAND_FLAGS, main, decoder_options=True)  # `nat-jax-distill`, `python -m nat_jax.distill`


if __name__ == '__main__':
  console()
