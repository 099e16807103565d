"""Sequence-level knowledge distillation, the library behind `python -m nat_jax.distill`.

How the work is organised:
- The split's examples are sorted by source length (stable) and cut into chunks of
  `--chunk_sentences`; inside a chunk, `translate_texts` decodes fixed-shape batches of similar
  length, one jitted decode per shape. Each finished chunk is written atomically to
  `<out>/.work/<split>/<chunk>.txt` (its translations in sorted order).
- Re-running the same command continues with the chunks that are missing, so a run killed at any
  point (even SIGKILL) ends with the same bytes as an uninterrupted one. `<out>/.work/<split>/job.json`
  records what the work is (teacher, checkpoint step, decoder, options, data, limit, chunking): a
  re-run with different settings is an error instead of a silent mix.
- With several processes (`jax.distributed`, or `--process_index/--process_count` for independent
  processes) process p decodes the chunks i with i % P == p; process 0 waits for every chunk and
  assembles the files. Assembly restores the split's order.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import sys
import time
from typing import Any, Mapping, Sequence

from tqdm import tqdm

from nat_jax import decode
from nat_jax.data import load_split
from nat_jax.data.distilled import MANIFEST, tsv_field
from nat_jax.data.sources import SPLITS
from nat_jax.errors import DistillError, log
from nat_jax.files import remove_stale_temporaries, write_atomic
from nat_jax.run.resources import Resources
from nat_jax.run.translation import encode_sources, translate_texts

WORK = '.work'


def sources_hash(sources: Sequence[str]) -> str:
  """sha256 of the sources as they appear in the TSV, one per line: identifies a split's content."""
  digest = hashlib.sha256()
  for source in sources:
    digest.update(tsv_field(source).encode('utf-8') + b'\n')
  return digest.hexdigest()


def length_order(token_lengths: Sequence[int]) -> list[int]:
  """Example indices sorted by source length (stable): chunks then hold sentences of similar length."""
  return sorted(range(len(token_lengths)), key=lambda i: token_lengths[i])


def chunk_ranges(count: int, size: int) -> list[tuple[int, int]]:
  return [(start, min(start + size, count)) for start in range(0, count, size)]


def check_job(work_dir: str, job: dict):
  """Record the job in work_dir/job.json, or fail if unfinished work there came from another job."""
  path = os.path.join(work_dir, 'job.json')
  if os.path.exists(path):
    with open(path) as f:
      old = json.load(f)
    if old != job:
      changed = sorted(k for k in set(old) | set(job) if old.get(k) != job.get(k))
      raise DistillError(f'{work_dir} holds unfinished work of a different distillation (differs in {changed}); '
                         'rerun the original command to finish it, or delete that directory / use another --out.')
  else:
    os.makedirs(work_dir, exist_ok=True)
    write_atomic(path, json.dumps(job, indent=2, sort_keys=True))


def distil_split(run, decode_fn, split: str, out: str, job: dict, *, limit: int, batch_size: int,
                 chunk_sentences: int, process_index: int, process_count: int, wait_seconds: float,
                 lead: bool) -> dict:
  """Decode one split in resumable chunks (this process's share) and, on process 0, assemble
  `<out>/<split>.tsv`. Returns the split's manifest entry."""
  examples = load_split(run.config.data, split)
  if limit:
    examples = examples[:limit]
  sources = [e.source for e in examples]
  token_lengths = [len(s) for s in encode_sources(sources, run.tokenizer, run.config.max_len,
                                                  warn=False)]  # translate_texts warns about over-long lines
  order = length_order(token_lengths)
  chunks = chunk_ranges(len(order), chunk_sentences)
  work_dir = os.path.join(out, WORK, split)
  digest = sources_hash(sources)
  check_job(work_dir, {**job, 'split': split, 'examples': len(examples), 'sources_sha256': digest,
                       'chunk_sentences': chunk_sentences})
  if process_count == 1:  # with several processes a live one may be writing its own
    for path in remove_stale_temporaries(work_dir):
      log.warning('removed %s, left by an interrupted run.', path)
  chunk_path = lambda i: os.path.join(work_dir, f'{i:06d}.txt')
  mine = [i for i in range(len(chunks)) if i % process_count == process_index]
  todo = [i for i in mine if not os.path.exists(chunk_path(i))]
  done_sentences = sum(chunks[i][1] - chunks[i][0] for i in mine if i not in todo)
  total = sum(chunks[i][1] - chunks[i][0] for i in mine)
  with tqdm(total=total, initial=done_sentences, desc=f'distill {split}', unit='sent', dynamic_ncols=True,
            file=sys.stderr, mininterval=2.0) as bar:
    for i in todo:
      start, stop = chunks[i]
      indices = order[start:stop]
      hyps, _ = translate_texts(run, [sources[j] for j in indices], decode_fn, batch_size)
      write_atomic(chunk_path(i), ''.join(tsv_field(h) + '\n' for h in hyps))
      bar.update(stop - start)
  entry = {'examples': len(examples), 'sources_sha256': digest, 'file': f'{split}.tsv'}
  if not lead:
    return entry
  deadline = time.time() + wait_seconds
  while True:
    missing = [i for i in range(len(chunks)) if not os.path.exists(chunk_path(i))]
    if not missing:
      break
    if time.time() > deadline:
      raise DistillError(f'{split}: chunks {missing[:5]}... of other processes are still missing after '
                         f'{wait_seconds}s; rerun those processes (they resume), then this one.')
    print(f'{split}: waiting for {len(missing)} chunks of other processes', file=sys.stderr, flush=True)
    time.sleep(10)
  translations = [''] * len(examples)
  for i, (start, stop) in enumerate(chunks):
    with open(chunk_path(i), encoding='utf-8', newline='') as f:
      lines = f.read().split('\n')[:-1]
    if len(lines) != stop - start:
      raise DistillError(f'{chunk_path(i)} has {len(lines)} lines, expected {stop - start}: delete it and rerun.')
    for j, line in zip(order[start:stop], lines):
      translations[j] = line
  rows = ('\t'.join([tsv_field(e.source), t] + [tsv_field(r) for r in e.references]) + '\n'
          for e, t in zip(examples, translations))
  write_atomic(os.path.join(out, f'{split}.tsv'), ''.join(rows))
  entry['empty_translations'] = sum(not t.strip() for t in translations)
  return entry


def distill(run, decoder: str, options: decode.Options | Mapping[str, Any], out: str, splits: Sequence[str], *,
            limit: int = 0, batch_size: int = 64, chunk_sentences: int = 1024, process_index: int = 0,
            process_count: int = 1, wait_seconds: float = 86400, teacher_workdir: str = '') -> dict:
  """Distil `splits` with the teacher `run` into `out` by `decoder` with `options` (typed, or option values over
  the run's defaults: decode.build_decoder); returns the manifest (written by process 0)."""
  bad = [s for s in splits if s not in SPLITS]
  if bad or not splits:
    raise DistillError(f'--splits={",".join(splits)}: each split must be one of {SPLITS}.')
  if chunk_sentences < 1 or batch_size < 1 or limit < 0:
    raise DistillError('--chunk_sentences and --batch_size must be >= 1 and --limit >= 0.')
  decode_fn, options = decode.build_decoder(run.method, decoder, options, Resources(run.tokenizer))
  step = run.meta[0]['step'] if run.meta else None
  data = {k: run.config.data[k] for k in sorted(run.config.data.keys())}
  job = {'teacher': os.path.abspath(teacher_workdir), 'step': step, 'averaged_checkpoints': len(run.meta),
         'decoder': decoder, 'options': dataclasses.asdict(options), 'data': data, 'limit': limit,
         'max_len': run.config.max_len}
  os.makedirs(out, exist_ok=True)
  lead = process_index == 0
  entries = {}
  for split in splits:
    entries[split] = distil_split(run, decode_fn, split, out, job, limit=limit, batch_size=batch_size,
                                  chunk_sentences=chunk_sentences, process_index=process_index,
                                  process_count=process_count, wait_seconds=wait_seconds, lead=lead)
  manifest = {**job, 'splits': entries}
  if lead:
    path = os.path.join(out, MANIFEST)
    date = None
    if os.path.exists(path):  # a re-run of finished work keeps the first date: same files, same bytes
      with open(path) as f:
        old = json.load(f)
      if {k: v for k, v in old.items() if k != 'date'} == manifest:
        date = old.get('date')
    manifest['date'] = date or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    write_atomic(path, json.dumps(manifest, indent=2, sort_keys=True) + '\n')
  return manifest
