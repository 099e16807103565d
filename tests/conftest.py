"""Shared fixtures: a small real parallel corpus (Bible verses from the SQLite DB), a compile cache and a
tiny trained run (helpers the tests share are in tests/support.py)."""
from __future__ import annotations

import os
import sqlite3

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


@pytest.fixture(scope='session')
def compile_cache(tmp_path_factory) -> str:
  return str(tmp_path_factory.mktemp('jax_cache'))


@pytest.fixture(scope='session')
def trained_run(tmp_path_factory, corpus, compile_cache) -> str:
  """Workdir of a tiny model trained for 8 steps (checkpoints at 2, 4, 6, 8)."""
  from nat_jax.training.loop import train_and_evaluate
  workdir = str(tmp_path_factory.mktemp('trained_run'))
  train_and_evaluate(tiny_config(corpus, compile_cache), workdir)
  return workdir
