"""The wheel is a product on its own: built with `python -m build` (an sdist, then the wheel from that sdist) and
installed into a fresh virtual environment, it holds no top-level package but nat_jax, carries its licence, and
from a folder outside the checkout trains a recipe by name, translates, evaluates and serves (slow: a build, an
install and a short training)."""
import glob
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile

import pytest

from tests.support import REPO

TRAIN = ['--config=at_bible_tiny', '--config.total_steps=2', '--config.eval_every=2', '--config.checkpoint_every=2',
         '--config.eval_max_sentences=2', '--config.data.max_examples=300', '--config.test_decoder=greedy',
         '--config.vocab_size=500', '--config.compilation_cache_dir=']


def run(cmd, cwd, env, timeout=1200, **kwargs):
  out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)
  assert out.returncode == 0, (cmd, out.stdout[-2000:], out.stderr[-3000:])
  return out


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_the_wheel_installed_elsewhere_trains_translates_evaluates_and_serves(tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
  env['JAX_PLATFORMS'] = 'cpu'
  pytest.importorskip('build', reason='pip install build (requirements-dev.txt)')
  # What a release makes: an sdist, and the wheel built from that sdist (so the sdist is complete).
  run([sys.executable, '-m', 'build', '-o', str(tmp_path / 'dist'), REPO], tmp_path, env)
  sdist, = glob.glob(str(tmp_path / 'dist' / 'nat_jax-*.tar.gz'))
  with tarfile.open(sdist) as tar:
    held = {n.split('/', 1)[-1] for n in tar.getnames()}
  assert {'LICENSE', 'pyproject.toml', 'configs/at_bible_tiny.py', 'nat_jax/__init__.py'} <= held, sorted(held)[:50]
  wheel, = glob.glob(str(tmp_path / 'dist' / 'nat_jax-*.whl'))
  names = zipfile.ZipFile(wheel).namelist()
  assert {n.split('/')[0] for n in names if '.dist-info/' not in n} == {'nat_jax'}
  assert 'nat_jax/configs/at_bible_tiny.py' in names and any(n.endswith('licenses/LICENSE') for n in names)
  venv = tmp_path / 'venv'
  run([sys.executable, '-m', 'venv', str(venv)], tmp_path, env)
  bin_dir = venv / 'bin'
  run([str(bin_dir / 'pip'), 'install', '-q', wheel, '-c', os.path.join(REPO, 'constraints.txt')], tmp_path, env)
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()
  env['PATH'] = f'{bin_dir}{os.pathsep}{env["PATH"]}'
  run(['nat-jax-train', '--workdir=run', *TRAIN], elsewhere, env)
  assert json.loads((elsewhere / 'run' / 'test_results.json').read_text())['step'] == 2
  said = run(['nat-jax-translate', '--workdir=run'], elsewhere, env, input='In the beginning.\nAnd God said.\n')
  assert len(said.stdout.split('\n')) == 3
  run(['nat-jax-evaluate', '--workdir=run', '--decoders=greedy', '--max_sentences=4', '--latency_sentences=2',
       '--batch_sizes=1', '--batch1_runs=1', '--out=eval'], elsewhere, env)
  assert (elsewhere / 'eval' / 'results.json').exists()
  port = free_port()
  server = subprocess.Popen(['nat-jax-serve', '--workdir=run', f'--port={port}'], cwd=elsewhere, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    deadline, health = time.time() + 300, None
    while time.time() < deadline and server.poll() is None and health is None:
      try:
        with urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=5) as r:
          health = json.loads(r.read())
      except OSError:
        time.sleep(1)
    assert health is not None and health.get('status') == 'ok', (health, server.poll())
  finally:
    server.terminate()
    server.wait(timeout=120)
