"""Training on the output of `python -m nat_jax.distill`: `--config.data.distill_dir=<dir>`.

The training targets become the teacher translations of `<dir>/train.tsv`; with
`data.raw_prob` > 0 a pair keeps its raw reference with that probability at each use
(nat_jax.data.batching.TrainBatches). Validation and test keep their raw references.

A distill dir is used only when its train.tsv holds exactly the training split's sources, line
for line: another pair or corpus, a different `max_examples`, a `--limit` smoke distillation or an
edited file is an error that names the first line that differs, never a silent misalignment.
"""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from nat_jax.data.batching import Pair
from nat_jax.data.sources import DataError, DataNotFoundError, Example, read_lines
from nat_jax.data.tokenizer import EOS_ID

MANIFEST = 'manifest.json'


def tsv_field(text: str) -> str:
  """A text as one TSV field of a distilled file: tabs and line breaks become spaces."""
  return ' '.join(text.replace('\t', ' ').splitlines()) if text else ''


def read_teacher_translations(distill_dir: str, split: str, examples: Sequence[Example]) -> list[str]:
  """The teacher translation of each example of `split`, checked against the examples' sources."""
  how = ('make it with: python -m nat_jax.distill --workdir=<teacher run> '
         f'--out={distill_dir} --splits={split}')
  path = os.path.join(distill_dir, f'{split}.tsv')
  if not os.path.isfile(os.path.join(distill_dir, MANIFEST)) or not os.path.isfile(path):
    raise DataNotFoundError(f'data.distill_dir={distill_dir!r} holds no finished distillation of split '
                            f'{split!r} ({MANIFEST} and {split}.tsv); {how}')
  with open(os.path.join(distill_dir, MANIFEST)) as f:
    manifest = json.load(f)
  lines = read_lines(path)
  limit = manifest.get('limit', 0)
  if len(lines) != len(examples):
    extra = f' (it was made with --limit={limit})' if limit else ''
    raise DataError(f'{path} has {len(lines)} lines but the {split} split has {len(examples)} examples{extra}: '
                    f'it was distilled from other data. Distil this data again; {how}')
  translations = []
  for number, (line, example) in enumerate(zip(lines, examples), 1):
    fields = line.split('\t')
    if len(fields) < 3:
      raise DataError(f'{path}:{number} has {len(fields)} tab-separated fields; distilled lines are '
                      'source<TAB>teacher translation<TAB>reference[<TAB>...]. Distil again; ' + how)
    if fields[0] != tsv_field(example.source):
      raise DataError(f'{path}:{number}: its source {fields[0][:60]!r} is not example {number} of the {split} '
                      f'split ({example.source[:60]!r}): the distillation was made from other data '
                      f'(data settings then: {manifest.get("data")}). Distil this data again; {how}')
    translations.append(fields[1])
  return translations


def distilled_pairs(examples: Sequence[Example], teacher: Sequence[str], tokenizer,
                    max_len: int) -> tuple[list[Pair], list[np.ndarray], dict[str, int]]:
  """(pairs with the teacher targets, the raw first-reference target of each pair, counts).

  A pair is dropped when its source, teacher target or raw target is longer than `max_len`
  tokens (incl. EOS); an empty teacher translation falls back to the raw reference. Counts:
  'dropped', 'empty_teacher'.
  """
  pairs, raw_targets, counts = [], [], {'dropped': 0, 'empty_teacher': 0}
  for example, translation in zip(examples, teacher):
    source = tokenizer.encode(example.source) + [EOS_ID]
    raw = tokenizer.encode_target(example.references[0]) + [EOS_ID]
    target = tokenizer.encode_target(translation) + [EOS_ID] if translation.strip() else raw
    counts['empty_teacher'] += not translation.strip()
    if max(len(source), len(target), len(raw)) > max_len:
      counts['dropped'] += 1
      continue
    pairs.append((np.asarray(source, np.int32), np.asarray(target, np.int32)))
    raw_targets.append(np.asarray(raw, np.int32))
  return pairs, raw_targets, counts
