"""DAG dynamic programs and decoders against brute-force enumeration of paths (and token sequences).

One padded batch mixes graph and target lengths: a normal pair, a short one, one with repeated
reference n-grams, a target longer than its graph (no path), a one-vertex graph, and an empty
padding row. Every ignored entry holds a large garbage value (|x| up to 1e4, exp() would overflow).
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.decode import dag as dag_decode
from nat_jax.losses import dag, fuzzy
from tests.support import dag_greedy_path, dag_lookahead_path, reference_text_tokens

L, M, V = 7, 5, 3
GRAPH = np.array([7, 5, 6, 3, 1, 0])
TARGET = np.array([5, 3, 5, 5, 1, 0])  # row 3: T > G (impossible); row 5: padding
LL_FORMS = {'scaled': dag.dag_log_likelihood_scaled, 'logspace': dag.dag_log_likelihood_logspace,
            'default': dag.dag_log_likelihood}


def _garbage(rng, shape):
  return rng.uniform(-1e4, 1e4, size=shape)


def _log_softmax(x, mask):
  x = np.where(mask, x, -np.inf)
  top = np.max(x, axis=-1, keepdims=True)
  top = np.where(np.isfinite(top), top, 0.0)
  out = x - top - np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True) + 1e-300)
  return np.where(mask, out, -np.inf)


@pytest.fixture(scope='module')
def graph():
  """Normalized transitions, token distributions, targets and log_emit (garbage where ignored)."""
  rng = np.random.default_rng(0)
  b = len(GRAPH)
  v = np.arange(L)
  tmask = (v[:, None] < v[None, :])[None] & (v[None, None, :] < GRAPH[:, None, None])  # [B, L, L]
  log_trans = _log_softmax(rng.normal(size=(b, L, L)) * 1.5, tmask)
  log_trans = np.where(tmask, log_trans, _garbage(rng, (b, L, L)))
  log_probs = _log_softmax(rng.normal(size=(b, L, V)) * 1.5, np.ones((b, L, V), bool))  # [B, L, V]
  targets = rng.integers(0, V, size=(b, M))
  targets[2] = [1, 0, 1, 0, 1]  # repeated bigrams (1, 0) x2, (0, 1) x2 and unigrams
  targets[np.arange(M)[None] >= TARGET[:, None]] = V + 5  # ignored ids past the target
  emask = (v[None, :, None] < GRAPH[:, None, None]) & (np.arange(M)[None, None] < TARGET[:, None, None])
  gathered = np.take_along_axis(log_probs, np.minimum(targets, V - 1)[:, None, :].repeat(L, 1), axis=2)
  log_emit = np.where(emask, gathered, _garbage(rng, (b, L, M)))
  log_probs_garbage = np.where((v[None, :] < GRAPH[:, None])[..., None], log_probs, _garbage(rng, log_probs.shape))
  return dict(log_trans=log_trans, log_emit=log_emit, log_probs=log_probs, log_probs_garbage=log_probs_garbage,
              targets=targets, tmask=tmask, emask=emask)


def _j(g):
  """The batch as jax arrays: (log_trans, log_emit, target_lengths, graph_lengths)."""
  return (jnp.asarray(g['log_trans'], jnp.float32), jnp.asarray(g['log_emit'], jnp.float32),
          jnp.asarray(TARGET, jnp.int32), jnp.asarray(GRAPH, jnp.int32))


def _paths(size, num_vertices=None):
  """Strictly increasing paths 0 -> size-1 (all lengths, or exactly num_vertices)."""
  if size == 1:
    return [(0,)] if num_vertices in (None, 1) else []
  if size < 1:
    return []
  out = []
  for k in range(size - 1):
    if num_vertices is None or k + 2 == num_vertices:
      out += [(0,) + mid + (size - 1,) for mid in itertools.combinations(range(1, size - 1), k)]
  return out


def _path_log_prob(log_trans_b, path):
  return sum(log_trans_b[i, j] for i, j in zip(path[:-1], path[1:]))


def _brute_alignment(g, b):
  """(log P(y | x), posterior [L, M], best path) for row b, enumerating all T-vertex paths."""
  t = TARGET[b]
  scores = {a: _path_log_prob(g['log_trans'][b], a) + sum(g['log_emit'][b, a[m], m] for m in range(t))
            for a in _paths(GRAPH[b], t)} if t > 0 else {}
  post = np.zeros((L, M))
  if not scores:
    return -np.inf, post, None
  total = np.logaddexp.reduce(list(scores.values()))
  for a, s in scores.items():
    for m, vtx in enumerate(a):
      post[vtx, m] += np.exp(s - total)
  return total, post, max(scores, key=scores.get)


@pytest.mark.parametrize('form', sorted(LL_FORMS))
def test_log_likelihood_and_posterior_gradient(graph, form):
  fn = LL_FORMS[form]
  args = _j(graph)
  ll = np.asarray(jax.jit(fn)(*args))
  # The summed log-likelihood is -inf (rows 3 and 5 have no path), yet its gradient is finite.
  grad_emit, grad_trans = jax.jit(jax.grad(lambda lt, le: jnp.sum(fn(lt, le, *args[2:])), argnums=(1, 0)))(*args[:2])
  assert np.all(np.isfinite(grad_emit)) and np.all(np.isfinite(grad_trans))
  assert np.all(np.asarray(grad_trans)[~graph['tmask']] == 0)
  for b in range(len(GRAPH)):
    want, post, _ = _brute_alignment(graph, b)
    if np.isfinite(want):
      np.testing.assert_allclose(ll[b], want, rtol=1e-5, atol=1e-5)
    else:
      assert ll[b] == -np.inf
    np.testing.assert_allclose(np.asarray(grad_emit[b]), post, atol=2e-5)  # zero for impossible rows


def test_forms_agree_on_peaky_inputs():
  """Sharp transitions and very unlikely tokens (alpha spans hundreds of nats).

  Row 2 (T = G) has a single path whose transitions are ~150 nats below the best link into each
  vertex: the scaled form underflows to -inf there and dag_log_likelihood recovers it in log space.
  """
  rng = np.random.default_rng(1)
  b, size, tlen = 3, 9, 6
  graph_lengths = jnp.array([9, 8, 6])
  target_lengths = jnp.array([6, 4, 6])
  log_trans = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(b, size, size)) * 40, jnp.float32), axis=-1)
  log_emit = jnp.asarray(rng.normal(size=(b, size, tlen)) * 30 - 100, jnp.float32)
  args = (log_trans, log_emit, target_lengths, graph_lengths)
  exact = dag.dag_log_likelihood_logspace(*args)
  assert np.all(np.isfinite(exact))
  np.testing.assert_allclose(jax.jit(dag.dag_log_likelihood)(*args), exact, rtol=1e-5)  # row 2 falls back
  scaled = np.asarray(dag.dag_log_likelihood_scaled(*args))
  np.testing.assert_allclose(scaled[:2], exact[:2], rtol=1e-5)
  assert scaled[2] == -np.inf  # the only path underflows in the scaled form
  grad = lambda fn: jax.grad(lambda lt, le: jnp.sum(fn(lt, le, *args[2:])), argnums=(0, 1))(*args[:2])  # noqa: E731
  for got, want in zip(jax.jit(lambda: grad(dag.dag_log_likelihood))(), grad(dag.dag_log_likelihood_logspace)):
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_forced_alignment_brute_force(graph):
  """force_alignment (glancing, NLL): the likelihood sums only the paths that put each glanced
  position on its aligned vertex, scored without the glanced emissions; glanced emissions get no
  gradient, and changing them changes nothing."""
  from nat_jax.methods.dag import force_alignment
  log_trans, log_emit, tlen, glen = _j(graph)
  align = dag.dag_best_alignment(log_trans, log_emit, tlen, glen)  # [B, M]
  glanced = (align >= 0) & (jnp.arange(M)[None, :] % 2 == 1)  # positions 1 and 3 of every possible row
  loss = lambda emit: dag.dag_log_likelihood(log_trans, force_alignment(emit, align, glanced), tlen, glen)
  ll = np.asarray(loss(log_emit))
  for b in range(len(GRAPH)):
    t, g_b = TARGET[b], np.asarray(glanced[b])
    want = [_path_log_prob(graph['log_trans'][b], a) + sum(graph['log_emit'][b, a[m], m] for m in range(t)
                                                           if not g_b[m])
            for a in _paths(GRAPH[b], t) if all(a[m] == align[b, m] for m in range(t) if g_b[m])] if t else []
    if want:
      np.testing.assert_allclose(ll[b], np.logaddexp.reduce(want), rtol=1e-5, atol=1e-5)
    else:
      assert ll[b] == -np.inf
  assert np.asarray(glanced).sum() >= 4
  grad = np.asarray(jax.grad(lambda e: jnp.sum(jnp.where(jnp.isfinite(loss(e)), loss(e), 0.0)))(log_emit))
  assert np.all(grad[np.broadcast_to(np.asarray(glanced)[:, None, :], grad.shape)] == 0.0)
  assert np.abs(grad).sum() > 0
  shaken = log_emit + jnp.where(glanced[:, None, :], 3.0 * jax.random.normal(jax.random.PRNGKey(1), log_emit.shape), 0)
  np.testing.assert_array_equal(np.asarray(loss(shaken)), ll)


def test_best_alignment(graph):
  got = np.asarray(jax.jit(dag.dag_best_alignment)(*_j(graph)))
  for b in range(len(GRAPH)):
    _, _, best = _brute_alignment(graph, b)
    want = np.full(M, -1)
    if best is not None:
      want[:len(best)] = best
    np.testing.assert_array_equal(got[b], want)


def test_nll_loss_masks_impossible_pairs(graph):
  args = _j(graph)
  loss, num_valid, num_impossible = jax.jit(dag.dag_nll_loss)(*args)
  lls = [_brute_alignment(graph, b)[0] for b in range(len(GRAPH))]
  want = np.mean([-ll / t for ll, t in zip(lls, TARGET) if np.isfinite(ll)])
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  assert (int(num_valid), int(num_impossible)) == (4, 1)  # row 3 impossible, row 5 padding
  grads = jax.jit(jax.grad(lambda lt, le: dag.dag_nll_loss(lt, le, *args[2:])[0], argnums=(0, 1)))(*args[:2])
  assert all(np.all(np.isfinite(np.asarray(x))) for x in grads)
  assert np.all(np.asarray(grads[1])[3] == 0)


def _brute_ngram_stats(g, b, n):
  """Exact expectations by enumerating every path and every token sequence on it."""
  probs = np.exp(g['log_probs'][b])  # [L, V]
  ref = [tuple(g['targets'][b, m:m + n]) for m in range(TARGET[b] - n + 1)]
  expected = dict.fromkeys(ref, 0.0)
  exp_ngrams = exp_len = 0.0
  for path in _paths(GRAPH[b]):
    p_path = np.exp(_path_log_prob(g['log_trans'][b], path))
    k = len(path)
    exp_len += p_path * k
    exp_ngrams += p_path * max(k - n + 1, 0)
    seqs = np.array(list(itertools.product(range(V), repeat=k)))  # [V^k, k]
    p_seq = np.prod(probs[list(path), seqs], axis=1)  # [V^k]
    for gram in expected:
      counts = sum(np.all(seqs[:, i:i + n] == gram, axis=1) for i in range(k - n + 1)) if k >= n else 0
      expected[gram] += p_path * np.sum(p_seq * counts)
  clipped = sum(min(e, ref.count(gram)) for gram, e in expected.items())
  return clipped, exp_ngrams, exp_len


@pytest.mark.parametrize('n', [1, 2, 3])
def test_expected_ngram_stats_and_fuzzy_loss(graph, n):
  lt, le, tl, gl = _j(graph)
  targets = jnp.asarray(graph['targets'], jnp.int32)
  stats = jax.jit(fuzzy.expected_ngram_stats, static_argnums=5)(lt, le, targets, tl, gl, n)
  loss = jax.jit(fuzzy.fuzzy_alignment_loss, static_argnums=5)(lt, le, targets, tl, gl, n)
  for b in range(len(GRAPH)):
    clipped, exp_ngrams, exp_len = _brute_ngram_stats(graph, b, n)
    np.testing.assert_allclose(stats['clipped_matches'][b], clipped, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats['expected_ngrams'][b], exp_ngrams, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats['expected_length'][b], exp_len, rtol=1e-4, atol=1e-6)
    brevity = min(1.0, np.exp(1 - TARGET[b] / exp_len)) if exp_len > 0 else 0.0
    want = -brevity * clipped / exp_ngrams if exp_ngrams > 0 else 0.0
    np.testing.assert_allclose(loss[b], want, rtol=1e-4, atol=1e-6)
  grads = jax.grad(lambda a, e: jnp.sum(fuzzy.fuzzy_alignment_loss(a, e, targets, tl, gl, n)), argnums=(0, 1))(lt, le)
  assert all(np.all(np.isfinite(np.asarray(x))) for x in grads)
  assert np.all(np.asarray(grads[0])[~graph['tmask']] == 0) and np.all(np.asarray(grads[1])[~graph['emask']] == 0)


def test_clipping_merges_duplicate_ngrams():
  """A 2-vertex graph that surely emits 'a a': E[C_(a,a)] = 1 and the reference 'a a a' has C = 2."""
  log_trans = jnp.zeros((1, 2, 2))  # only 0 -> 1 is valid: probability 1
  targets = jnp.array([[0, 0, 0]])
  log_emit = jnp.zeros((1, 2, 3))  # P(a | v) = 1
  stats = fuzzy.expected_ngram_stats(log_trans, log_emit, targets, jnp.array([3]), jnp.array([2]), 2)
  assert float(stats['clipped_matches'][0]) == pytest.approx(1.0)  # min(1, 2) once, not twice


@pytest.mark.parametrize('beta', [0.5, 1.0, 2.0])
def test_joint_viterbi(graph, beta):
  lt = jnp.asarray(graph['log_trans'], jnp.float32)
  tokens, length = jax.jit(dag_decode.joint_viterbi)(lt, jnp.asarray(graph['log_probs_garbage'], jnp.float32),
                                                    jnp.asarray(GRAPH), beta)
  best_tok = np.argmax(graph['log_probs'], -1)
  for b in range(len(GRAPH)):
    paths = _paths(GRAPH[b])
    want_tokens = np.zeros(L, int)
    if paths:
      score = lambda a: (_path_log_prob(graph['log_trans'][b], a)  # noqa: E731
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


# --- reference decoders (tests only): the registered ones are checked against these -----------






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
def test_clean_path_tokens_on_hand_built_paths(dedup):
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
