"""Where the test run's time goes: every test's seconds (setup, call and teardown together), grouped by what it
spends them on, written as a table that is committed (tests/durations.txt) so a change can see what it costs.

    python -m pytest -q --durations-table=tests/durations.txt

regenerates it (the README's test run otherwise; any -k / -m / -n works). Each worker measures its own tests:
in-process compile seconds (JAX's own compile events: tracing, lowering, XLA), the processes a test starts
(commands, the accelerator suite, git) and the trainings it runs in-process (`TrainLoop.run`, fixtures
included: a shared run is paid by the first test that asks for it). A test's kind is the first that holds:
`training` (it trains, in-process or through `nat_jax.train`), `commands` (it starts processes), `compiles`
(compiling is at least half its time), else `work`. Budgets are read here by people, never asserted.
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import os
import subprocess
import sys
import time

import pytest

COMPILE_EVENTS = ('/jax/core/compile/backend_compile_duration', '/jax/core/compile/jaxpr_to_mlir_module_duration',
                  '/jax/core/compile/jaxpr_trace_duration')
KINDS = ('training', 'commands', 'compiles', 'work')
TESTS = os.path.dirname(os.path.abspath(__file__))


@dataclasses.dataclass
class Cost:
  seconds: float = 0.0
  compile_seconds: float = 0.0
  launches: int = 0
  trainings: int = 0  # in-process TrainLoop.run calls and `nat_jax.train` processes

  def add(self, other: 'Cost'):
    for f in dataclasses.fields(self):
      setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

  def kind(self) -> str:
    if self.trainings:
      return 'training'
    if self.launches:
      return 'commands'
    return 'compiles' if self.compile_seconds >= self.seconds / 2 else 'work'


def pytest_addoption(parser):
  parser.addoption('--durations-table', default='', metavar='PATH',
                   help='write every test\'s seconds, grouped by cost (trainings, commands, compiles, work), to PATH')


class Meter:
  """This process's counters, read before and after each test phase."""

  def __init__(self):
    self.now = Cost()

  def install(self):
    from jax import monitoring

    from nat_jax.training.loop import TrainLoop

    def on_event(event, duration, **_):
      if event in COMPILE_EVENTS:
        self.now.compile_seconds += duration
    monitoring.register_event_duration_secs_listener(on_event)
    popen_init, run = subprocess.Popen.__init__, TrainLoop.run

    def counted_popen(popen, args, *a, **k):
      popen_init(popen, args, *a, **k)
      if not started_by_a_test():  # a library's own helper process (e.g. platform's uname) is not counted
        return
      self.now.launches += 1
      words = [str(arg) for arg in (args if isinstance(args, (list, tuple)) else [args])]
      self.now.trainings += ('nat_jax.train' in words and '--help' not in words) or any(
          w.endswith('accelerator_suite.sh') for w in words)

    def counted_run(loop, *a, **k):
      self.now.trainings += 1
      return run(loop, *a, **k)
    subprocess.Popen.__init__, TrainLoop.run = counted_popen, counted_run

  def snapshot(self) -> Cost:
    return dataclasses.replace(self.now)


def started_by_a_test() -> bool:
  frame = sys._getframe(2)
  while frame is not None:
    if frame.f_code.co_filename.startswith(TESTS) and frame.f_code.co_filename != __file__:
      return True
    frame = frame.f_back
  return False


class Table:
  """The controller's (or the only process's) collection of every test's cost, written at the end."""

  def __init__(self, path: str):
    self.path, self.costs, self.start = path, collections.defaultdict(Cost), time.time()

  def record(self, report):
    for name, value in report.user_properties:
      if name == 'cost':
        self.costs[report.nodeid].add(Cost(**value))

  def write(self, workers: int):
    wall = time.time() - self.start
    rows = sorted(self.costs.items(), key=lambda kv: -kv[1].seconds)
    totals = {k: Cost() for k in KINDS}
    counts = collections.Counter(c.kind() for _, c in rows)
    for _, c in rows:
      totals[c.kind()].add(c)
    total = Cost()
    for c in totals.values():
      total.add(c)
    from nat_jax.metrics.timing import cpu_model  # at the end of the run: the plugin loads before JAX is set up
    lines = [f'# Regenerate: python -m pytest -q --durations-table={self.path} (see tests/durations.py)',
             f'# {datetime.date.today()}, {cpu_model()}, {os.cpu_count()} cores, '
             f'{workers} worker(s); {len(rows)} tests, {wall:.0f} s of wall time, {total.seconds:.0f} s of tests',
             f'# in-process compiles {total.compile_seconds:.0f} s, {total.launches} processes started, '
             f'{total.trainings} trainings', '#', '# kind       tests  seconds  compile_s  launches  trainings']
    for k in KINDS:
      t = totals[k]
      lines.append(f'# {k:<10} {counts[k]:>5} {t.seconds:>8.1f} {t.compile_seconds:>10.1f} {t.launches:>9} '
                   f'{t.trainings:>10}')
    lines += ['', f'{"seconds":>8} {"compile_s":>9} {"launches":>8} {"trainings":>9}  {"kind":<9} test']
    lines += [f'{c.seconds:>8.2f} {c.compile_seconds:>9.2f} {c.launches:>8} {c.trainings:>9}  {c.kind():<9} {node}'
              for node, c in rows]
    with open(self.path, 'w', encoding='utf-8') as f:
      f.write('\n'.join(lines) + '\n')


def pytest_configure(config):
  if not config.getoption('durations_table'):
    return
  if not hasattr(config, 'workerinput'):  # the controller or the only process: collects and writes
    config.pluginmanager.register(Collector(Table(config.getoption('durations_table'))), 'durations-table')
  if hasattr(config, 'workerinput') or config.getoption('numprocesses', None) in (None, 0):  # runs the tests
    meter = Meter()
    meter.install()
    config.pluginmanager.register(Measurer(meter), 'durations-meter')


class Collector:
  def __init__(self, table: Table):
    self.table = table

  def pytest_runtest_logreport(self, report):
    self.table.record(report)

  def pytest_sessionfinish(self, session):
    workers = session.config.getoption('numprocesses', None) or 1
    self.table.write(workers if isinstance(workers, int) else 1)


class Measurer:
  def __init__(self, meter: Meter):
    self.meter, self.before = meter, None

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_makereport(self, item, call):
    outcome = yield
    report, now = outcome.get_result(), self.meter.snapshot()
    before = self.before or Cost()
    report.user_properties.append(('cost', {
        'seconds': report.duration, 'compile_seconds': now.compile_seconds - before.compile_seconds,
        'launches': now.launches - before.launches, 'trainings': now.trainings - before.trainings}))
    self.before = now
