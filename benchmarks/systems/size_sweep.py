"""Speed at size; quality from the d=128 runs: every method's default decoder at d = 128, 256 and 512,
with random weights, beside our AT greedy and CTranslate2 (float32 and int8, one thread and every core).

  python -m benchmarks.systems.size_sweep [--sizes=128,256,512] [--batch_sizes=1,64] [--passes=5] \
      [--out_len=37] [--ct2] [--json=OUT.json]

Why random weights: what a decoder call costs does not depend on the weights, only on the shapes
and on how many steps / passes it runs, and no trained model exists above d=128 yet. What depends
on the weights is fixed from the trained d=128 runs instead (docs/lab-notes/2026-11-26-speed-at-size.md says which):

  output length  every left-to-right decoder (greedy, the IBDecoder family, HRT's Skip-AT, drafted)
                 and Mask-Predict run with max_len = --out_len, the mean length (incl. EOS) of
                 at_bible_tiny's greedy output on the Acts test set (36.81,
                 docs/lab-notes/2026-11-24-drafted.md), so every row writes the same number of tokens;
                 random weights never emit EOS before it (each row's measured steps are printed and
                 checked). The DA-Transformer's cost is its graph (lambda x the source width), not the
                 output length.
  acceptance     drafted decoding (exact, the AT verifier) with a free draft: a perfect one (the
                 verifier's own greedy output: the ceiling), and one that finalises --acceptance
                 tokens per pass (1.43: the DAT re-drafter on the tiny runs,
                 docs/lab-notes/2026-11-24-drafted.md), made from the greedy output by corrupting
                 tokens so that gaps of 1 and 2 tokens alternate as floor((j + 1) a) - floor(j a). Its
                 output is checked equal to greedy's. The drafter's own cost is not in these rows (the
                 DAT row is what a DAT drafter costs once).

Sources are real: the Acts test sentences in a 4,000-piece sentencepiece vocabulary (the Bible
recipes'; --tokenizer, else one trained on the Bible's training split into a scratch directory).
Batch 1: the sentence of median length; batch B: the B sentences around the median length, one
batch padded to the longest. Model shapes per size: `SIZES` (128: the tiny recipes' E3D2, 256: the
mid-size recipes' E6D2, 512: Transformer-base E6D6), each method's options from its Bible recipe.

Timing: per size and batch size, every row compiles first (untimed), then --passes passes time every
row once each (the order reversed every other pass); reported: median ms per call, sentences/s, and
the row's speed over AT greedy computed within each pass: median (min-max over passes). The encoder
alone is timed too, so that "ms per pass" (drafted) and "ms per step" (greedy) exclude it: their
ratio is what one verification pass costs in greedy steps.

Precisions (--dtypes): int8 rows decode with the int8 product load_run picks ('int8': the packed oneDNN
kernel where it runs, nat_jax.kernels.onednn), 'int8/xla' with XLA's int8 dot. CTranslate2 decodes in a
process of its own (spawned, fed each batch through a pipe, which its timed calls include), so that JAX's
threads in this one never compete with its own. The floor row: the time this core takes to read the int8 weight
bytes one decoder step reads (every decoder matrix but cross-attention's keys and values, which are read
once per sentence, and the output projection), measured in the same passes (benchmarks.components.read_floor); each
int8 AT greedy row's step is reported against it.
"""
from __future__ import annotations

import functools
import json
import multiprocessing
import os
import sys
import tempfile
import types
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from flax import linen as nn

from benchmarks.components.read_floor import read_once
from benchmarks.components.sized_models import (
  SIZES,
  VOCAB,
  corrupt,
  decoder_fn,
  in_precision,
  random_params,
  sized_method,
  source_batch,
  steps_of,
)
from nat_jax import decode, recipes
from nat_jax.commands import cli
from nat_jax.data import load_or_train_tokenizer, load_split
from nat_jax.data.tokenizer import TOKENIZER_FILE
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.kernels import onednn
from nat_jax.metrics.timing import alternated, machine, timed
from nat_jax.run.translation import encode_sources
from nat_jax.views import LeftToRightScorer

flags.DEFINE_list('sizes', ['128', '256', '512'], 'd_model of each size (keys of SIZES).')
flags.DEFINE_list('batch_sizes', ['1', '64'], 'Sentences per call.')
flags.DEFINE_integer('passes', 5, 'Timed passes over the rows (alternating order).')
flags.DEFINE_integer('out_len', 37, 'Output tokens (incl. EOS) every left-to-right row writes: the trained '
                     'tiny AT greedy mean on Acts (36.81, docs/lab-notes/2026-11-24-drafted.md).')
flags.DEFINE_float('acceptance', 1.43, 'Tokens per pass of the imperfect free draft (the DAT re-drafter on '
                   'the tiny runs, docs/lab-notes/2026-11-24-drafted.md).')
flags.DEFINE_list('rows', [], 'Only these rows (labels of ROWS; default: all).')
flags.DEFINE_list('dtypes', ['float32', 'int8'], "Precisions of our rows: each row again in each (labelled ' int8' "
                  "...; weights quantized as load_run does; 'int8/xla': XLA's int8 dot, where 'int8' takes the "
                  'oneDNN kernel if it runs); speed is always over float32 AT greedy.')
flags.DEFINE_boolean('ct2', True, 'Add CTranslate2 rows (the ct2 extra): float32 and int8, 1 thread and every core.')
flags.DEFINE_string('tokenizer', '', 'A 4,000-piece spm.model (default: train one on the Bible training split).')
flags.DEFINE_string('json', '', 'Also write the results here (JSON).')
flags.DEFINE_integer('seed', 0, 'Seed of the random weights.')
FLAGS = flags.FLAGS

# (label, recipe, decoder, options, draft): draft 'perfect' / 'acceptance' for the drafted rows.
ROWS = [
    ('AT greedy', 'at_bible_tiny', 'greedy', {}, None),
    ('AT beam 4', 'at_bible_tiny', 'beam', {}, None),
    ('DAT dag_lookahead', 'dat_bible_tiny', 'dag_lookahead', {}, None),
    ('HRT hrt (k=2)', 'hrt_bible_tiny', 'hrt', {}, None),
    ('IBDecoder greedy', 'ibdec_bible_tiny', 'greedy', {}, None),
    ('SA greedy', 'sa_bible_tiny', 'greedy', {}, None),
    ('IBDecoder+SA greedy', 'ibsa_bible_tiny', 'greedy', {}, None),
    ('IMDecoder greedy', 'imdec_bible_tiny', 'greedy', {}, None),
    ('CMLM mask_predict (I=10, l=5)', 'cmlm_bible_tiny', 'mask_predict', {}, None),
    ('AT drafted (perfect free draft) block 4', 'at_bible_tiny', 'drafted', {'block': 4}, 'perfect'),
    ('AT drafted (perfect free draft) block 8', 'at_bible_tiny', 'drafted', {'block': 8}, 'perfect'),
    ('AT drafted (free draft at the measured acceptance) block 4', 'at_bible_tiny', 'drafted', {'block': 4},
     'acceptance'),
]
ENCODER = 'AT encoder alone'  # timed beside the rows: what "ms per pass / step" leave out
FLOOR = 'floor: one read of the int8 weights a decoder step reads'
FLOOR_LOOP = 32  # reads per timed floor call
CT2_ROWS = [(q, t) for q in ('float32', 'int8') for t in (1, 0)]  # threads 0: every core

def ct2_fn(method, config, params, tokenizer, quantization: str, threads: int, out_len: int, scratch: str):
  """fn(params, src, draft) -> DecodeOutput of the AT exported to CTranslate2 (`threads` 0: every core),
  decoding in a process of its own."""
  from nat_jax.formats.ct2 import export_ctranslate2
  model_dir = os.path.join(scratch, f'ct2_{config.model.d_model}_{quantization}')
  if not os.path.isdir(model_dir):
    run = types.SimpleNamespace(config=config, method=method, params=params, tokenizer=tokenizer, meta=[])
    export_ctranslate2(run, model_dir, quantization)
  peer = ProcessPeer(model_dir, threads or os.cpu_count() or 1, out_len)
  return lambda params_, src, tokens: peer(np.asarray(src))


class ProcessPeer:
  """A CTranslate2 decoder in a spawned process: call(src) -> its DecodeOutput (an error there is raised here)."""

  def __init__(self, model_dir: str, threads: int, max_len: int):
    context = multiprocessing.get_context('spawn')
    self.conn, child = context.Pipe()
    self.process = context.Process(target=serve_peer, args=(child, model_dir, threads, max_len), daemon=True)
    self.process.start()

  def __call__(self, src: np.ndarray):
    self.conn.send(src)
    out = self.conn.recv()
    if isinstance(out, BaseException):
      raise out
    return out


def serve_peer(conn, model_dir: str, threads: int, max_len: int):
  """The peer process: decode every batch received until the pipe closes."""
  from nat_jax.formats.ct2 import ct2_decode_fn
  fn = ct2_decode_fn(model_dir, intra_threads=threads, max_len=max_len)
  while True:
    try:
      src = conn.recv()
    except EOFError:
      return
    try:
      conn.send(jax.tree_util.tree_map(np.asarray, fn(None, src)))
    except Exception as e:  # noqa: BLE001 (sent back, raised in the benchmark)
      conn.send(RuntimeError(f'CTranslate2 peer: {type(e).__name__}: {e}'))


def step_bytes(params) -> int:
  """Bytes of the int8 weights one decoder step reads (one per element of the float model's matrices): every
  decoder matrix but cross-attention's keys and values (once per sentence), and the output projection (the
  embedding table)."""
  total = 0
  for path, leaf in jax.tree_util.tree_flatten_with_path(nn.meta.unbox(params))[0]:
    keys = [str(getattr(p, 'key', p)) for p in path]
    if keys[-1] not in ('kernel', 'embedding'):
      continue
    decoder = any(k.startswith('decoder') for k in keys) and not (
        'cross_attention' in keys and ('key' in keys or 'value' in keys))
    if decoder or keys[-1] == 'embedding':
      total += leaf.size
  return total


def timed_programs(size: int, tokenizer, scratch: str):
  """What is timed at `size`: ({label: (fn, params, draft kind, dtype)} for every row in every precision and
  CTranslate2's; {encoder label: (params, encode)} per precision; the read floor's call or None; its bytes)."""
  rows = [r for r in ROWS if not FLAGS.rows or r[0] in FLAGS.rows]
  built: dict[tuple, Any] = {}
  for _, recipe, *_ in rows:
    if (recipe, 'float32') not in built:
      config, method = sized_method(recipe, size)
      params = random_params(method, FLAGS.seed)
      for dtype in FLAGS.dtypes:
        built[recipe, dtype] = (config, *in_precision(config, params, dtype))
  config, method, at_params = built['at_bible_tiny', 'float32']
  fns = {label + suffix(dtype): (decoder_fn(built[recipe, dtype][1], name, options, draft, FLAGS.out_len),
                                 built[recipe, dtype][2], draft, dtype)
         for dtype in FLAGS.dtypes for label, recipe, name, options, draft in rows}
  floor, floor_bytes = None, 0
  if any(d.startswith('int8') for d in FLAGS.dtypes):
    floor_bytes = step_bytes(at_params)
    floor = read_once(floor_bytes, FLOOR_LOOP)
  encoders = {ENCODER + suffix(dtype): (built['at_bible_tiny', dtype][2], jax.jit(
      lambda p, src, m=built['at_bible_tiny', dtype][1]: decode.method_view(m, LeftToRightScorer, 'size_sweep')(
          p).encode(src))) for dtype in FLAGS.dtypes}
  if FLAGS.ct2:
    for quantization, threads in CT2_ROWS:
      label = f'CTranslate2 greedy {quantization} {threads or os.cpu_count()} thread(s)'
      fns[label] = (ct2_fn(method, config, at_params, tokenizer, quantization, threads, FLAGS.out_len, scratch),
                    at_params, None, 'float32')
  return fns, encoders, floor, floor_bytes


def suffix(dtype: str) -> str:
  """A row label's precision suffix ('' for float32)."""
  return '' if dtype == 'float32' else f' {dtype}'


def result_row(size: int, batch: int, label: str, t, base, t_enc: float, out, src, draft, step_ms: float,
               floor_ms: Optional[float]) -> dict:
  """One row's record: its median time, its per-pass ratios to AT greedy (`base`), its steps, and for drafted
  rows its passes in float32 greedy steps; the int8 AT greedy's step against the read floor."""
  ratio = base / t
  row = {'size': size, 'batch': batch, 'row': label, 'ms': 1e3 * float(np.median(t)),
         'sentences_per_s': batch / float(np.median(t)), 'speed_vs_at_greedy': float(np.median(ratio)),
         'speed_min': float(ratio.min()), 'speed_max': float(ratio.max()), 'steps': steps_of(out),
         'source_width': int(src.shape[1]), 'encoder_ms': 1e3 * t_enc}
  if label.startswith('AT greedy int8') and floor_ms:
    row['ms_per_step'] = 1e3 * (float(np.median(t)) - t_enc) / row['steps']
    row['step_vs_floor'] = row['ms_per_step'] / floor_ms
  if 'iterations' in out.aux and draft is not None:
    passes = float(np.max(np.asarray(out.aux['passes'])))
    row['passes'] = passes
    row['tokens_per_pass'] = row['steps'] / float(np.mean(np.asarray(out.aux['iterations'])))
    row['pass_in_greedy_steps'] = (1e3 * (float(np.median(t)) - t_enc) / passes) / step_ms  # float32 steps
  return row


def measure_batch(size: int, batch: int, seqs, programs) -> list[dict[str, Any]]:
  """Every program of `programs` (timed_programs') at one batch size, alternated pass by pass."""
  fns, encoders, floor, floor_bytes = programs
  src = jnp.asarray(source_batch(seqs, batch))
  drafts = {}
  for dtype in FLAGS.dtypes:  # each precision's drafts: its own greedy output (the perfect draft), corrupted
    fn, params, _, _ = fns['AT greedy' + suffix(dtype)]
    perfect = np.asarray(fn(params, src, None).tokens)
    drafts[dtype] = {None: None, 'perfect': jnp.asarray(perfect),
                     'acceptance': jnp.asarray(corrupt(perfect, FLAGS.acceptance))}
  outs = {label: timed(lambda: fn(params, src, drafts[dtype][draft]))[0]  # noqa: B023
          for label, (fn, params, draft, dtype) in fns.items()}
  for label, (_, _, draft, dtype) in fns.items():
    if draft is not None and not np.array_equal(np.asarray(outs[label].tokens), drafts[dtype]['perfect']):
      raise AssertionError(f'{label}: exact drafted decoding did not return the greedy output.')
  calls = {label: functools.partial(fn, params, src, drafts[dtype][draft])
           for label, (fn, params, draft, dtype) in fns.items()}
  calls.update({label: functools.partial(fn, params, src) for label, (params, fn) in encoders.items()})
  for label in encoders:
    timed(calls[label])  # compiled before the timed passes, as every row is
  if floor:
    calls[FLOOR] = floor
    floor()
  times = alternated(calls, FLAGS.passes)
  at_ms = 1e3 * (float(np.median(times['AT greedy'])) - float(np.median(times[ENCODER])))
  step_ms = at_ms / steps_of(outs['AT greedy'])
  results, floor_ms = [], None
  if floor:
    floor_ms = 1e3 * float(np.median(times[FLOOR])) / FLOOR_LOOP
    results.append({'size': size, 'batch': batch, 'row': FLOOR, 'ms_per_step': floor_ms, 'bytes': floor_bytes})
    print(f'| {size} | {batch} | {FLOOR} | {floor_ms:.3f} ms per step ({floor_bytes / 1e6:.1f} MB) |', flush=True)
  for label, (_, _, draft, dtype) in fns.items():
    t_enc = float(np.median(times[ENCODER + suffix(dtype)]))
    results.append(result_row(size, batch, label, times[label], times['AT greedy'], t_enc, outs[label], src, draft,
                              step_ms, floor_ms))
    print(format_row(results[-1]), flush=True)
  return results


def measure_size(size: int, seqs, tokenizer, scratch: str) -> list[dict[str, Any]]:
  """Every row at `size` and every batch size: timings and per-pass ratios to AT greedy."""
  programs = timed_programs(size, tokenizer, scratch)
  return [row for batch in map(int, FLAGS.batch_sizes) for row in measure_batch(size, batch, seqs, programs)]


def format_row(r: dict) -> str:
  extra = f" | step {r['ms_per_step']:.3f} ms = {r['step_vs_floor']:.2f}x the floor" if 'step_vs_floor' in r else ''
  if 'passes' in r:
    extra = f" | {r['tokens_per_pass']:.2f} tokens/pass, pass = {r['pass_in_greedy_steps']:.2f} greedy steps"
  return (f"| {r['size']} | {r['batch']} | {r['row']} | {r['ms']:.2f} | {r['sentences_per_s']:.1f} | "
          f"{r['speed_vs_at_greedy']:.2f}x ({r['speed_min']:.2f}-{r['speed_max']:.2f}) | {r['steps']:.1f}{extra} |")


def main(_):
  cli.quiet_logs()
  if 'float32' not in FLAGS.dtypes:
    raise ConfigError('--dtypes must include float32: every speed is over float32 AT greedy.')
  sizes = [int(s) for s in FLAGS.sizes]
  unknown = [s for s in sizes if s not in SIZES]
  if unknown:
    raise ConfigError(f'--sizes: no shapes for {unknown}; known: {sorted(SIZES)}.')
  data_cfg = recipes.load_recipe(recipes.recipe_path('at_bible_tiny')).data
  with tempfile.TemporaryDirectory() as scratch:
    if FLAGS.tokenizer:
      tokenizer = load_or_train_tokenizer(FLAGS.tokenizer, (), VOCAB)
    else:
      train = load_split(data_cfg, 'train')
      texts = (t for e in train for t in (e.source, e.references[0]))
      tokenizer = load_or_train_tokenizer(os.path.join(scratch, TOKENIZER_FILE), texts, VOCAB)
    seqs = encode_sources([e.source for e in load_split(data_cfg, 'test')], tokenizer, 128, warn=False)
    print('Speed at size; quality from the d=128 runs (random weights; docs/lab-notes/2026-11-26-speed-at-size.md).')
    print(f'output length {FLAGS.out_len} tokens per row, free-draft acceptance {FLAGS.acceptance} tokens/pass\n')
    print('| d_model | batch | row | ms per call | sentences/s | speed vs AT greedy, median (min-max) | '
          'tokens per row (mean) |')
    print('|---|---|---|---|---|---|---|')
    results = []
    for size in sizes:
      results += measure_size(size, seqs, tokenizer, scratch)
      if FLAGS.json:
        write_atomic(FLAGS.json, json.dumps({'machine': machine(), 'int8_product': onednn.resolve('auto'),
                                             'command': 'python -m benchmarks.systems.size_sweep '
                                                        + ' '.join(sys.argv[1:]),
                                             'out_len': FLAGS.out_len,
                                             'acceptance': FLAGS.acceptance, 'rows': results}, indent=1) + '\n')
  print(f'\nmachine: {machine()}')


if __name__ == '__main__':
  cli.run_command(main)
