"""Shared fixtures: a small real parallel corpus (Bible verses from the SQLite DB), the test run's one compile
cache and a tiny trained run (helpers the tests share are in tests/support.py).

One compile cache per test run: `pytest_configure` makes a JAX persistent compilation cache directory that the
test process, every pytest-xdist worker and every command the tests start share (through the environment), so a
program compiled once in the run is read back everywhere else; it is removed when the run ends
(`NAT_JAX_TEST_CACHE=<dir>` keeps it in <dir> across runs instead). The tests' programs compile with XLA's
cheapest code generation (FAST_COMPILES): the tiny test models spend their time compiling, not running.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

os.environ.setdefault('JAX_PLATFORMS', 'cpu')


import pytest  # noqa: E402

from nat_jax.data.bible import DB_PATH  # noqa: E402
from tests.support import tiny_config  # noqa: E402

SPLIT_QUERIES = {  # (book, how many short verses)
    'train': (1, 600), 'validation': (8, 12), 'test': (44, 16)}


def _verses(book: int, limit: int) -> list[tuple[str, str, str]]:
  query = """
      SELECT TRIM(s.vText), TRIM(e.vText), TRIM(r.vText) FROM bible s
      JOIN bible e ON e.bbName = 'e' AND (e.bNumber, e.cNumber, e.vNumber) = (s.bNumber, s.cNumber, s.vNumber)
      JOIN bible r ON r.bbName = 's' AND (r.bNumber, r.cNumber, r.vNumber) = (s.bNumber, s.cNumber, s.vNumber)
      WHERE s.bbName = '4' AND s.bNumber = ? AND LENGTH(s.vText) < 120 AND LENGTH(e.vText) < 120
        AND TRIM(e.vText) != '' AND TRIM(r.vText) != ''
      ORDER BY s.cNumber, s.vNumber LIMIT ?"""
  with sqlite3.connect(DB_PATH) as db:
    return db.execute(query, (book, limit)).fetchall()


@pytest.fixture(scope='session')
def corpus(tmp_path_factory) -> dict[str, str]:
  """TSV files (source, Elberfelder, Schlachter) of short verses: 600 train, 12 validation, 16 test."""
  root = tmp_path_factory.mktemp('corpus')
  paths = {}
  for split, (book, limit) in SPLIT_QUERIES.items():
    path = root / f'{split}.tsv'
    path.write_text(''.join('\t'.join(v) + '\n' for v in _verses(book, limit)), encoding='utf-8')
    paths[split] = str(path)
  return paths


SET_UP = 'NAT_JAX_TEST_RUN'  # set by the run's first process; xdist workers and commands inherit its environment
OWNED = []  # the compile cache directory this process made (removed when the run ends)
CACHE_SETTINGS = {  # JAX setting: its value in the tests
    'jax_persistent_cache_min_compile_time_secs': 0.0,  # every program: the tests' tiny ones compile in < 1 s
    'jax_persistent_cache_min_entry_size_bytes': -1,
}
# A process may read an entry another is still writing (JAX writes in place): JAX warns and compiles instead
# (this process: pytest.ini's filterwarnings; commands the tests start: PYTHONWARNINGS).
UNFINISHED_ENTRY = 'ignore:Error reading persistent compilation cache entry'
# Cheaper compiles of the tests' tiny programs (the same HLO, plainer machine code): LLVM at its lowest level
# and XLA's classic elemental emitters. A JAX that does not know one of them runs the tests without them.
FAST_COMPILES = ('--xla_backend_optimization_level=0', '--xla_cpu_use_fusion_emitters=false')


def pytest_configure(config):
  """The run's compile cache and compile settings: put in the environment once, by the run's first process,
  for the xdist workers and the commands started later; read into this process's JAX config (JAX read the
  environment when the test modules imported it)."""
  import jax
  if SET_UP not in os.environ:
    os.environ.update(test_environment())
    os.environ[SET_UP] = '1'
  jax.config.update('jax_compilation_cache_dir', os.environ['JAX_COMPILATION_CACHE_DIR'])
  for name, value in CACHE_SETTINGS.items():
    jax.config.update(name, value)


def test_environment() -> dict[str, str]:
  """The variables a test run sets (`NAT_JAX_TEST_CACHE=<dir>` keeps the compile cache there across runs)."""
  cache = os.environ.get('NAT_JAX_TEST_CACHE') or tempfile.mkdtemp(prefix='nat_jax_test_jax_cache_')
  OWNED.extend([] if os.environ.get('NAT_JAX_TEST_CACHE') else [cache])
  env = {'JAX_COMPILATION_CACHE_DIR': cache, **{k.upper(): str(v) for k, v in CACHE_SETTINGS.items()},
         'PYTHONWARNINGS': ','.join(filter(None, [os.environ.get('PYTHONWARNINGS'), UNFINISHED_ENTRY]))}
  wanted = [f for f in FAST_COMPILES if f.split('=')[0] not in os.environ.get('XLA_FLAGS', '')]
  flags = ' '.join([os.environ.get('XLA_FLAGS', ''), *wanted]).strip()
  probe = subprocess.run([sys.executable, '-c', 'import jax.numpy as jnp; jnp.zeros(1).block_until_ready()'],
                         env={**os.environ, 'XLA_FLAGS': flags}, capture_output=True, timeout=300)
  if probe.returncode == 0:  # XLA aborts on a flag it does not know
    env['XLA_FLAGS'] = flags
  return env


def pytest_unconfigure(config):
  for path in OWNED:
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope='session')
def compile_cache() -> str:
  """The run's one compile cache (trainings in the tests name it as their compilation_cache_dir)."""
  return os.environ['JAX_COMPILATION_CACHE_DIR']


@pytest.fixture(scope='session')
def trained_run(tmp_path_factory, corpus, compile_cache) -> str:
  """Workdir of a tiny model trained for 8 steps (checkpoints at 2, 4, 6, 8)."""
  from nat_jax.training.loop import train_and_evaluate
  workdir = str(tmp_path_factory.mktemp('trained_run'))
  train_and_evaluate(tiny_config(corpus, compile_cache), workdir)
  return workdir
