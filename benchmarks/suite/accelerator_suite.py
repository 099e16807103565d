"""The accelerator suite: what a rare, short lease of a GPU is spent on (run through
benchmarks/suite/accelerator_suite.sh, which first installs the pack's wheels the machine lacks).

  python -m benchmarks.suite.accelerator_suite --pack=accelerator_pack [--out=$OUT] [--smoke] [--stages=...] \
      [--budget_seconds=540 --device=h200]
  python -m benchmarks.suite.accelerator_suite --plan --budget_seconds=540 --device=h200 [--pack=...]   # no device

Stages, in order, each skipped when its marker says it is done (rerun the same command after a
time-out: trainings resume from their checkpoints):
  teacher   the AT base (configs/at_base.py: d=512, 6+6, bf16) on the pack's Bible pairs
  distill   its greedy translations of the training and validation sources (the students' targets)
  dat       a DA-Transformer student at base size (configs/dat_drafter_base.py: warm-started from the AT,
            graph 8 x source, glancing), which also drafts for the AT (drafted decoding)
  hrt       an HRT student (configs/hrt_wmt14_ende.py: k = 2, from the AT, mixed distillation)
  bench     python -m nat_jax.benchmark over every method's default decoder at batch 1 and 64: AT greedy,
            beam, Jacobi (HGJ), drafted by the DA-Transformer; DAT lookahead and beam; HRT
Budgets: a number of updates per training (--teacher_steps, --dat_steps, --hrt_steps: the learning-rate
schedule's length) and, for a lease shorter than that, wall-clock seconds (--teacher_seconds, ...):
at its budget a training is stopped with SIGTERM, which saves a checkpoint at the step reached
(nat_jax.train), and the suite goes on with it. --bench_sentences / --latency_sentences bound the
benchmark's work (each source width it meets is a compile). Every stage's seconds go into
OUT/suite.json. --smoke: tiny models and a few steps, the same stages end to end on a CPU
(tests/integration/test_accelerator_suite.py).

--budget_seconds=N: the whole call ends within N seconds, whatever happens. The plan
(benchmarks/suite/suite_plan.py: measured H200 unit costs x each stage's compile count, trainings in shares of what
is left) gives each stage its seconds; a stage may use what earlier stages saved and loses what they overran
(`suite_plan.stage_timeout`), and is stopped with SIGTERM at its time (a training saves a checkpoint). One
training-step shape per training (--config.num_buckets=1) unless --train_flags says otherwise, and the
benchmark's sentences default to BUDGET_DEFAULTS. A failed stage does not stop the suite: the stages that
need it are skipped, the benchmark runs on what exists, the results are written and the exit is 1.
--plan prints that plan (no device, no pack needed; with --pack the compile counts are the pack's) with
its total on the last line, and exits 1 when the budget cannot be met.

Results, always written at the end (also after a failure): OUT/results.json and OUT/results.md: the device
and JAX version, each stage's planned and used seconds, status, updates and training tokens per second,
and every benchmarked decoder's BLEU (both references) and batch-1 / batch-64 speed.

What a 15-minute lease ran (docs/lab-notes/2026-11-25-accelerators.md):
benchmarks/suite/accelerator_suite.sh PACK --stages=teacher,distill,dat,bench --teacher_seconds=140
--dat_seconds=90 --distill_limit=8192 --bench_sentences=64 --latency_sentences=16
--teacher_decoders=greedy,beam,drafted --dat_decoders=dag_lookahead
--train_flags=--config.num_buckets=2,--config.max_len=128
"""
from __future__ import annotations

import bisect
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Optional

from absl import flags

from benchmarks.suite import suite_plan
from nat_jax.commands import cli
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic

STAGES = ('teacher', 'distill', 'dat', 'hrt', 'bench')
SMOKE_MODEL = ['--config.model.d_model=32', '--config.model.d_ff=64', '--config.model.num_heads=2',
               '--config.model.enc_layers=1', '--config.model.dec_layers=1', '--config.model.dtype=float32',
               '--config.max_len=64', '--config.max_decode_len=40', '--config.tokens_per_batch=512',
               '--config.grad_accum_steps=1', '--config.num_buckets=2', '--config.warmup_steps=2']
SMOKE_BENCH = (16, 2)  # --smoke's benchmark: sentences, of which translated one by one

flags.DEFINE_string('pack', None, 'A directory written by python -m benchmarks.suite.accelerator_pack.')
flags.DEFINE_string('out', os.environ.get('OUT', ''), 'Results directory (default: $OUT, else <pack>/results).')
flags.DEFINE_list('stages', list(STAGES), 'Stages to run (in this order).')
flags.DEFINE_bool('smoke', False, 'Tiny models and a few steps (CPU end-to-end check).')
flags.DEFINE_integer('teacher_steps', 3000, 'AT base updates.')
flags.DEFINE_integer('dat_steps', 1500, 'DA-Transformer updates.')
flags.DEFINE_integer('hrt_steps', 1000, 'HRT updates.')
flags.DEFINE_integer('teacher_seconds', 0, 'Stop the AT training after this many seconds (0: at its steps).')
flags.DEFINE_integer('dat_seconds', 0, 'Stop the DA-Transformer training after this many seconds (0: at its steps).')
flags.DEFINE_integer('hrt_seconds', 0, 'Stop the HRT training after this many seconds (0: at its steps).')
flags.DEFINE_list('teacher_decoders', ['greedy', 'beam', 'jacobi_hgj', 'drafted'], 'AT decoders benchmarked '
                  '(drafted: by the DA-Transformer, re-draft).')
flags.DEFINE_list('dat_decoders', ['dag_lookahead', 'dag_beam'], 'DA-Transformer decoders benchmarked.')
flags.DEFINE_integer('bench_sentences', 0, 'Benchmark the first N test sentences (0: all).')
flags.DEFINE_integer('latency_sentences', 100, 'Sentences timed one by one at batch 1.')
flags.DEFINE_integer('distill_batch', 256, 'Sentences per distillation batch.')
flags.DEFINE_integer('distill_limit', 0, 'Distil the first N pairs of each split (0: all); the DA-Transformer '
                     'then trains on those N.')
flags.DEFINE_list('train_flags', [], 'More --config.<key>=<value> flags for every training (e.g. fewer buckets: '
                  'each (rows, length) shape is a compile).')
flags.DEFINE_integer('budget_seconds', 0, 'End the whole call within this many seconds (0: no budget; stages '
                     'run to their steps or --*_seconds).')
flags.DEFINE_bool('plan', False, 'Print the plan for --budget_seconds on --device and exit (1 if it cannot be met).')
flags.DEFINE_enum('device', 'h200', sorted(suite_plan.UNITS), 'The GPU whose unit costs the plan uses.')
FLAGS = flags.FLAGS
# The benchmark's work under a budget, unless given: its compiles are decoders x source widths.
BUDGET_DEFAULTS = {'bench_sentences': 64, 'latency_sentences': 4}
DEPENDS = {'distill': 'teacher', 'dat': 'distill', 'hrt': 'distill', 'bench': 'teacher'}


def pack_files(pack: str) -> dict:
  names = {split: os.path.join(pack, f'{split}.tsv') for split in ('train', 'validation', 'test')}
  names['spm'] = os.path.join(pack, 'spm.model')
  missing = [p for p in names.values() if not os.path.exists(p)]
  if missing:
    raise ConfigError(f'--pack={pack}: {missing} missing; write it with python -m benchmarks.suite.accelerator_pack '
                      f'--out={pack}.')
  return names


def data_flags(files: dict, vocab_size: int) -> list[str]:
  return ['--config.data.source=files', f'--config.data.train_files={files["train"]}',
          f'--config.data.validation_files={files["validation"]}', f'--config.data.test_files={files["test"]}',
          '--config.data.tfds_name=', f'--config.vocab_size={vocab_size}']


def prepare_workdir(workdir: str, spm: str):
  """A training's run directory with the pack's tokenizer in it (every run of the suite shares it)."""
  os.makedirs(workdir, exist_ok=True)
  if not os.path.exists(os.path.join(workdir, 'spm.model')):
    shutil.copy(spm, os.path.join(workdir, 'spm.model'))


def train(recipe: str, workdir: str, files: dict, vocab_size: int, steps: int, extra: list[str]) -> list[str]:
  budget_flags = ['--config.log_every=10'] + ([] if any('num_buckets' in f for f in FLAGS.train_flags) else
                                              ['--config.num_buckets=1']) if FLAGS.budget_seconds else []
  return [sys.executable, '-m', 'nat_jax.train', f'--config=configs/{recipe}.py', f'--workdir={workdir}',
          *data_flags(files, vocab_size), f'--config.total_steps={steps}', f'--config.eval_every={steps}',
          f'--config.checkpoint_every={max(1, min(500, steps))}', '--config.test_average=1',
          '--config.eval_max_sentences=200', *(SMOKE_MODEL if FLAGS.smoke else []), *budget_flags, *FLAGS.train_flags,
          *extra]


def bench_runs(runs: dict, out: str, failed: set) -> str:
  """nat_jax.benchmark --runs: the teacher's, the DA-Transformer's and the HRT student's decoders, each
  student only when its stage is among --stages or done before, and did not fail in this call (drafted
  drafts with the DA-Transformer, re-draft)."""
  trained = {k for k in ('dat', 'hrt') if k not in failed and (
      k in FLAGS.stages or os.path.exists(os.path.join(out, f'{k}.done')))}
  teacher = [f'drafted/drafter={runs["dat"]}/update=redraft' if d == 'drafted' else d
             for d in FLAGS.teacher_decoders if d != 'drafted' or 'dat' in trained]
  entries = [f'{runs["teacher"]}:{"+".join(teacher)}'] if teacher else []
  if FLAGS.dat_decoders and 'dat' in trained:
    entries.append(f'{runs["dat"]}:{"+".join(FLAGS.dat_decoders)}')
  if 'hrt' in trained:
    entries.append(f'{runs["hrt"]}:hrt')
  return ','.join(entries)


def budgeted(name: str) -> int:
  """A benchmark flag's value: as given, else BUDGET_DEFAULTS' under a budget, else its default."""
  if FLAGS.budget_seconds and not FLAGS[name].present:
    return BUDGET_DEFAULTS[name]
  return FLAGS[name].value


def train_buckets() -> int:
  """Training-step shapes per training: --train_flags' num_buckets, else 1 under a budget, else at_base's 4."""
  for flag in FLAGS.train_flags:
    if flag.startswith('--config.num_buckets='):
      return int(flag.split('=', 1)[1])
  return 1 if FLAGS.budget_seconds else 4


def source_widths(texts: list[str], tokenizer, max_len: int) -> list[int]:
  """Each text's padded source width as translation batches it (encode_sources, then the smallest of
  source_lengths that holds it): what the distillation and the benchmark compile a program for."""
  from nat_jax.run.translation import encode_sources, source_lengths
  lengths = source_lengths(max_len)
  return [lengths[bisect.bisect_left(lengths, len(ids))]
          for ids in encode_sources(texts, tokenizer, max_len, warn=False)]


def plan_settings(files: Optional[dict]) -> suite_plan.Settings:
  """The plan's settings: from the flags, and the compile counts from the pack's data when it is given."""
  stages = tuple(st for st in STAGES if st in FLAGS.stages)
  decoders = len([d for d in FLAGS.teacher_decoders if d != 'drafted' or 'dat' in stages])
  decoders += len(FLAGS.dat_decoders) * ('dat' in stages) + ('hrt' in stages)
  bench_sentences, latency = budgeted('bench_sentences') or 1007, budgeted('latency_sentences')  # Acts: 1,007
  if FLAGS.smoke:
    bench_sentences, latency = SMOKE_BENCH
  # Without the pack: what the Bible pack gives (4,000 pieces, --config.max_len=128): the first 64 Acts verses
  # meet 7 padded widths, all 1,007 meet 10, the first 4 meet 2; distillation meets 15.
  found = {'bench_widths_b64': 7 if bench_sentences <= 64 else 10, 'bench_widths_b1': min(latency, 2 + latency // 4)}
  if files:
    from nat_jax.data import Tokenizer
    tokenizer = Tokenizer(files['spm'])
    given = [int(f.split('=', 1)[1]) for f in SMOKE_MODEL * FLAGS.smoke + FLAGS.train_flags
             if f.startswith('--config.max_len=')]
    max_len = given[-1] if given else 256  # the last one given wins, as on the command line
    sources = {}
    for split in ('train', 'validation', 'test'):
      with open(files[split], encoding='utf-8') as f:
        sources[split] = [line.split('\t')[0] for line in f.read().splitlines() if line.strip()]
    limit = FLAGS.distill_limit or None
    distilled = sources['train'][:limit] + sources['validation'][:limit]
    test = sources['test'][:bench_sentences]
    test_widths = source_widths(test, tokenizer, max_len)
    found = {'distill_widths': len(set(source_widths(distilled, tokenizer, max_len))),
             'distill_sentences': len(distilled), 'bench_widths_b1': len(set(test_widths[:latency])),
             'bench_widths_b64': len(set(test_widths)), 'bench_sentences': len(test)}
  found.setdefault('bench_sentences', bench_sentences)
  return suite_plan.Settings(stages=stages, train_buckets=train_buckets(), distill_batch=FLAGS.distill_batch,
                             bench_decoders=decoders, bench_latency_sentences=latency, **found)


def checkpoint_step(workdir: str) -> Optional[int]:
  """The newest checkpoint's step of a run, or None."""
  path = os.path.join(workdir, 'checkpoints')
  steps = [int(d) for d in os.listdir(path) if d.isdigit()] if os.path.isdir(path) else []
  return max(steps) if steps else None


def training_tokens_per_s(workdir: str) -> Optional[float]:
  """Median training tokens per second over the logged windows after the first (which holds the compile)."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return None
  values = []
  with open(path, encoding='utf-8') as f:
    for line in f:
      try:
        record = json.loads(line)
      except ValueError:
        continue  # a torn last line
      if record.get('split') == 'train' and 'tokens_per_s' in record:
        values.append(record['tokens_per_s'])
  values = values[1:] or values
  return round(float(sorted(values)[len(values) // 2]), 1) if values else None


def device_line(bench: Optional[dict]) -> dict:
  """{device, machine} of the benchmark's results, else asked of JAX in a short process."""
  if bench:
    return {'device': bench.get('device'), 'machine': bench.get('machine')}
  try:
    found = subprocess.run([sys.executable, '-c', 'import jax; print(jax.devices()[0].device_kind); '
                            'print(f"JAX {jax.__version__}")'], capture_output=True, text=True, timeout=60)
    device, machine = (found.stdout.splitlines() + ['', ''])[:2]
  except subprocess.TimeoutExpired:
    device, machine = '', ''
  return {'device': device or None, 'machine': machine or None}


def bench_rows(bench: Optional[dict]) -> list[dict]:
  rows = []
  for r in (bench or {}).get('rows', []):
    quality = r.get('quality') or {}
    speed = r.get('speed') or {}
    rows.append({'run': r['run'], 'decoder': r['decoder_spec'],
                 'bleu': (quality.get('all_refs') or {}).get('bleu'),
                 'batch1_latency_ms': (speed.get('batch1') or {}).get('latency_ms_median'),
                 'batch64_sentences_per_s': (speed.get('sentences_per_s') or {}).get('64')})
  return rows


def write_results(out: str, runs: dict, timings: dict, status: dict, planned: dict) -> dict:
  """OUT/results.json and OUT/results.md: device, stages (seconds, status, updates, tokens/s), decoders."""
  bench_path = os.path.join(out, 'bench', 'results.json')
  bench = None
  if os.path.exists(bench_path):
    with open(bench_path, encoding='utf-8') as f:
      bench = json.load(f)
  stages = {}
  for name in status:
    stage = {'status': status[name], 'seconds': timings.get(name), 'planned_seconds': planned.get(name)}
    if name in runs:
      stage.update(updates=checkpoint_step(runs[name]), tokens_per_s=training_tokens_per_s(runs[name]))
    stages[name] = stage
  results = {**device_line(bench), 'date': time.strftime('%Y-%m-%d'), 'budget_seconds': FLAGS.budget_seconds,
             'plan_device': FLAGS.device if FLAGS.budget_seconds else None, 'smoke': FLAGS.smoke,
             'stages': stages, 'rows': bench_rows(bench)}
  write_atomic(os.path.join(out, 'results.json'), json.dumps(results, indent=2) + '\n')
  write_atomic(os.path.join(out, 'results.md'), results_markdown(results))
  return results


def results_markdown(results: dict) -> str:
  cell = lambda v, fmt='{}': '-' if v is None else fmt.format(v)
  lines = [f"# Accelerator suite: {results['device']} ({results['machine']}), {results['date']}", '',
           f"Budget: {results['budget_seconds'] or 'none'} s" + (' (smoke: tiny models)' if results['smoke'] else ''),
           '', '| stage | status | seconds | planned | updates | training tokens/s |', '|---|---|---|---|---|---|']
  for name, st in results['stages'].items():
    lines.append(f"| {name} | {st['status']} | {cell(st['seconds'])} | {cell(st['planned_seconds'], '{:.0f}')} | "
                 f"{cell(st.get('updates'))} | {cell(st.get('tokens_per_s'))} |")
  lines += ['', '| run | decoder | BLEU (both references) | batch-1 ms | batch-64 sentences/s |',
            '|---|---|---|---|---|']
  for r in results['rows']:
    lines.append(f"| {os.path.basename(r['run'])} | {r['decoder']} | {cell(r['bleu'])} | "
                 f"{cell(r['batch1_latency_ms'])} | {cell(r['batch64_sentences_per_s'])} |")
  return '\n'.join(lines) + '\n'


def checked_plan(files: Optional[dict]) -> dict:
  """Each stage's planned seconds under --budget_seconds (printed; empty without it); --plan exits with the
  plan's verdict; ConfigError for unknown stages or a budget the plan cannot meet (unless --smoke)."""
  unknown = sorted(set(FLAGS.stages) - set(STAGES))
  if unknown:
    raise ConfigError(f'--stages: unknown {unknown}; stages are {list(STAGES)}.')
  if not (FLAGS.plan or FLAGS.budget_seconds):
    return {}
  if FLAGS.budget_seconds <= 0:
    raise ConfigError('--plan needs --budget_seconds > 0 (e.g. 540: a 9-minute call).')
  rows, met = suite_plan.plan(FLAGS.budget_seconds, plan_settings(files), suite_plan.UNITS[FLAGS.device])
  print(suite_plan.format_plan(rows, FLAGS.budget_seconds, FLAGS.device, met), flush=True)
  if FLAGS.plan:
    sys.exit(0 if met else 1)
  if not met and not FLAGS.smoke:
    raise ConfigError(f'--budget_seconds={FLAGS.budget_seconds} cannot be met on {FLAGS.device} (the plan above): '
                      'raise it, run fewer --stages or decoders, or fewer --train_flags=--config.num_buckets.')
  return {r['stage']: r['seconds'] for r in rows}


def stage_commands(out: str, files: dict, runs: dict, failed: set) -> dict:
  """{stage: () -> its command line}, built when the stage starts (bench reads which stages `failed`)."""
  from nat_jax.data import Tokenizer
  vocab = Tokenizer(files['spm']).vocab_size
  steps = {k: 4 if FLAGS.smoke else v for k, v in (('teacher', FLAGS.teacher_steps), ('dat', FLAGS.dat_steps),
                                                     ('hrt', FLAGS.hrt_steps))}
  distill = os.path.join(out, 'distill_greedy')
  cache = os.path.join(out, 'jax_cache')
  limit = [f'--config.data.max_examples={FLAGS.distill_limit}'] if FLAGS.distill_limit else []
  return {
      'teacher': lambda: train('at_base', runs['teacher'], files, vocab, steps['teacher'],
                               [f'--config.compilation_cache_dir={cache}', '--config.test_decoder=greedy']),
      'distill': lambda: [sys.executable, '-m', 'nat_jax.distill', f'--workdir={runs["teacher"]}', f'--out={distill}',
                          '--decoder=greedy', f'--batch_size={FLAGS.distill_batch}', f'--limit={FLAGS.distill_limit}'],
      'dat': lambda: train('dat_drafter_base', runs['dat'], files, vocab, steps['dat'],
                           [f'--config.compilation_cache_dir={cache}', f'--config.init_from={runs["teacher"]}',
                            f'--config.data.distill_dir={distill}', '--config.grad_accum_steps=1',
                            *(['--config.dat.upsample_scale=2.0'] if FLAGS.smoke else []), *limit]),
      'hrt': lambda: train('hrt_wmt14_ende', runs['hrt'], files, vocab, steps['hrt'],
                           [f'--config.compilation_cache_dir={cache}', f'--config.init_from={runs["teacher"]}',
                            f'--config.data.distill_dir={distill}', *limit]),
      'bench': lambda: [sys.executable, '-m', 'nat_jax.benchmark', f'--out={os.path.join(out, "bench")}',
                        f'--runs={bench_runs(runs, out, failed)}', '--batch_sizes=1,64',
                        *([f'--max_sentences={SMOKE_BENCH[0]}', f'--latency_sentences={SMOKE_BENCH[1]}',
                           '--batch1_runs=1'] if FLAGS.smoke else
                          [f'--max_sentences={budgeted("bench_sentences")}',
                           f'--latency_sentences={budgeted("latency_sentences")}', '--batch1_runs=3',
                           '--dtype=bfloat16'])],
  }


def main(argv):
  files = pack_files(FLAGS.pack) if FLAGS.pack else None
  planned = checked_plan(files)
  if not files:
    raise ConfigError('--pack is required (write one with python -m benchmarks.suite.accelerator_pack --out=DIR).')
  t0 = time.time()
  deadline = t0 + FLAGS.budget_seconds - suite_plan.RESULTS_SECONDS
  out = FLAGS.out or os.path.join(FLAGS.pack, 'results')
  os.makedirs(out, exist_ok=True)
  runs = {k: os.path.join(out, k) for k in ('teacher', 'dat', 'hrt')}
  env = {**os.environ, 'JAX_COMPILATION_CACHE_DIR': os.path.join(out, 'jax_cache')}  # every stage's compiles, kept
  timings_path = os.path.join(out, 'suite.json')
  timings = {}
  if os.path.exists(timings_path):
    with open(timings_path) as f:
      timings = json.load(f)
  seconds = {'teacher': FLAGS.teacher_seconds, 'dat': FLAGS.dat_seconds, 'hrt': FLAGS.hrt_seconds}
  order = [name for name in STAGES if name in FLAGS.stages]
  status, failed = {}, set()
  commands = stage_commands(out, files, runs, failed)
  for name in order:
    if DEPENDS.get(name) in failed:
      status[name] = 'skipped'
      failed.add(name)
      print(f'{name}: skipped ({DEPENDS[name]} did not finish)', flush=True)
      continue
    limit_s = seconds.get(name, 0)
    if FLAGS.budget_seconds:
      limit_s = suite_plan.stage_timeout(planned, order, name, time.time(), deadline)
      if name in runs:
        limit_s = max(1.0, limit_s - suite_plan.TRAINING_SAVE_S)  # SIGTERM early: its checkpoint gets written
    if name in runs:  # a training: its run directory exists only when the stage runs
      prepare_workdir(runs[name], files['spm'])
    status[name] = suite_plan.run_stage(name, commands[name](), out, timings, limit_s, env=env)
    if status[name] == 'failed':
      failed.add(name)
  results = write_results(out, runs, timings, status, planned)
  print(f'accelerator suite: {json.dumps(results["stages"])}; results in {out}/results.md '
        f'({time.time() - t0:.0f} s)', flush=True)
  if failed:
    raise ConfigError(f'stages {sorted(failed)} failed or were skipped; see {out}/logs; rerun the same command to '
                      'resume.')


if __name__ == '__main__':
  cli.run_command(main)
