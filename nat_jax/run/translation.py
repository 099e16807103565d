"""Translating lists of sentences with a run in fixed-shape batches.

Used by translate, evaluate, the benchmarks and the validation/test BLEU inside training, so
all of them decode exactly the same way: empty lines give empty outputs, over-long
lines are truncated with a warning, output order equals input order.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import jax
import numpy as np

from nat_jax.core.tokens import WIDTH_STEP
from nat_jax.data import Tokenizer, inference_batches
from nat_jax.errors import log
from nat_jax.parallel.sharding import place_rows
from nat_jax.run import compiled


def source_lengths(max_len: int, geometric: bool = False) -> list[int]:
  """The padded source widths inference compiles for: every multiple of 8 below max_len, and max_len.

  A batch is padded at most 7 tokens past its longest source, so the encoder (and a
  DA-Transformer's graph of lambda x width vertices) stays close to the real length, for at most
  max_len / 8 compiled shapes, each compiled only when a batch needs it. `geometric`: 8, 16, 24, 32,
  48, 64, 96, 128, ... (from 16 on each at most 1.5x the one before), for batches of mixed widths whose rows are
  bounded by their own width (decode.cuts_rows): padding then changes no output, so fewer shapes
  (8 rather than 16 up to 128) are worth up to a third more padding.
  """
  if geometric:
    steps = {m * 2 ** k * WIDTH_STEP // 2 for k in range(max_len.bit_length() + 1) for m in (2, 3)}
    return sorted({w for w in steps if w < max_len and w % WIDTH_STEP == 0} | {max_len})
  return sorted({*range(WIDTH_STEP, max_len, WIDTH_STEP), max_len})


def encode_sources(texts: Sequence[str], tokenizer: Tokenizer, max_len: int,
                   line_numbers: Optional[Sequence[int]] = None, warn: bool = True) -> list[list[int]]:
  """Token ids + EOS per line; lines longer than max_len are truncated with one warning each
  (`warn=False` for callers that only size work which translate_texts then warns about)."""
  out = []
  for i, text in enumerate(texts):
    ids = tokenizer.encode(text)
    if len(ids) + 1 > max_len and warn:
      log.warning('input line %d has %d tokens, more than the model maximum %d; truncated.',
                  line_numbers[i] if line_numbers else i + 1, len(ids), max_len - 1)
    ids = ids[:max_len - 1]
    out.append(ids + [tokenizer.eos_id])
  return out


def host_value(x) -> np.ndarray:
  """A decoder output whole on this host: rows split over devices of other processes (a mesh that
  spans processes) are gathered from all of them, every process getting the same array."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(jax.device_get(x))


def on_run_devices(src: np.ndarray, run):
  """A batch of source rows as the run's decoders take it: split over its mesh's `data` axis when the
  run spans several devices, else as it is."""
  mesh = run.mesh
  return src if mesh is None or mesh.size == 1 else place_rows(src, mesh)


def translate_texts(run, texts: Sequence[str], decode_fn: Callable, rows: int, first_line: int = 1,
                    shrink: bool = False, mix_widths: bool = False) -> tuple[list[str], dict[str, np.ndarray]]:
  """Translate `texts` in order. Returns (translations, aux stats per sentence).

  run: a nat_jax.run.workdir.Run (or any object with config, tokenizer, params, mesh). Empty / whitespace-only
  lines translate to ''. `first_line` numbers the lines in warnings. Batches hold `rows` sentences of
  one padded width (`shrink`: a partial batch fewer rows; `mix_widths`: of any widths, for a decoder that
  bounds each row by its own width; nat_jax.data.inference_batches). With a run on several devices
  (`run.mesh`), each batch's rows are split over the mesh's `data` axis, so every device decodes
  its share, not the whole batch (outputs unchanged; tests/integration/test_aot.py checks every decoder).
  """
  cfg, tok = run.config, run.tokenizer
  outputs = [''] * len(texts)
  aux_all: dict[str, np.ndarray] = {}
  keep = [i for i, t in enumerate(texts) if t.strip()]
  seqs = encode_sources([texts[i] for i in keep], tok, cfg.max_len, [first_line + i for i in keep])
  for idx, src in inference_batches(seqs, rows, source_lengths(cfg.max_len, mix_widths), shrink, mix_widths):
    compiled.keep_maps_in_bounds()  # a process meeting many shapes must not run out of memory maps
    out = decode_fn(run.params, on_run_devices(src, run))
    tokens = host_value(out.tokens)
    aux = {k: host_value(v) for k, v in out.aux.items()}
    for row, j in enumerate(idx):
      if j < 0:
        continue
      outputs[keep[j]] = tok.decode(tokens[row])
      for k, v in aux.items():
        aux_all.setdefault(k, np.zeros(len(texts), v.dtype))[keep[j]] = v[row]
  return outputs, aux_all
