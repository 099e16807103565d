"""Loading a trained run from its workdir and translating lists of sentences in fixed-shape batches.

Used by translate, evaluate and the validation/test BLEU inside training, so all three decode
exactly the same way: empty lines give empty outputs, over-long lines are truncated with a
warning, output order equals input order.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from typing import Any, Callable, Optional, Sequence

from absl import app
from absl import logging as absl_logging
import jax
import ml_collections
import numpy as np
import sacrebleu

from nat_jax import checkpoint, decode
from nat_jax.data import Tokenizer, inference_batches, load_or_train_tokenizer
from nat_jax.methods import get_method
from nat_jax.train_state import dummy_batch, make_optimizer, state_shardings
from nat_jax.sharding import make_mesh

log = logging.getLogger(__name__)

CONFIG_FILE = 'config.json'
TOKENIZER_FILE = 'spm.model'


@dataclasses.dataclass
class Run:
  config: ml_collections.ConfigDict
  tokenizer: Tokenizer
  method: Any
  params: Any
  meta: list


def quiet_logs():
  """Keep orbax/absl INFO chatter out of the user's terminal (warnings still show)."""
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger('absl').setLevel(logging.WARNING)


def source_lengths(max_len: int, num_buckets: int) -> list[int]:
  """The few padded source widths inference compiles for (multiples of 8 up to max_len)."""
  step = -(-max_len // num_buckets)
  return sorted({min(max_len, -(-(step * (i + 1)) // 8) * 8) for i in range(num_buckets)})


def load_run(workdir: str, which: str = 'latest', average: int = 1) -> Run:
  """Config, tokenizer and params of a training run; clear errors when something is missing."""
  config_path = os.path.join(workdir, CONFIG_FILE)
  spm_path = os.path.join(workdir, TOKENIZER_FILE)
  for path, what in ((config_path, 'config'), (spm_path, 'sentencepiece model')):
    if not os.path.exists(path):
      raise checkpoint.CheckpointError(
          f'{path!r} not found: --workdir={workdir} holds no trained run ({what} missing). '
          f'Train first: python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir={workdir}')
  with open(config_path) as f:
    config = ml_collections.ConfigDict(json.load(f))
  tokenizer = load_or_train_tokenizer(spm_path, (), config.vocab_size)
  method = get_method(config, tokenizer.vocab_size)
  mesh = make_mesh(1)
  abstract, _ = state_shardings(method, make_optimizer(config), dummy_batch(), mesh)
  params, meta = checkpoint.load_params(workdir, abstract, which=which, average=average)
  return Run(config, tokenizer, method, params, meta)


def encode_sources(texts: Sequence[str], tokenizer: Tokenizer, max_len: int,
                   line_numbers: Optional[Sequence[int]] = None) -> list[list[int]]:
  """Token ids + EOS per line; lines longer than max_len are truncated with one warning each."""
  out = []
  for i, text in enumerate(texts):
    ids = tokenizer.encode(text)
    if len(ids) + 1 > max_len:
      print(f'WARNING: input line {line_numbers[i] if line_numbers else i + 1} has {len(ids)} tokens, more than the model maximum '
            f'{max_len - 1}; truncated.', file=sys.stderr, flush=True)
      ids = ids[:max_len - 1]
    out.append(ids + [tokenizer.eos_id])
  return out


def translate_texts(run_or_parts, texts: Sequence[str], decode_fn: Callable, rows: int,
                    params=None, first_line: int = 1) -> tuple[list[str], dict[str, np.ndarray]]:
  """Translate `texts` in order. Returns (translations, aux stats per sentence).

  run_or_parts: a Run (or any object with config, tokenizer, params). Empty / whitespace-only
  lines translate to ''. `first_line` numbers the lines in warnings.
  """
  cfg, tok = run_or_parts.config, run_or_parts.tokenizer
  params = run_or_parts.params if params is None else params
  outputs = [''] * len(texts)
  aux_all: dict[str, np.ndarray] = {}
  keep = [i for i, t in enumerate(texts) if t.strip()]
  seqs = encode_sources([texts[i] for i in keep], tok, cfg.max_len, [first_line + i for i in keep])
  lengths = source_lengths(cfg.max_len, cfg.num_buckets)
  for idx, src in inference_batches(seqs, rows, lengths):
    out = decode_fn(params, src)
    tokens = np.asarray(jax.device_get(out.tokens))
    aux = {k: np.asarray(v) for k, v in jax.device_get(out.aux).items()}
    for row, j in enumerate(idx):
      if j < 0:
        continue
      outputs[keep[j]] = tok.decode(tokens[row])
      for k, v in aux.items():
        aux_all.setdefault(k, np.zeros(len(texts), v.dtype))[keep[j]] = v[row]
  return outputs, aux_all


def bleu_scores(hyps: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, Any]:
  """sacreBLEU BLEU and chrF with their signatures. references: one list per reference stream."""
  bleu = sacrebleu.metrics.BLEU()
  chrf = sacrebleu.metrics.CHRF()
  b = bleu.corpus_score(list(hyps), [list(r) for r in references])
  c = chrf.corpus_score(list(hyps), [list(r) for r in references])
  return {'bleu': round(b.score, 2), 'chrf': round(c.score, 2), 'bleu_signature': str(bleu.get_signature()),
          'chrf_signature': str(chrf.get_signature()), 'num_refs': len(references)}


def reference_streams(examples) -> list[list[str]]:
  """Examples with a varying number of references -> streams; the common number is used."""
  n = min(len(e.references) for e in examples)
  return [[e.references[r] for e in examples] for r in range(n)]


def split_decoder_flags(argv: list[str]) -> tuple[list[str], dict[str, str]]:
  """Pull `--decoder.<opt>=<value>` out of argv (absl cannot declare dotted flags)."""
  rest, opts = [], {}
  for arg in argv:
    if arg.startswith('--decoder.'):
      key, sep, value = arg[len('--decoder.'):].partition('=')
      if not sep:
        raise SystemExit(f'error: {arg!r} needs a value: --decoder.{key}=<value>')
      opts[key] = value
    else:
      rest.append(arg)
  return rest, opts


def run_with_decoder_flags(main: Callable, overrides: dict[str, str]):
  """app.run(main) after moving `--decoder.<opt>=<v>` out of sys.argv into `overrides`."""
  argv, found = split_decoder_flags(sys.argv)
  overrides.update(found)
  app.run(main, argv=argv)


def cli_prologue(argv, workdir: str, which: str, average: int, prepare: Callable[[Run], Any]) -> tuple[Run, Any]:
  """Shared start of translate/evaluate: argument checks, quiet logs, the run, and `prepare(run)`
  (decoders etc.); a missing run or a bad decoder option prints `error: ...` and exits 2."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not workdir:
    raise app.UsageError('--workdir=<dir of a trained run> is required.')
  quiet_logs()
  try:
    run = load_run(workdir, which, average)
    return run, prepare(run)
  except (checkpoint.CheckpointError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


def make_decoder(method, name: str, overrides: dict[str, str]):
  """(jitted decode fn, parsed options)."""
  options = decode.parse_options(name, overrides)
  return decode.make_decode_fn(method, name, options), options
