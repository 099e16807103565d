"""Non-autoregressive and hybrid vs autoregressive: BLEU, batch-1 latency, source words/s at batch 1
and batch-64 throughput of several runs and decoders on one split, in one process, with speedups
against the first run's greedy and beam.

  python -m benchmarks.nat_vs_at \
      --runs=runs/at_student_bible_tiny:greedy+beam,runs/cmlm_bible_tiny:mask_predict/iterations=4+mask_predict,runs/hrt_bible_tiny:hrt+hrt/b_at=4+hrt/chunk=1 \
      [--latency_sentences=100] [--batch1_runs=5] [--batch_size=64] [--dtype=float32] [--out=docs/nat_vs_at.md]

A decoder is `name` or `name/opt=value/opt=value` (its --decoder.<opt> options); a run is `workdir` or
`workdir@dtype` (bfloat16 / float16: that entry loads the run in half precision, so fp32 and half
precision of one run sit side by side; default --dtype). The first run is
the baseline; it must list `greedy` (and `beam` for the beam ratios). Timing is nat_jax.evaluate's:
every shape compiled first, batch-1 latency = median over --batch1_runs passes over the first
--latency_sentences sentences translated one by one, words/s = source words of a pass / its time
(mean over passes), throughput over the whole split. The last column compares a decoder with the
greedy decoding of its own run (Jacobi: decoder passes and batch-1 latency).
"""
from __future__ import annotations

import json
import os
import sys

from absl import app, flags

from nat_jax import cli
from nat_jax.data import load_split
from nat_jax.evaluate import FLAGS, evaluate_decoder  # also defines --batch_size, --latency_sentences, --split, ...
from nat_jax.models.transformer import DTYPES
from nat_jax.runs import load_run
from nat_jax.timing import machine

flags.DEFINE_list('runs', None, 'workdir:decoder+decoder,... ; the first run is the AT baseline.')


def parse_decoder(spec: str) -> tuple[str, dict[str, str]]:
  """'hrt/b_at=4/chunk=1' -> ('hrt', {'b_at': '4', 'chunk': '1'})."""
  name, *opts = spec.split('/')
  bad = [o for o in opts if '=' not in o]
  if bad or not name:
    raise app.UsageError(f'decoder {spec!r}: expected name or name/opt=value/opt=value')
  return name, dict(o.split('=', 1) for o in opts)


def parse_runs(specs: list[str], default_dtype: str) -> list[tuple[str, str, list[str]]]:
  """'runs/x@bfloat16:greedy+beam' -> ('runs/x', 'bfloat16', ['greedy', 'beam'])."""
  out = []
  for spec in specs:
    run, sep, decoders = spec.rpartition(':')
    workdir, at, dtype = run.partition('@')
    if not sep or not workdir or not decoders or (at and dtype not in DTYPES):
      raise app.UsageError(f'--runs entry {spec!r}: expected workdir[@{"|".join(DTYPES)}]:decoder+decoder')
    out.append((workdir, dtype or default_dtype, decoders.split('+')))
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS.runs:
    raise app.UsageError('--runs is required.')
  cli.quiet_logs()
  rows = []
  for workdir, dtype, decoders in parse_runs(FLAGS.runs, FLAGS.dtype):
    run = load_run(workdir, FLAGS.checkpoint, FLAGS.average, dtype)
    examples = load_split(run.config.data, FLAGS.split)[:FLAGS.max_sentences or None]
    for spec in decoders:
      name, options = parse_decoder(spec)
      print(f'{workdir} ({dtype}): {spec} ...', file=sys.stderr, flush=True)
      r = evaluate_decoder(run, name, options, examples, batch_size=FLAGS.batch_size,
                           latency_sentences=FLAGS.latency_sentences, batch1_runs=FLAGS.batch1_runs)
      r.update(workdir=workdir if dtype == 'float32' else f'{workdir}@{dtype}', method=run.method.label(),
               step=run.meta[0]['step'], spec=spec,
               layers=f'E{run.config.model.enc_layers}D{run.config.model.dec_layers}')
      print(json.dumps(r), file=sys.stderr, flush=True)
      rows.append(r)
  base = {r['spec']: r for r in rows if r['workdir'] == rows[0]['workdir']}
  lines = [f'machine: {machine()}; split {FLAGS.split}, {rows[0]["sentences"]} sentences, {FLAGS.dtype}; '
           f'batch-1 latency median and words/s over {FLAGS.batch1_runs} passes over {FLAGS.latency_sentences} '
           'sentences', '',
           '| run | method | layers | decoder | BLEU (1 ref) | BLEU (all refs) | latency b=1 (ms) | src words/s b=1 '
           f'| sent/s b={FLAGS.batch_size} | b=1 speedup vs AT greedy / beam '
           f'| b={FLAGS.batch_size} speedup vs AT greedy / beam | vs own greedy: iterations / b=1 wall-clock |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|']

  def ratio(r, ref, key, inverse):
    if ref is None or key not in r or key not in ref:
      return '-'
    return f'{(ref[key] / r[key]) if inverse else (r[key] / ref[key]):.2f}'

  for r in rows:
    lat = [ratio(r, base.get(d), 'latency_ms_batch1_median', True) for d in ('greedy', 'beam')]
    thr = [ratio(r, base.get(d), 'sentences_per_s_batch', False) for d in ('greedy', 'beam')]
    own = next((g for g in rows if g['workdir'] == r['workdir'] and g['spec'] == 'greedy'), None)
    own_iter = ratio(r, own, 'mean_iterations', True) if own is not r else '-'
    own_wall = ratio(r, own, 'latency_ms_batch1_median', True) if own is not r else '-'
    lines.append(f'| {r["workdir"]} (step {r["step"]}) | {r["method"]} | {r["layers"]} | {r["spec"]} | '
                 f'{r["first_ref"]["bleu"]} | {r.get("all_refs", {}).get("bleu", "-")} | '
                 f'{r.get("latency_ms_batch1_median", "-")} | {r.get("source_words_per_s_batch1", "-")} | '
                 f'{r["sentences_per_s_batch"]} | {lat[0]} / {lat[1]} | {thr[0]} / {thr[1]} | {own_iter} / {own_wall} |')
  table = '\n'.join(lines) + '\n'
  print(table)
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      f.write(table)
    with open(os.path.splitext(FLAGS.out)[0] + '.json', 'w') as f:
      json.dump({'machine': machine(), 'split': FLAGS.split, 'dtype': FLAGS.dtype, 'rows': rows}, f, indent=1)


if __name__ == '__main__':
  app.run(main)
