"""The serving schedules benchmarks.systems.continuous_batching prices, on cases worked out by hand: the rows
every step runs (the loop's shrink stages, the refills), the cache sizes, the encoder calls."""
import random

from benchmarks.systems.batch_schedules import batch_schedule, continuous_schedule, cost, padded_width, slots_for


def steps(calls):
  return [shape for kind, shape in calls if kind == 'step']


def encoders(calls):
  return [shape for kind, shape in calls if kind == 'encoder']


def test_one_client_runs_each_sentence_alone_either_way():
  lengths, widths = [3, 1, 2], [5, 9, 20]
  for calls, row_steps in (batch_schedule(lengths, widths, 1), continuous_schedule(lengths, widths, 1, 1)):
    assert row_steps == sum(lengths)  # no idle row
    assert [rows for rows, _, _ in steps(calls)] == [1] * sum(lengths)
    assert [rows for rows, _ in encoders(calls)] == [1, 1, 1]


def test_batch_at_a_time_shrinks_to_a_quarter_once_no_more_are_live():
  # 16 rows: one sentence of 10 steps, fifteen of 1. Step 0 runs 16 rows; then one row is live
  # (<= 16 / 4), so steps 1..9 run 4 rows (the smallest stage): 16 + 9 * 4 row-steps.
  calls, row_steps = batch_schedule([10] + [1] * 15, [8] * 16, 16)
  assert [rows for rows, _, _ in steps(calls)] == [16] + [4] * 9
  assert row_steps == 52 and encoders(calls) == [(16, 8)]


def test_batch_at_a_time_runs_each_batch_to_its_longest():
  calls, row_steps = batch_schedule([5, 1, 1, 1, 2, 2], [8, 8, 8, 8, 30, 12], 4)
  # batch 1: 4 rows x 5 steps (4 rows cannot shrink); batch 2: 2 sentences -> 2 rows x 2 steps, width 32
  assert row_steps == 4 * 5 + 2 * 2
  assert encoders(calls) == [(4, 8), (2, 32)]
  assert steps(calls)[-1] == (2, 32, 32)


def test_continuous_refills_a_finished_row_at_the_next_boundary():
  # 2 rows, refills every step: sentence 0 (3 steps) keeps row 0; sentences 1, 2, 3 (1 step each)
  # take row 1 in turn: 3 steps of 2 rows, no idle row-step, encoder calls of 2, 1 and 1 rows.
  calls, row_steps = continuous_schedule([3, 1, 1, 1], [8, 8, 8, 40], 2, 1)
  assert row_steps == 6 and len(steps(calls)) == 3
  assert [rows for rows, _ in encoders(calls)] == [2, 1, 1]
  assert encoders(calls)[-1] == (1, 48)  # a refill encodes at its own sentences' width
  assert steps(calls)[-1] == (2, 32, 48)  # the memory is as wide as the widest live row


def test_continuous_idles_a_finished_row_until_the_stage_ends():
  # refills every 4 steps: row 1's sentence ends after 1 step and the row idles 3 steps; then sentence
  # 2 runs its 4 steps beside a free row (2 rows cannot shrink): 16 row-steps for 9 tokens
  calls, row_steps = continuous_schedule([4, 1, 4], [8, 8, 8], 2, 4)
  assert row_steps == 2 * 4 + 2 * 4 and len(steps(calls)) == 8


def test_every_sentence_gets_its_steps_and_slots_follow_the_furthest_row():
  rng = random.Random(0)
  lengths = [rng.randint(1, 90) for _ in range(40)]
  widths = [rng.randint(2, 100) for _ in range(40)]
  for clients in (1, 4, 16):
    for k in (1, 3, 8):
      calls, row_steps = continuous_schedule(lengths, widths, clients, k)
      assert row_steps >= sum(lengths) and len(encoders(calls)) <= len(lengths)
      assert sum(rows for rows, _ in encoders(calls)) >= len(lengths)  # every sentence encoded (rows padded)
      assert all(slots in (32, 64, 128) for _, slots, _ in steps(calls))
    calls, row_steps = batch_schedule(lengths, widths, clients)
    assert row_steps >= sum(lengths)


def test_helpers_and_cost():
  assert [padded_width(w) for w in (1, 8, 9, 33, 87, 128)] == [8, 8, 16, 48, 96, 128]
  assert [slots_for(t) for t in (0, 31, 32, 64, 127)] == [32, 32, 64, 128, 128]
  calls = [('encoder', (2, 8)), ('step', (2, 32, 8)), ('step', (2, 32, 8))]
  assert cost(calls, {(2, 32, 8): 0.5}, {(2, 8): 2.0}) == 3.0
  assert cost(calls, {(2, 32, 8): 0.5}, {(2, 8): 2.0}, ('encoder',)) == 2.0
