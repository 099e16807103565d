"""Sequence-level distillation: `python -m nat_jax.distill` and training on its output."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from nat_jax import decode
from nat_jax.data import TrainBatches, load_split
from nat_jax.data.sources import DataError, DataNotFoundError
from nat_jax.errors import ConfigError, DistillError
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run
from nat_jax.training.distill import distill
from nat_jax.training.loop import training_batches
from tests.support import REPO, tiny_config


def read_tsv(path):
  with open(path, encoding='utf-8', newline='') as f:
    return [line.split('\t') for line in f.read().split('\n')[:-1]]


@pytest.fixture(scope='module')
def distilled(trained_run, tmp_path_factory):
  """(teacher run, out dir) of a 40-example greedy distillation in chunks of 3 sentences."""
  run = load_run(trained_run)
  out = str(tmp_path_factory.mktemp('distilled'))
  distill(run, 'greedy', {}, out, ['train', 'validation'], limit=40, batch_size=8, chunk_sentences=3,
         teacher_workdir=trained_run)
  return run, out


def test_files_are_line_aligned_with_the_split(distilled):
  """One line per example in the split's order: its source, the translation `translate` makes of
  it with the same decoder, and its references; the manifest says what made them."""
  run, out = distilled
  decode_fn, _ = decode.build_decoder(run.method, 'greedy', {})
  for split, size in (('train', 40), ('validation', 12)):
    examples = load_split(run.config.data, split)[:40]
    rows = read_tsv(os.path.join(out, f'{split}.tsv'))
    assert len(rows) == size == len(examples)
    want, _ = translate_texts(run, [e.source for e in examples], decode_fn, 5)
    assert [r[0] for r in rows] == [e.source for e in examples]
    assert [r[1] for r in rows] == want
    assert [tuple(r[2:]) for r in rows] == [e.references for e in examples]
  with open(os.path.join(out, 'manifest.json')) as f:
    manifest = json.load(f)
  assert manifest['decoder'] == 'greedy' and manifest['limit'] == 40 and manifest['step'] == 8
  assert {s: e['examples'] for s, e in manifest['splits'].items()} == {'train': 40, 'validation': 12}


def test_interrupted_distillation_resumes_to_the_same_files(distilled, tmp_path):
  """SIGKILL after the first chunks, rerun the same command: it keeps the finished chunks and ends
  with the bytes of the uninterrupted distillation."""
  run, whole = distilled
  out = str(tmp_path / 'out')
  command = [sys.executable, '-m', 'nat_jax.distill', f'--workdir={run_dir(run)}', f'--out={out}', '--decoder=greedy',
             '--limit=40', '--batch_size=8', '--chunk_sentences=3']
  proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  work = os.path.join(out, '.work', 'train')
  deadline = time.time() + 300
  while time.time() < deadline and len([f for f in os.listdir(work) if f.endswith('.txt')] if os.path.isdir(work)
                                        else []) < 2:
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  finished = {f: os.path.getmtime(os.path.join(work, f)) for f in os.listdir(work) if f.endswith('.txt')}
  assert 2 <= len(finished) < 14 and not os.path.exists(os.path.join(out, 'train.tsv'))
  result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-2000:]
  for f, mtime in finished.items():  # finished chunks were not decoded again
    assert os.path.getmtime(os.path.join(work, f)) == mtime
  for split in ('train', 'validation'):
    with open(os.path.join(out, f'{split}.tsv'), 'rb') as a, open(os.path.join(whole, f'{split}.tsv'), 'rb') as b:
      assert a.read() == b.read()
  # The same command once more changes nothing, the manifest's date included.
  with open(os.path.join(out, 'manifest.json'), 'rb') as f:
    manifest = f.read()
  assert subprocess.run(command, cwd=REPO, capture_output=True, timeout=600).returncode == 0
  with open(os.path.join(out, 'manifest.json'), 'rb') as f:
    assert f.read() == manifest


def test_two_processes_each_decode_their_share_and_process_0_assembles(distilled, tmp_path):
  """Process 1 of 2 decodes the odd chunks only and writes no file of its own; process 0 decodes
  the even ones, assembles, and the files equal the one-process distillation."""
  run, whole = distilled
  out = str(tmp_path / 'out')
  kwargs = dict(limit=40, batch_size=8, chunk_sentences=3, process_count=2, teacher_workdir=run_dir(run))
  distill(run, 'greedy', {}, out, ['train', 'validation'], process_index=1, **kwargs)
  chunks = sorted(f for f in os.listdir(os.path.join(out, '.work', 'train')) if f.endswith('.txt'))
  assert chunks == [f'{i:06d}.txt' for i in range(1, 14, 2)]
  assert not os.path.exists(os.path.join(out, 'train.tsv')) and not os.path.exists(os.path.join(out, 'manifest.json'))
  distill(run, 'greedy', {}, out, ['train', 'validation'], process_index=0, wait_seconds=0, **kwargs)
  for name in ('train.tsv', 'validation.tsv'):
    with open(os.path.join(out, name), 'rb') as a, open(os.path.join(whole, name), 'rb') as b:
      assert a.read() == b.read()


def run_dir(run) -> str:
  return os.path.dirname(run.tokenizer.model_path)


def test_a_different_command_on_unfinished_work_is_an_error(distilled, tmp_path):
  run, _ = distilled
  out = str(tmp_path / 'out')
  distill(run, 'greedy', {}, out, ['validation'], limit=5, batch_size=8, chunk_sentences=2)
  with pytest.raises(DistillError, match=r'different distillation.*decoder'):
    distill(run, 'beam', {}, out, ['validation'], limit=5, batch_size=8, chunk_sentences=2)
  with pytest.raises(DistillError, match='each split must be one of'):
    distill(run, 'greedy', {}, out, ['dev'])


def mixed_batches(raw_prob: float, seed: int = 0) -> TrainBatches:
  """Batches over 60 pairs whose teacher targets are [7, EOS] and raw targets [9, 9, EOS]."""
  pairs = [(np.array([5 + i % 3, 1], np.int32), np.array([7, 1], np.int32)) for i in range(60)]
  raw = [np.array([9, 9, 1], np.int32)] * 60
  return TrainBatches(pairs, [(6, 8)], seed, raw_targets=raw, raw_prob=raw_prob)


def raw_fraction(batches: TrainBatches, steps: int) -> float:
  rows = np.concatenate([batches(s)['target'] for s in range(steps)])
  rows = rows[rows[:, 0] > 0]
  assert set(rows[:, 0]) <= {7, 9}
  return float(np.mean(rows[:, 0] == 9))


def test_raw_prob_mixes_raw_references_reproducibly():
  assert raw_fraction(mixed_batches(0.0), 50) == 0.0
  assert raw_fraction(mixed_batches(1.0), 50) == 1.0
  half = raw_fraction(mixed_batches(0.5), 200)
  assert 0.45 < half < 0.55  # 1200 draws: 3.5 standard deviations
  for step in (0, 17, 123):  # a function of (seed, step): same batches from a fresh instance ...
    np.testing.assert_array_equal(mixed_batches(0.5)(step)['target'], mixed_batches(0.5)(step)['target'])
  assert any(not np.array_equal(mixed_batches(0.5)(s)['target'], mixed_batches(0.5, seed=1)(s)['target'])
             for s in range(5))  # ... and another seed draws differently
  with pytest.raises(ValueError, match='raw_prob must be in'):
    mixed_batches(1.5)


def test_training_reads_teacher_targets_and_rejects_other_data(distilled, corpus, tmp_path):
  """`data.distill_dir` swaps in the teacher translations (validation keeps raw references); a
  distillation of other data is an error naming the problem."""
  run, out = distilled
  examples = load_split(run.config.data, 'train')
  config = tiny_config(corpus, **{'data.distill_dir': out, 'max_len': 128})  # the 8-step teacher babbles
  rows = read_tsv(os.path.join(out, 'train.tsv'))
  batches, described = training_batches(config, examples[:40], run.tokenizer, [(64, 128)])
  assert 'teacher targets' in described, described
  teacher = {tuple(run.tokenizer.encode(r[0]) + [1]): run.tokenizer.encode(r[1] or r[2]) + [1] for r in rows}
  seen = 0
  for step in range(3):
    batch = batches(step)
    for src, tgt in zip(batch['source'], batch['target']):
      if src[0] > 0:
        assert tgt[tgt > 0].tolist() == teacher[tuple(src[src > 0].tolist())]
        seen += 1
  assert seen == 3 * 40, described
  with pytest.raises(DataError, match=r'40 lines but the train split has 600 examples \(it was made with --limit=40\)'):
    training_batches(config, examples, run.tokenizer, [(64, 128)])
  edited = examples[:40]
  edited[12] = type(edited[12])('An edited source line.', edited[12].references)
  with pytest.raises(DataError, match=r'train.tsv:13: its source'):
    training_batches(config, edited, run.tokenizer, [(64, 128)])
  config.data.distill_dir = str(tmp_path)
  with pytest.raises(DataNotFoundError, match='holds no finished distillation'):
    training_batches(config, examples[:40], run.tokenizer, [(64, 128)])
  config.data.distill_dir, config.data.raw_prob = '', 0.3
  with pytest.raises(ConfigError, match='data.distill_dir is empty'):
    training_batches(config, examples[:40], run.tokenizer, [(64, 128)])
