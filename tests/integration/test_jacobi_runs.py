"""Jacobi decoding on a trained run: equal to greedy, and the ddgviz grid of its iterations."""
import os

import jax.numpy as jnp
import numpy as np

from nat_jax.run.translation import encode_sources
from nat_jax.run.workdir import load_run
from nat_jax.viz import ddg, pictures
from tests.support import assert_same_as_greedy, decode_all


def test_equals_greedy_trained_model(trained_run):
  run = load_run(trained_run)
  texts = ['In the beginning God created the heavens and the earth.', 'And Paul said', 'Amen.',
           'Now when they heard this, they were cut to the heart.', 'He went up.', 'Peace be with you all.']
  src = jnp.asarray(np.asarray([s + [0] * (24 - len(s)) for s in encode_sources(texts, run.tokenizer, 24)]),
                    jnp.int32)
  configs = [('jacobi_pj', {}), ('jacobi_pgj', {'block_size': 3}), ('jacobi_hgj', {'block_size': 3})]
  assert_same_as_greedy(decode_all(run.method, run.params, src, 20, configs), configs)


def test_ddgviz_grid(trained_run, tmp_path):
  run = load_run(trained_run)
  grid = ddg.trace_sentence(run, 'And Paul said', 'pgj', 3, 10)
  iters, n = grid.states.shape
  assert len(grid.pieces) == iters and all(len(row) == n for row in grid.pieces) and grid.probs.shape == (iters, n)
  assert (grid.states[-1] == 2).all() and ((grid.probs > 0) & (grid.probs <= 1)).all()
  png, page = pictures.output_paths(str(tmp_path / 'ddg'))
  ddg.write_png(grid, png, 'test')
  with open(page, 'w') as f:
    f.write(ddg.render_html(grid, 'test'))
  assert os.path.getsize(png) > 0
  text = open(page).read()
  assert text.count('<td class=') == iters * n and 'http' not in text
