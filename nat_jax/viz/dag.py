"""The DA-Transformer's DAG for one sentence: its vertices' top tokens, the strongest edges, and the
path each decoder takes; drawn as .png (matplotlib) and .html."""
from __future__ import annotations

import dataclasses
import html

import jax
import jax.numpy as jnp
import numpy as np

from nat_jax.core.tokens import clean_path_tokens
from nat_jax.decode import GraphPredictor, method_view
from nat_jax.decode.dag import DAG_PATHS
from nat_jax.errors import ConfigError
from nat_jax.files import atomic_output
from nat_jax.run.translation import encode_sources
from nat_jax.viz.pictures import SPECIAL_PIECES, probabilities

PATH_COLORS = ('#d62728', '#1f77b4', '#2ca02c', '#9467bd', '#ff7f0e')


@dataclasses.dataclass
class DecoderPath:
  vertices: list[int]      # the path, vertex 0 .. G-1
  pieces: list[str]        # the token the decoder reads at each vertex
  translation: str         # what the decoder outputs (repeats collapsed, specials dropped, detokenized)


@dataclasses.dataclass
class DagPicture:
  source: str
  top: list[list[tuple[str, float]]]      # [G][top_tokens]: (piece, P(y | v))
  edges: list[tuple[int, int, float]]     # (i, j, E_ij): the strongest transitions out of each vertex
  paths: dict[str, DecoderPath]


def dag_picture(run, text: str, decoders: list[str], top_tokens: int = 3, edges: int = 2,
                beta: float = 1.0) -> DagPicture:
  """The graph the run predicts for `text` and each decoder's path through it."""
  unknown = [d for d in decoders if d not in DAG_PATHS]
  if unknown:
    raise ConfigError(f'--decoders: {unknown} are not DAG decoders; choose from {sorted(DAG_PATHS)}.')
  build = method_view(run.method, GraphPredictor, 'dagviz (the DA-Transformer graph)')
  src = jnp.asarray(encode_sources([text], run.tokenizer, run.config.max_len), jnp.int32)  # [1, S]

  @jax.jit
  def graph_and_paths(params, src):
    view = build(params)
    graph = view.predict_graph(src)
    log_probs = view.vertex_log_probs(graph.hidden)  # [1, L, V]
    top_lp, top_ids = jax.lax.top_k(log_probs, top_tokens)  # [1, L, k]
    paths = {name: DAG_PATHS[name](view, src, **({'beta': beta} if name == 'dag_joint_viterbi' else {}))[:2]
             for name in decoders}
    return graph.log_trans, graph.graph_lengths, top_lp, top_ids, paths

  log_trans, lengths, top_lp, top_ids, paths = jax.device_get(graph_and_paths(run.params, src))
  size = int(lengths[0])

  def piece(t):
    return SPECIAL_PIECES.get(int(t)) or run.tokenizer.decode([int(t)]) or '_'

  top = [[(piece(t), float(probabilities(lp))) for t, lp in zip(top_ids[0, v], top_lp[0, v])] for v in range(size)]
  trans = probabilities(log_trans[0])  # [L, L]
  strongest = []
  for i in range(size - 1):
    row = trans[i, i + 1:size]
    for j in np.argsort(-row, kind='stable')[:edges]:
      strongest.append((i, i + 1 + int(j), float(row[j])))
  drawn = {}
  limit = build(run.params).max_decode_len(src.shape[1])
  for name in decoders:  # in the order asked for (device_get returns the dict sorted)
    path, tokens = paths[name]
    on = path[0] >= 0
    vertices, ids = path[0][on].tolist(), tokens[0][on]
    text_ids, _ = clean_path_tokens(jnp.asarray(tokens), jnp.asarray([len(vertices)]), True, limit)
    drawn[name] = DecoderPath(vertices, [piece(t) for t in ids], run.tokenizer.decode(np.asarray(text_ids[0])))
  return DagPicture(text, top, strongest, drawn)


def write_png(pic: DagPicture, path: str):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  from matplotlib.patches import FancyArrowPatch
  size = len(pic.top)
  rows = len(pic.top[0]) if pic.top else 1
  fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * size + 1.5), 7.0))
  on_path = {v for p in pic.paths.values() for v in p.vertices}
  for v, tokens in enumerate(pic.top):
    ax.add_patch(plt.Rectangle((v - 0.42, -0.5), 0.84, 1.0, facecolor='#fff3c4' if v in on_path else '#f4f4f4',
                               edgecolor='#888', lw=0.6, zorder=2))
    label = '\n'.join(f'{p[:7]} {q:.2f}' for p, q in tokens)
    ax.text(v, 0, label, ha='center', va='center', fontsize=6, zorder=3, linespacing=1.3)
    ax.text(v, -0.62, str(v), ha='center', va='top', fontsize=5.5, color='#555')
  for i, j, e in pic.edges:
    ax.add_patch(FancyArrowPatch((i, 0.5), (j, 0.5), connectionstyle=f'arc3,rad={-0.35 if j - i > 1 else -0.6}',
                                 arrowstyle='-|>', mutation_scale=5, lw=0.4 + 1.6 * e, color='black',
                                 alpha=0.15 + 0.85 * e, zorder=1))
  for k, (name, p) in enumerate(pic.paths.items()):
    color = PATH_COLORS[k % len(PATH_COLORS)]
    for a, b in zip(p.vertices[:-1], p.vertices[1:]):
      ax.add_patch(FancyArrowPatch((a, -0.5 - 0.12 * k), (b, -0.5 - 0.12 * k), connectionstyle='arc3,rad=0.35',
                                   arrowstyle='-|>', mutation_scale=6, lw=1.4, color=color, zorder=4))
    ax.plot([], [], color=color, lw=2, label=f'{name}: {p.translation[:110]}')
  ax.set_xlim(-1, size)
  ax.set_ylim(-3.2, 3.2)
  ax.axis('off')
  ax.legend(loc='lower left', fontsize=7, frameon=False)
  ax.set_title(f'{pic.source[:140]}\n{size} vertices (top {rows} tokens each); above: the strongest transitions '
               'out of each vertex; below: the decoders\' paths', fontsize=8)
  fig.tight_layout()
  with atomic_output(path, 'wb') as f:
    fig.savefig(f, format='png', dpi=110)
  plt.close(fig)


def render_html(pic: DagPicture) -> str:
  """A self-contained page: the picture as inline SVG (hover a vertex for its tokens), then a table of
  each decoder's path (vertex: token) and translation."""
  step, top_y, box_h = 64, 170, 64
  width = step * max(len(pic.top), 1) + 40
  height = top_y + box_h + 40 + 26 * len(pic.paths) + 120
  svg = []

  def cx(v):
    return 20 + step * v + step / 2

  for i, j, e in pic.edges:
    x1, x2 = cx(i), cx(j)
    lift = min(150, 18 + 9 * (j - i))
    svg.append(f'<path d="M{x1:.0f},{top_y} Q{(x1 + x2) / 2:.0f},{top_y - 2 * lift} {x2:.0f},{top_y}" '
               f'fill="none" stroke="black" stroke-opacity="{0.15 + 0.85 * e:.2f}" '
               f'stroke-width="{0.5 + 2 * e:.2f}"><title>E({i},{j}) = {e:.3f}</title></path>')
  on_path = {v for p in pic.paths.values() for v in p.vertices}
  for v, tokens in enumerate(pic.top):
    x = cx(v) - step / 2 + 3
    tip = html.escape(f'vertex {v}: ' + ', '.join(f'{p} {q:.3f}' for p, q in tokens))
    svg.append(f'<g><title>{tip}</title><rect x="{x:.0f}" y="{top_y}" width="{step - 6}" height="{box_h}" '
               f'fill="{"#fff3c4" if v in on_path else "#f4f4f4"}" stroke="#888"/>')
    for k, (p, q) in enumerate(tokens[:3]):
      svg.append(f'<text x="{cx(v):.0f}" y="{top_y + 16 + 18 * k}" font-size="{11 if k == 0 else 9}" '
                 f'text-anchor="middle">{html.escape(p[:9])} {q:.2f}</text>')
    svg.append(f'<text x="{cx(v):.0f}" y="{top_y + box_h + 12}" font-size="9" fill="#555" '
               f'text-anchor="middle">{v}</text></g>')
  for k, (name, p) in enumerate(pic.paths.items()):
    color, y = PATH_COLORS[k % len(PATH_COLORS)], top_y + box_h + 18
    for a, b in zip(p.vertices[:-1], p.vertices[1:]):
      drop = 14 + 10 * k + 4 * min(b - a, 8)
      svg.append(f'<path d="M{cx(a):.0f},{y} Q{(cx(a) + cx(b)) / 2:.0f},{y + 2 * drop} {cx(b):.0f},{y}" '
                 f'fill="none" stroke="{color}" stroke-width="2"/>')
  rows = ''.join(
      f'<tr><td style="color:{PATH_COLORS[k % len(PATH_COLORS)]}"><b>{html.escape(name)}</b></td>'
      f'<td class="path">{" ".join(f"{v}:{html.escape(t)}" for v, t in zip(p.vertices, p.pieces))}</td>'
      f'<td>{html.escape(p.translation)}</td></tr>' for k, (name, p) in enumerate(pic.paths.items()))
  return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>DAG: {html.escape(pic.source[:60])}</title>'
          '<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #999;'
          'padding:3px 6px;font-size:12px;vertical-align:top}td.path{font-family:monospace;font-size:11px}'
          '</style></head><body>'
          f'<h3>{html.escape(pic.source)}</h3><p>{len(pic.top)} vertices. Above the vertices: the strongest '
          'transitions out of each (darker = more probable); below: the path of each decoder. Hover a vertex '
          'for its top tokens.</p>'
          f'<div style="overflow-x:auto"><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
          f'{"".join(svg)}</svg></div>'
          f'<table><tr><th>decoder</th><th>path (vertex:token)</th><th>translation</th></tr>{rows}</table>'
          '</body></html>\n')
