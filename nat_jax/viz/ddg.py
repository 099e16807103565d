"""The decoding dependency graph of Jacobi decoding: each position's token per iteration, marked
wrong / correct / final, as a grid; drawn as .png (matplotlib) and .html."""
from __future__ import annotations

import html
from typing import NamedTuple

import numpy as np

from nat_jax.decode import LeftToRightScorer, jacobi, method_view
from nat_jax.files import atomic_output
from nat_jax.run.translation import encode_sources
from nat_jax.viz.pictures import SPECIAL_PIECES, probabilities

STATE_NAMES = ('wrong', 'correct', 'final')


COLORS = {'wrong': '#f2f2f2', 'correct': '#b7e1b0', 'final': '#2e8b57'}


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
