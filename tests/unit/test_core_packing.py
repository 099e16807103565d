"""Packed training rows (nat_jax.core.packing, PackedTrainBatches): the batcher places every pair once
per epoch, within the row, with its segment ids and positions; a packed batch gives every token-level
method the loss sums and gradients of the same pairs alone, one per row (dropout off)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.data import PackedTrainBatches
from nat_jax.errors import ConfigError
from nat_jax.methods import get_method
from tests.support import random_model, tiny_config

VOCAB, ROWS, LENGTH, K = 40, 3, 24, 4


def random_pairs(n: int, seed: int = 0, longest: int = 12):
  """n (source, target) int32 arrays of 1..longest tokens incl. the final EOS (id 1), ids 5..VOCAB-1."""
  rng = np.random.default_rng(seed)
  def seq():
    return np.append(rng.integers(5, VOCAB, rng.integers(0, longest)), 1).astype(np.int32)
  return [(seq(), seq()) for _ in range(n)]


def segments_of(batch, side: str, r: int) -> dict[int, np.ndarray]:
  """{segment id: its tokens (trailing padding cut)} of row r, read straight off the packed arrays."""
  out = {}
  for k in sorted(set(batch[f'{side}_segments'][r]) - {0}):
    where = batch[f'{side}_segments'][r] == k
    np.testing.assert_array_equal(batch[f'{side}_positions'][r][where], np.arange(where.sum()))  # restart per pair
    assert np.all(np.diff(np.flatnonzero(where)) == 1), 'a pair occupies consecutive slots'
    tokens = batch[side][r][where]
    out[k] = tokens[:np.flatnonzero(tokens)[-1] + 1] if tokens.any() else tokens
  return out


def alone_rows(batch) -> dict[str, jnp.ndarray]:
  """The packed batch's pairs one per row, pair k of row r on row r * K + k - 1 (numpy, from the arrays)."""
  out = {side: np.zeros((ROWS * K, LENGTH), np.int32) for side in ('source', 'target')}
  for r in range(ROWS):
    for side in ('source', 'target'):
      for k, tokens in segments_of(batch, side, r).items():
        out[side][r * K + k - 1, :len(tokens)] = tokens
  return {side: jnp.asarray(x) for side, x in out.items()}


def test_packed_batches_hold_every_pair_once_per_epoch_in_place():
  pairs = random_pairs(60)
  batches = PackedTrainBatches(pairs, (ROWS, LENGTH), seed=3, max_segments=K, slot_multiple=2)
  seen, step = [], 0
  while batches.epoch_of(step) == 0:
    b = batches(step)
    assert {key: x.shape for key, x in b.items()} == {key: (ROWS, LENGTH) for key in b}
    for r in range(ROWS):
      src, tgt = segments_of(b, 'source', r), segments_of(b, 'target', r)
      assert src.keys() == tgt.keys() and len(src) <= K
      assert all(np.sum(b['target_segments'][r] == k) % 2 == 0 for k in tgt)  # reserved: a multiple of 2
      seen += [(tuple(src[k]), tuple(tgt[k])) for k in src]
    step += 1
  assert sorted(seen) == sorted((tuple(s), tuple(t)) for s, t in pairs)
  n_rows = sum(len(s) + 0 for s, _ in pairs)
  assert step * ROWS * LENGTH < 2 * n_rows, 'packing should fill rows (pairs alone would take 60 rows)'
  # a pure function of (seed, step): a fresh batcher asked for a later step first gives the same batch
  again = PackedTrainBatches(pairs, (ROWS, LENGTH), seed=3, max_segments=K, slot_multiple=2)
  for s in (step + 2, 1, step):
    for key, x in again(s).items():
      np.testing.assert_array_equal(x, batches(s)[key])


def test_packed_batches_split_rows_between_processes_and_mix_raw_targets():
  pairs = random_pairs(40, seed=1)
  raw = [np.array([7, 8, 9, 1], np.int32)] * len(pairs)
  whole = PackedTrainBatches(pairs, (4, LENGTH), seed=2, max_segments=K, raw_targets=raw, raw_prob=0.5)
  halves = [PackedTrainBatches(pairs, (4, LENGTH), seed=2, max_segments=K, raw_targets=raw, raw_prob=0.5,
                               process_index=p, process_count=2) for p in range(2)]
  targets = set()
  for step in range(5):
    b = whole(step)
    for key, x in b.items():
      np.testing.assert_array_equal(np.concatenate([h(step)[key] for h in halves]), x)
    targets |= {tuple(t) for r in range(4) for t in segments_of(b, 'target', r).values()}
  assert (7, 8, 9, 1) in targets and len(targets) > 1  # both kinds of target occur


def test_packed_batches_reject_a_target_longer_than_the_row():
  with pytest.raises(ValueError, match='slots'):
    PackedTrainBatches([(np.array([5, 1]), np.arange(5, 28, dtype=np.int32))], (2, 24), seed=0, max_segments=2,
                       slot_multiple=5)  # 23 tokens fit, their 25 reserved slots do not


def loss_and_grads(method, params, batch, step=3):
  def f(p):
    sums = method.loss(p, batch, jax.random.PRNGKey(5), step=jnp.int32(step), deterministic=True)
    return sums['loss'], sums
  (_, sums), grads = jax.value_and_grad(f, has_aux=True)(params)
  return sums, grads


def assert_close(a, b):
  for key in ('loss', 'nll', 'tokens', 'correct'):
    np.testing.assert_allclose(a[key], b[key], rtol=2e-5, atol=1e-4, err_msg=key)
  flat_a, flat_b = jax.tree_util.tree_leaves(a['grads']), jax.tree_util.tree_leaves(b['grads'])
  for x, y in zip(flat_a, flat_b):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


METHODS = {
    'at': {'model.method': 'at'},
    'ibdecoder': {'model.method': 'ibdecoder', 'ibdecoder.h': 2, 'ibdecoder.c': 1},
    'sa': {'model.method': 'ibdecoder', 'ibdecoder.h': 1, 'ibdecoder.c': 2},
    'imdecoder': {'model.method': 'ibdecoder', 'ibdecoder.h': 4, 'ibdecoder.c': 1},
    'cmlm': {'model.method': 'cmlm'},
    'hrt': {'model.method': 'hrt', 'hrt.chunk': 2, 'model.relative_window': 4},
}


@pytest.mark.parametrize('name', sorted(METHODS))
def test_a_packed_batch_gives_the_losses_and_gradients_of_its_pairs_alone(corpus, name):
  method, params = random_model(corpus, VOCAB, **METHODS[name], **{'data.pack': K})
  batches = PackedTrainBatches(random_pairs(30, seed=4), (ROWS, LENGTH), seed=0, max_segments=K,
                               slot_multiple=method.slot_multiple)
  packed = {key: jnp.asarray(x) for key, x in batches(0).items()}
  assert int(packed['target_segments'].max()) >= 2, 'the test needs rows holding several pairs'
  sums, grads = loss_and_grads(method, params, packed)
  alone_sums, alone_grads = loss_and_grads(method, params, alone_rows(batches(0)))
  assert_close(dict(sums, grads=grads), dict(alone_sums, grads=alone_grads))
  if name in ('at', 'ibdecoder', 'imdecoder'):  # no random masking: each pair in a batch of its own adds up too
    alone = alone_rows(batches(0))
    real = [i for i in range(ROWS * K) if alone['target'][i].any()]
    parts = [loss_and_grads(method, params, {side: x[i:i + 1] for side, x in alone.items()}) for i in real]
    total = {key: sum(p[0][key] for p in parts) for key in ('loss', 'nll', 'tokens', 'correct')}
    total['grads'] = jax.tree_util.tree_map(lambda *g: sum(g), *[p[1] for p in parts])
    assert_close(dict(sums, grads=grads), total)


def test_packing_a_method_that_cannot_is_a_config_error(corpus):
  with pytest.raises(ConfigError, match='data.pack=4.*dat'):
    get_method(tiny_config(corpus, **{'model.method': 'dat', 'data.pack': 4}), VOCAB)
