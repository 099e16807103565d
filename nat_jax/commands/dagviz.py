"""The DA-Transformer graph of one sentence: vertices with their top tokens, the strongest transitions,
and the path each DAG decoder takes through it.

  python -m nat_jax.dagviz --workdir=runs/fadat_bible_tiny --text "In the beginning ..." --out dag \
      [--decoders=dag_greedy,dag_lookahead,dag_joint_viterbi] [--top_tokens=3] [--edges=2] [--beta=1.0]

Vertices run left to right (0 .. G-1, G = the graph size the model chose for this source); each
shows its --top_tokens most probable tokens with P(y | v). Above the axis: each vertex's --edges
strongest outgoing transitions, darker for higher E_ij. Below: one coloured path per decoder
(dag_greedy follows argmax E_ij, dag_lookahead argmax E_ij + max_y log P(y | j), dag_joint_viterbi the
best path of the best normalized length), with the translation it reads off (repeats collapsed,
as the decoder does). Writes OUT.png (matplotlib) and OUT.html (self-contained: inline SVG, hover a
vertex for its tokens); an --out ending in .png or .html names one of the pair.
"""
from __future__ import annotations

import os

from absl import flags

from nat_jax.commands import cli
from nat_jax.decode import GraphPredictor, method_view
from nat_jax.decode.dag import DAG_PATHS
from nat_jax.files import write_atomic
from nat_jax.viz.dag import dag_picture, render_html, write_png
from nat_jax.viz.pictures import output_paths

COMMAND_FLAGS = (
    cli.workdir_flag('A DA-Transformer run directory written by nat_jax.train.'),
    cli.Flag('text', 'str', None, 'Source sentence.', required=True),
    cli.Flag('out', 'str', 'dagviz', 'Output path without extension (OUT.png and OUT.html are written).'),
    cli.Flag('decoders', 'list', list(DAG_PATHS), 'DAG decoders whose paths are drawn.', choices=tuple(DAG_PATHS)),
    cli.Flag('top_tokens', 'int', 3, 'Tokens shown per vertex.', low=1, high=100),
    cli.Flag('edges', 'int', 2, 'Strongest outgoing transitions drawn per vertex.', low=1, high=100),
    cli.Flag('beta', 'float', 1.0, "dag_joint_viterbi's length normalisation exponent.", low=0),
)


FLAGS = flags.FLAGS


def main(argv):
  run, _ = cli.cli_prologue(FLAGS.workdir, 'latest', 1,  # not a DAG method: error, exit 2
                            lambda run: method_view(run.method, GraphPredictor, 'dagviz (the DA-Transformer graph)'))
  pic = dag_picture(run, FLAGS.text, FLAGS.decoders, FLAGS.top_tokens, FLAGS.edges, FLAGS.beta)
  png, page = output_paths(FLAGS.out)
  os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
  write_png(pic, png)
  write_atomic(page, render_html(pic))
  for name, p in pic.paths.items():
    print(f'{name}: {len(p.vertices)} of {len(pic.top)} vertices -> {p.translation}')
  print(f'wrote {png} and {page}')


console = cli.command(COMMAND_FLAGS, main)  # `nat-jax-dagviz`, `python -m nat_jax.dagviz`


if __name__ == '__main__':
  console()
