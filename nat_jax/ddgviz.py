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

import html
import os
from typing import NamedTuple

from absl import flags
import numpy as np

from nat_jax import cli
from nat_jax.data import Tokenizer
from nat_jax.decode import LeftToRightScorer, jacobi, method_view
from nat_jax.decode.registry import MAX_BLOCK
from nat_jax.errors import ConfigError
from nat_jax.files import atomic_output, write_atomic
from nat_jax.translation import encode_sources


def probabilities(log_p) -> np.ndarray:
  """exp of log-probabilities (float64), clipped to [0, 1]: an fp32 log-softmax can give log p a hair
  above 0, and what draws or prints a probability (matplotlib's alpha) may reject 1.0000001."""
  return np.clip(np.exp(np.asarray(log_p, np.float64)), 0.0, 1.0)


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

STATE_NAMES = ('wrong', 'correct', 'final')
COLORS = {'wrong': '#f2f2f2', 'correct': '#b7e1b0', 'final': '#2e8b57'}
SPECIAL_PIECES = {Tokenizer.pad_id: '<pad>', Tokenizer.eos_id: '</s>', Tokenizer.bos_id: '<s>'}


class Grid(NamedTuple):
  pieces: list[list[str]]  # [iterations][positions]
  probs: np.ndarray        # f32[I, N]
  states: np.ndarray       # i32[I, N]: index into STATE_NAMES
  final_pieces: list[str]  # [N]: greedy's tokens


def build_grid(states, output, piece) -> Grid:
  """Jacobi states after each iteration (row 0 of each) + the output -> the grid over positions 1..steps."""
  n = int(output.aux['steps'][0])
  final = np.asarray(states[-1].drafts()[0][0, :n])  # [N]: greedy's tokens in slot order (read out after)
  drafts = np.stack([np.asarray(s.drafts()[0][0, :n]) for s in states])  # [I, N]
  probs = probabilities(np.stack([np.asarray(s.drafts()[1][0, :n]) for s in states]))  # [I, N]
  known = np.arange(1, n + 1)[None, :] <= np.array([int(s.fixed[0]) for s in states])[:, None]  # [I, N]
  grid_states = np.where(known, 2, (drafts == final[None]).astype(np.int32))
  return Grid([[piece(int(t)) for t in row] for row in drafts], probs, grid_states, [piece(int(t)) for t in final])


def trace_sentence(run, text: str, algorithm: str, block_size: int, max_len: int) -> Grid:
  """Decode one sentence with the traced Jacobi iteration and build its grid."""
  src = np.asarray(encode_sources([text], run.tokenizer, run.config.max_len), np.int32)  # [1, S]
  build = method_view(run.method, LeftToRightScorer, 'DDGviz (Jacobi decoding)')
  states, output = jacobi.trace_jacobi(build, run.params, src, max_len=max_len,
                                       **jacobi.algorithm_options(algorithm, block_size))
  return build_grid(states, output, lambda t: SPECIAL_PIECES.get(t) or run.tokenizer.decode([t]) or '_')


def write_png(grid: Grid, path: str, title: str):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  from matplotlib.colors import ListedColormap
  iters, n = grid.states.shape
  fig, ax = plt.subplots(figsize=(max(4.0, 1.0 * n + 1.5), max(2.0, 0.6 * iters + 1.5)))
  ax.imshow(grid.states, cmap=ListedColormap([COLORS[s] for s in STATE_NAMES]), vmin=0, vmax=2, aspect='auto')
  for i in range(iters):
    for j in range(n):
      color = 'white' if grid.states[i, j] == 2 else 'black'
      ax.text(j, i, f'{grid.pieces[i][j]}\n{grid.probs[i, j]:.2f}', ha='center', va='center', fontsize=7, color=color)
  ax.set_xticks(range(n), [f'{j + 1}\n{p}' for j, p in enumerate(grid.final_pieces)], fontsize=7)
  ax.set_yticks(range(iters), [str(i + 1) for i in range(iters)])
  ax.set_xlabel('target position (greedy token)')
  ax.set_ylabel('Jacobi iteration')
  ax.set_title(title, fontsize=9)
  fig.tight_layout()
  with atomic_output(path, 'wb') as f:
    fig.savefig(f, format='png', dpi=120)
  plt.close(fig)


def render_html(grid: Grid, title: str) -> str:
  """A self-contained page: one table row per iteration, one cell per position."""
  style = ''.join(f'td.{s}{{background:{c};{"color:white;" if s == "final" else ""}}}' for s, c in COLORS.items())
  head = ''.join(f'<th>{j + 1}<br>{html.escape(p)}</th>' for j, p in enumerate(grid.final_pieces))
  rows = []
  for i, pieces in enumerate(grid.pieces):
    cells = ''.join(f'<td class="{STATE_NAMES[grid.states[i, j]]}">{html.escape(p)}'
                    f'<br><small>{grid.probs[i, j]:.2f}</small></td>'
                    for j, p in enumerate(pieces))
    rows.append(f'<tr><th>{i + 1}</th>{cells}</tr>')
  legend = ' '.join(f'<span class="box {s}">{s}</span>' for s in STATE_NAMES)
  return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>DDGviz</title><style>'
          f'body{{font-family:sans-serif}}table{{border-collapse:collapse}}td,th{{border:1px solid #999;'
          f'padding:3px 6px;text-align:center;font-size:12px}}{style}'
          f'span.box{{padding:2px 6px;border:1px solid #999}}span.final{{background:{COLORS["final"]};color:white}}'
          f'span.correct{{background:{COLORS["correct"]}}}span.wrong{{background:{COLORS["wrong"]}}}'
          f'</style></head><body><h3>{html.escape(title)}</h3><p>{legend} &mdash; rows: iterations, '
          f'columns: target positions; each cell: draft token and its probability.</p>'
          f'<table><tr><th>iter</th>{head}</tr>{"".join(rows)}</table></body></html>\n')


def output_paths(out: str) -> tuple[str, str]:
  base, ext = os.path.splitext(out)
  base = base if ext in ('.png', '.html') else out
  return base + '.png', base + '.html'


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
