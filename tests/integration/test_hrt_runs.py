"""HRT runs end to end: fine-tuning from an AT run (and the benchmarks that read it), and a clear error
for an AT run of another size."""
from __future__ import annotations

import subprocess
import sys

import pytest

from nat_jax.errors import ConfigError
from nat_jax.training.loop import train_and_evaluate
from tests.support import REPO, tiny_config


def test_init_from_a_run_of_another_size_is_a_clear_error(corpus, compile_cache, trained_run, tmp_path):
  config = tiny_config(corpus, compile_cache, init_from=trained_run,
                       **{'model.method': 'hrt', 'model.d_model': 48, 'model.relative_window': 4})
  with pytest.raises(ConfigError, match=r"init_from=.*do not fit this model.*\(32, 2, 16\).*\(48, 2, 24\)"):
    train_and_evaluate(config, str(tmp_path / 'hrt'))


@pytest.fixture(scope='module')
def hrt_run(corpus, compile_cache, trained_run, tmp_path_factory):
  """(workdir, test results) of an HRT run fine-tuned for 2 steps from the tiny AT run."""
  workdir = str(tmp_path_factory.mktemp('hrt'))
  config = tiny_config(corpus, compile_cache, init_from=trained_run, total_steps=2, eval_every=2,
                       eval_decoder='hrt', test_decoder='hrt', **{'model.method': 'hrt', 'model.relative_window': 4})
  return workdir, train_and_evaluate(config, workdir)


def test_hrt_fine_tunes_from_an_at_run_end_to_end(hrt_run):
  _, result = hrt_run
  assert result['decoder'] == 'hrt' and result['sentences'] == 16 and result['step'] == 2


@pytest.mark.slow  # about a minute: two benchmark scripts in processes of their own
def test_hrt_benchmarks_run_on_a_fine_tuned_run(hrt_run):
  workdir, _ = hrt_run
  # The quality breakdown benchmark runs on it: three BLEU rows and the Skip-AT agreement line.
  out = subprocess.run([sys.executable, '-m', 'benchmarks.components.hrt_quality', f'--workdir={workdir}',
                        '--max_sentences=6'], cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  rows = [line for line in out.stdout.splitlines() if line.startswith('| ') and 'BLEU' not in line]
  assert [r.split('|')[1].split(' (')[0].strip() for r in rows] == ['C_d = 1', 'oracle fill', 'hrt'], out.stdout
  assert 'same token at' in out.stdout
  # And the component breakdown (its flags come from benchmarks.components.decode_speed): one row per batch size.
  out = subprocess.run([sys.executable, '-m', 'benchmarks.components.hrt_breakdown', f'--workdir={workdir}',
                        '--batch_sizes=1,2', '--repeats=1'], cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  rows = [line.split('|')[1].strip() for line in out.stdout.splitlines()
          if line.startswith('| ') and 'rows' not in line]
  assert rows == ['1', '2'], out.stdout
