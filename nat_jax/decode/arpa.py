"""Backoff n-gram language models over sentencepiece pieces: estimation, the backoff rule, ARPA files.

An LM here is a backoff model in ARPA's terms: every stored n-gram g = (w_1 .. w_k) has a log10
probability of w_k after w_1 .. w_(k-1) and, when it is the context of longer n-grams, a log10
backoff weight, so

  log10 P(w | h) = logp(longest stored suffix s of h, then w) + sum of backoff(h's suffixes longer than s)

(a context missing from the model weighs 0). `estimate` builds one from token sequences with
interpolated Kneser-Ney smoothing (one absolute discount per order, D = n1 / (n1 + 2 n2), adjusted
counts: continuation counts below the top order except for n-grams starting with <s>); `logprob` is
the rule in plain Python; `write_arpa` / `read_arpa` exchange models with KenLM and SRILM in the ARPA
text format. `python -m nat_jax.lm` estimates one from a run's training targets; `dag_beam` reads one
into device tables (nat_jax.decode.ngram_lm). tests/unit/test_decode_ngram_lm.py checks the estimate (every
context's distribution sums to 1).
"""
from __future__ import annotations

import collections
import math
from typing import Iterable, Sequence

from nat_jax.errors import ConfigError, DataError
from nat_jax.files import atomic_output

BOS_WORD, EOS_WORD, UNK_WORD = '<s>', '</s>', '<unk>'
NO_PROB = -99.0  # ARPA's log10 probability of <s>, which is a context but never predicted
Ngrams = dict[tuple[str, ...], tuple[float, float]]  # (w_1 .. w_k) -> (log10 P(w_k | w_1 .. w_(k-1)), log10 backoff)


def estimate(sentences: Iterable[Sequence[str]], order: int) -> Ngrams:
  """Interpolated Kneser-Ney n-grams (orders 1 .. order) of sentences (words, without <s> / </s>),
  in backoff form. <unk> gets the mass the unigram discount spreads over the vocabulary."""
  if order < 1:
    raise ConfigError(f'An n-gram model needs order >= 1, got {order}.')
  raw = [collections.Counter() for _ in range(order + 1)]  # raw[k][g]: count of the k-gram g
  for words in sentences:
    s = (BOS_WORD, *words, EOS_WORD)
    for k in range(1, order + 1):
      for i in range(len(s) - k + 1):
        raw[k][s[i:i + k]] += 1
  del raw[1][(BOS_WORD,)]  # <s> is never predicted
  adjusted = [collections.Counter() for _ in range(order + 1)]
  adjusted[order] = raw[order]
  for k in range(order - 1, 0, -1):  # continuation counts: distinct words seen before g ...
    for g in raw[k + 1]:
      adjusted[k][g[1:]] += 1
    for g, n in raw[k].items():  # ... except after <s>, where nothing precedes: raw counts
      if g[0] == BOS_WORD:
        adjusted[k][g] = n
  vocabulary = len({g[0] for g in adjusted[1]} | {UNK_WORD})
  model: Ngrams = {}
  weights = {}  # context h -> log10 of its interpolation weight, which is its backoff
  for k in range(1, order + 1):
    counts = adjusted[k]
    histogram = collections.Counter(n for n in counts.values() if n <= 2)
    discount = histogram[1] / (histogram[1] + 2 * histogram[2]) if histogram[1] and histogram[2] else 0.5
    totals, types = collections.Counter(), collections.Counter()
    for g, n in counts.items():
      totals[g[:-1]] += n
      types[g[:-1]] += 1
    weight = {h: discount * types[h] / totals[h] for h in totals}
    if k == 1:
      counts = {**counts, (UNK_WORD,): counts.get((UNK_WORD,), 0)}
    for g, n in counts.items():
      h = g[:-1]
      # the lower order's probability of g's word after h minus its oldest word: stored, as a k-gram
      # with a (continuation) count has a (k-1)-gram suffix with one
      below = 1.0 / vocabulary if k == 1 else 10 ** model[g[1:]][0]
      model[g] = (math.log10(max(n - discount, 0.0) / totals[h] + weight[h] * below), 0.0)
    weights.update({h: math.log10(w) for h, w in weight.items() if h})
  if order > 1:
    model[(BOS_WORD,)] = (NO_PROB, 0.0)
  for h, bo in weights.items():
    model[h] = (model[h][0], bo)
  return model


def logprob(model: Ngrams, context: Sequence[str], word: str) -> float:
  """log10 P(word | context) by the backoff rule (context: the preceding words, oldest first; a word
  the model lacks is <unk>). The plain-Python reference of `lm_logprob`."""
  if (word,) not in model:
    word = UNK_WORD
  context = tuple(w if (w,) in model else UNK_WORD for w in context)
  backoff = 0.0
  for start in range(len(context) + 1):  # the longest context first
    h = context[start:]
    if h + (word,) in model:
      return model[h + (word,)][0] + backoff
    if h in model:
      backoff += model[h][1]
  raise KeyError(f'The model has no unigram {word!r} (nor {UNK_WORD!r}).')


def order_of(model: Ngrams) -> int:
  return max(len(g) for g in model)


def write_arpa(model: Ngrams, path: str):
  """The model as an ARPA file (\\data\\ counts, then \\k-grams: sections, log10 values)."""
  by_order = collections.defaultdict(list)
  for g, values in model.items():
    by_order[len(g)].append((g, values))
  top = order_of(model)
  with atomic_output(path) as f:
    f.write('\n\\data\\\n')
    for k in range(1, top + 1):
      f.write(f'ngram {k}={len(by_order[k])}\n')
    for k in range(1, top + 1):
      f.write(f'\n\\{k}-grams:\n')
      for g, (lp, bo) in sorted(by_order[k]):
        f.write(f'{lp:.6f}\t{" ".join(g)}' + (f'\t{bo:.6f}' if k < top and bo != 0.0 else '') + '\n')
    f.write('\n\\end\\\n')


def header_int(text: str, path: str, number: int, least: int = 0) -> int:
  """A count (or, least=1, an order) of an ARPA header line; DataError naming the line unless a whole
  number >= least."""
  if not text.strip().isdigit() or int(text) < least:
    raise DataError(f'{path}:{number}: {text!r} in a header line is not a whole number >= {least}; '
                    'is it an ARPA file?')
  return int(text)


def read_arpa(path: str) -> Ngrams:
  """An ARPA file's n-grams; DataError naming the line for anything malformed (NaN values included)."""
  model: Ngrams = {}
  expected, section = {}, 0
  with open(path, encoding='utf-8') as f:
    for number, line in enumerate(f, start=1):
      line = line.strip()
      if not line or line == '\\data\\':
        continue
      if line == '\\end\\':
        break
      if line.startswith('ngram ') and '=' in line:
        k, _, n = line[6:].partition('=')
        expected[header_int(k, path, number, 1)] = header_int(n, path, number)
      elif line.startswith('\\') and line.endswith('-grams:'):
        section = header_int(line[1:-7], path, number, 1)
      elif section:
        fields = line.split()
        try:
          lp = float(fields[0])
          g = tuple(fields[1:1 + section])
          bo = float(fields[1 + section]) if len(fields) > 1 + section else 0.0
        except (ValueError, IndexError):
          raise DataError(f'{path}:{number}: not an ARPA {section}-gram line: {line[:80]!r}') from None
        if len(g) != section:
          raise DataError(f'{path}:{number}: expected {section} words, got {line[:80]!r}')
        if not (lp <= 0.0 and math.isfinite(bo)):  # NaN fails both; -inf (probability 0) is a log-probability
          raise DataError(f'{path}:{number}: log10 probability {lp} / backoff {bo} of {" ".join(g)!r}: a '
                          'log-probability must be <= 0 and a backoff finite; the file is not a usable ARPA model.')
        model[g] = (lp, bo)
      else:
        raise DataError(f'{path}:{number}: unexpected line outside an n-gram section: {line[:80]!r}')
  found = collections.Counter(len(g) for g in model)
  if not model or any(found[k] != n for k, n in expected.items()):
    raise DataError(f'{path}: the header announces {expected} n-grams per order, the file holds {dict(found)}; '
                    'is it a complete ARPA file?')
  return model
