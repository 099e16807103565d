"""nat_jax.training.bookkeeping: the metrics log survives a kill in the middle of an append (a torn last line is
dropped, said, and the run resumes), a resume drops only what was logged past the resumed step, and a log that is
not a regular file is never read back (a symlink to a device would read without end)."""
import json
import logging
import os

from nat_jax.training.bookkeeping import MetricsLog


def records(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


def logged(tmp_path, steps):
  log = MetricsLog(str(tmp_path), 0, True)
  for step in steps:
    log.write(step, 'train', {'loss': 10.0 - step})
  log.close()
  return tmp_path / 'metrics.jsonl'


def test_a_torn_last_line_is_dropped_and_the_run_resumes(tmp_path, caplog):
  path = logged(tmp_path, (2, 4))
  with open(path, 'a') as f:
    f.write('{"step": 6, "split": "tra')  # killed mid-append
  with caplog.at_level(logging.WARNING, logger='nat_jax'):
    resumed = MetricsLog(str(tmp_path), 4, True)
  resumed.write(6, 'train', {'loss': 0.5})
  resumed.close()
  assert [(r['step'], r['loss']) for r in records(path)] == [(2, 8.0), (4, 6.0), (6, 0.5)]
  assert any('1 unreadable line' in r.getMessage() for r in caplog.records), caplog.text


def test_garbage_and_overlong_lines_are_dropped_and_the_rest_kept(tmp_path):
  path = logged(tmp_path, (2,))
  with open(path, 'a') as f:
    f.write('not json\n' + '[1, 2]\n' + '{"split": "train"}\n' + 'x' * (3 << 20) + '\n')
  with open(path, 'a') as f:
    f.write(json.dumps({'step': 4, 'split': 'train', 'loss': 6.0}) + '\n')
  MetricsLog(str(tmp_path), 4, True).close()
  assert [r['step'] for r in records(path)] == [2, 4]


def test_resume_keeps_a_clean_log_as_it_is(tmp_path):
  path = logged(tmp_path, (2, 4))
  before = os.stat(path)
  MetricsLog(str(tmp_path), 4, True).close()
  assert os.stat(path).st_ino == before.st_ino and [r['step'] for r in records(path)] == [2, 4]
  MetricsLog(str(tmp_path), 2, True).close()
  assert [r['step'] for r in records(path)] == [2]


def test_a_log_that_is_not_a_file_is_not_read_back(tmp_path):
  """A FIFO stands for any device: opening it to read would block, reading /dev/zero would not end."""
  os.mkfifo(tmp_path / 'metrics.jsonl')
  MetricsLog(str(tmp_path), 4, True).close()  # returns: nothing is read from the FIFO
  assert (tmp_path / 'metrics.jsonl').is_fifo()
