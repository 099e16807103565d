"""The DAG decoders' graph functions (nat_jax.decode.dag: joint Viterbi, greedy and lookahead paths, following
argmax, cleaning path tokens) against brute-force enumeration of paths and plain-Python references, on the padded
batch of tests.support.dag_batch and on hand-built graphs."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.decode import dag as dag_decode
from tests.support import (
  GRAPH,
  L,
  dag_batch,
  dag_greedy_path,
  dag_lookahead_path,
  dag_paths,
  path_log_prob,
  reference_text_tokens,
)


@pytest.fixture(scope='module')
def graph():
  return dag_batch()


@pytest.mark.parametrize('beta', [0.5, 1.0, 2.0])
def test_joint_viterbi(graph, beta):
  lt = jnp.asarray(graph['log_trans'], jnp.float32)
  tokens, length = jax.jit(dag_decode.joint_viterbi)(lt, jnp.asarray(graph['log_probs_garbage'], jnp.float32),
                                                    jnp.asarray(GRAPH), beta)
  best_tok = np.argmax(graph['log_probs'], -1)
  for b in range(len(GRAPH)):
    paths = dag_paths(GRAPH[b])
    want_tokens = np.zeros(L, int)
    if paths:
      score = lambda a: (path_log_prob(graph['log_trans'][b], a)  # noqa: E731
                         + np.max(graph['log_probs'][b, list(a)], -1).sum()) / len(a) ** beta
      best = max(paths, key=score)
      want_tokens[:len(best)] = best_tok[b, list(best)]
    assert int(length[b]) == (len(best) if paths else 0)
    np.testing.assert_array_equal(tokens[b], want_tokens)


def _reference_follow(log_trans_b, bonus_b, size):
  path = [0] if size > 0 else []
  while path and path[-1] != size - 1:
    i = path[-1]
    path.append(i + 1 + int(np.argmax(log_trans_b[i, i + 1:size] + bonus_b[i + 1:size])))
  return path


def test_greedy_and_lookahead_hand_built():
  """0 -> 2 (p .6) beats 0 -> 1 (p .3) for greedy; vertex 1's sure token makes lookahead go 0 -> 1 -> 3."""
  e = np.full((2, 5, 5), 1e3)  # garbage everywhere outside the valid region
  e[0, 0, 1:] = [.3, .6, .05, .05]
  e[0, 1, 2:] = [.1, .5, .4]
  e[0, 2, 3:] = [.4, .6]
  e[0, 3, 4] = 1.0
  e[1, 0, 1:3] = [.2, .8]  # row 1: graph of 3 vertices
  e[1, 1, 2] = 1.0
  log_trans = jnp.asarray(np.where(e < 1e3, np.log(np.maximum(e, 1e-30)), e), jnp.float32)
  top = np.array([[.5, .99, .3, .9, .9], [.9, .9, .9, .9, .9]])  # max token probability per vertex
  probs = np.full((2, 5, 10), 1e-3)
  probs[:, np.arange(5), np.arange(5) + 5] = top  # vertex v emits token v + 5
  log_probs = jnp.asarray(np.log(probs), jnp.float32)
  lengths = jnp.array([5, 3])
  tokens, n = jax.jit(dag_greedy_path)(log_trans, log_probs, lengths)
  np.testing.assert_array_equal(n, [3, 2])
  np.testing.assert_array_equal(tokens[:, :3], [[5, 7, 9], [5, 7, 0]])
  tokens, n = jax.jit(dag_lookahead_path)(log_trans, log_probs, lengths)
  np.testing.assert_array_equal(n, [4, 2])
  np.testing.assert_array_equal(tokens[:, :4], [[5, 6, 8, 9], [5, 7, 0, 0]])
  assert np.all(np.asarray(tokens)[:, 4:] == 0)


@pytest.mark.parametrize('lookahead', [False, True])
def test_greedy_and_lookahead_random(graph, lookahead):
  fn = dag_lookahead_path if lookahead else dag_greedy_path
  tokens, n = jax.jit(fn)(jnp.asarray(graph['log_trans'], jnp.float32),
                          jnp.asarray(graph['log_probs_garbage'], jnp.float32), jnp.asarray(GRAPH))
  for b in range(len(GRAPH)):
    bonus = np.max(graph['log_probs'][b], -1) if lookahead else np.zeros(L)
    path = _reference_follow(graph['log_trans'][b], bonus, GRAPH[b])
    want = np.zeros(L, int)
    want[:len(path)] = np.argmax(graph['log_probs'][b, path], -1) if path else []
    assert int(n[b]) == len(path)
    np.testing.assert_array_equal(tokens[b], want)


@pytest.mark.parametrize('max_steps', [0, 9])
def test_long_paths_follow_the_reference(max_steps):
  """Paths of up to 37 vertices (the successor search is loop-free pointer doubling): equal to
  following argmax one vertex at a time, cut after max_steps vertices when given."""
  rng = np.random.default_rng(5)
  size, lengths = 37, np.array([37, 20, 2, 1, 0, 33])
  near = -np.abs(np.arange(size)[None, :] - np.arange(size)[:, None] - 1.0)  # prefer short hops
  log_trans = near[None] * rng.uniform(0.5, 3.0, (len(lengths), 1, 1)) + rng.normal(0, 1.5, (len(lengths), size, size))
  bonus = rng.normal(0, 1.0, (len(lengths), size))
  got = np.asarray(jax.jit(dag_decode.follow_argmax, static_argnums=3)(
      jnp.asarray(log_trans, jnp.float32), jnp.asarray(bonus, jnp.float32), jnp.asarray(lengths), max_steps))
  for b, g in enumerate(lengths):
    path = _reference_follow(log_trans[b], bonus[b], g)[:max_steps or size]
    assert got[b, :len(path)].tolist() == path and np.all(got[b, len(path):] == -1), b
  assert max(len(_reference_follow(log_trans[b], bonus[b], g)) for b, g in enumerate(lengths)) > 16


@pytest.mark.parametrize('dedup', [True, False])
def test_clean_path_tokens_on_hand_builtdag_paths(dedup):
  """Hand-built path tokens (BOS=2, EOS=1, PAD=0): repeats collapse before the length cap, the
  special tokens leave the text, EOS closes it; padding past a path's length is ignored."""
  paths = [[2, 7, 7, 7, 5, 5, 1], [2, 9, 1, 9, 9, 1, 0], [2, 1, 0, 0, 0, 0, 0], [2, 4, 4, 4, 4, 4, 4],
           [2, 8, 8, 6, 6, 3, 1]]
  lengths = [7, 6, 2, 7, 7]
  limit = 4
  out, n = jax.jit(dag_decode.clean_path_tokens, static_argnums=(2, 3))(
      jnp.array(paths), jnp.array(lengths), dedup, limit)
  for b, (path, length) in enumerate(zip(paths, lengths)):
    want = reference_text_tokens(path[:length], dedup, limit)
    assert out[b].tolist() == want + [0] * (limit - len(want)), (b, out[b])
    assert int(n[b]) == len(want) - 1
  if dedup:  # the cap applies after removing repeats: 4 4 4 4 4 4 is one token, 8 8 6 6 3 three
    assert out[3].tolist() == [4, 1, 0, 0] and out[4].tolist() == [8, 6, 3, 1]
