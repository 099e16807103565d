"""The server's batching: its composition (compose_batch) against brute force over every batch, its
worker's waiting rule against a stand-in translator."""
import itertools
import time

import numpy as np
import pytest

from nat_jax.deploy.server import MAX_PASSED, Batcher, Metrics, ServeConfig, compose_arrival, compose_batch
from nat_jax.run.translator import Translation


def brute_force(lengths, size, anchored):
  """Of every `size`-subset (holding the oldest, if `anchored`): the least length span, then the longest
  wait (smallest sum of arrival positions)."""
  best = None
  for chosen in itertools.combinations(range(len(lengths)), size):
    if anchored and 0 not in chosen:
      continue
    span = max(lengths[i] for i in chosen) - min(lengths[i] for i in chosen)
    key = (span, sum(chosen))
    if best is None or key < best[0]:
      best = (key, chosen)
  return best


@pytest.mark.parametrize('passed_over', [0, MAX_PASSED - 1, MAX_PASSED])
@pytest.mark.parametrize('seed', range(30))
def test_compose_batch_is_the_tightest_batch(seed, passed_over):
  anchored = passed_over >= MAX_PASSED
  rng = np.random.default_rng(seed)
  n = int(rng.integers(2, 10))
  size = int(rng.integers(1, n + 1))
  lengths = [int(x) for x in rng.integers(1, 8 if seed % 2 else 40, n)]  # few distinct lengths: many ties
  chosen = compose_batch(lengths, size, passed_over)
  assert chosen == sorted(chosen) and len(set(chosen)) == size and (chosen[0] == 0 or not anchored)
  (span, waited), _ = brute_force(lengths, size, anchored)
  assert max(lengths[i] for i in chosen) - min(lengths[i] for i in chosen) == span
  assert sum(chosen) == waited


def test_everything_fits_one_batch_and_arrival_takes_the_oldest():
  assert compose_batch([5, 1, 9], 3) == [0, 1, 2] and compose_batch([], 4) == []
  assert compose_arrival([5, 1, 9, 2], 2) == [0, 1]
  assert compose_batch([50, 10, 11, 49, 12, 51], 3) == [1, 2, 4]                 # the tightest three
  assert compose_batch([50, 10, 11, 49, 12, 51], 3, MAX_PASSED) == [0, 3, 5]    # the oldest's neighbours


def test_no_sentence_waits_more_than_max_passed_batches_beyond_those_before_it():
  """A queue refilled after every batch, the worker's anchoring rule: each sentence is taken within
  MAX_PASSED batches more than there were sentences waiting when it arrived, however long or short it
  is (a lone 200 among 1-3s included)."""
  rng = np.random.default_rng(0)
  queue, arrived_behind, waited, arrived_at, next_id = [], {}, {}, {}, 0
  lengths = {}
  for batches in range(300):
    while len(queue) < 40:
      lengths[next_id] = int(rng.choice([1, 2, 3, 200], p=[0.33, 0.33, 0.32, 0.02]))
      arrived_behind[next_id], waited[next_id], arrived_at[next_id] = len(queue), 0, batches
      queue.append(next_id)
      next_id += 1
    taken = compose_batch([lengths[i] for i in queue], 8, batches - arrived_at[queue[0]])
    gone = {queue[i] for i in taken}
    for i in queue:
      if i not in gone:
        waited[i] += 1
    queue = [i for i in queue if i not in gone]
  done = [i for i in waited if i not in queue]
  assert len(done) == 300 * 8
  assert all(waited[i] <= arrived_behind[i] + MAX_PASSED for i in done)
  assert any(waited[i] > arrived_behind[i] for i in done)  # composition did reorder


class RecordingTranslator:
  """Stands in for a Translator: records each batch's texts, translates a text to itself upper-cased."""

  def __init__(self):
    self.batches = []

  def translate_with_stats(self, texts, decoder=None, options=None, batch_size=None):
    self.batches.append(list(texts))
    return [Translation(t.upper(), {}) for t in texts]


def test_the_worker_waits_for_as_many_as_its_last_batch_held_and_a_lone_client_never_waits():
  translator = RecordingTranslator()
  batcher = Batcher(translator, ServeConfig(max_batch=8, max_wait_ms=60_000, warmup='none'), Metrics())
  try:
    key = ('greedy', ())
    for text in ('a', 'b', 'c'):  # one client, one sentence at a time: never waits the minute
      assert [t.text for t in batcher.submit([text], key).result(timeout=30)] == [text.upper()]
    four = batcher.submit(['d', 'e', 'f', 'g'], key)  # a batch of 4 ...
    assert [t.text for t in four.result(timeout=30)] == ['D', 'E', 'F', 'G']
    first = batcher.submit(['h'], key)  # ... so the next waits for 4 (or the minute)
    time.sleep(0.5)
    assert not first.done()
    rest = [batcher.submit([t], key) for t in 'ijk']
    assert [f.result(timeout=30)[0].text for f in [first] + rest] == ['H', 'I', 'J', 'K']
    assert translator.batches == [['a'], ['b'], ['c'], ['d', 'e', 'f', 'g'], ['h', 'i', 'j', 'k']]
  finally:
    batcher.stop(timeout=30)
