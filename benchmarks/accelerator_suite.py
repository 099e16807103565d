"""The accelerator suite: what a rare, short lease of a GPU is spent on (run through
benchmarks/accelerator_suite.sh, which first installs the pack's wheels the machine lacks).

  python -m benchmarks.accelerator_suite --pack=accelerator_pack [--out=$OUT] [--smoke] [--stages=...]

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
(tests/integration/test_accelerator_suite.py). What a 15-minute lease ran (docs/lab-notes/2026-11-25-accelerators.md):
benchmarks/accelerator_suite.sh PACK --stages=teacher,distill,dat,bench --teacher_seconds=140
--dat_seconds=90 --distill_limit=8192 --bench_sentences=64 --latency_sentences=16
--teacher_decoders=greedy,beam,drafted --dat_decoders=dag_lookahead
--train_flags=--config.num_buckets=2,--config.max_len=128
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from absl import flags

from nat_jax.commands import cli
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic

STAGES = ('teacher', 'distill', 'dat', 'hrt', 'bench')
SMOKE_MODEL = ['--config.model.d_model=32', '--config.model.d_ff=64', '--config.model.num_heads=2',
               '--config.model.enc_layers=1', '--config.model.dec_layers=1', '--config.model.dtype=float32',
               '--config.max_len=64', '--config.max_decode_len=40', '--config.tokens_per_batch=512',
               '--config.grad_accum_steps=1', '--config.num_buckets=2', '--config.warmup_steps=2']

flags.DEFINE_string('pack', None, 'A directory written by python -m benchmarks.accelerator_pack.')
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
FLAGS = flags.FLAGS


def pack_files(pack: str) -> dict:
  names = {split: os.path.join(pack, f'{split}.tsv') for split in ('train', 'validation', 'test')}
  names['spm'] = os.path.join(pack, 'spm.model')
  missing = [p for p in names.values() if not os.path.exists(p)]
  if missing:
    raise ConfigError(f'--pack={pack}: {missing} missing; write it with python -m benchmarks.accelerator_pack '
                      f'--out={pack}.')
  return names


def data_flags(files: dict, vocab_size: int) -> list[str]:
  return ['--config.data.source=files', f'--config.data.train_files={files["train"]}',
          f'--config.data.validation_files={files["validation"]}', f'--config.data.test_files={files["test"]}',
          '--config.data.tfds_name=', f'--config.vocab_size={vocab_size}']


def run_stage(name: str, command: list[str], out: str, timings: dict, seconds: int = 0):
  """Run one stage's command (its output in OUT/logs/<name>.log) unless its marker exists; after
  `seconds` (> 0) it gets SIGTERM (a training saves a checkpoint and stops) and is waited for."""
  marker = os.path.join(out, f'{name}.done')
  if os.path.exists(marker):
    print(f'{name}: done before, skipped', flush=True)
    return
  os.makedirs(os.path.join(out, 'logs'), exist_ok=True)
  print(f'{name}: {" ".join(command)}', flush=True)
  t0 = time.time()
  with open(os.path.join(out, 'logs', f'{name}.log'), 'a') as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
      code = process.wait(timeout=seconds or None)
    except subprocess.TimeoutExpired:
      print(f'{name}: {seconds} s budget reached, stopping it (SIGTERM: checkpoint, then exit)', flush=True)
      process.terminate()
      code = process.wait()
  timings[name] = round(time.time() - t0, 1)
  write_atomic(os.path.join(out, 'suite.json'), json.dumps(timings, indent=2))
  if code:
    raise ConfigError(f'stage {name} failed (exit {code}); see {os.path.join(out, "logs", name + ".log")}; '
                      'rerun the same command to resume.')
  write_atomic(marker, time.strftime('%Y-%m-%d %H:%M:%S\n'))
  print(f'{name}: {timings[name]}s', flush=True)


def prepare_workdir(workdir: str, spm: str):
  """A training's run directory with the pack's tokenizer in it (every run of the suite shares it)."""
  os.makedirs(workdir, exist_ok=True)
  if not os.path.exists(os.path.join(workdir, 'spm.model')):
    shutil.copy(spm, os.path.join(workdir, 'spm.model'))


def train(recipe: str, workdir: str, files: dict, vocab_size: int, steps: int, extra: list[str]) -> list[str]:
  return [sys.executable, '-m', 'nat_jax.train', f'--config=configs/{recipe}.py', f'--workdir={workdir}',
          *data_flags(files, vocab_size), f'--config.total_steps={steps}', f'--config.eval_every={steps}',
          f'--config.checkpoint_every={max(1, min(500, steps))}', '--config.test_average=1',
          '--config.eval_max_sentences=200', *(SMOKE_MODEL if FLAGS.smoke else []), *FLAGS.train_flags, *extra]


def bench_runs(runs: dict, out: str) -> str:
  """nat_jax.benchmark --runs: the teacher's, the DA-Transformer's and the HRT student's decoders, each
  student only when its stage is among --stages or done before (drafted drafts with the
  DA-Transformer, re-draft)."""
  trained = {k for k in ('dat', 'hrt') if k in FLAGS.stages or os.path.exists(os.path.join(out, f'{k}.done'))}
  teacher = [f'drafted/drafter={runs["dat"]}/update=redraft' if d == 'drafted' else d
             for d in FLAGS.teacher_decoders if d != 'drafted' or 'dat' in trained]
  entries = [f'{runs["teacher"]}:{"+".join(teacher)}'] if teacher else []
  if FLAGS.dat_decoders and 'dat' in trained:
    entries.append(f'{runs["dat"]}:{"+".join(FLAGS.dat_decoders)}')
  if 'hrt' in trained:
    entries.append(f'{runs["hrt"]}:hrt')
  return ','.join(entries)


def main(argv):
  from nat_jax.data import Tokenizer
  files = pack_files(FLAGS.pack)
  out = FLAGS.out or os.path.join(FLAGS.pack, 'results')
  unknown = sorted(set(FLAGS.stages) - set(STAGES))
  if unknown:
    raise ConfigError(f'--stages: unknown {unknown}; stages are {list(STAGES)}.')
  os.makedirs(out, exist_ok=True)
  vocab = Tokenizer(files['spm']).vocab_size
  steps = {k: 4 if FLAGS.smoke else v for k, v in (('teacher', FLAGS.teacher_steps), ('dat', FLAGS.dat_steps),
                                                     ('hrt', FLAGS.hrt_steps))}
  runs = {k: os.path.join(out, k) for k in ('teacher', 'dat', 'hrt')}
  distill = os.path.join(out, 'distill_greedy')
  cache = f'--config.compilation_cache_dir={os.path.join(out, "jax_cache")}'
  timings_path = os.path.join(out, 'suite.json')
  timings = {}
  if os.path.exists(timings_path):
    with open(timings_path) as f:
      timings = json.load(f)
  commands = {
      'teacher': train('at_base', runs['teacher'], files, vocab, steps['teacher'],
                       [cache, '--config.test_decoder=greedy']),
      'distill': [sys.executable, '-m', 'nat_jax.distill', f'--workdir={runs["teacher"]}', f'--out={distill}',
                  '--decoder=greedy', f'--batch_size={FLAGS.distill_batch}', f'--limit={FLAGS.distill_limit}'],
      'dat': train('dat_drafter_base', runs['dat'], files, vocab, steps['dat'],
                   [cache, f'--config.init_from={runs["teacher"]}', f'--config.data.distill_dir={distill}',
                    '--config.grad_accum_steps=1', *(['--config.dat.upsample_scale=2.0'] if FLAGS.smoke else []),
                    *([f'--config.data.max_examples={FLAGS.distill_limit}'] if FLAGS.distill_limit else [])]),
      'hrt': train('hrt_wmt14_ende', runs['hrt'], files, vocab, steps['hrt'],
                   [cache, f'--config.init_from={runs["teacher"]}', f'--config.data.distill_dir={distill}',
                    *([f'--config.data.max_examples={FLAGS.distill_limit}'] if FLAGS.distill_limit else [])]),
      'bench': [sys.executable, '-m', 'nat_jax.benchmark', f'--out={os.path.join(out, "bench")}',
                f'--runs={bench_runs(runs, out)}', '--batch_sizes=1,64',
                *(['--max_sentences=16', '--latency_sentences=2', '--batch1_runs=1'] if FLAGS.smoke else
                  [f'--max_sentences={FLAGS.bench_sentences}', f'--latency_sentences={FLAGS.latency_sentences}',
                   '--batch1_runs=3', '--dtype=bfloat16'])],
  }
  seconds = {'teacher': FLAGS.teacher_seconds, 'dat': FLAGS.dat_seconds, 'hrt': FLAGS.hrt_seconds}
  for name in STAGES:
    if name in FLAGS.stages:
      if name in runs:  # a training: its run directory exists only when the stage runs
        prepare_workdir(runs[name], files['spm'])
      run_stage(name, commands[name], out, timings, seconds.get(name, 0))
  print(f'accelerator suite: {timings}; results in {out}', flush=True)


if __name__ == '__main__':
  cli.run_command(main)
