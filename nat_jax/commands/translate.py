"""Translate source lines with a trained run.

  echo "In the beginning God created the heavens and the earth." | \
      python -m nat_jax.translate --workdir=runs/at_bible_tiny [--decoder=beam --decoder.beam_size=5]

Reads stdin (or --input), writes one detokenized translation per input line to stdout (or
--output), in order. Lines are split on '\\n' only; an empty or blank line gives an empty line;
a line longer than the model's maximum is truncated (warning on stderr) and still gives one
line; undecodable bytes are replaced, never dropped. Progress and warnings go to stderr. With
--output, the translations go to a temporary file that replaces the output file only when every
line is translated: a failed run leaves an existing output file as it was. Each translation is one
line for any reader (control characters and Unicode line separators become spaces).
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Callable, Iterator

from absl import flags

from nat_jax.commands import cli
from nat_jax.files import atomic_output
from nat_jax.run.translator import Translator

FLAGS = flags.FLAGS


def read_lines(stream) -> Iterator[str]:
  """Lines of a binary stream split on b'\\n' only (a trailing '\\r' is dropped), UTF-8 with replacement."""
  pending = b''
  for block in iter(lambda: stream.read(1 << 16), b''):
    pending += block
    *lines, pending = pending.split(b'\n')
    for line in lines:
      yield line.rstrip(b'\r').decode('utf-8', errors='replace')
  if pending:
    yield pending.rstrip(b'\r').decode('utf-8', errors='replace')


def chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
  chunk = []
  for line in lines:
    chunk.append(line)
    if len(chunk) == size:
      yield chunk
      chunk = []
  if chunk:
    yield chunk


COMMAND_FLAGS = (
    cli.workdir_flag(),
    cli.decoder_flag(f'Decoder name (default: {cli.RUN_DEFAULT_DECODER}); options via --decoder.<opt>=<v>.'),
    cli.Flag('input', 'str', None, 'Input file (default: stdin).', path='file'),
    cli.Flag('output', 'str', None, 'Output file (default: stdout); replaced only when all lines are translated.',
             path='new_file'),
    cli.batch_size_flag(),
    cli.checkpoint_flag(),
    cli.average_flag(),
    cli.dtype_flag(),
    cli.quantization_flag(),
    cli.int8_kernel_flag(),
    cli.Flag('chunk_lines', 'int', 4096, 'Lines read and translated at a time (bounds memory on big inputs).',
             low=1, high=1 << 24),
)


def translate_stream(translate: Callable[..., list[str]], source, sink, chunk_lines: int, describe: str):
  """Every line of the binary stream `source` translated, one line each, to the text stream `sink`;
  `translate(lines, first_line=n)` as `Translator.translate`."""
  done, t0 = 0, time.time()
  for chunk in chunks(read_lines(source), chunk_lines):
    outputs = translate(chunk, first_line=done + 1)
    try:
      sink.writelines(line + '\n' for line in outputs)
      sink.flush()
    except OSError as e:  # a full disk or device, a closed pipe: name the output
      raise OSError(e.errno, e.strerror or str(e), getattr(sink, 'name', 'the output')) from e
    done += len(chunk)
    print(f'translated {done} lines ({done / max(time.time() - t0, 1e-9):.1f} lines/s, {describe})',
          file=sys.stderr, flush=True)


def main(argv, decoder_options: dict[str, str]):
  stdin = None if FLAGS.input else cli.standard_stream('stdin', 'input')  # checked before the run loads
  stdout = None if FLAGS.output else cli.standard_stream('stdout', 'output')
  translator = cli.cli_prologue(
      FLAGS.workdir, FLAGS.checkpoint, FLAGS.average,
      lambda run: Translator.from_run(run, FLAGS.decoder, batch_size=FLAGS.batch_size, workdir=FLAGS.workdir,
                                      **decoder_options),
      FLAGS.dtype, FLAGS.quantization, FLAGS.int8_kernel)[1]
  describe = f'decoder {translator.decoder} {dataclasses.asdict(translator.options)}, {translator.precision}'
  work = lambda source, sink: translate_stream(translator.translate, source, sink, FLAGS.chunk_lines, describe)
  with open(FLAGS.input, 'rb') if FLAGS.input else stdin.buffer as source:
    if FLAGS.output:
      with atomic_output(FLAGS.output, fsync=False) as sink:
        work(source, sink)
    else:
      work(source, stdout)


console = cli.command(COMMAND_FLAGS, main, decoder_options=True)  # `nat-jax-translate`, `python -m nat_jax.translate`


if __name__ == '__main__':
  console()
