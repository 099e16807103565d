"""The accelerator suite's plan and budget (benchmarks/suite/suite_plan.py): the plan's arithmetic against a hand count,
the budget's bookkeeping, and how a stage is stopped at its time."""
import sys

import pytest

from benchmarks.suite import suite_plan

UNITS = suite_plan.Units(start_s=10.0, train_compile_s=30.0, decode_compile_s=2.0, greedy_step_ms=1.0)


def test_fixed_stages_cost_their_starts_compiles_and_steps():
  s = suite_plan.Settings(distill_widths=5, distill_sentences=1000, distill_batch=100, decode_steps=10,
                          bench_decoders=3, bench_widths_b1=2, bench_widths_b64=4, bench_sentences=128,
                          bench_latency_sentences=4, bench_batch1_runs=2, bench_step_factor=1.0)
  rows = {r['stage']: r for r in suite_plan.fixed_stages(s, UNITS)}
  assert rows['distill']['seconds'] == pytest.approx(10 + 5 * 2 + 10 * 10 * 1e-3)  # 10 batches x 10 steps x 1 ms
  # 3 decoders x (2 + 4) programs; calls: 3 x (4 sentences x 2 runs + 2 x 2 batches of 64), 10 steps each
  assert rows['bench']['compiles'] == 18
  assert rows['bench']['seconds'] == pytest.approx(10 + 18 * 2 + 3 * (8 + 4) * 10 * 1e-3)


def test_trainings_share_what_the_fixed_stages_leave():
  s = suite_plan.Settings(train_buckets=2)
  fixed = sum(r['seconds'] for r in suite_plan.fixed_stages(s, UNITS))
  rows, met = suite_plan.plan(1000.0, s, UNITS)
  assert met and [r['stage'] for r in rows] == list(s.stages)
  assert sum(r['seconds'] for r in rows) + suite_plan.RESULTS_SECONDS == pytest.approx(1000.0)
  left = 1000.0 - suite_plan.RESULTS_SECONDS - fixed - 3 * (10 + 2 * 30)
  work = {r['stage']: r['work_s'] for r in rows if r['stage'] in suite_plan.TRAININGS}
  assert work == pytest.approx({t: left * suite_plan.TRAINING_SHARES[t] for t in suite_plan.TRAININGS})
  only_teacher, met = suite_plan.plan(1000.0, suite_plan.Settings(stages=('teacher', 'bench')), UNITS)
  assert met and only_teacher[0]['work_s'] == pytest.approx(
      1000.0 - suite_plan.RESULTS_SECONDS - only_teacher[1]['seconds'] - 40)  # the whole rest, share renormalised


def test_a_budget_below_the_fixed_costs_is_not_met():
  s = suite_plan.Settings()
  fixed = sum(r['seconds'] for r in suite_plan.fixed_stages(s, UNITS)) + 3 * 40 + suite_plan.RESULTS_SECONDS
  assert not suite_plan.plan(fixed + 3 * suite_plan.MIN_TRAINING_SECONDS - 1, s, UNITS)[1]
  assert suite_plan.plan(fixed + 3 * suite_plan.MIN_TRAINING_SECONDS + 1, s, UNITS)[1]


def test_a_stage_gets_the_savings_and_loses_the_overruns_of_earlier_stages():
  planned = {'a': 100.0, 'b': 50.0, 'c': 30.0}
  order = list(planned)
  deadline = 180.0
  assert suite_plan.stage_timeout(planned, order, 'a', 0.0, deadline) == 100.0
  assert suite_plan.stage_timeout(planned, order, 'b', 80.0, deadline) == 70.0  # a saved 20 s
  assert suite_plan.stage_timeout(planned, order, 'b', 120.0, deadline) == 30.0  # a overran by 20 s
  assert suite_plan.stage_timeout(planned, order, 'c', 170.0, deadline) == 10.0
  assert suite_plan.stage_timeout(planned, order, 'c', 200.0, deadline) == 1.0  # past the deadline: stopped at once


SLEEPER = ('import signal, sys, time\n'
           'if sys.argv[1] == "save": signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n'
           'else: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
           'time.sleep(60)\n')


@pytest.mark.parametrize('behaviour, status', [('save', 'stopped'), ('ignore', 'failed')])
def test_a_stage_is_stopped_at_its_time(tmp_path, monkeypatch, behaviour, status):
  """SIGTERM at its time: a stage that saves and exits 143 (nat_jax.train) is 'stopped' and marked done; one
  that ignores it is killed after the grace and is 'failed' (no marker: a rerun runs it again)."""
  monkeypatch.setattr(suite_plan, 'STOP_GRACE_S', 1)
  timings = {}
  got = suite_plan.run_stage('teacher', [sys.executable, '-c', SLEEPER, behaviour], str(tmp_path), timings,
                                    seconds=1)
  assert got == status and timings['teacher'] < 30
  assert (tmp_path / 'teacher.done').exists() == (status == 'stopped')
