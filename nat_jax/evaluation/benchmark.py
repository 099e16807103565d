"""The benchmark library behind `python -m nat_jax.benchmark` and `python -m nat_jax.evaluate`.
Every run x decoder is measured in this one process on one device:
  quality   BLEU against each reference alone and against all (sacreBLEU, signature kept), chrF,
            and which reference each output n-gram matches: both, only one, or neither
            (scoring.ngram_match_shares), on the outputs at the largest batch size, beside the CPU
            hours the run's training spent (`train CPU-h`, from its checkpoint; a fine-tuned run's own);
  compile   seconds spent compiling: per compiled (batch, width) shape, the first call minus a
            second identical call; timings below exclude it (every shape is compiled first);
  batch 1   latency per sentence (median, p90 and mean over --batch1_runs passes over the first
            --latency_sentences sentences, each translated alone), source words/s (RoyalFlush's
            metric: words of a pass / its wall-clock, mean over passes) and sentences/s;
  batch b   sentences/s over the whole split at each other batch size;
  speed-ups against the baseline run's greedy and beam (default: the first run of method `at`),
            and against the same run's greedy (iterations, batch-1 wall-clock, identical outputs:
            Jacobi decoding must be 1.0).
Writes OUT/results.json, OUT/results.md (quality table, speed table), OUT/pareto.png (BLEU against
batch-1 latency and against throughput at the largest batch, the Pareto front drawn) and, per run x
decoder, OUT/outputs/<run>.<decoder>.txt (detokenized, one line per sentence, in order).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import time
from typing import Any, Callable, Sequence

import jax
import numpy as np

from nat_jax import decode
from nat_jax.data import inference_batches, load_split
from nat_jax.decode import LeftToRightScorer
from nat_jax.errors import ConfigError, log
from nat_jax.files import atomic_output, write_atomic
from nat_jax.formats import ct2
from nat_jax.metrics.scoring import reference_view
from nat_jax.metrics.timing import machine, timed
from nat_jax.run.translation import encode_sources, source_lengths, translate_texts
from nat_jax.run.translator import Translator
from nat_jax.run.workdir import PRECISIONS, Run, precision


@dataclasses.dataclass(frozen=True)
class Entry:
  workdir: str
  precision: str  # a label of nat_jax.run.workdir.PRECISIONS: a dtype ('bfloat16') or a quantization ('int8')
  decoders: tuple[str, ...]  # decoder specs; empty: the run's defaults

  @property
  def label(self) -> str:
    """The run's name in tables and file names: the workdir's last part, @precision unless float32."""
    name = os.path.basename(os.path.normpath(self.workdir))
    return name if self.precision == 'float32' else f'{name}@{self.precision}'


def parse_decoder(spec: str) -> tuple[str, dict[str, str]]:
  """'hrt/b_at=4/chunk=1' -> ('hrt', {'b_at': '4', 'chunk': '1'}). A part that does not start with
  `option=` continues the value before it, so a value may be a path:
  'drafted/drafter=/r/cmlm:mask_predict:iterations=1/block=4' -> drafter '/r/cmlm:mask_predict:iterations=1'."""
  name, *parts = spec.split('/')
  opts = []
  for part in parts:
    if re.match(r'[A-Za-z_]\w*=', part) or not opts:
      opts.append(part)
    else:
      opts[-1] += '/' + part
  if not name or any('=' not in o for o in opts):
    raise ConfigError(f'decoder {spec!r}: expected name or name/opt=value/opt=value')
  return name, dict(o.split('=', 1) for o in opts)


def parse_entry(spec: str, default_precision: str) -> Entry:
  """'runs/x@bfloat16:greedy+beam' -> Entry('runs/x', 'bfloat16', ('greedy', 'beam')); 'runs/x' -> defaults;
  'runs/x@int8': int8 weights."""
  run, sep, decoders = spec.partition(':')
  workdir, at, label = run.partition('@')
  if not workdir or (at and label not in PRECISIONS) or (sep and not decoders):
    raise ConfigError(f'--runs entry {spec!r}: expected workdir[@{"|".join(PRECISIONS)}][:decoder+decoder...]')
  for decoder in decoders.split('+') if decoders else ():
    parse_decoder(decoder)
  return Entry(workdir, label or default_precision, tuple(decoders.split('+')) if decoders else ())


def default_decoders(run: Run) -> tuple[str, ...]:
  """The run's test decoder, and greedy where the method has a left-to-right view."""
  names = [run.config.test_decoder]
  if LeftToRightScorer in run.method.views() and 'greedy' not in names:
    names.append('greedy')
  return tuple(names)


def build_row(translator: Translator, entry: Entry, spec: str, scratch: str) -> tuple[Callable, dict[str, Any]]:
  """(decode fn, options) of one decoder spec of a run: a registered decoder (built by the run's
  Translator), or a peer engine serving the same run (nat_jax.formats.ct2.PEERS: exported into `scratch` first)."""
  run = translator.run
  name, overrides = parse_decoder(spec)
  if name in ct2.PEERS:
    if run.method.name != 'at' or entry.precision != 'float32':
      raise ConfigError(f'{entry.workdir}: peer {name} serves an autoregressive run (method at) loaded in float32 '
                        f'(its own quantization option sets the weight type); this one is {run.method.label()} '
                        f'@{entry.precision}.')
    options = ct2.peer_options(name, overrides)
    decode_fn = ct2.peer_decode_fn(run, entry.workdir, options, os.path.join(scratch, entry.label))
    return decode_fn, dataclasses.asdict(options)
  decode_fn, options = translator.decoder_for(name, overrides)
  return decode_fn, dataclasses.asdict(options)


def used_widths(run: Run, sources: Sequence[str], rows: int) -> list[int]:
  """The padded source widths of the batches translate_texts makes of `sources` at `rows` per batch."""
  seqs = encode_sources([s for s in sources if s.strip()], run.tokenizer, run.config.max_len, warn=False)
  return sorted({src.shape[1] for _, src in inference_batches(seqs, rows, source_lengths(run.config.max_len))})


def compile_shapes(run: Run, decode_fn: Callable, rows: int, widths: Sequence[int]) -> float:
  """Compile every (rows, width) shape; returns the compile seconds: per shape, the first call's time
  minus that of a second identical call."""
  seconds = 0.0
  for width in widths:
    src = np.zeros((rows, width), np.int32)
    src[:, 0] = run.tokenizer.eos_id
    _, first = timed(lambda: decode_fn(run.params, src).tokens)
    _, second = timed(lambda: decode_fn(run.params, src).tokens)
    seconds += max(first - second, 0.0)
  return seconds


def batch1_speed(run: Run, decode_fn: Callable, sources: Sequence[str], passes: int) -> dict[str, float]:
  """Latency of each sentence translated alone (median, p90, mean over all passes), source words/s
  and sentences/s (per pass: its sentences or words / its wall-clock; mean over passes).
  Shapes must be compiled already."""
  words = sum(len(text.split()) for text in sources)
  times, words_per_s, sents_per_s = [], [], []
  for _ in range(passes):
    pass_times = [timed(lambda: translate_texts(run, [text], decode_fn, 1))[1] for text in sources]
    times += pass_times
    words_per_s.append(words / sum(pass_times))
    sents_per_s.append(len(sources) / sum(pass_times))
  return {'latency_ms_median': round(1e3 * float(np.median(times)), 3),
          'latency_ms_p90': round(1e3 * float(np.percentile(times, 90)), 3),
          'latency_ms_mean': round(1e3 * float(np.mean(times)), 3),
          'source_words_per_s': round(float(np.mean(words_per_s)), 1),
          'sentences_per_s': round(float(np.mean(sents_per_s)), 2)}


def measure_decoder(run: Run, decode_fn: Callable, sources: Sequence[str], *, batch_sizes: Sequence[int],
                    latency_sentences: int, batch1_runs: int) -> tuple[dict[str, Any], list[str], dict]:
  """(speed, translations, per-sentence aux statistics) of `decode_fn` on `sources`.

  speed: compile seconds and compiled shapes; 'batch1' (batch1_speed over the first
  `latency_sentences`, when 1 is among batch_sizes and latency_sentences > 0); 'sentences_per_s'
  per batch size > 1 over all sources. Translations and aux come from the largest batch size
  (an untimed pass at batch 1 when that is the only one)."""
  batch_sizes = sorted(set(batch_sizes))
  largest = batch_sizes[-1]
  latency_sources = list(sources[:latency_sentences]) if 1 in batch_sizes else []
  compile_s, shapes = 0.0, 0
  for rows in batch_sizes:
    widths = used_widths(run, latency_sources if rows == 1 and largest > 1 else sources, rows)
    compile_s += compile_shapes(run, decode_fn, rows, widths)
    shapes += len(widths)
  speed: dict[str, Any] = {'compile_s': round(compile_s, 2), 'compiled_shapes': shapes, 'sentences_per_s': {}}
  hyps, aux = None, {}
  for rows in reversed(batch_sizes):
    if rows == 1:
      continue
    (hyps, aux), seconds = timed(lambda: translate_texts(run, sources, decode_fn, rows))  # noqa: B023
    speed['sentences_per_s'][str(rows)] = round(len(sources) / seconds, 2)
  if latency_sources:
    speed['batch1'] = batch1_speed(run, decode_fn, latency_sources, batch1_runs)
    speed['sentences_per_s']['1'] = speed['batch1']['sentences_per_s']
  if hyps is None:
    hyps, aux = translate_texts(run, sources, decode_fn, 1)
  return speed, hyps, aux


def pareto_front(xs: Sequence[float], ys: Sequence[float], lower_x_better: bool = True) -> list[int]:
  """Indices (ascending) of the points not dominated by another: none has an x at least as good and
  a y at least as high, better in one of the two (y: higher is better). Sort-and-sweep, O(n log n):
  by x from best, a point is on the front iff it has its x group's highest y and beats the highest
  y of every better x; identical points are all on it."""
  sign = 1.0 if lower_x_better else -1.0
  order = sorted(range(len(xs)), key=lambda i: (sign * xs[i], -ys[i]))
  front, best_before, k = [], -np.inf, 0
  while k < len(order):
    group = [i for i in order[k:] if sign * xs[i] == sign * xs[order[k]]]
    top = max(ys[i] for i in group)
    if top > best_before:
      front += [i for i in group if ys[i] == top]
    best_before = max(best_before, top)
    k += len(group)
  return sorted(front)


def ratio(a, b) -> float | None:
  return round(a / b, 3) if a is not None and b else None


def add_comparisons(rows: list[dict], hyps: dict[str, list[str]], baseline: str, largest: int):
  """Speed-ups of each row against the baseline run's greedy and beam (batch-1 latency, throughput at
  the largest batch) and against its own run's greedy (iterations, batch-1 latency, share of identical
  outputs); a row decoded in another precision (run@int8) against the same run and decoder in float32
  (BLEU difference, share of identical outputs). A run's `greedy` / `beam` is its row of that decoder with
  default options, else its first."""
  def find(run, name):  # the row of decoder `name` with default options, else its first row
    mine = [r for r in rows if r['run'] == run and r['decoder'] == name]
    return next((r for r in mine if r['decoder_spec'] == name), mine[0] if mine else None)

  def latency(r):
    return r['speed'].get('batch1', {}).get('latency_ms_median') if r else None

  def throughput(r):
    return r['speed']['sentences_per_s'].get(str(largest)) if r else None

  def same_share(r, o):  # share of sentences both rows translated identically
    return round(float(np.mean([a == b for a, b in zip(hyps[r['label']], hyps[o['label']])])), 4)

  for r in rows:
    r['vs_baseline'] = {}
    for spec in ('greedy', 'beam'):
      base = find(baseline, spec)
      r['vs_baseline'][spec] = {'batch1': ratio(latency(base), latency(r)),
                                f'batch{largest}': ratio(throughput(r), throughput(base))}
    twin = next((o for o in rows if o['workdir'] == r['workdir'] and o['dtype'] == 'float32'
                 and o['decoder_spec'] == r['decoder_spec']), None) if r['dtype'] != 'float32' else None
    if twin is not None:  # the same run and decoder in float32: what the precision costs in BLEU and outputs
      r['vs_float32'] = {'bleu': round(bleu_of(r) - bleu_of(twin), 2), 'same_output': same_share(r, twin)}
    own = find(r['run'], 'greedy')
    if own is not None and own is not r:
      r['vs_own_greedy'] = {'iterations': ratio(own['aux'].get('iterations', own['aux'].get('steps')),
                                                r['aux'].get('iterations')),
                            'batch1': ratio(latency(own), latency(r)), 'same_output': same_share(r, own)}


def tokens_per_pass(aux: dict):
  """Output tokens (incl. EOS) per decoder pass of the row's sentences (mean steps / mean iterations):
  drafted and Jacobi decoding's accepted length; None for decoders that report no iterations."""
  if aux.get('iterations') and 'steps' in aux:
    return round(aux['steps'] / aux['iterations'], 2)
  return None


def bleu_of(row) -> float:
  """The BLEU the picture and the fronts use: against all references (the only one if one)."""
  return row['quality'].get('all_refs', row['quality']['per_ref'][0])['bleu']


def add_fronts(report: dict):
  rows, largest = report['rows'], report['batch_sizes'][-1]
  report['pareto'] = {}
  timed_b1 = [i for i, r in enumerate(rows) if 'batch1' in r['speed']]
  if timed_b1:
    front = pareto_front([rows[i]['speed']['batch1']['latency_ms_median'] for i in timed_b1],
                         [bleu_of(rows[i]) for i in timed_b1], lower_x_better=True)
    report['pareto']['latency_batch1'] = [rows[timed_b1[i]]['label'] for i in front]
  if largest > 1:
    front = pareto_front([r['speed']['sentences_per_s'][str(largest)] for r in rows],
                         [bleu_of(r) for r in rows], lower_x_better=False)
    report['pareto'][f'throughput_batch{largest}'] = [rows[i]['label'] for i in front]


def train_cpu_hours(meta: dict) -> float | None:
  """CPU hours the run's training had spent at this checkpoint (nat_jax.training.bookkeeping.CpuClock; None for a
  checkpoint older than that accounting). A student fine-tuned from another run counts its own only."""
  seconds = meta.get('cpu_seconds')
  return None if seconds is None else round(seconds / 3600, 2)


def check_specs(entries: Sequence[Entry]):
  """ConfigError for a decoder spec of `entries` with a bad name or option, before any work."""
  for spec in (spec for entry in entries for spec in entry.decoders):
    name, overrides = parse_decoder(spec)
    if name in ct2.PEERS:
      ct2.peer_options(name, overrides)
    else:
      decode.parse_options(name, overrides)


def benchmark(entries: Sequence[Entry], *, baseline: str | None = None, batch_sizes: Sequence[int] = (1, 8, 64),
              split: str = 'test', max_sentences: int = 0, latency_sentences: int = 100, batch1_runs: int = 3,
              which: str = 'latest', average: int = 1, int8_kernel: str = 'auto',
              log=print) -> tuple[dict, dict[str, list[str]]]:
  """(report, translations per row label) of every entry x decoder; see the module docstring. int8_kernel:
  the product of int8 entries (nat_jax.kernels.onednn.CHOICES), named in the report's machine line."""
  batch_sizes = sorted({int(b) for b in batch_sizes})
  if not entries or not batch_sizes or batch_sizes[0] < 1:
    raise ConfigError('benchmark needs at least one run and batch sizes >= 1.')
  check_specs(entries)
  rows, hyps, sources, examples, precisions = [], {}, None, None, set()
  start = time.time()
  with tempfile.TemporaryDirectory(prefix='nat_jax_benchmark_') as scratch:  # exported peer models, removed on any exit
    for entry in entries:
      dtype, quantization = precision(entry.precision)
      translator = Translator(entry.workdir, checkpoint=which, average=average, dtype=dtype,
                              quantization=quantization, int8_kernel=int8_kernel)
      precisions.add(translator.precision)
      run = translator.run
      these = load_split(run.config.data, split)[:max_sentences or None]
      if sources is None:
        examples, sources = these, [e.source for e in these]
      elif [e.source for e in these] != sources:
        raise ConfigError(f'{entry.workdir}: its {split} split differs from the first run\'s; the benchmark compares '
                         'runs on one test set.')
      specs = entry.decoders or default_decoders(run)
      built = [build_row(translator, entry, spec, scratch) for spec in specs]  # a view the method lacks: here
      for spec, (decode_fn, options) in zip(specs, built):
        name = parse_decoder(spec)[0]
        label = f'{entry.label}:{spec}'
        log(f'[{time.time() - start:7.0f}s] {label} on {len(sources)} {split} sentences ...')
        speed, hyps[label], aux = measure_decoder(run, decode_fn, sources, batch_sizes=batch_sizes,
                                                  latency_sentences=latency_sentences, batch1_runs=batch1_runs)
        rows.append({'label': label, 'run': entry.label, 'workdir': entry.workdir, 'dtype': entry.precision,
                     'method': run.method.label(), 'method_name': run.method.name, 'step': run.meta[0]['step'],
                     'train_cpu_hours': train_cpu_hours(run.meta[0]),
                     'layers': f'E{run.config.model.enc_layers}D{run.config.model.dec_layers}',
                     'decoder': name, 'decoder_spec': spec, 'options': options,
                     'quality': reference_view(hyps[label], examples), 'speed': speed,
                     'aux': {k: round(float(np.mean(v)), 3) for k, v in aux.items()}})
        log(f'  {json.dumps({"bleu": bleu_of(rows[-1]), **speed})}')
      del run
  baseline = baseline or next((r['run'] for r in rows if r['method_name'] == 'at'), rows[0]['run'])
  if baseline not in {r['run'] for r in rows}:
    raise ConfigError(f'--baseline={baseline!r} is not among the runs {sorted({r["run"] for r in rows})}.')
  add_comparisons(rows, hyps, baseline, batch_sizes[-1])
  refs = reference_view([e.references[1] for e in examples], examples) if min(
      len(e.references) for e in examples) > 1 else None
  int8 = sorted(p for p in precisions if p.startswith('int8'))  # which product the int8 rows ran
  report = {'machine': '; '.join([machine(), *int8]), 'device': jax.devices()[0].device_kind, 'split': split,
            'sentences': len(sources),
            'batch_sizes': batch_sizes, 'latency_sentences': min(latency_sentences, len(sources)),
            'batch1_runs': batch1_runs, 'baseline': baseline, 'average': average,
            'human_agreement': refs and refs['per_ref'][0], 'rows': rows}
  add_fronts(report)
  return report, hyps


def fmt(value, none='-') -> str:
  return none if value is None else str(value)


def markdown(report: dict) -> str:
  """The quality table (multi-reference view) and the speed table."""
  rows, largest = report['rows'], report['batch_sizes'][-1]
  n_refs = len(rows[0]['quality']['per_ref'])
  lines = [f'{report["machine"]}; {report["split"]} split, {report["sentences"]} sentences; batch-1 latency over '
           f'{report["batch1_runs"]} passes over {report["latency_sentences"]} sentences; speed-ups against '
           f'`{report["baseline"]}`.', '', '**Quality**', '']
  ref_cols = ' | '.join(f'BLEU ref {i + 1}' for i in range(n_refs))
  head = f'| run | method | train CPU-h | decoder | {ref_cols} |'
  if n_refs > 1:
    head += (' BLEU all refs | chrF all refs | 1-grams: both / ref 1 only / ref 2 only / neither (%) '
             '| 2-grams: both / ref 1 only / ref 2 only / neither (%) |')
  else:
    head += ' chrF |'
  lines += [head, '|' + '---|' * (head.count('|') - 1)]
  for r in rows:
    q = r['quality']
    cells = [r['run'], r['method'], fmt(r.get('train_cpu_hours')), r['decoder_spec']]
    cells += [str(p['bleu']) for p in q['per_ref']]
    if n_refs > 1:
      cells += [str(q['all_refs']['bleu']), str(q['all_refs']['chrf'])]
      cells += [' / '.join(str(q['match'][g][k]) for k in ('both', 'first_only', 'second_only', 'neither'))
                for g in ('1gram', '2gram')]
    else:
      cells.append(str(q['per_ref'][0]['chrf']))
    lines.append('| ' + ' | '.join(cells) + ' |')
  if report.get('human_agreement'):
    h = report['human_agreement']
    lines += ['', f'The references against each other: ref 2 scored against ref 1 is BLEU {h["bleu"]}, chrF '
              f'{h["chrf"]}.']
  signatures = [rows[0]['quality']['per_ref'][0]] + ([rows[0]['quality']['all_refs']] if n_refs > 1 else [])
  lines += ['', 'sacreBLEU signatures: ' + ', '.join(f'`{q["bleu_signature"]}`, `{q["chrf_signature"]}`'
                                                  for q in signatures), '', '**Speed**', '']
  others = [b for b in report['batch_sizes'] if b > 1]
  head = ('| run | decoder | compile (s) | latency b=1 median / p90 (ms) | src words/s b=1 | '
          + ''.join(f'sent/s b={b} | ' for b in others)
          + 'b=1 speed-up vs greedy / beam | '
          + (f'b={largest} speed-up vs greedy / beam | ' if largest > 1 else '')
          + 'vs own greedy: iterations / b=1 wall-clock / same output | tokens per decoder pass |')
  lines += [head, '|' + '---|' * (head.count('|') - 1)]
  for r in rows:
    s, b1 = r['speed'], r['speed'].get('batch1', {})
    vs, own = r['vs_baseline'], r.get('vs_own_greedy', {})
    cells = [r['run'], r['decoder_spec'], str(s['compile_s']),
             f'{fmt(b1.get("latency_ms_median"))} / {fmt(b1.get("latency_ms_p90"))}', fmt(b1.get('source_words_per_s'))]
    cells += [fmt(s['sentences_per_s'].get(str(b))) for b in others]
    cells.append(f'{fmt(vs["greedy"]["batch1"])} / {fmt(vs["beam"]["batch1"])}')
    if largest > 1:
      cells.append(f'{fmt(vs["greedy"][f"batch{largest}"])} / {fmt(vs["beam"][f"batch{largest}"])}')
    cells.append(f'{fmt(own.get("iterations"))} / {fmt(own.get("batch1"))} / {fmt(own.get("same_output"))}')
    cells.append(fmt(tokens_per_pass(r['aux'])))
    lines.append('| ' + ' | '.join(cells) + ' |')
  for name, labels in report['pareto'].items():
    lines += ['', f'Pareto front ({name.replace("_", " ")}): ' + ', '.join(f'`{l}`' for l in labels)]
  return '\n'.join(lines) + '\n'


def plot_pareto(report: dict, path: str) -> bool:
  """BLEU against batch-1 latency and against throughput at the largest batch; fronts drawn. Nothing (False)
  when neither was timed (--latency_sentences=0 with --batch_sizes=1)."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  rows, largest = report['rows'], report['batch_sizes'][-1]
  panels = []
  if 'latency_batch1' in report['pareto']:
    panels.append(('latency_batch1', 'latency per sentence at batch 1 (ms, median)',
                   lambda r: r['speed'].get('batch1', {}).get('latency_ms_median')))
  if largest > 1:
    panels.append((f'throughput_batch{largest}', f'sentences/s at batch {largest}',
                   lambda r: r['speed']['sentences_per_s'][str(largest)]))
  if not panels:
    return False
  # One panel under the other, so the figure reads at a page's width; a point is named beside it only on the
  # front (the others by their colour and marker in the legend, which names every run and decoder once).
  runs = sorted({r['run'] for r in rows})
  decoders = sorted({r['decoder'] for r in rows})
  legend = 0.3 + 0.2 * ((len(runs) + len(decoders) + 3) // 3)  # inches: 3 columns of runs, decoders, the front
  height = 5.2 * len(panels) + legend  # the panels, then the legend below them
  fig, axes = plt.subplots(len(panels), 1, figsize=(8, height), squeeze=False)
  colors = {m: plt.cm.tab20(i % 20) for i, m in enumerate(runs)}
  markers = {d: 'osD^v<>pPX*h'[i % 12] for i, d in enumerate(decoders)}
  for ax, (key, xlabel, x_of) in zip(axes[:, 0], panels):
    points = [(x_of(r), bleu_of(r), r) for r in rows if x_of(r) is not None]
    for x, y, r in points:
      ax.scatter(x, y, color=colors[r['run']], marker=markers[r['decoder']], s=60, zorder=3)
    front = sorted((p for p in points if p[2]['label'] in report['pareto'][key]), key=lambda p: p[0])
    ax.plot([p[0] for p in front], [p[1] for p in front], '--', color='black', lw=1, zorder=2)
    ax.set_xscale('log')
    lo, hi = np.log(ax.get_xlim())
    for x, y, r in front:  # a name on the right of its point, or on its left in the right part of the panel
      right = (np.log(x) - lo) / (hi - lo) > 0.55
      ax.annotate(r['label'], (x, y), fontsize=9, xytext=(-6 if right else 6, 5), textcoords='offset points',
                  ha='right' if right else 'left')
    ax.set_xlabel(xlabel + ' (log scale)', fontsize=11)
    ax.set_ylabel('BLEU (all references)', fontsize=11)
    ax.tick_params(labelsize=10)
    ax.grid(alpha=0.3)
  handles = ([plt.Line2D([], [], ls='', marker='o', color=colors[m], label=m) for m in runs]
             + [plt.Line2D([], [], ls='', marker=markers[d], color='grey', label=d) for d in decoders]
             + [plt.Line2D([], [], ls='--', color='black', label='Pareto front (named points)')])
  fig.legend(handles=handles, loc='lower center', ncol=3, fontsize=9, frameon=False)
  fig.suptitle(f'{report["split"]} split, {report["sentences"]} sentences; {report["machine"]}', fontsize=10)
  fig.tight_layout(rect=(0, legend / height, 1, 0.97))
  with atomic_output(path, 'wb') as f:
    fig.savefig(f, format='png', dpi=130)
  plt.close(fig)
  return True


def output_name(label: str) -> str:
  """'hrt_bible_tiny:hrt/b_at=4' -> 'hrt_bible_tiny.hrt_b_at=4.txt'."""
  return re.sub(r'[^A-Za-z0-9._=@+-]', '_', label.replace(':', '.', 1)) + '.txt'


def write_report(report: dict, hyps: dict[str, list[str]], out: str) -> str:
  """results.json, results.md, pareto.png (when there is a speed to plot) and outputs/*.txt under `out`; returns
  the markdown."""
  os.makedirs(os.path.join(out, 'outputs'), exist_ok=True)
  for label, lines in hyps.items():
    write_atomic(os.path.join(out, 'outputs', output_name(label)), ''.join(line + '\n' for line in lines))
  for r in report['rows']:
    r['outputs'] = os.path.join('outputs', output_name(r['label']))
  write_atomic(os.path.join(out, 'results.json'), json.dumps(report, indent=1))
  table = markdown(report)
  write_atomic(os.path.join(out, 'results.md'), table)
  if not plot_pareto(report, os.path.join(out, 'pareto.png')):
    log.warning('no pareto.png: nothing was timed to plot BLEU against (--latency_sentences=0 and one batch size '
                'of 1); results.json and results.md hold the quality.')
  return table
