"""DAG beam search (nat_jax.decode.dag_beam) against enumerating every path and every output on
tiny graphs: with every token offered and a beam as large as the number of prefixes it is exact;
with a small beam it returns a finished output whose score is what the enumeration gives it. Both
searches (the device's batched loop and the host's per-row numpy) are held to the enumeration, and
to each other on larger random graphs."""
import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.decode.dag_beam import dag_beam_search, dag_beam_search_host
from nat_jax.decode.ngram_lm import host_tables
from tests.support import TableGraphs, random_graphs, reference_text_tokens, run


def search_on_host(*args, lm=None, **kwargs):
  return dag_beam_search_host(*args, lm=None if lm is None else host_tables(lm), **kwargs)


SEARCHES = {'device': dag_beam_search, 'host': search_on_host}
BOTH = pytest.mark.parametrize('search', sorted(SEARCHES))


def marginals(log_trans, log_probs, length: int, beta: float) -> dict[tuple, float]:
  """{output y_1..y_n: log sum over paths 0 < v_1 < ... < v_n = G - 1 of prod E(v_(i-1), v_i) P(y_i | v_i)^beta}
  by enumerating every path and every output (vertex 0 emits nothing)."""
  trans, probs = np.asarray(log_trans, np.float64), np.asarray(log_probs, np.float64)
  vocab, totals = probs.shape[-1], {}
  for inner in range(length - 1):
    for middle in itertools.combinations(range(1, length - 1), inner):
      path = (0, *middle, length - 1)
      path_lp = sum(trans[a, b] for a, b in zip(path, path[1:]))
      for out in itertools.product(range(vocab), repeat=len(path) - 1):
        lp = path_lp + beta * sum(probs[v, y] for v, y in zip(path[1:], out))
        totals[out] = np.logaddexp(totals.get(out, -np.inf), lp)
  return totals


def normalized(total: float, n: int, alpha: float) -> float:
  return total / n ** alpha


def graphs(seed: int, lengths, size: int, vocab: int):
  """Random graphs: transitions normalized over each row's G vertices, -1e9 outside them."""
  rng = np.random.default_rng(seed)
  lengths = np.asarray(lengths)
  v = np.arange(size)
  ok = (v[:, None] < v[None, :])[None] & (v[None, None, :] < lengths[:, None, None])  # [B, L, L]
  logits = np.where(ok, rng.normal(size=(len(lengths), size, size)) * 2, -np.inf)
  peak = np.max(logits, axis=-1, keepdims=True)
  peak = np.where(np.isfinite(peak), peak, 0.0)
  log_trans = logits - peak - np.log(np.maximum(np.sum(np.exp(logits - peak), axis=-1, keepdims=True), 1e-30))
  log_probs = rng.normal(size=(len(lengths), size, vocab)) * 2
  log_probs -= np.log(np.sum(np.exp(log_probs), axis=-1, keepdims=True))
  return (jnp.asarray(np.where(ok, log_trans, -1e9), jnp.float32), jnp.asarray(log_probs, jnp.float32),
          jnp.asarray(lengths, jnp.int32))


@BOTH
@pytest.mark.parametrize('alpha,beta', [(1.1, 1.0), (0.0, 1.0), (1.0, 0.5), (1.1, 0.0)])
def test_exhaustive_beam_finds_the_best_output_by_enumeration(search, alpha, beta):
  vocab = 3
  for seed in range(3):
    log_trans, log_probs, lengths = graphs(seed, [6, 5, 3, 2], size=6, vocab=vocab)
    final = SEARCHES[search](log_trans, log_probs, lengths, beam_size=vocab ** 4, top_cand=vocab, alpha=alpha,
                             beta=beta)
    for r in range(4):
      totals = marginals(np.asarray(log_trans[r]), np.asarray(log_probs[r]), int(lengths[r]), beta)
      scores = sorted((normalized(t, len(y), alpha) for y, t in totals.items()), reverse=True)
      got = tuple(np.asarray(final.fin_seqs[r, 0, :int(final.fin_lengths[r, 0])]).tolist())
      assert math.isclose(normalized(totals[got], len(got), alpha), scores[0], rel_tol=1e-4, abs_tol=1e-4), (seed, r)
      # The K best finished ones are the K best outputs, in order, with their enumerated scores.
      top = scores[:4]
      np.testing.assert_allclose(np.asarray(final.fin_scores[r, :len(top)]), top, rtol=1e-4, atol=1e-4)


@BOTH
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_small_beam_scores_its_outputs_exactly(search, seed):
  """A beam of 2 offering 2 tokens per vertex is a search, not an enumeration, but every prefix it
  keeps carries the mass of all its paths: each finished output's score is its enumerated score,
  and no better than the best output."""
  vocab = 4
  log_trans, log_probs, lengths = graphs(seed, [7, 6], size=7, vocab=vocab)
  final = SEARCHES[search](log_trans, log_probs, lengths, beam_size=2, top_cand=2, alpha=1.1, beta=1.0)
  for r in range(2):
    totals = marginals(np.asarray(log_trans[r]), np.asarray(log_probs[r]), int(lengths[r]), 1.0)
    best = max(normalized(t, len(y), 1.1) for y, t in totals.items())
    for i in range(2):
      got = tuple(np.asarray(final.fin_seqs[r, i, :int(final.fin_lengths[r, i])]).tolist())
      want = normalized(totals[got], len(got), 1.1)
      assert math.isclose(float(final.fin_scores[r, i]), want, rel_tol=1e-4, abs_tol=1e-4), (r, i, got)
      assert want <= best + 1e-6


@BOTH
def test_registered_decoder_gives_the_text_of_the_best_output(search):
  vocab = 5
  log_trans, log_probs, lengths = random_graphs(0, batch=5, size=9, vocab=vocab)
  view = TableGraphs(log_trans, log_probs, lengths, max_len=9)
  src = jnp.ones((5, 4), jnp.int32)
  out = run(view, 'dag_beam', src, beam_size=8, top_cand=3, search=search)
  final = dag_beam_search(log_trans, log_probs, lengths, 8, 3, 1.1, 1.0)
  for r in range(5):
    n = int(final.fin_lengths[r, 0])
    want = reference_text_tokens(np.asarray(final.fin_seqs[r, 0, :n]).tolist(), True, 9) if n else [1]
    got = np.asarray(out.tokens[r]).tolist()
    assert got[:len(want)] == want and not any(got[len(want):]), (r, got, want)
  assert int(out.aux['path'][3]) == 0  # a one-vertex graph has no path that emits a token: empty text


@BOTH
def test_exhaustive_beam_with_an_lm_finds_the_best_output_by_enumeration(search):
  """With an n-gram LM the score is (marginal + gamma log10 P_lm(y)) / |y|^alpha, P_lm over every token
  from <s> on (the plain-Python backoff rule here); an exhaustive beam with a pool as large as all
  extensions finds the K best outputs."""
  from nat_jax.decode import arpa, ngram_lm
  vocab, alpha, gamma = 4, 1.1, 0.7
  names = {0: 'p', 1: '</s>', 2: '<s>', 3: '<unk>'}
  rng = np.random.default_rng(0)
  model = arpa.estimate([[('p', 'q')[i] for i in rng.integers(0, 2, rng.integers(1, 5))] for _ in range(30)]
                            + [['p', 'p', 'p']] * 5, 3)  # 'q' is no token here: <unk> ids 3 stay unseen
  tables = ngram_lm.build_tables(model, {w: i for i, w in names.items()}, vocab)

  def lm(out):
    words = ['<s>'] + [names[t] for t in out]
    return sum(arpa.logprob(model, words[max(0, i - 2):i], words[i]) for i in range(1, len(words)))

  log_trans, log_probs, lengths = graphs(5, [6, 5, 4], size=6, vocab=vocab)
  log_probs = log_probs.at[:, :, 2].set(-30.0)  # BOS (the LM's <s>) is never a good output token
  final = SEARCHES[search](log_trans, log_probs, lengths, beam_size=vocab ** 4, top_cand=vocab, alpha=alpha,
                           beta=1.0, lm=tables, gamma=gamma, lm_pool=vocab)
  plain = dag_beam_search(log_trans, log_probs, lengths, beam_size=vocab ** 4, top_cand=vocab, alpha=alpha, beta=1.0)
  changed = 0
  for r in range(3):
    totals = marginals(np.asarray(log_trans[r]), np.asarray(log_probs[r]), int(lengths[r]), 1.0)
    scored = {y: normalized(t + gamma * lm(y), len(y), alpha) for y, t in totals.items()}
    top = sorted(scored.values(), reverse=True)[:4]
    np.testing.assert_allclose(np.asarray(final.fin_scores[r, :4]), top, rtol=1e-4, atol=1e-4)
    got = tuple(np.asarray(final.fin_seqs[r, 0, :int(final.fin_lengths[r, 0])]).tolist())
    assert math.isclose(scored[got], top[0], rel_tol=1e-4, abs_tol=1e-4)
    changed += not np.array_equal(final.fin_seqs[r, 0], plain.fin_seqs[r, 0])
  assert changed, 'the LM should change some best output in this test'


@pytest.mark.parametrize('with_lm', [False, True])
def test_host_and_device_searches_agree_on_larger_graphs(with_lm):
  """The two searches are two implementations of one search: on graphs too large to enumerate, with
  beams far smaller than the prefixes, they keep the same K finished outputs with the same scores."""
  from nat_jax.decode import arpa, ngram_lm
  vocab, lm, gamma = 12, None, 0.0
  if with_lm:
    names = {i: f'w{i}' for i in range(vocab)} | {1: '</s>', 2: '<s>', 3: '<unk>'}
    rng = np.random.default_rng(1)
    model = arpa.estimate([[f'w{i}' for i in rng.integers(4, vocab, rng.integers(1, 9))] for _ in range(60)], 3)
    lm, gamma = ngram_lm.build_tables(model, {w: i for i, w in names.items()}, vocab), 0.8
  log_trans, log_probs, lengths = graphs(7, [24, 17, 9, 3, 2, 1], size=24, vocab=vocab)
  kwargs = dict(beam_size=4, top_cand=3, alpha=1.1, beta=1.0, lm=lm, gamma=gamma, lm_pool=2)
  device, host = dag_beam_search(log_trans, log_probs, lengths, **kwargs), search_on_host(
      log_trans, log_probs, lengths, **kwargs)
  np.testing.assert_allclose(np.asarray(host.fin_scores), np.asarray(device.fin_scores), rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(np.asarray(host.fin_lengths), np.asarray(device.fin_lengths))
  np.testing.assert_array_equal(np.asarray(host.fin_seqs), np.asarray(device.fin_seqs))
  assert np.isfinite(np.asarray(device.fin_scores[:4])).all() and np.isinf(np.asarray(device.fin_scores[5])).all()
