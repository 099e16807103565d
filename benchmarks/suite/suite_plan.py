"""How the accelerator suite (benchmarks.suite.accelerator_suite) spends a lease: each stage's expected seconds on a
GPU from measured unit costs and its compile count, the budget each stage gets, and a stage run and stopped
at its time (`run_stage`).

  python -m benchmarks.suite.accelerator_suite --plan --budget_seconds=540 --device=h200   # prints this plan

Unit costs (`UNITS`): what issue 33's lease measured on an H200 (docs/lab-notes/2026-11-25-accelerators.md,
13.4) where it measured it, else an assumption named as one in `SOURCES`. A stage's expected seconds are
its process start, its compiles times the compile unit, and its device work; the trainings have no fixed
length: they get what the fixed stages leave, in the shares of `TRAINING_SHARES`, and are stopped at their
share with a checkpoint. The plan cannot meet a budget when the fixed costs plus each training's start,
compile and `MIN_TRAINING_SECONDS` exceed it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time

from nat_jax.files import write_atomic
from nat_jax.training.bookkeeping import PREEMPTED_EXIT

TRAININGS = ('teacher', 'dat', 'hrt')
TRAINING_SHARES = {'teacher': 0.5, 'dat': 0.3, 'hrt': 0.2}  # of the seconds the fixed stages leave
MIN_TRAINING_SECONDS = 20.0  # a training's updates after its compile, at the least (else the stage is pointless)
RESULTS_SECONDS = 5.0  # kept back at the end: the results files and the device line
TRAINING_SAVE_S = 10  # a training is sent SIGTERM this long before its time: its step ends, its checkpoint is written
STOP_GRACE_S = 30  # after SIGTERM: a training finishes its step (or compile) and writes its checkpoint


@dataclasses.dataclass(frozen=True)
class Units:
  start_s: float           # a stage's process: Python, JAX and the GPU client up, the run loaded
  train_compile_s: float   # one training-step shape (a length bucket), compiled
  decode_compile_s: float  # one decoding program (decoder x batch size x source width), compiled
  greedy_step_ms: float    # one base-size greedy step inside the device loop (batch 1 to 64 alike)
  device_factor: float = 1.0  # device work relative to the H200's


# The H200's figures are 13.4's; the H100's device work is scaled by the two cards' memory bandwidth (4.8 / 3.35
# TB/s), an assumption: the greedy step is latency-bound on the H200 (13.4), so the factor is an upper bound.
UNITS = {
    'h200': Units(start_s=15.0, train_compile_s=31.0, decode_compile_s=3.0, greedy_step_ms=0.26),
    'h100': Units(start_s=15.0, train_compile_s=31.0, decode_compile_s=3.0, greedy_step_ms=0.26,
                  device_factor=4.8 / 3.35),
}
SOURCES = {
    'start_s': 'assumed (not timed on a GPU: JAX import, CUDA client, run load)',
    'train_compile_s': 'measured, H200: the AT base teacher\'s first update took 30.7 s, its compile (13.4)',
    'decode_compile_s': 'measured, H200: 1-10 s per decoding program, ~3 s typical (13.4, issue 52)',
    'greedy_step_ms': 'measured, H200: 0.259 / 0.276 ms per base greedy step in the device loop, b=1 / b=64 (13.4)',
    'device_factor': 'h100: assumed, the bandwidth ratio 4.8 / 3.35 TB/s (an upper bound for latency-bound steps)',
}


@dataclasses.dataclass(frozen=True)
class Settings:
  """What sets the suite's compile counts and device work (from its flags and its pack)."""
  stages: tuple[str, ...] = ('teacher', 'distill', 'dat', 'hrt', 'bench')
  train_buckets: int = 1           # length buckets = training-step shapes per training
  distill_widths: int = 15         # padded source widths the distillation meets (programs)
  distill_sentences: int = 28_000  # sentences distilled (train + validation, --distill_limit)
  distill_batch: int = 256
  decode_steps: int = 70           # greedy steps per batch (random or early weights write to the bound)
  bench_decoders: int = 7          # decoders benchmarked (teacher's, the DAT's, HRT)
  bench_widths_b1: int = 4         # source widths of the batch-1 latency sentences
  bench_widths_b64: int = 7        # source widths of the batch-64 sentences (each width its own batches)
  bench_sentences: int = 64       # translated at batch 64 (quality and throughput)
  bench_latency_sentences: int = 4  # translated one by one, bench_batch1_runs times
  bench_batch1_runs: int = 3
  bench_step_factor: float = 4.0   # a benchmarked decoder's device work over greedy's (beam's 4 rows, passes)


def fixed_stages(s: Settings, u: Units) -> list[dict]:
  """[{stage, compiles, compile_s, start_s, work_s, seconds}] of the stages whose work is fixed (distill, bench)."""
  rows = []
  if 'distill' in s.stages:
    batches = -(-s.distill_sentences // s.distill_batch)
    work = batches * s.decode_steps * u.greedy_step_ms * u.device_factor / 1e3
    rows.append(_row('distill', s.distill_widths, u.decode_compile_s, u, work,
                     f'{s.distill_sentences:,} sentences in {batches} batches of {s.distill_batch}, '
                     f'{s.decode_steps} greedy steps each'))
  if 'bench' in s.stages:
    compiles = s.bench_decoders * (s.bench_widths_b1 + s.bench_widths_b64)
    calls = s.bench_decoders * (s.bench_latency_sentences * s.bench_batch1_runs + 2 * -(-s.bench_sentences // 64))
    work = calls * s.decode_steps * u.greedy_step_ms * s.bench_step_factor * u.device_factor / 1e3
    rows.append(_row('bench', compiles, u.decode_compile_s, u, work,
                     f'{s.bench_decoders} decoders x ({s.bench_widths_b1} batch-1 + {s.bench_widths_b64} batch-64 '
                     f'widths) programs; {s.bench_sentences} sentences'))
  return rows


def _row(stage: str, compiles: int, compile_unit_s: float, u: Units, work: float, note: str) -> dict:
  compile_s = compiles * compile_unit_s
  return {'stage': stage, 'compiles': compiles, 'compile_s': compile_s, 'start_s': u.start_s, 'work_s': work,
          'seconds': u.start_s + compile_s + work, 'note': note}


def plan(budget_s: float, s: Settings, u: Units) -> tuple[list[dict], bool]:
  """(every stage of s.stages in the suite's order with its planned seconds, whether the budget is met).

  Fixed stages cost what `fixed_stages` says; each training gets its start and compiles plus its share
  (TRAINING_SHARES, renormalised over the trainings run) of what is left after the fixed stages, the
  trainings' starts and compiles and RESULTS_SECONDS; met when that share is >= MIN_TRAINING_SECONDS each."""
  fixed = {r['stage']: r for r in fixed_stages(s, u)}
  trainings = [t for t in TRAININGS if t in s.stages]
  overhead = {t: _row(t, s.train_buckets, u.train_compile_s, u, 0.0, '') for t in trainings}
  left = budget_s - RESULTS_SECONDS - sum(r['seconds'] for r in fixed.values()) - sum(
      r['seconds'] for r in overhead.values())
  total_share = sum(TRAINING_SHARES[t] for t in trainings) or 1.0
  met = left >= MIN_TRAINING_SECONDS * len(trainings) and left >= 0
  rows = []
  for stage in s.stages:
    if stage in fixed:
      rows.append(fixed[stage])
    else:
      work = max(left, 0.0) * TRAINING_SHARES[stage] / total_share
      row = overhead[stage]
      rows.append({**row, 'work_s': work, 'seconds': row['seconds'] + work,
                   'note': f'{s.train_buckets} step shape(s); trains {work:.0f} s, then stopped with a checkpoint'})
  return rows, met


def stage_timeout(planned: dict[str, float], order: list[str], stage: str, now: float, deadline: float) -> float:
  """Seconds `stage` may run from `now`: what is left before `deadline` less what the stages after it were
  planned: the savings of earlier stages go to it, their overruns come out of it. Never below 1 s (a stage
  that has no time left is stopped at once and saves what it has)."""
  reserve = sum(planned[name] for name in order[order.index(stage) + 1:])
  return max(1.0, deadline - now - reserve)


def format_plan(rows: list[dict], budget_s: float, device: str, met: bool) -> str:
  """The plan as a table; its last line is the total against the budget."""
  lines = [f'# accelerator suite plan for {device}, budget {budget_s:.0f} s (units: benchmarks/suite/suite_plan.py)',
           '| stage | compiles | start s | compile s | work s | seconds | what |', '|---|---|---|---|---|---|---|']
  for r in rows:
    lines.append(f"| {r['stage']} | {r['compiles']} | {r['start_s']:.0f} | {r['compile_s']:.0f} | {r['work_s']:.0f} "
                 f"| {r['seconds']:.0f} | {r['note']} |")
  total = sum(r['seconds'] for r in rows) + RESULTS_SECONDS
  verdict = 'fits' if met else (f'does NOT fit: the trainings need {MIN_TRAINING_SECONDS:.0f} s of updates each '
                                'after their compiles')
  lines.append(f'total {total:.0f} s of {budget_s:.0f} s ({RESULTS_SECONDS:.0f} s kept for the results): {verdict}')
  return '\n'.join(lines)


def run_stage(name: str, command: list[str], out: str, timings: dict, seconds: float = 0, env=None) -> str:
  """Run one stage's command (its output in OUT/logs/<name>.log) unless its marker exists; after
  `seconds` (> 0) it gets SIGTERM (a training saves a checkpoint and stops), and SIGKILL STOP_GRACE_S
  later. Returns 'done before', 'done', 'stopped' (at its time, exit 0 or a saved checkpoint) or 'failed'."""
  marker = os.path.join(out, f'{name}.done')
  if os.path.exists(marker):
    print(f'{name}: done before, skipped', flush=True)
    return 'done before'
  os.makedirs(os.path.join(out, 'logs'), exist_ok=True)
  print(f'{name}: {" ".join(command)}' + (f' (at most {seconds:.0f} s)' if seconds else ''), flush=True)
  t0 = time.time()
  stopped = False
  with open(os.path.join(out, 'logs', f'{name}.log'), 'a') as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
      code = process.wait(timeout=seconds or None)
    except subprocess.TimeoutExpired:
      print(f'{name}: {seconds:.0f} s reached, stopping it (SIGTERM: a training saves a checkpoint)', flush=True)
      stopped = True
      process.terminate()
      try:
        code = process.wait(timeout=STOP_GRACE_S)
      except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait()
  timings[name] = round(time.time() - t0, 1)
  write_atomic(os.path.join(out, 'suite.json'), json.dumps(timings, indent=2))
  if code and not (stopped and code == PREEMPTED_EXIT):
    print(f'{name}: failed (exit {code}); see {os.path.join(out, "logs", name + ".log")}; rerun the same command '
          'to resume.', flush=True)
    return 'failed'
  write_atomic(marker, time.strftime('%Y-%m-%d %H:%M:%S\n'))
  print(f'{name}: {timings[name]}s', flush=True)
  return 'stopped' if stopped else 'done'
