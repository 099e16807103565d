"""Token-budget batching into a few fixed (rows, length) shapes, so XLA compiles only a few.

Training batches are a pure function of (seed, step): resuming at step s yields exactly the batch an
uninterrupted run would have seen, with no iterator state to checkpoint.
"""

import math
from typing import Iterator, Optional, Sequence

import numpy as np

from nat_jax.core.packing import PACKING_KEYS
from nat_jax.core.tokens import EOS_ID, PAD_ID, WIDTH_STEP, ceil_div
from nat_jax.errors import ConfigError, DataError

Pair = tuple[np.ndarray, np.ndarray]  # (source int32[n], target int32[m]), both ending in EOS.
RAW_STREAM = 0x7261  # third seed word of the raw-reference draws (apart from the epoch permutations)


def bucket_shapes(max_len: int, tokens_per_batch: int, num_buckets: int,
                  row_multiple: int = 1) -> list[tuple[int, int]]:
  """(rows, length) per bucket, sorted by length; the last length covers `max_len`.

  Lengths are evenly spaced up to `max_len`, each rounded up to a multiple of 8; rows is the token
  budget // length rounded down to a multiple of `row_multiple` (at least `row_multiple`).
  """
  if min(max_len, tokens_per_batch, num_buckets, row_multiple) < 1:
    raise ConfigError('bucket_shapes needs positive max_len, tokens_per_batch, num_buckets and '
                     f'row_multiple, got {(max_len, tokens_per_batch, num_buckets, row_multiple)}.')
  lengths = sorted({WIDTH_STEP * math.ceil(max_len * (i + 1) / num_buckets / WIDTH_STEP) for i in range(num_buckets)})
  return [(max(row_multiple, tokens_per_batch // length // row_multiple * row_multiple), length)
          for length in lengths]


def encode_pairs(examples, tokenizer, max_len: int) -> tuple[list[Pair], int]:
  """Tokenizes source and first reference (+EOS); drops pairs longer than `max_len` on a side.

  Returns (pairs, number of dropped examples).
  """
  pairs, dropped = [], 0
  for example in examples:
    source = tokenizer.encode(example.source) + [EOS_ID]
    target = tokenizer.encode_target(example.references[0]) + [EOS_ID]
    if max(len(source), len(target)) > max_len:
      dropped += 1
    else:
      pairs.append((np.asarray(source, np.int32), np.asarray(target, np.int32)))
  return pairs, dropped


def pad_rows(seqs: Sequence[np.ndarray | None], length: int) -> np.ndarray:
  """int32[len(seqs), length], row i = seqs[i] padded with PAD_ID (None = all-pad row)."""
  out = np.full((len(seqs), length), PAD_ID, np.int32)
  for row, seq in zip(out, seqs):
    if seq is not None:
      row[:len(seq)] = seq
  return out


class TrainBatches:
  """Shuffled, bucketed training batches; `batches(step)` depends only on (seed, step).

  Epoch e: pairs are permuted with `np.random.default_rng((seed, e))`, each bucket's pairs (in
  that order) are cut into batches of the bucket's rows (the last one padded with empty rows),
  and the epoch's batch order is permuted with the same generator. Epochs are concatenated.
  With several processes, process p gets rows [p * rows / P, (p + 1) * rows / P) of each batch.

  Mixed distillation: with `raw_targets` (one per pair, e.g. the raw references of distilled
  pairs) a row keeps its raw target instead of the pair's with probability `raw_prob`, drawn from
  `np.random.default_rng((seed, step, RAW_STREAM))` over the rows of the global batch, so the
  choice is a function of (seed, step, example) like everything else.
  """

  def __init__(self, pairs: Sequence[Pair], shapes: Sequence[tuple[int, int]], seed: int,
               process_index: int = 0, process_count: int = 1,
               raw_targets: Optional[Sequence[np.ndarray]] = None, raw_prob: float = 0.0):
    if not pairs:
      raise DataError('TrainBatches needs at least one pair.')
    if not 0.0 <= raw_prob <= 1.0:
      raise ConfigError(f'raw_prob must be in [0, 1], got {raw_prob}.')
    if raw_prob > 0 and (raw_targets is None or len(raw_targets) != len(pairs)):
      raise ConfigError('raw_prob > 0 needs one raw target per pair (a distilled training set).')
    self.raw_targets = list(raw_targets) if raw_prob > 0 else None
    self.raw_prob = raw_prob
    self.shapes = sorted(shapes, key=lambda shape: shape[1])
    bad_rows = [rows for rows, _ in self.shapes if rows % process_count]
    if bad_rows:
      raise ConfigError(f'Batch rows {bad_rows} do not divide by process_count={process_count}; '
                       'use bucket_shapes(..., row_multiple=<multiple of the process count>).')
    if not 0 <= process_index < process_count:
      raise ConfigError(f'process_index={process_index} not in [0, {process_count}).')
    self.pairs, self.seed = list(pairs), seed
    self.process_index, self.process_count = process_index, process_count
    lengths = np.array([max(len(s), len(t)) for s, t in self.pairs])  # [num_pairs]
    if self.raw_targets is not None:
      lengths = np.maximum(lengths, [len(t) for t in self.raw_targets])
    bucket_lengths = np.array([length for _, length in self.shapes])
    if lengths.max() > bucket_lengths[-1]:
      raise ConfigError(f'A pair of {lengths.max()} tokens exceeds the longest bucket '
                       f'({bucket_lengths[-1]}); filter pairs with encode_pairs(max_len=...).')
    self.bucket = np.searchsorted(bucket_lengths, lengths)  # [num_pairs] smallest fitting bucket
    counts = np.bincount(self.bucket, minlength=len(self.shapes))
    self.batches_per_epoch = sum(ceil_div(int(n), rows) for n, (rows, _) in zip(counts, self.shapes))
    self._layouts: dict[int, list[tuple[int, np.ndarray]]] = {}

  def epoch_of(self, step: int) -> int:
    return step // self.batches_per_epoch

  def _layout(self, epoch: int) -> list[tuple[int, np.ndarray]]:
    """The epoch's batches as (bucket, pair indices int64[rows], -1 = empty row), cached."""
    if epoch not in self._layouts:
      rng = np.random.default_rng((self.seed, epoch))
      order = rng.permutation(len(self.pairs))
      batches = []
      for b, (rows, _) in enumerate(self.shapes):
        members = order[self.bucket[order] == b]
        padded = np.full(ceil_div(len(members), rows) * rows, -1, np.int64)
        padded[:len(members)] = members
        batches += [(b, chunk) for chunk in padded.reshape(-1, rows)]
      self._layouts = {epoch: [batches[i] for i in rng.permutation(len(batches))]}
    return self._layouts[epoch]

  def __call__(self, step: int) -> dict[str, np.ndarray]:
    """{'source', 'target'}: int32[rows / process_count, length] of this process, pad 0."""
    bucket, indices = self._layout(self.epoch_of(step))[step % self.batches_per_epoch]
    rows, length = self.shapes[bucket]
    local = rows // self.process_count
    indices = indices[self.process_index * local:(self.process_index + 1) * local]
    chosen = [self.pairs[i] if i >= 0 else (None, None) for i in indices]
    if self.raw_targets is not None:
      use_raw = np.random.default_rng((self.seed, step, RAW_STREAM)).random(rows) < self.raw_prob  # [rows]
      use_raw = use_raw[self.process_index * local:(self.process_index + 1) * local]
      chosen = [(s, self.raw_targets[i] if raw and i >= 0 else t)
                for (s, t), i, raw in zip(chosen, indices, use_raw)]
    return {'source': pad_rows([s for s, _ in chosen], length),
            'target': pad_rows([t for _, t in chosen], length)}


def packed_shape(max_len: int, tokens_per_batch: int, row_multiple: int = 1) -> tuple[int, int]:
  """(rows, length) of packed batches: rows of the longest bucket's length (so every pair fits), as
  many as the token budget allows (a multiple of `row_multiple`)."""
  return bucket_shapes(max_len, tokens_per_batch, 1, row_multiple)[0]


class PackedTrainBatches(TrainBatches):
  """TrainBatches with up to `max_segments` pairs per row, all batches of one (rows, length) shape.

  Epoch e: the pairs, permuted with `np.random.default_rng((seed, e))`, are packed in that order,
  each into the first of the `window` most recently opened rows where its source and its reserved
  target slots fit (else into a new row; the oldest open row is then closed); consecutive rows form
  the batches, whose order the same generator permutes. A pair reserves its target length (the
  longer of its two targets with `raw_targets`) rounded up to `slot_multiple` slots. Each row
  carries the segment ids and positions of nat_jax.core.packing. Epochs hold different numbers of
  batches; steps run through them in order (`epoch_of`), so a batch is still a function of
  (seed, step) alone. Raw-reference mixing draws per pair, in the order of the global batch.
  """

  def __init__(self, pairs: Sequence[Pair], shape: tuple[int, int], seed: int, max_segments: int,
               slot_multiple: int = 1, process_index: int = 0, process_count: int = 1,
               raw_targets: Optional[Sequence[np.ndarray]] = None, raw_prob: float = 0.0, window: int = 8):
    super().__init__(pairs, [shape], seed, process_index, process_count, raw_targets, raw_prob)
    if max_segments < 1 or slot_multiple < 1 or window < 1:
      raise ConfigError('max_segments, slot_multiple and window must be >= 1, got '
                       f'{(max_segments, slot_multiple, window)}.')
    self.max_segments, self.window = max_segments, window
    self.source_len = np.array([len(s) for s, _ in self.pairs])  # [num_pairs]
    target_len = np.array([len(t) for _, t in self.pairs])
    if self.raw_targets is not None:
      target_len = np.maximum(target_len, [len(t) for t in self.raw_targets])
    self.target_len = slot_multiple * np.ceil(target_len / slot_multiple).astype(np.int64)  # reserved slots
    if self.target_len.max() > shape[1]:
      raise ConfigError(f'A target needs {self.target_len.max()} slots (a multiple of {slot_multiple}), more than '
                       f'the row length {shape[1]}; lower max_len or raise the row length.')
    self._epoch_starts = [0]  # first step of each epoch packed so far, + the step after the last one
    self.batches_per_epoch = len(self._layout(0))  # of epoch 0: packing makes each epoch's count its own

  def _rows(self, epoch: int) -> list[list[int]]:
    """The epoch's packed rows (pair indices), in packing order."""
    length = self.shapes[0][1]
    order = np.random.default_rng((self.seed, epoch)).permutation(len(self.pairs))
    done, open_rows = [], []  # open: [pairs, source slots used, target slots used]
    for i in order:
      s, t = self.source_len[i], self.target_len[i]
      for row in open_rows:
        if row[1] + s <= length and row[2] + t <= length and len(row[0]) < self.max_segments:
          row[0].append(int(i))
          row[1] += s
          row[2] += t
          break
      else:
        open_rows.append([[int(i)], s, t])
        if len(open_rows) > self.window:
          done.append(open_rows.pop(0)[0])
    return done + [row[0] for row in open_rows]

  def _layout(self, epoch: int) -> list[list[list[int]]]:
    """The epoch's batches: `rows` packed rows each (empty lists pad the last one), cached."""
    if epoch not in self._layouts:
      rows = self._rows(epoch)
      per_batch = self.shapes[0][0]
      rows += [[] for _ in range(-len(rows) % per_batch)]
      batches = [rows[i:i + per_batch] for i in range(0, len(rows), per_batch)]
      order = np.random.default_rng((self.seed, epoch, 1)).permutation(len(batches))
      self._layouts = {epoch: [batches[i] for i in order]}
    return self._layouts[epoch]

  def epoch_of(self, step: int) -> int:
    while self._epoch_starts[-1] <= step:
      epoch = len(self._epoch_starts) - 1
      self._epoch_starts.append(self._epoch_starts[-1] + len(self._layout(epoch)))
    return int(np.searchsorted(self._epoch_starts, step, side='right')) - 1

  def __call__(self, step: int) -> dict[str, np.ndarray]:
    """{'source', 'target', + nat_jax.core.packing.PACKING_KEYS}: int32[rows / process_count, length]."""
    epoch = self.epoch_of(step)
    rows = self._layout(epoch)[step - self._epoch_starts[epoch]]
    targets = {}
    if self.raw_targets is not None:
      members = [i for row in rows for i in row]
      use_raw = np.random.default_rng((self.seed, step, RAW_STREAM)).random(len(members)) < self.raw_prob
      targets = {i: self.raw_targets[i] for i, raw in zip(members, use_raw) if raw}
    local = len(rows) // self.process_count
    rows = rows[self.process_index * local:(self.process_index + 1) * local]
    length = self.shapes[0][1]
    out = {key: np.zeros((local, length), np.int32) for key in ('source', 'target') + PACKING_KEYS}
    for r, row in enumerate(rows):
      at = {'source': 0, 'target': 0}
      for k, i in enumerate(row, start=1):
        source, target = self.pairs[i]
        for side, seq, slots in (('source', source, len(source)),
                                 ('target', targets.get(i, target), int(self.target_len[i]))):
          start = at[side]
          out[side][r, start:start + len(seq)] = seq
          out[f'{side}_segments'][r, start:start + slots] = k
          out[f'{side}_positions'][r, start:start + slots] = np.arange(slots)
          at[side] = start + slots
    return out


def inference_batches(seqs: Sequence[Sequence[int]], rows: int, lengths: Sequence[int],
                      shrink: bool = False, mix_widths: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  """Length-sorted translation batches: (index int64[R], tokens int32[R, Lb]).

  Lb is the smallest of `lengths` that fits a sequence, and a batch holds only sequences of one Lb:
  every sentence is decoded at its own padded width whatever else is translated with it, so its
  output (whose length bound grows with the width) never depends on its batch-mates. With
  `mix_widths` (for decoders that bound each row by its own width, decode.cuts_rows) a batch holds the
  next `rows` sequences by length whatever their widths, padded to the widest one's Lb: fewer, fuller
  batches. `index` holds positions in `seqs` (-1 for padding rows). R = rows, or with `shrink` the
  smallest power of two that holds a (width's) last, partial batch (a lone sentence costs one row).
  Sequences must not exceed max(lengths) (truncate before calling).
  """
  lengths = sorted(lengths)
  sizes = np.array([len(s) for s in seqs], np.int64)
  if sizes.size and sizes.max() > lengths[-1]:
    raise ValueError(f'Sequence {int(sizes.argmax())} has {sizes.max()} tokens, more than the '
                     f'longest allowed length {lengths[-1]}; truncate inputs first.')
  order = np.argsort(-sizes, kind='stable')  # Longest first: memory problems show up at once.
  width = np.asarray(lengths)[np.searchsorted(lengths, sizes[order])] if sizes.size else sizes  # [N] per sorted seq
  starts = np.flatnonzero(np.r_[True, width[1:] != width[:-1]]) if sizes.size else []
  if mix_widths:
    starts = [0] if sizes.size else []
  for begin, end in zip(starts, [*starts[1:], len(order)]):
    for start in range(begin, end, rows):
      chunk = order[start:min(start + rows, end)]
      index = np.full(power_of_two_rows(len(chunk), rows) if shrink else rows, -1, np.int64)
      index[:len(chunk)] = chunk
      yield index, pad_rows([np.asarray(seqs[i]) if i >= 0 else None for i in index], int(width[start]))  # the widest


def power_of_two_rows(n: int, limit: int) -> int:
  """The smallest power of two >= n, at most `limit`: the rows a batch of n sentences is decoded
  with when batches shrink (at most log2(limit) + 1 compiled row counts)."""
  rows = 1
  while rows < n:
    rows *= 2
  return min(rows, limit)
