"""DDGviz: the grid of Jacobi iterations x target positions for one sentence.

  python -m nat_jax.ddgviz --workdir=runs/at_bible_tiny --text "In the beginning ..." --out ddg \
      [--algorithm=pj|pgj|hgj] [--block_size=3]

Each cell is the draft token at that position after that iteration, its probability, and its
state: final (the decoder knows it equals greedy's token), correct (equals greedy's token, not
yet known to be final) or wrong. Runs in a row of final cells show tokens decoded in parallel:
the model did not need the tokens between them. Writes OUT.png (matplotlib) and OUT.html
(self-contained, inline CSS); an --out ending in .png or .html names one of the pair.
"""
from __future__ import annotations

import os

from absl import flags

from nat_jax.commands import cli
from nat_jax.decode import LeftToRightScorer, jacobi, method_view
from nat_jax.decode.options import MAX_BLOCK
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.viz.ddg import render_html, trace_sentence, write_png
from nat_jax.viz.pictures import output_paths

COMMAND_FLAGS = (
    cli.workdir_flag(),
    cli.Flag('text', 'str', None, 'Source sentence to decode.', required=True),
    cli.Flag('out', 'str', 'ddgviz', 'Output path without extension (OUT.png and OUT.html are written).'),
    cli.Flag('algorithm', 'enum', 'pj', 'Jacobi algorithm to trace.', choices=tuple(sorted(jacobi.ALGORITHMS))),
    cli.Flag('block_size', 'int', 3, "Block size of pgj/hgj (at most the run's config.max_decode_len).", low=1,
             high=MAX_BLOCK),
    cli.Flag('max_len', 'int', 0, "Maximum target length (at most the run's config.max_decode_len).", low=1,
             high=MAX_BLOCK, zero="the run's bound"),
)


FLAGS = flags.FLAGS


def main(argv):
  run, _ = cli.cli_prologue(FLAGS.workdir, 'latest', 1,  # a method without the view: error, exit 2
                            lambda run: method_view(run.method, LeftToRightScorer, 'DDGviz (Jacobi decoding)'))
  for name in ('max_len', 'block_size'):
    if getattr(FLAGS, name) > run.config.max_decode_len:
      raise ConfigError(f'--{name}={getattr(FLAGS, name)}: this run decodes at most {run.config.max_decode_len} '
                        f'tokens (its config.max_decode_len); use a value <= {run.config.max_decode_len}.')
  grid = trace_sentence(run, FLAGS.text, FLAGS.algorithm, FLAGS.block_size, FLAGS.max_len)
  title = (f'{FLAGS.algorithm.upper()}: {grid.states.shape[0]} iterations for {grid.states.shape[1]} tokens '
           f'| {FLAGS.text[:80]}')
  png, page = output_paths(FLAGS.out)
  os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
  write_png(grid, png, title)
  write_atomic(page, render_html(grid, title))
  print(f'{title}\nwrote {png} and {page}')


console = cli.command(COMMAND_FLAGS, main)  # `nat-jax-ddgviz`, `python -m nat_jax.ddgviz`


if __name__ == '__main__':
  console()
