"""The server's batching: its composition (compose_batch) against brute force over every batch, its
worker's waiting rule against stand-in translators, the benchmark's offline closed loop."""
import itertools
import threading
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


def test_the_worker_waits_for_as_many_as_were_outstanding_and_a_lone_client_never_waits():
  translator = RecordingTranslator()
  batcher = Batcher(translator, ServeConfig(max_batch=8, max_wait_ms=60_000, warmup='none'), Metrics())
  try:
    key = ('greedy', ())
    for text in ('a', 'b', 'c'):  # one client, one sentence at a time: never waits the minute
      assert [t.text for t in batcher.submit([text], key).result(timeout=30)] == [text.upper()]
    four = batcher.submit(['d', 'e', 'f', 'g'], key)  # a batch of 4 ...
    assert [t.text for t in four.result(timeout=30)] == ['D', 'E', 'F', 'G']
    first = batcher.submit(['h'], key)  # ... 4 were outstanding, so the next waits for 4 (or the minute)
    time.sleep(0.5)
    assert not first.done()
    rest = [batcher.submit([t], key) for t in 'ijk']
    assert [f.result(timeout=30)[0].text for f in [first] + rest] == ['H', 'I', 'J', 'K']
    assert translator.batches == [['a'], ['b'], ['c'], ['d', 'e', 'f', 'g'], ['h', 'i', 'j', 'k']]
  finally:
    batcher.stop(timeout=30)


class GatedTranslator(RecordingTranslator):
  """A RecordingTranslator whose batches finish only once the test opens the gate."""

  def __init__(self):
    super().__init__()
    self.gate, self.started = threading.Event(), threading.Semaphore(0)

  def translate_with_stats(self, texts, decoder=None, options=None, batch_size=None):
    self.started.release()
    assert self.gate.wait(timeout=60)
    return super().translate_with_stats(texts, decoder, options, batch_size)


def test_clients_taking_turns_are_gathered_again_into_one_batch():
  """4 sentences decode while 4 other clients' sentences arrive: 8 were outstanding. Once free, the worker
  waits for the first 4 clients to send again and decodes all 8 together, though the 4 waiting arrived
  more than max_wait_ms before it was free (the wait counts from then). A worker that waited only for as
  many as its last batch held (4) took the 4 at once, and the two halves took turns from then on."""
  translator = GatedTranslator()
  batcher = Batcher(translator, ServeConfig(max_batch=8, max_wait_ms=2_000, warmup='none'), Metrics())
  key = ('greedy', ())
  try:
    first = batcher.submit(['a', 'b', 'c', 'd'], key)
    assert translator.started.acquire(timeout=30)  # decoding the first 4, the gate closed
    others = [batcher.submit([t], key) for t in 'efgh']
    time.sleep(2.5)  # the 4 others have waited longer than max_wait_ms
    translator.gate.set()
    assert [t.text for t in first.result(timeout=30)] == ['A', 'B', 'C', 'D']
    time.sleep(0.2)
    assert not any(f.done() for f in others)  # waiting for the first 4 clients to come back
    back = [batcher.submit([t], key) for t in 'ijkl']
    assert [f.result(timeout=30)[0].text for f in others + back] == list('EFGHIJKL')
    assert translator.batches == [list('abcd'), list('efghijkl')]
  finally:
    translator.gate.set()
    batcher.stop(timeout=30)


@pytest.mark.parametrize('compose', ['length', 'arrival'])
@pytest.mark.parametrize('clients,max_batch', [(1, 64), (8, 4), (32, 16), (128, 32), (5, 5), (64, 64)])
def test_closed_loop_takes_each_sentence_once_from_what_has_arrived(compose, clients, max_batch):
  """benchmarks/serve_load's offline closed loop: `clients` clients, each sending its next sentence when
  answered, all of them waiting whenever the worker is free."""
  from benchmarks.systems.serve_load import closed_loop_batches
  lengths = np.random.default_rng(clients).integers(1, 200, 300)
  stream = ['x' * int(n) for n in lengths]
  batches = closed_loop_batches(stream, clients, max_batch, compose)
  flat = [i for batch in batches for i in batch]
  assert sorted(flat) == list(range(len(stream)))  # each once
  taken = 0
  for batch in batches:
    assert max(batch) < clients + taken  # only sentences sent: one per client, the next once answered
    assert len(batch) == min(max_batch, clients, len(stream) - taken)  # every client's sentence waits
    taken += len(batch)
  if compose == 'arrival':
    assert flat == list(range(len(stream)))
  elif clients > max_batch:  # a choice to make: the first batch is the tightest of the first `clients`
    first = sorted(lengths[:clients])
    assert np.ptp(lengths[batches[0]]) == min(first[i + max_batch - 1] - first[i]
                                              for i in range(clients - max_batch + 1))
