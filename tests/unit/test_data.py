"""Tests of nat_jax.data against independent truths (the SQLite DB, written files, multisets)."""

import collections
import logging
import sqlite3
import sys

import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds

from nat_jax import data
from nat_jax.data import bible, sources
from nat_jax.recipes.defaults import DataSettings, section


def data_config(**overrides) -> ml_collections.ConfigDict:
  cfg = section(DataSettings)
  cfg.update({'source': 'files', **overrides})
  return cfg


# ----------------------------------------------------------------------------- bible


def db_rows(where: str, params=()) -> list[tuple]:
  """(book, chapter, verse, en, de_e, de_s) rows of en-de, straight from the DB, non-empty only."""
  query = f"""
      SELECT s.bNumber, s.cNumber, s.vNumber, TRIM(s.vText), TRIM(e.vText), TRIM(r.vText)
      FROM bible s
      JOIN bible e ON e.bbName = 'e' AND (e.bNumber, e.cNumber, e.vNumber)
                                       = (s.bNumber, s.cNumber, s.vNumber)
      JOIN bible r ON r.bbName = 's' AND (r.bNumber, r.cNumber, r.vNumber)
                                       = (s.bNumber, s.cNumber, s.vNumber)
      WHERE s.bbName = '4' AND TRIM(s.vText) != '' AND TRIM(e.vText) != ''
        AND TRIM(r.vText) != '' AND {where}
      ORDER BY s.bNumber, s.cNumber, s.vNumber"""
  with sqlite3.connect(bible.DB_PATH) as db:
    return db.execute(query, params).fetchall()


@pytest.fixture(scope='module')
def bible_dir(tmp_path_factory):
  data_dir = str(tmp_path_factory.mktemp('tfds'))
  data.load_split(data_config(source='bible', tfds_data_dir=data_dir), 'validation')  # Builds.
  return data_dir


@pytest.fixture(scope='module')
def bible_splits(bible_dir):
  cfg = data_config(source='bible', tfds_data_dir=bible_dir)
  return {split: data.load_split(cfg, split) for split in sources.SPLITS}


def test_bible_split_books():
  assert data.SPLIT_BOOKS['validation'] == (8, 17) and data.SPLIT_BOOKS['test'] == (44,)
  assert data.RESERVED_BOOKS == (45,)
  all_books = [b for books in data.SPLIT_BOOKS.values() for b in books] + [45]
  assert sorted(all_books) == list(range(1, 67))


@pytest.mark.parametrize('split', sources.SPLITS)
def test_bible_split_matches_db(bible_splits, split):
  books = data.SPLIT_BOOKS[split]
  rows = db_rows(f"s.bNumber IN ({','.join('?' * len(books))})", books)
  assert bible_splits[split] == [data.Example(en, (de_e, de_s)) for *_, en, de_e, de_s in rows]


def test_bible_per_book_counts_disjoint_and_romans_reserved(bible_dir):
  """The stored book/chapter/verse fields: per-book counts equal the DB's, splits are disjoint."""
  builder = data.BibleTranslate(config='en-de', data_dir=bible_dir)
  db_counts = collections.Counter(row[0] for row in db_rows('1'))
  seen = {}
  for split, data_source in builder.as_data_source().items():
    records = data_source.__getitems__(list(range(len(data_source))))
    keys = {(r['book'], r['chapter'], r['verse']) for r in records}
    assert len(keys) == len(records)
    counts = collections.Counter(int(r['book']) for r in records)
    assert set(counts) == set(data.SPLIT_BOOKS[split])
    assert all(counts[b] == db_counts[b] for b in counts)
    assert all(len(r['references']) == 2 for r in records)
    for other, other_keys in seen.items():
      assert not keys & other_keys, (split, other)
    seen[split] = keys
  total = sum(len(keys) for keys in seen.values())
  assert total == sum(db_counts.values()) - db_counts[45]
  assert 'tensorflow' not in sys.modules


def test_bible_max_examples_and_unknown_pair(bible_dir):
  cfg = data_config(source='bible', tfds_data_dir=bible_dir, max_examples=5)
  first = db_rows('s.bNumber = 44')[:5]
  assert [ex.source for ex in data.load_split(cfg, 'test')] == [row[3] for row in first]
  with pytest.raises(data.DataError, match='data.pair'):
    data.load_split(data_config(source='bible', pair='en-xx'), 'test')


# ----------------------------------------------------------------------------- files


PAIRS = [('Hello world.', 'Hallo Welt.', 'Hallo, Welt!'),
         ('Good morning', 'Guten Morgen', 'Morgen'),
         ('', 'leer', 'leer'),  # Empty source: skipped.
         ('Thanks  ', 'Danke', 'Vielen Dank')]
EXPECTED = [data.Example('Hello world.', ('Hallo Welt.', 'Hallo, Welt!')),
            data.Example('Good morning', ('Guten Morgen', 'Morgen')),
            data.Example('Thanks', ('Danke', 'Vielen Dank'))]


def write(path, lines) -> str:
  path.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
  return str(path)


def test_languages_of_the_data():
  """The Bible's pair names its languages (a de-en run is not en->de, the defaults of source_lang /
  target_lang); other sources declare theirs."""
  cfg = lambda source, pair: data_config(source=source, pair=pair, source_lang='fr', target_lang='ro')
  assert {p: sources.languages(cfg('bible', p)) for p in ('de-en', 'en-de', 'ro-en')} == {
      'de-en': ('de', 'en'), 'en-de': ('en', 'de'), 'ro-en': ('ro', 'en')}
  assert sources.languages(cfg('files', 'de-en')) == sources.languages(cfg('tfds', 'de-en')) == ('fr', 'ro')


def test_files_tsv_and_aligned_files_agree(tmp_path, caplog):
  tsv = write(tmp_path / 'train.tsv', ['\t'.join(p) for p in PAIRS])
  src, ref1, ref2 = (write(tmp_path / f'{i}.txt', [p[i] for p in PAIRS]) for i in range(3))
  with caplog.at_level(logging.WARNING):
    assert data.load_split(data_config(train_files=tsv), 'train') == EXPECTED
  assert 'skipped 1 pairs' in caplog.text
  three = data.load_split(data_config(test_files=f'{src},{ref1},{ref2}'), 'test')
  assert three == EXPECTED
  two = data.load_split(data_config(validation_files=f'{src}, {ref1}'), 'validation')
  assert two == [data.Example(ex.source, ex.references[:1]) for ex in EXPECTED]
  assert len(data.load_split(data_config(train_files=tsv, max_examples=2), 'train')) == 2


def test_files_errors_name_the_file(tmp_path):
  good = write(tmp_path / 'good.txt', ['a', 'b'])
  short = write(tmp_path / 'short.txt', ['a'])
  empty = write(tmp_path / 'empty.txt', [])
  no_tab = write(tmp_path / 'notab.tsv', ['a\tb', 'just one column'])
  blank = write(tmp_path / 'blank.tsv', ['\tx', '  \ty'])
  missing = str(tmp_path / 'missing.txt')
  cases = [
      (data_config(source='nope'), data.DataError, "'nope'"),
      (data_config(train_files=missing), data.DataNotFoundError, missing),
      (data_config(train_files=f'{good},{missing}'), FileNotFoundError, missing),
      (data_config(train_files=empty), ValueError, empty),
      (data_config(train_files=f'{good},{short}'), data.DataError, short),
      (data_config(train_files=no_tab), data.DataError, f'{no_tab}:2'),
      (data_config(train_files=blank), data.DataError, 'no usable examples'),
      (data_config(), data.DataError, 'data.train_files'),
  ]
  for cfg, error, text in cases:
    with pytest.raises(error) as info:
      data.load_split(cfg, 'train')
    assert text in str(info.value)


# ----------------------------------------------------------------------------- tfds


WMT_LIKE = {'train': [('A house.', 'Ein Haus.'), ('Two cats.', 'Zwei Katzen.'), ('', 'leer')],
            'validation': [('Yes.', 'Ja.')]}


class NatJaxTestTinyWmt(tfds.core.GeneratorBasedBuilder):
  """Offline stand-in for a WMT builder: examples are {'en': text, 'de': text}."""
  VERSION = tfds.core.Version('1.0.0')

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {'en': tfds.features.Text(), 'de': tfds.features.Text()}), disable_shuffling=True)

  def _split_generators(self, dl_manager):
    return {split: self._generate_examples(pairs) for split, pairs in WMT_LIKE.items()}

  def _generate_examples(self, pairs):
    for i, (en, de) in enumerate(pairs):
      yield i, {'en': en, 'de': de}


def test_tfds_source_reads_local_array_record_dataset(tmp_path):
  NatJaxTestTinyWmt(data_dir=str(tmp_path), file_format='array_record').download_and_prepare()
  cfg = data_config(source='tfds', tfds_name='nat_jax_test_tiny_wmt', tfds_data_dir=str(tmp_path))
  assert data.load_split(cfg, 'train') == [data.Example('A house.', ('Ein Haus.',)),
                                           data.Example('Two cats.', ('Zwei Katzen.',))]
  assert data.load_split(cfg, 'validation') == [data.Example('Yes.', ('Ja.',))]
  reverse = data_config(**{**cfg.to_dict(), 'source_lang': 'de', 'target_lang': 'en'})
  assert data.load_split(reverse, 'validation') == [data.Example('Ja.', ('Yes.',))]
  with pytest.raises(data.DataError, match='data.source_lang'):
    data.load_split(data_config(**{**cfg.to_dict(), 'source_lang': 'fr'}), 'train')
  with pytest.raises(data.DataError, match="no 'test' split"):
    data.load_split(cfg, 'test')
  assert 'tensorflow' not in sys.modules


def test_tfds_source_missing_dataset(tmp_path):
  for name in ('nat_jax_test_tiny_wmt', 'no_such_dataset_xyz'):
    cfg = data_config(source='tfds', tfds_name=name, tfds_data_dir=str(tmp_path / 'empty'))
    with pytest.raises(data.DataNotFoundError, match='download_and_prepare'):
      data.load_split(cfg, 'train')


# ----------------------------------------------------------------------------- tokenizer


@pytest.fixture(scope='module')
def tokenizer_path(tmp_path_factory):
  texts = [t for code in ('4', 'e') for t in bible.read_verses(code, (1,)).values()]
  path = str(tmp_path_factory.mktemp('spm') / 'spm.model')
  data.load_or_train_tokenizer(path, texts, vocab_size=600)
  return path


def test_tokenizer_round_trip_and_special_ids(tokenizer_path):
  tok = data.Tokenizer(tokenizer_path)
  assert (tok.pad_id, tok.eos_id, tok.bos_id, tok.unk_id, tok.mask_id) == (0, 1, 2, 3, 4)
  assert tok.vocab_size == 600
  sp_pieces = [tok._sp.id_to_piece(i) for i in range(5)]  # pylint: disable=protected-access
  assert sp_pieces == ['<pad>', '</s>', '<s>', '<unk>', '<mask>']
  for text in ['In the beginning God created the heavens.', 'Und Gott sprach: Es werde Licht!',
               'Unseen: 漢字 ✓ ñ Ω ẞ 🙂']:
    ids = tok.encode(text)
    assert tok.eos_id not in ids and tok.unk_id not in ids
    assert tok.decode(ids) == text
    assert tok.decode([tok.bos_id, *ids[:2], tok.mask_id, *ids[2:], tok.eos_id, 7, 8, 0]) == text
  batch = np.zeros((2, 12), np.int32)
  row = tok.encode('God created') + [tok.eos_id]
  batch[0, :len(row)] = row
  assert tok.decode_batch(batch) == [tok.decode(batch[0]), '']


def test_tokenizer_reload_gives_identical_ids(tokenizer_path):
  text = 'And God said, Let there be light: 漢字.'
  fresh = data.load_or_train_tokenizer(tokenizer_path, [], vocab_size=600)  # Loads, no training.
  assert fresh.encode(text) == data.Tokenizer(tokenizer_path).encode(text)


def test_tokenizer_shrinks_too_large_vocab(tmp_path):
  tok = data.load_or_train_tokenizer(str(tmp_path / 'small.model'), ['ab ba abba'] * 20, 5000)
  assert tok.vocab_size < 5000 and tok.decode(tok.encode('abba ab')) == 'abba ab'


# ----------------------------------------------------------------------------- batching


def test_bucket_shapes():
  assert data.bucket_shapes(128, 4096, 4) == [(128, 32), (64, 64), (42, 96), (32, 128)]
  assert data.bucket_shapes(100, 1000, 3, row_multiple=4) == [(24, 40), (12, 72), (8, 104)]
  assert data.bucket_shapes(16, 10, 2, row_multiple=4) == [(4, 8), (4, 16)]


class FakeTokenizer:
  def encode(self, text):
    return [ord(c) for c in text]

  encode_target = encode  # one vocabulary for both sides, as a joint sentencepiece model


def test_encode_pairs_appends_eos_and_drops_long():
  examples = [data.Example('ab', ('xyz',)), data.Example('a' * 5, ('b',)),
              data.Example('a', ('b' * 4,))]
  pairs, dropped = data.encode_pairs(examples, FakeTokenizer(), max_len=4)
  assert dropped == 2 and len(pairs) == 1
  np.testing.assert_array_equal(pairs[0][0], [97, 98, 1])
  np.testing.assert_array_equal(pairs[0][1], [120, 121, 122, 1])
  assert pairs[0][0].dtype == np.int32


def random_pairs(n, seed=0):
  rng = np.random.default_rng(seed)
  def seq():
    return np.append(rng.integers(5, 100, rng.integers(1, 60)), 1).astype(np.int32)
  return [(seq(), seq()) for _ in range(n)]


def unpad(row):
  return tuple(row[:np.flatnonzero(row)[-1] + 1]) if row.any() else None


SHAPES = data.bucket_shapes(64, 512, 3, row_multiple=2)


def test_train_batches_one_epoch_covers_every_pair_once():
  pairs = random_pairs(300)
  batches = data.TrainBatches(pairs, SHAPES, seed=3)
  seen = collections.Counter()
  for step in range(batches.batches_per_epoch):
    assert batches.epoch_of(step) == 0
    batch = batches(step)
    assert batch['source'].shape == batch['target'].shape
    assert batch['source'].shape in SHAPES and batch['source'].dtype == np.int32
    length = batch['source'].shape[1]
    for src, tgt in zip(batch['source'], batch['target']):
      if src.any():
        seen[unpad(src), unpad(tgt)] += 1
        smallest = min(l for _, l in SHAPES if l >= max(len(unpad(src)), len(unpad(tgt))))
        assert length == smallest
      else:
        assert not tgt.any()
  assert seen == collections.Counter((tuple(s), tuple(t)) for s, t in pairs)
  assert batches.epoch_of(batches.batches_per_epoch) == 1


def test_train_batches_pure_function_of_seed_and_step():
  pairs = random_pairs(200)
  a, b = data.TrainBatches(pairs, SHAPES, seed=7), data.TrainBatches(pairs, SHAPES, seed=7)
  steps = list(range(0, 3 * a.batches_per_epoch, 5))
  first = {step: a(step) for step in steps}
  for step in reversed(steps):  # Other call order, fresh instance: same batches (resumption).
    for key in ('source', 'target'):
      np.testing.assert_array_equal(b(step)[key], first[step][key])
  other = data.TrainBatches(pairs, SHAPES, seed=8)
  assert any(not np.array_equal(other(s)['source'], first[s]['source']) for s in steps)
  assert any(not np.array_equal(a(s)['source'], a(s + a.batches_per_epoch)['source'])
             for s in steps[:5])  # Epochs are reshuffled.


def test_train_batches_process_split():
  pairs = random_pairs(100)
  whole = data.TrainBatches(pairs, SHAPES, seed=1)
  halves = [data.TrainBatches(pairs, SHAPES, seed=1, process_index=p, process_count=2)
            for p in range(2)]
  for step in range(whole.batches_per_epoch + 3):
    for key in ('source', 'target'):
      joined = np.concatenate([h(step)[key] for h in halves])
      np.testing.assert_array_equal(joined, whole(step)[key])
  with pytest.raises(ValueError, match='process_count=3'):
    data.TrainBatches(pairs, SHAPES, seed=1, process_count=3)


@pytest.mark.parametrize('shrink', [False, True])
def test_inference_batches_cover_every_index_once(shrink):
  """Every sequence once, in a batch of its own padded width (so its neighbours never change the
  width it is decoded at); with shrink, a width's last batch has the fewest power-of-two rows."""
  rng = np.random.default_rng(0)
  seqs = [list(rng.integers(5, 50, rng.integers(0, 31))) for _ in range(45)]
  lengths = (32, 8, 16)
  seen = []
  per_width = {}
  for index, tokens in data.inference_batches(seqs, 8, lengths, shrink=shrink):
    assert index.dtype == np.int64 and tokens.dtype == np.int32
    real = [i for i in index if i >= 0]
    per_width.setdefault(tokens.shape[1], []).append((len(index), len(real)))
    assert tokens.shape[1] in lengths and tokens.shape[0] == (max(1, 2 ** int(np.ceil(np.log2(len(real)))))
                                                              if shrink else 8)
    for i in real:  # every row's own width
      assert tokens.shape[1] == min(l for l in lengths if l >= len(seqs[i]))
    for i, row in zip(index, tokens):
      if i >= 0:
        seen.append(int(i))
        assert list(row[:len(seqs[i])]) == seqs[i] and not row[len(seqs[i]):].any()
      else:
        assert not row.any()
  assert sorted(seen) == list(range(len(seqs)))
  for width, batches in per_width.items():  # full batches, then at most one partial one
    assert all(real == 8 for _, real in batches[:-1]), (width, batches)
  with pytest.raises(ValueError, match='truncate'):
    list(data.inference_batches([[5] * 33], 8, lengths))
  assert not list(data.inference_batches([], 8, lengths))


def test_mixed_width_batches_are_full_and_cover_every_index_once():
  """mix_widths: the next `rows` sequences by length whatever their widths, padded to the widest one's
  width; every sequence once; only the last batch partial."""
  rng = np.random.default_rng(1)
  seqs = [list(rng.integers(5, 50, rng.integers(1, 31))) for _ in range(45)]
  lengths = (8, 16, 24, 32)
  batches = list(data.inference_batches(seqs, 8, lengths, shrink=True, mix_widths=True))
  seen = [int(i) for index, _ in batches for i in index if i >= 0]
  assert sorted(seen) == list(range(45)) and len(batches) == 6
  assert any(len({min(l for l in lengths if l >= len(seqs[i])) for i in index if i >= 0}) > 1 for index, _ in batches)
  for index, tokens in batches:
    real = [i for i in index if i >= 0]
    assert tokens.shape[1] == min(l for l in lengths if l >= max(len(seqs[i]) for i in real))
    assert tokens.shape[0] == (8 if len(real) == 8 else max(1, 2 ** int(np.ceil(np.log2(len(real))))))
