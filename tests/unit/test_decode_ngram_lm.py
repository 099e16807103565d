"""The n-gram LM of dag_beam (nat_jax.decode.ngram_lm): the Kneser-Ney estimate is a distribution
after every context, ARPA files round-trip, and the device trie lookup equals the plain-Python
backoff rule on every context of a small model."""
import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.decode import arpa, ngram_lm
from nat_jax.decode.arpa import BOS_WORD, EOS_WORD, UNK_WORD

WORDS = ['a', 'b', 'c', 'd', 'e']


def corpus(n=60, seed=0):
  rng = np.random.default_rng(seed)
  # a skewed, repetitive language so that many n-grams repeat and many are unseen
  return [[WORDS[min(int(x), 4)] for x in rng.geometric(0.45, rng.integers(1, 7))] for _ in range(n)]


@pytest.mark.parametrize('order', [1, 2, 3, 4])
def test_the_estimate_is_a_distribution_after_every_context(order):
  model = arpa.estimate(corpus(), order)
  outcomes = [g[0] for g in model if len(g) == 1 and g[0] != BOS_WORD]  # the vocabulary: words, </s>, <unk>
  assert EOS_WORD in outcomes and UNK_WORD in outcomes
  contexts = [()] + [(BOS_WORD,) + c for n in range(order - 1) for c in itertools.product(WORDS, repeat=n)]
  contexts += [c for n in range(1, order) for c in itertools.product(WORDS + [UNK_WORD], repeat=n)]
  for context in contexts:
    total = sum(10 ** arpa.logprob(model, context, w) for w in outcomes)
    assert total == pytest.approx(1.0, abs=1e-6), context


def test_kneser_ney_by_hand_on_a_bigram_model():
  # sentences "a b" and "a": bigrams <s> a (2), a b, b </s>, a </s>
  model = arpa.estimate([['a', 'b'], ['a']], 2)
  # unigram continuation counts: a 1 (<s>), b 1 (a), </s> 2 (b, a): n1 = 2, n2 = 1, D1 = 2 / (2 + 2);
  # vocabulary a, b, </s>, <unk>
  d1, total = 0.5, 4
  uniform = 1 / 4
  weight1 = d1 * 3 / total
  p_a = (1 - d1) / total + weight1 * uniform
  assert 10 ** model[('a',)][0] == pytest.approx(p_a)
  assert 10 ** model[('</s>',)][0] == pytest.approx((2 - d1) / total + weight1 * uniform)
  # bigrams: counts <s> a 2, a b 1, a </s> 1, b </s> 1: D2 = 3 / (3 + 2) = 0.6
  d2 = 0.6
  p_b_after_a = (1 - d2) / 2 + d2 * 2 / 2 * (10 ** model[('b',)][0])
  assert 10 ** model[('a', 'b')][0] == pytest.approx(p_b_after_a)
  assert 10 ** model[('a',)][1] == pytest.approx(d2 * 2 / 2)  # backoff of the context a


def test_arpa_round_trip_and_errors(tmp_path):
  model = arpa.estimate(corpus(), 3)
  path = str(tmp_path / 'lm.arpa')
  arpa.write_arpa(model, path)
  again = arpa.read_arpa(path)
  assert again.keys() == model.keys()
  for g, (lp, bo) in model.items():
    assert again[g] == pytest.approx((lp, bo), abs=1e-5)
  text = open(path).read()
  (tmp_path / 'cut.arpa').write_text(text[:text.rindex('\n', 0, len(text) // 2) + 1])  # whole lines, half of them
  with pytest.raises(ValueError, match='header announces'):
    arpa.read_arpa(str(tmp_path / 'cut.arpa'))
  (tmp_path / 'bad.arpa').write_text(text.replace('\n\\2-grams:\n', '\n\\2-grams:\nnot-a-number a b\n'))
  with pytest.raises(ValueError, match='bad.arpa:.*2-gram'):
    arpa.read_arpa(str(tmp_path / 'bad.arpa'))


@pytest.mark.parametrize('on', ['device', 'host'])
@pytest.mark.parametrize('order,pruned', [(1, False), (3, False), (4, False), (3, True)])
def test_device_and_host_lookups_equal_the_backoff_rule(order, pruned, on):
  model = arpa.estimate(corpus(seed=order), order)
  if pruned:  # as a pruned or foreign ARPA file can be: lower orders missing under stored higher ones
    for g in [g for g in model if len(g) == 2 and BOS_WORD not in g][::3]:
      del model[g]
    model[('zz',)] = (-3.0, 0.0)  # a word the vocabulary lacks: dropped from the tables
    model[('zz', 'a')] = (-0.5, 0.0)
  ids = {w: i + 5 for i, w in enumerate(WORDS)}
  ids.update({BOS_WORD: 2, EOS_WORD: 1, UNK_WORD: 3})
  names = {i: w for w, i in ids.items()}
  vocab = 12  # ids 10, 11 and 0 (pad) are no word of the model: looked up as <unk>
  tables = ngram_lm.build_tables(model, ids, vocab)
  words = [1, 3, 5, 6, 7, 8, 9, 10, 11]
  history = [2, 3, 5, 6, 7, 8, 9, 11]
  contexts = []
  for n in range(order):  # every context of up to order - 1 words, with <s> and -1 (before it) in front
    for c in itertools.product(history, repeat=n):
      if 2 not in c[1:]:
        contexts.append(c)
  rows, expected = [], []
  for c in contexts:
    padded = [-1] * (order - 1 - len(c)) + list(c)
    for w in words:
      rows.append((padded, w))
      names_c = [names.get(t, UNK_WORD) for t in c]
      expected.append(arpa.logprob(model, names_c, names.get(w, UNK_WORD)))
  context = jnp.asarray(np.array([r[0] for r in rows], np.int32).reshape(len(rows), order - 1))
  word = jnp.asarray([r[1] for r in rows], jnp.int32)
  if on == 'host':  # the same lookup in numpy, as dag_beam's host search runs it
    got = ngram_lm.lm_logprob(ngram_lm.host_tables(tables), np.asarray(context), np.asarray(word), np)
    assert isinstance(got, np.ndarray)
  else:
    got = ngram_lm.lm_logprob(tables, context, word)
  np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)
  assert all(math.isfinite(e) for e in expected)
