"""Target-side n-gram LMs on the device for `dag_beam`: a backoff model (nat_jax.decode.arpa) as
`LmTables`, a trie keyed by its n-grams' words in reverse order (w_k, w_(k-1), ...), children sorted by
word id in one flat array, so a lookup (`lm_logprob`) is order - 1 binary searches per walk, two walks
(the probability and the backoffs), batched over any shape, on the device (jax.numpy) or on the host
(numpy, `host_tables`). tests/unit/test_decode_ngram_lm.py checks both lookups against `arpa.logprob`, the
plain-Python backoff rule.
"""
from __future__ import annotations

import collections
import math
from typing import Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np

from nat_jax.decode.arpa import UNK_WORD, Ngrams
from nat_jax.errors import DataError


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
