"""Non-autoregressive vs autoregressive: BLEU, batch-1 latency and batch-64 throughput of several
runs and decoders on one split, in one process, with speedups against the AT run's greedy and beam.

  python -m benchmarks.nat_vs_at \
      --runs=runs/at_bible_tiny:greedy+beam,runs/dat_bible_tiny:dag_greedy+dag_lookahead+dag_joint_viterbi,runs/fadat_bible_tiny:dag_greedy+dag_lookahead+dag_joint_viterbi \
      [--latency_sentences=100] [--batch_size=64] [--out=docs/nat_vs_at.md]

The first run is the baseline; it must list `greedy` (and `beam` for the beam ratios). Timing is
nat_jax.evaluate's: every shape compiled first, batch-1 latency = median over the first
--latency_sentences sentences translated one by one, throughput over the whole split.
"""
from __future__ import annotations

import json
import sys

from absl import app, flags

from nat_jax import cli
from nat_jax.data import load_split
from nat_jax.evaluate import FLAGS, evaluate_decoder  # also defines --batch_size, --latency_sentences, --split, ...
from nat_jax.runs import load_run
from nat_jax.timing import machine

flags.DEFINE_list('runs', None, 'workdir:decoder+decoder,... ; the first run is the AT baseline.')


def parse_runs(specs: list[str]) -> list[tuple[str, list[str]]]:
  out = []
  for spec in specs:
    workdir, sep, decoders = spec.rpartition(':')
    if not sep or not workdir or not decoders:
      raise app.UsageError(f'--runs entry {spec!r}: expected workdir:decoder+decoder')
    out.append((workdir, decoders.split('+')))
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS.runs:
    raise app.UsageError('--runs is required.')
  cli.quiet_logs()
  rows = []
  for workdir, decoders in parse_runs(FLAGS.runs):
    run = load_run(workdir, FLAGS.checkpoint, FLAGS.average)
    examples = load_split(run.config.data, FLAGS.split)[:FLAGS.max_sentences or None]
    for name in decoders:
      print(f'{workdir}: {name} ...', file=sys.stderr, flush=True)
      r = evaluate_decoder(run, name, {}, examples, batch_size=FLAGS.batch_size,
                           latency_sentences=FLAGS.latency_sentences)
      r.update(workdir=workdir, method=run.method.label(), step=run.meta[0]['step'])
      print(json.dumps(r), file=sys.stderr, flush=True)
      rows.append(r)
  base = {r['decoder']: r for r in rows if r['workdir'] == rows[0]['workdir']}
  lines = [f'machine: {machine()}; split {FLAGS.split}, {rows[0]["sentences"]} sentences; '
           f'batch-1 latency median over {FLAGS.latency_sentences} sentences', '',
           '| run | method | decoder | BLEU (1 ref) | BLEU (all refs) | latency b=1 (ms) | sent/s b='
           f'{FLAGS.batch_size} | b=1 speedup vs AT greedy / beam | b={FLAGS.batch_size} speedup vs AT greedy / beam |',
           '|---|---|---|---|---|---|---|---|---|']

  def ratio(r, ref, key, inverse):
    if ref is None or key not in r or key not in ref:
      return '-'
    return f'{(ref[key] / r[key]) if inverse else (r[key] / ref[key]):.2f}'

  for r in rows:
    lat = [ratio(r, base.get(d), 'latency_ms_batch1_median', True) for d in ('greedy', 'beam')]
    thr = [ratio(r, base.get(d), 'sentences_per_s_batch', False) for d in ('greedy', 'beam')]
    lines.append(f'| {r["workdir"]} (step {r["step"]}) | {r["method"]} | {r["decoder"]} | {r["first_ref"]["bleu"]} | '
                 f'{r.get("all_refs", {}).get("bleu", "-")} | {r.get("latency_ms_batch1_median", "-")} | '
                 f'{r["sentences_per_s_batch"]} | {lat[0]} / {lat[1]} | {thr[0]} / {thr[1]} |')
  table = '\n'.join(lines) + '\n'
  print(table)
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      f.write(table)


if __name__ == '__main__':
  app.run(main)
