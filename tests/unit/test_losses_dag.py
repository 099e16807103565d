"""The DAG losses (nat_jax.losses.dag, and the fuzzy alignment of nat_jax.losses.fuzzy) against brute-force
enumeration of paths and token sequences, on the padded batch of tests.support.dag_batch."""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.losses import dag, fuzzy
from tests.support import GRAPH, TARGET, L, M, V, dag_batch, dag_batch_arrays, dag_paths, path_log_prob

LL_FORMS = {'scaled': dag.dag_log_likelihood_scaled, 'logspace': dag.dag_log_likelihood_logspace,
            'default': dag.dag_log_likelihood}


@pytest.fixture(scope='module')
def graph():
  return dag_batch()


def _brute_alignment(g, b):
  """(log P(y | x), posterior [L, M], best path) for row b, enumerating all T-vertex paths."""
  t = TARGET[b]
  scores = {a: path_log_prob(g['log_trans'][b], a) + sum(g['log_emit'][b, a[m], m] for m in range(t))
            for a in dag_paths(GRAPH[b], t)} if t > 0 else {}
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
  args = dag_batch_arrays(graph)
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
  log_trans, log_emit, tlen, glen = dag_batch_arrays(graph)
  align = dag.dag_best_alignment(log_trans, log_emit, tlen, glen)  # [B, M]
  glanced = (align >= 0) & (jnp.arange(M)[None, :] % 2 == 1)  # positions 1 and 3 of every possible row
  loss = lambda emit: dag.dag_log_likelihood(log_trans, force_alignment(emit, align, glanced), tlen, glen)
  ll = np.asarray(loss(log_emit))
  for b in range(len(GRAPH)):
    t, g_b = TARGET[b], np.asarray(glanced[b])
    want = [path_log_prob(graph['log_trans'][b], a) + sum(graph['log_emit'][b, a[m], m] for m in range(t)
                                                           if not g_b[m])
            for a in dag_paths(GRAPH[b], t) if all(a[m] == align[b, m] for m in range(t) if g_b[m])] if t else []
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
  got = np.asarray(jax.jit(dag.dag_best_alignment)(*dag_batch_arrays(graph)))
  for b in range(len(GRAPH)):
    _, _, best = _brute_alignment(graph, b)
    want = np.full(M, -1)
    if best is not None:
      want[:len(best)] = best
    np.testing.assert_array_equal(got[b], want)


def test_nll_loss_masks_impossible_pairs(graph):
  args = dag_batch_arrays(graph)
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
  for path in dag_paths(GRAPH[b]):
    p_path = np.exp(path_log_prob(g['log_trans'][b], path))
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
  lt, le, tl, gl = dag_batch_arrays(graph)
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


