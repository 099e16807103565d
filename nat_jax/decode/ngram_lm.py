"""Target-side n-gram language models for `dag_beam` (DA-Transformer's beam search + n-gram LM).

An LM here is a backoff model in ARPA's terms: every stored n-gram g = (w_1 .. w_k) has a log10
probability of w_k after w_1 .. w_(k-1) and, when it is the context of longer n-grams, a log10
backoff weight, so

  log10 P(w | h) = logp(longest stored suffix s of h, then w) + sum of backoff(h's suffixes longer than s)

(a context missing from the model weighs 0). `estimate` builds one from token sequences with
interpolated Kneser-Ney smoothing (one absolute discount per order, D = n1 / (n1 + 2 n2), adjusted
counts: continuation counts below the top order except for n-grams starting with <s>); `write_arpa` /
`read_arpa` exchange models with KenLM and SRILM in the ARPA text format, whose words are the
sentencepiece pieces. For decoding (`LmTables`, `lm_logprob`) the n-grams live in a trie keyed
by their words in reverse order (w_k, w_(k-1), ...), children sorted by word id in one flat array,
so a lookup is order - 1 binary searches per walk, two walks (the probability and the backoffs),
batched over any shape, on the device (jax.numpy) or on the host (numpy, `host_tables`).
`python -m nat_jax.lm` estimates one from a run's training targets.
tests/test_ngram_lm.py checks the estimate (every context's distribution sums to 1) and the device
and host lookups against `logprob`, the plain-Python backoff rule.
"""
from __future__ import annotations

import collections
import math
from typing import Iterable, Mapping, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np

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


@flax.struct.dataclass
class LmTables:
  """A backoff model over token ids as a reversed-word trie: node 0 is the root, node n > 0 the
  n-gram read off the path to it backwards. Children of a node are consecutive and sorted by word."""
  word: jax.Array       # i32[N]: the word on the edge into each node (-1 for the root)
  first: jax.Array      # i32[N]: its first child
  end: jax.Array        # i32[N]: one past its last child
  logp: jax.Array       # f32[N]: log10 P(last word | the rest), NaN where the model stores no such n-gram
  backoff: jax.Array    # f32[N]: log10 backoff of the n-gram as a context (0 where none)
  known: jax.Array      # bool[V]: token ids with a unigram (others are looked up as <unk>)
  order: int = flax.struct.field(pytree_node=False, default=1)
  search_steps: int = flax.struct.field(pytree_node=False, default=1)  # binary-search iterations (widest fan-out)
  unk: int = flax.struct.field(pytree_node=False, default=0)


def build_tables(model: Ngrams, word_ids: Mapping[str, int], vocab_size: int) -> LmTables:
  """LmTables of `model` whose words are mapped by `word_ids` (n-grams with a word outside it are
  dropped: no output can contain them). <unk> must be in both. Built level by level with numpy: a
  depth-d node is a distinct (depth-(d-1) node, word) pair of some n-gram's reversed words, numbered
  in sorted order so that every node's children are consecutive and sorted by word."""
  if (UNK_WORD,) not in model or UNK_WORD not in word_ids:
    raise DataError(f'The n-gram model and the vocabulary both need {UNK_WORD}.')
  by_order = collections.defaultdict(list)  # k -> [(reversed word ids, log10 p, log10 backoff)]
  for g, (lp, bo) in model.items():
    if all(w in word_ids for w in g):
      by_order[len(g)].append(([word_ids[w] for w in reversed(g)], lp, bo))
  order = max(by_order)
  paths = {k: np.asarray([r[0] for r in rows], np.int64).reshape(len(rows), k) for k, rows in by_order.items()}
  values = {k: np.asarray([r[1:] for r in rows], np.float64).reshape(len(rows), 2) for k, rows in by_order.items()}
  base = max(int(p.max()) for p in paths.values()) + 1
  prefix = {k: np.zeros(len(p), np.int64) for k, p in paths.items()}  # node of each n-gram's depth-(d-1) prefix
  words, parents, logp, backoff = [np.full(1, -1)], [np.full(1, -1)], [np.full(1, np.nan)], [np.zeros(1)]
  size = 1
  for depth in range(1, order + 1):
    longer = [k for k in sorted(paths) if k >= depth]
    keys = np.concatenate([prefix[k] * base + paths[k][:, depth - 1] for k in longer])  # (parent, word)
    level, inverse = np.unique(keys, return_inverse=True)
    level_logp, level_backoff = np.full(len(level), np.nan), np.zeros(len(level))
    start = 0
    for k in longer:
      node = inverse[start:start + len(paths[k])]
      start += len(paths[k])
      if k == depth:  # a stored n-gram; inner nodes of longer ones stay NaN / 0 unless stored too
        level_logp[node], level_backoff[node] = values[k][:, 0], values[k][:, 1]
      prefix[k] = size + node
    words.append(level % base)
    parents.append(level // base)
    logp.append(level_logp)
    backoff.append(level_backoff)
    size += len(level)
  words, parents = np.concatenate(words), np.concatenate(parents)
  first = np.full(size, size, np.int64)
  end = np.zeros(size, np.int64)
  children = np.arange(1, size)
  np.minimum.at(first, parents[1:], children)
  np.maximum.at(end, parents[1:], children + 1)
  empty = first == size
  first[empty] = end[empty] = 0
  fan_out = int(np.max(end - first))
  logp = np.concatenate(logp)
  unigrams = np.arange(1, size)[(parents[1:] == 0) & ~np.isnan(logp[1:])]
  known = np.zeros(vocab_size, bool)
  known[words[unigrams][words[unigrams] < vocab_size]] = True
  return LmTables(word=jnp.asarray(words, jnp.int32), first=jnp.asarray(first, jnp.int32),
                  end=jnp.asarray(end, jnp.int32), logp=jnp.asarray(logp, jnp.float32),
                  backoff=jnp.asarray(np.concatenate(backoff), jnp.float32), known=jnp.asarray(known), order=order,
                  search_steps=max(1, math.ceil(math.log2(fan_out + 1))), unk=word_ids[UNK_WORD])


def child(tables: LmTables, node: jax.Array, word: jax.Array, xp=jnp) -> tuple[jax.Array, jax.Array]:
  """(child node, found) of nodes i32[...] along word i32[...]: a binary search over the node's children
  (xp: the array namespace of the tables and arguments, jax.numpy on the device, numpy on the host)."""
  lo, hi = tables.first[node], tables.end[node]
  last = tables.word.shape[0] - 1
  for _ in range(tables.search_steps):
    mid = (lo + hi) // 2
    right = tables.word[xp.minimum(mid, last)] < word
    open_ = lo < hi
    lo = xp.where(open_ & right, mid + 1, lo)
    hi = xp.where(open_ & ~right, mid, hi)
  found = (lo < tables.end[node]) & (tables.word[xp.minimum(lo, last)] == word)
  return xp.where(found, lo, 0), found


def lm_logprob(tables: LmTables, context: jax.Array, word: jax.Array, xp=jnp) -> jax.Array:
  """log10 P(word | context) f32[...] of words i32[...] after contexts i32[..., order - 1] (oldest
  first; -1 = before the sentence start, which the walk never passes), by the backoff rule. With
  xp=numpy it runs on the host, on `host_tables(tables)`."""
  def known(tokens):
    in_vocab = (tokens >= 0) & (tokens < tables.known.shape[0])
    return xp.where(in_vocab & tables.known[xp.clip(tokens, 0, tables.known.shape[0] - 1)], tokens,
                    xp.where(tokens >= 0, tables.unk, -1))
  word, context = known(word), known(context)
  node, _ = child(tables, xp.zeros_like(word), word, xp)  # the unigram (<unk>'s when unknown)
  prob, matched, alive = tables.logp[node], xp.ones_like(word), xp.ones(word.shape, bool)
  for j in range(1, tables.order):  # extend (.., word) backwards through the context
    token = context[..., -j]
    nxt, found = child(tables, node, token, xp)
    alive = alive & found & (token >= 0)
    stored = alive & ~xp.isnan(tables.logp[nxt])
    prob = xp.where(stored, tables.logp[nxt], prob)
    matched = xp.where(stored, j + 1, matched)
    node = xp.where(alive, nxt, node)
  node, alive, total = xp.zeros_like(word), xp.ones(word.shape, bool), xp.zeros(word.shape, xp.float32)
  for j in range(1, tables.order):  # the backoffs of the contexts longer than the match
    token = context[..., -j]
    nxt, found = child(tables, node, token, xp)
    alive = alive & found & (token >= 0)
    total = total + xp.where(alive & (j >= matched), tables.backoff[nxt], 0.0)
    node = xp.where(alive, nxt, node)
  return prob + total


def host_tables(tables: LmTables) -> LmTables:
  """The same tables as numpy arrays, for `lm_logprob(..., xp=numpy)` on the host."""
  return jax.tree_util.tree_map(np.asarray, tables)
